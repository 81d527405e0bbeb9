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
