"""``python -m determined.cli``: the same as the ``det`` console script."""

import sys

from determined.cli._main import main

sys.exit(main())
