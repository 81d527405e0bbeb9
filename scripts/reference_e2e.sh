#!/usr/bin/env bash
# Run Determined 0.37.0's own end-to-end suite (e2e_tests, marker e2e_cpu), unchanged, with 0.37's
# `det` and SDK, against this repository's master.
#
#   scripts/reference_e2e.sh                      every e2e_cpu file, one after another
#   scripts/reference_e2e.sh --subset             the files that cover the wire (~10 min on 2 cores)
#   scripts/reference_e2e.sh e2e_tests/tests/cluster/test_users.py ...   just these files
#   scripts/reference_e2e.sh --list               print the files and the skip list, run nothing
#   --min-pass=PCT                                exit 1 when fewer of the applicable tests pass
#
# Where the suite comes from: DET_E2E_SOURCE names either a git repository of
# determined-ai/determined that has the tag 0.37.0 (a clone, or the bare mirror the project's search
# tool `fetch github:determined-ai/determined` leaves under /work/.mirror/), or a directory that
# already holds 0.37.0's e2e_tests/ and examples/ side by side (an unpacked release archive). No
# package registry ships e2e_tests, and none of its code is kept in this tree: it is extracted into
# .e2e/suite-0.37.0/ (git-ignored) once.
#
# What it builds once and then reuses: .e2e/venv (determined==0.37.0 and the suite's test
# dependencies; never a dependency of ours, and apart from .refvenv). Each run starts its own master
# (`det master up --cpu-slots 4` with the task container defaults of 0.37's own e2e_cpu cluster,
# this checkout's .venv, a fresh DET_HOME, a free port; a second one
# with one slot for the files in ONE_SLOT), writes one
# junit file per test file under .e2e/runs/<time>/, prints a per-file table and the total, and
# lists the tests it does not run with the reason (scripts/reference_e2e_skips.txt) and those the
# suite skipped itself.
#
# Environment: DET_E2E_SOURCE (above), DET_E2E_PORT (master port; default: a free one),
# DET_E2E_TEST_TIMEOUT (seconds one test may take, default 600).
set -euo pipefail
# The whole script is one block, read before it runs: editing it during a run cannot change it.
{
cd "$(dirname "$0")/.."
ROOT=$PWD

TAG=0.37.0
REQUIREMENTS=(determined==0.37.0)
# The suite's imports that its e2e_cpu files need (its requirements.txt also pins TensorFlow, ray,
# selenium and others for GPU, Kubernetes and SSO jobs, which this script does not run).
# kubernetes < 37: 37 wants python-dateutil 3, which 0.37's boto3 refuses. torch (the CPU build,
# pinned as ours) and tensorboard: the unmanaged experiments of test_unmanaged.py run in this venv
# with 0.37's core_v2, which imports them.
TEST_REQUIREMENTS=(pytest pytest-timeout pyyaml docker "python-dateutil>=2.1,<3" "kubernetes<37" pexpect
  torch==2.13.0 tensorboard)
# Under e2e_tests/tests/: agents, webhooks, task and trial logs, commands, the cluster message and
# the streaming client, about 10 minutes on 2 cores. test_users.py (8 min) and
# test_exp_continue.py (14 min) cover users and continue but do not fit; run them by name.
SUBSET=(
  cluster/test_agent.py
  cluster/test_webhooks.py
  cluster/test_logging.py
  command/test_run.py
  cluster/test_cluster_message.py
  streaming/test_client.py
)
SKIPS=$ROOT/scripts/reference_e2e_skips.txt
E2E=$ROOT/.e2e
VENV=$E2E/venv
SUITE=$E2E/suite-$TAG

say() { echo "reference_e2e: $*" >&2; }
die() { say "$*"; exit 2; }

mode=all
list=0
min_pass=0
files=()
for arg in "$@"; do
  case "$arg" in
    --subset) mode=subset ;;
    --min-pass=*) min_pass=${arg#--min-pass=} ;;
    --list) list=1 ;;
    -h | --help) sed -n '2,27p' "$0"; exit 0 ;;
    -*) die "unknown option $arg (see --help)" ;;
    *) files+=("${arg#e2e_tests/}") ;;
  esac
done
mkdir -p "$E2E"

# --- the scratch venv: 0.37's det and SDK, the suite's test dependencies -----------------------
want_venv=$(printf '%s\n' "${REQUIREMENTS[@]}" "${TEST_REQUIREMENTS[@]}" | sha256sum | cut -d' ' -f1)
(
  flock 9
  if [ "$(cat "$VENV/.done" 2>/dev/null || true)" != "$want_venv" ]; then
    say "building $VENV (determined==$TAG and the suite's test dependencies) ..."
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    # Two steps: asked together, pip's resolver backtracks into an old matplotlib that only builds
    # from source with the internet.
    "$VENV/bin/python" -m pip install -qq --disable-pip-version-check "${REQUIREMENTS[@]}"
    "$VENV/bin/python" -m pip install -qq --disable-pip-version-check "${TEST_REQUIREMENTS[@]}"
    echo "$want_venv" >"$VENV/.done"
  fi
) 9>"$E2E/.venv.lock"

# --- the suite at tag 0.37.0 --------------------------------------------------------------------
if [ ! -f "$SUITE/.done" ]; then
  src=${DET_E2E_SOURCE:-}
  # Where the project's search tool (fetch github:determined-ai/determined) leaves its snapshot.
  mirror=/work/.mirror/determined-ai+determined
  if [ -z "$src" ] && [ -d "$mirror/repo" ]; then
    src=$mirror/repo
  fi
  [ -n "$src" ] || die "set DET_E2E_SOURCE to a git repository of determined-ai/determined with the \
tag $TAG (or to a directory holding its e2e_tests/ and examples/); see CONTRIBUTING.md"
  rm -rf "$SUITE" && mkdir -p "$SUITE"
  if [ -d "$src/e2e_tests" ] && [ -d "$src/examples" ] && ! git -C "$src" rev-parse -q --verify "$TAG^{commit}" >/dev/null 2>&1; then
    say "copying e2e_tests/ and examples/ from $src"
    cp -r "$src/e2e_tests" "$src/examples" "$SUITE/"
  else
    git --git-dir="$(git -C "$src" rev-parse --absolute-git-dir)" rev-parse -q --verify "$TAG^{commit}" >/dev/null ||
      die "$src has no tag $TAG"
    say "extracting e2e_tests/ and examples/ at $TAG from $src"
    git --git-dir="$(git -C "$src" rev-parse --absolute-git-dir)" archive --format=tar "$TAG" e2e_tests examples |
      tar -x -C "$SUITE"
  fi
  touch "$SUITE/.done"
fi
cd "$SUITE/e2e_tests"

# Every file with an e2e_cpu test, less the ones skipped whole.
skipped_files() { grep -v '^#' "$SKIPS" | awk -F' *[|] *' 'NF >= 2 && $1 !~ /::/ { print $1 }'; }
all_files() {
  grep -rlE 'mark\.e2e_cpu\b' tests --include='test_*.py' | sort | grep -vxF -f <(skipped_files)
}
case "$mode" in
  subset) files=("${SUBSET[@]/#/tests/}") ;;
  all) [ ${#files[@]} -gt 0 ] || mapfile -t files < <(all_files) ;;
esac
for f in "${files[@]}"; do [ -f "$f" ] || die "no such file in 0.37.0's e2e_tests: $f"; done

if [ "$list" = 1 ]; then
  printf '%s\n' "${files[@]}"
  echo "--- not run (scripts/reference_e2e_skips.txt):"
  grep -v '^#' "$SKIPS" | sed '/^$/d'
  exit 0
fi

# --- our master ---------------------------------------------------------------------------------
RUN=$E2E/runs/$(date -u +%Y%m%dT%H%M%SZ)-$$
mkdir -p "$RUN/junit"
# The suite's checkpoint storage (its fixtures' host_path): its tests expect the files of one
# cluster there (0.37's CI ran on a fresh machine; test_experiment_delete picks the first
# cluster id's tensorboard/ it finds). Left by an earlier run, another cluster's come first.
# One run at a time on this /tmp: emptying it under a run still going deletes that run's
# checkpoints (seen 2026-11-28). A second run may go in its own /tmp, as root:
#   unshare --mount --propagation private sh -c 'mount --bind DIR /tmp && scripts/reference_e2e.sh ...'
exec 8>/tmp/determined-integration-checkpoints.lock
flock -n 8 || die "another reference run uses /tmp/determined-integration-checkpoints (its lock is held); wait for it, or run this one in a /tmp of its own (see the comment here)"
rm -rf /tmp/determined-integration-checkpoints
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# Two masters, each with its own DET_HOME and port: the main one (`--cpu-slots 4`, the issue's
# cluster), and, only for the files in ONE_SLOT, one with a single slot, started when the first
# of them comes and stopped after it. 0.37's e2e_cpu cluster was an agent without GPUs, which
# has exactly one (CPU) slot; those files assert `det slot list` shows one and disable "the"
# slot, while the other files need 4 (several trials at once, slots_per_trial 2).
ONE_SLOT=(cluster/test_agent_disable.py)
PORT=${DET_E2E_PORT:-$(free_port)}
PORT1=$(free_port)
home_of() { if [ "$1" = 1 ]; then echo "$RUN/home-1slot"; else echo "$RUN/home"; fi; }
port_of() { if [ "$1" = 1 ]; then echo "$PORT1"; else echo "$PORT"; fi; }
alive() { curl -fsS "http://127.0.0.1:$(port_of "$1")/info" >/dev/null 2>&1; }
# `det master up` starts the master in the background and returns once it answers.
# This checkout's code first on the master's path (the .venv's editable install may point at
# another checkout); the suite's own processes get no PYTHONPATH, so they import 0.37's client.
# The task container defaults of 0.37's own e2e_cpu cluster (.circleci/devcluster/
# double.devcluster.yaml): its test_resource_pools and test_logging's startup-hook tests read them.
MASTER_CONFIG=$RUN/master.yaml
cat >"$MASTER_CONFIG" <<'YAML'
task_container_defaults:
  startup_hook: "echo 'hello from master tcd startup hook'"
resource_pools:
  - pool_name: default
    task_container_defaults:
      environment_variables:
        - SOMEVAR=SOMEVAL
      startup_hook: "echo 'hello from rp tcd startup hook'"
YAML
start_master() { # 4 or 1 (slots)
  local home port
  home=$(home_of "$1") port=$(port_of "$1")
  mkdir -p "$home"
  DET_HOME=$home PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH} "$ROOT/.venv/bin/det" master up \
    --port "$port" --cpu-slots "$1" --config-file "$MASTER_CONFIG" >>"$RUN/master.out" 2>&1 ||
    die "the master did not start; see $RUN/master.out and $home/master.log"
  alive "$1" || die "the master does not answer on port $port; see $home/master.log"
  say "master with $1 slot(s) on 127.0.0.1:$port (DET_HOME $home, its log $home/master.log)"
}
stop_master() { # 4 or 1
  [ -d "$(home_of "$1")" ] || return 0
  DET_HOME=$(home_of "$1") PYTHONPATH=$ROOT "$ROOT/.venv/bin/det" master down >>"$RUN/master.out" 2>&1 || true
}
trap 'stop_master 4; stop_master 1' EXIT
start_master 4
say "results in $RUN"

# Tests listed with a reason are deselected by node id prefix.
deselect=()
while IFS= read -r id; do deselect+=(--deselect "$id"); done < <(
  grep -v '^#' "$SKIPS" | awk -F' *[|] *' 'NF >= 2 && $1 ~ /::/ { print $1 }'
)

export PATH=$VENV/bin:$PATH
for f in "${files[@]}"; do
  slots=4
  for one in "${ONE_SLOT[@]}"; do [ "$f" = "tests/$one" ] && slots=1; done
  if ! alive "$slots"; then
    [ "$slots" = 1 ] || say "the master stopped answering (see $RUN/home/master.log); starting it again"
    start_master "$slots"
  fi
  name=$(echo "${f#tests/}" | sed 's/\.py$//; s#/#.#g')
  start=$SECONDS
  say "$f ..."
  # os._exit once pytest is done: a test that fails while its webhook receiver's thread runs
  # leaves that thread behind, and the interpreter would wait for it for ever.
  env -u PYTHONPATH "$VENV/bin/python" -c 'import os, sys, pytest
rc = pytest.main(sys.argv[1:])
sys.stdout.flush(), sys.stderr.flush()
os._exit(rc)' \
    -q -m e2e_cpu -p no:cacheprovider "$f" "${deselect[@]}" \
    --master-host 127.0.0.1 --master-port "$(port_of "$slots")" \
    --timeout "${DET_E2E_TEST_TIMEOUT:-600}" \
    --junitxml "$RUN/junit/$name.xml" >"$RUN/$name.log" 2>&1 || true
  echo "$name $((SECONDS - start))" >>"$RUN/durations"
  tail -1 "$RUN/$name.log" >&2
  [ "$slots" = 4 ] || stop_master 1
done
stop_master 4

# --- the report ---------------------------------------------------------------------------------
"$VENV/bin/python" - "$RUN" "$SKIPS" "$min_pass" "${files[@]}" <<'EOF'
import pathlib
import sys
import xml.etree.ElementTree as ET

run, skips, min_pass, files = pathlib.Path(sys.argv[1]), sys.argv[2], float(sys.argv[3]), sys.argv[4:]
durations = dict(
    line.split() for line in (run / "durations").read_text().splitlines() if line.strip()
)
listed = []
for line in open(skips):
    if line.strip() and not line.startswith("#"):
        node, reason, *why = (p.strip() for p in line.split("|"))
        listed.append((node, reason, why[0] if why else ""))

rows, own_skips, failures = [], [], []
total = {"passed": 0, "failed": 0, "skipped": 0}
for f in files:
    name = f[len("tests/"):].removesuffix(".py").replace("/", ".")
    path = run / "junit" / f"{name}.xml"
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    if not path.exists():
        rows.append((f, None, durations.get(name, "?")))
        continue
    for case in ET.parse(path).iter("testcase"):
        test = f"{f}::{case.get('name')}"
        outcome = "passed"
        for child in case:
            if child.tag == "skipped":
                outcome = "skipped"
                own_skips.append((test, child.get("message", "")))
            elif child.tag in ("failure", "error"):
                outcome = "failed"
                failures.append((test, (child.get("message") or "").splitlines()[0][:160]
                                 if child.get("message") else child.tag))
        counts[outcome] += 1
    rows.append((f, counts, durations.get(name, "?")))
    for k in total:
        total[k] += counts[k]

print(f"\n{'file':<48} {'passed':>7} {'failed':>7} {'skipped':>8} {'s':>6}")
for f, c, secs in rows:
    if c is None:
        print(f"{f:<48} {'no junit (collection error? see its log)':>30} {secs:>6}")
    else:
        ran = c["passed"] + c["failed"]
        print(f"{f:<48} {c['passed']:>4}/{ran:<2} {c['failed']:>7} {c['skipped']:>8} {secs:>6}")
applicable = total["passed"] + total["failed"]
pct = 100.0 * total["passed"] / applicable if applicable else 0.0
print(
    f"\nTOTAL: {total['passed']} of {applicable} applicable tests passed ({pct:.1f}%); "
    f"{total['skipped']} skipped by the suite, {len(listed)} entries of the skip list not run"
)
print("\nNot run (scripts/reference_e2e_skips.txt):")
for node, reason, why in listed:
    print(f"  {node}  [{reason}] {why}")
if own_skips:
    print("\nSkipped by the suite itself:")
    for test, msg in own_skips:
        print(f"  {test}: {msg}")
if failures:
    print("\nFailed:")
    for test, msg in failures:
        print(f"  {test}: {msg}")
print(f"\nlogs and junit: {run}")
if pct < min_pass:
    print(f"FAILED: {pct:.1f}% of the applicable tests passed; --min-pass={min_pass:g} asks more")
    sys.exit(1)
EOF
exit
}
