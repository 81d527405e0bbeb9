#!/usr/bin/env bash
# Create .venv and install redetermined with everything its tests need, from nothing.
# torch is pinned here (a CPU build on the project's machines); the package itself asks for a range.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check torch==2.13.0
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev,s3]'
# Determined 0.37's own SDK and CLI, for tests/master/test_reference_client.py (never a
# dependency of redetermined: a separate venv, skipped when it already exists).
if [ ! -x .refvenv/bin/det ]; then
  python3 -m venv .refvenv
  .refvenv/bin/python -m pip install --quiet --disable-pip-version-check determined==0.37.0
fi

# Headless Chromium for the web UI's browser tests (tests/webui; Selenium is in the dev extra).
# Skipped when it is already there; without apt (or root) the browser tests skip and say why.
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    # Not fatal: without a browser the browser tests skip and say why; everything else runs.
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq chromium chromium-driver >/dev/null; } ||
      echo "setup.sh: could not install chromium; tests/webui's browser tests will skip" >&2
  else
    echo "setup.sh: no apt-get as root here; install chromium + chromium-driver for tests/webui" >&2
  fi
fi
