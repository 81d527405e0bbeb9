"""A TensorBoard task's server: TensorBoard's own program (its flags, plugins and WSGI app),
served on a unix socket instead of a TCP port, so that only the master's proxy, which checks
the owner's login, reaches it (docs/security.md, "Service ports").

    python -m determined.exec._tensorboard SOCKET [tensorboard flags ...]
"""

from __future__ import annotations

import os
import sys
from typing import Any


def main(argv: list[str]) -> int:
    from absl import app
    from tensorboard import default, program
    from tensorboard.plugins import base_plugin
    from werkzeug import serving

    if len(argv) < 2:
        print("usage: python -m determined.exec._tensorboard SOCKET [flags ...]", file=sys.stderr)
        return 2
    sock = argv[1]

    class UnixServer(program.TensorBoardServer):
        """TensorBoard's WSGI app on ``sock`` (mode 0600, in a directory of the master's
        user's or of the task's own OS user)."""

        def __init__(self, wsgi_app: Any, flags: Any) -> None:
            self._server = serving.make_server("unix://" + sock, 0, wsgi_app, threaded=True)
            os.chmod(sock, 0o600)

        def serve_forever(self) -> None:
            self._server.serve_forever()

        def get_url(self) -> str:
            # TensorBoard records a port for `tensorboard --list`; a socket has none.
            return "http://localhost:0/"

    tensorboard = program.TensorBoard(plugins=default.get_plugins(), server_class=UnixServer)
    try:
        app.run(tensorboard.main, argv=[argv[0], *argv[2:]], flags_parser=tensorboard.configure)
    except base_plugin.FlagsError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
