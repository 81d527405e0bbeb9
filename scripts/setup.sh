#!/usr/bin/env bash
# Set up redetermined from nothing, saying what each step does and how long it took.
#
#   ./scripts/setup.sh          what the main job needs: .venv with torch (CPU build) and the package
#   ./scripts/setup.sh --tests  and what the tests need: the dev extra, Determined 0.37 in .refvenv
#                               (the reference the tests compare with), Chromium for the browser tests,
#                               Slurm (slurm-wlm, munge) for the Slurm resource manager's tests
#
# Safe to run again: when nothing it installs from has changed since the last run, it says so and
# returns at once. torch is pinned here (a CPU build on the project's machines); the package itself
# asks for a range.
set -euo pipefail
cd "$(dirname "$0")/.."

TORCH=torch==2.13.0
REFERENCE=determined==0.37.0
# The [transformers] and [deepspeed] extras, pinned for the tests (issue 36). DeepSpeed comes as
# a source package: DS_BUILD_OPS=0 builds none of its C++ ops at install (pip caches the wheel).
INTEGRATIONS="transformers==5.23.0 accelerate==1.15.0 deepspeed==0.19.8"
AZURITE=azurite@3.37.0
tests=0
case "${1:-}" in
  "") ;;
  --tests) tests=1 ;;
  *) echo "usage: scripts/setup.sh [--tests]" >&2; exit 2 ;;
esac

say() { echo "setup: $*"; }
# step NAME COMMAND...: run it and say how long it took.
step() {
  local name=$1 start=$SECONDS
  shift
  say "$name ..."
  "$@"
  say "$name: done in $((SECONDS - start)) s"
}
# -qq: errors only (pip warns about every unusable find-links location on some machines).
pip_install() { "$1" -m pip install -qq --disable-pip-version-check "${@:2}"; }

# What the installed state depends on; a run with the same fingerprint has nothing to do.
fingerprint() {
  { echo "$TORCH $REFERENCE $AZURITE tests=$1"; cat pyproject.toml "$0"; } | sha256sum | cut -d' ' -f1
}
stamp=.venv/.setup-done
wanted=$(fingerprint "$tests")
done_before=$(cat "$stamp" 2>/dev/null || true)
if [ -x .venv/bin/det ] && { [ "$tests" = 0 ] || [ -x .refvenv/bin/det ]; } &&
  { [ "$done_before" = "$wanted" ] || { [ "$tests" = 0 ] && [ "$done_before" = "$(fingerprint 1)" ]; }; }; then
  say "already set up (.venv$([ "$tests" = 1 ] && echo ", .refvenv, browser")); nothing to do"
  exit 0
fi

total=$SECONDS
if [ ! -x .venv/bin/python ]; then
  step "virtual environment .venv" python3 -m venv .venv
fi
step "PyTorch ($TORCH, CPU build)" pip_install .venv/bin/python "$TORCH"
if [ "$tests" = 1 ]; then
  step "redetermined with the test tools (editable, [dev,s3,azure,postgres])" \
    pip_install .venv/bin/python -e '.[dev,s3,azure,postgres]'
  # shellcheck disable=SC2086  # INTEGRATIONS is a list of requirements
  DS_BUILD_OPS=0 step "the [transformers] and [deepspeed] extras ($INTEGRATIONS)" \
    pip_install .venv/bin/python -e '.[transformers,deepspeed]' $INTEGRATIONS
else
  step "redetermined (editable)" pip_install .venv/bin/python -e .
fi

if [ "$tests" = 1 ]; then
  # Determined 0.37's own SDK and CLI, which tests compare with (never a dependency of
  # redetermined: a separate venv, skipped when it already exists).
  if [ ! -x .refvenv/bin/det ]; then
    step "reference venv .refvenv ($REFERENCE, for tests)" \
      bash -c "python3 -m venv .refvenv && .refvenv/bin/python -m pip install --quiet \
        --disable-pip-version-check $REFERENCE"
  fi
  # The reference's determined.pytorch imports torch: the same CPU build, for the tests that
  # compare its pytorch API with ours.
  if ! .refvenv/bin/python -c "import torch" 2>/dev/null; then
    step "PyTorch in .refvenv ($TORCH, for the reference's pytorch API)" \
      pip_install .refvenv/bin/python "$TORCH"
  fi
  # Azurite, the Azure Storage emulator the azure checkpoint-storage tests run against (npm's
  # registry; into .tools, never global). Without npm those tests skip and say why.
  if [ ! -x .tools/node_modules/.bin/azurite-blob ]; then
    if command -v npm >/dev/null; then
      step "Azurite ($AZURITE, for the azure storage tests)" bash -c "npm install --no-save \
        --no-audit --no-fund --loglevel=error --prefix .tools $AZURITE >/dev/null"
    else
      say "no npm here: install Node.js and npm for the azure storage tests (they skip)" >&2
    fi
  fi
  # PostgreSQL's server binaries, for the store tests that run against both SQLite and
  # PostgreSQL (a throwaway server per test session). Without them those cases skip.
  if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
      step "PostgreSQL (for the store tests)" bash -c "{ apt-get update -qq && \
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; } || \
        echo 'setup: could not install postgresql; its store tests will skip' >&2"
    else
      say "no apt-get as root here: install postgresql for the store tests against it" >&2
    fi
  fi
  # Headless Chromium for the web UI's browser tests (Selenium is in the dev extra). Without apt
  # (or root) the browser tests skip and say why; everything else runs.
  if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
      step "Chromium (for the browser tests)" bash -c "{ apt-get update -qq && \
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver \
        >/dev/null; } || echo 'setup: could not install chromium; browser tests will skip' >&2"
    else
      say "no apt-get as root here: install chromium and chromium-driver for tests/webui" >&2
    fi
  fi
  # JupyterLab (the [notebook] extra) for the notebook tests; without it they skip.
  if ! .venv/bin/python -c "import jupyterlab" 2>/dev/null; then
    step "JupyterLab (the [notebook] extra, for the notebook tests)" \
      pip_install .venv/bin/python -e '.[notebook]'
  fi
  # OpenSSH's server and client for det shell's tests (a per-task sshd); without them they skip.
  if [ ! -x /usr/sbin/sshd ] || ! command -v ssh >/dev/null; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
      step "OpenSSH server and client (for the shell tests)" bash -c "{ apt-get update -qq && \
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server openssh-client \
        >/dev/null; } || echo 'setup: could not install openssh-server; shell tests will skip' >&2"
    else
      say "no apt-get as root here: install openssh-server and openssh-client for det shell" >&2
    fi
  fi
  # Slurm and munge for the Slurm resource manager's tests (a private two-node cluster under
  # tmp_path); without them those tests skip and say why.
  if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
      step "Slurm and munge (for the Slurm tests)" bash -c "{ apt-get update -qq && \
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge \
        >/dev/null; } || echo 'setup: could not install slurm-wlm; Slurm tests will skip' >&2"
    else
      say "no apt-get as root here: install slurm-wlm and munge for the Slurm tests" >&2
    fi
  fi
  # bubblewrap, the task sandbox (docs/security.md): its tests run tasks inside it; without it
  # they skip, and a master here runs tasks unsandboxed (single-user only).
  if ! command -v bwrap >/dev/null; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
      step "bubblewrap (the task sandbox)" bash -c "{ apt-get update -qq && \
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; } || \
        echo 'setup: could not install bubblewrap; sandbox tests will skip' >&2"
    else
      say "no apt-get as root here: install bubblewrap for the task sandbox" >&2
    fi
  fi
fi

echo "$wanted" >"$stamp"
if [ "$tests" = 1 ]; then
  say "ready in $((SECONDS - total)) s: .venv (det, python), .refvenv and the browser for the tests"
else
  say "ready in $((SECONDS - total)) s: .venv/bin/det and .venv/bin/python (or: source .venv/bin/activate)"
fi
