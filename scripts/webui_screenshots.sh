#!/usr/bin/env bash
# Retake the web UI screenshots in docs/webui/ (experiments, experiment, experiment-64, asha,
# trial, login): the browser tests run against a real master and save each page as they check it.
set -euo pipefail
cd "$(dirname "$0")/.."
WEBUI_SCREENSHOTS=docs/webui .venv/bin/python -m pytest tests/webui/test_pages.py tests/webui/test_layout.py -q -p no:cacheprovider "$@"
ls -l docs/webui/*.png
