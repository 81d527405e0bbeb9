#!/usr/bin/env bash
# The GPU checks of issues #19 and #32 in one run (docs/pytorch.md):
#   1. installs the wheels in .whl/ (what a bare torch machine lacks: pyzmq, pathspec, tqdm,
#      psycopg, pytest-timeout, pytest-xdist; lightning and its dependencies for step 4) into
#      /tmp/site, and those in .whl037/ (Determined 0.37 and its dependencies) into
#      /tmp/site037, where the folders are there;
#   2. "tests": all of tests/pytorch and tests/core (CUDA paths where a GPU is there: async
#      checkpoint staging, bitwise resume, to_device, use_amp in float16, ...), 4 workers when
#      pytest-xdist is importable;
#   3. "stall": benchmarks/checkpoint_stall.py on the GPU and on the CPU, 100 MB and 1 GB;
#   4. "overhead": benchmarks/gpu_overhead.py, per-batch cost with and without AMP: a plain
#      loop, ours, Determined 0.37 (from /tmp/site037) and Lightning (if importable) in one run.
# STEPS picks and orders steps 2-4 (default: "tests overhead stall"). Everything goes to
# $OUT/log (default ./gpu-check-out/log). Exits non-zero if a step failed, after running all of
# them. About 8-10 minutes for all three on a 16-core machine with one GPU.
#
#   OUT=/tmp/out bash benchmarks/gpu_check.sh
#   STEPS=overhead bash benchmarks/gpu_check.sh
#
# The GPU machine reaches no package index: fetch the wheels beforehand on a machine that does,
# for the GPU machine's Python (python3 --version there), and carry .whl/ and .whl037/ along:
#   pip download -d .whl --only-binary=:all: --python-version 3.X pyzmq pathspec tqdm \
#       'psycopg[binary]' pytest-timeout pytest-xdist hypothesis lightning
#   pip download -d .whl037 --only-binary=:all: --python-version 3.X determined==0.37.0
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
WHEELS=${WHEELS:-.whl}  # another folder of wheels (a simulation on another Python)
WHEELS037=${WHEELS037:-.whl037}
STEPS=${STEPS:-tests overhead stall}
failed=()

step() {  # step NAME TIMEOUT_S COMMAND...: run one step, note its failure, go on
    local name=$1 limit=$2
    shift 2
    echo
    echo "== $name ($(date -u +%H:%M:%S))"
    local start=$SECONDS
    timeout --signal=KILL "$limit" "$@"
    local rc=$?
    echo "== $name: rc=$rc in $((SECONDS - start)) s"
    [ "$rc" -eq 0 ] || failed+=("$name (rc=$rc)")
}

run_tests() {  # every test of tests/pytorch and tests/core; CUDA paths where there is a GPU
    local workers=()
    if "$PY" -c "import xdist" 2>/dev/null; then
        workers=(-n 4 --dist loadfile)
    fi
    step tests 420 "$PY" -m pytest -q -rs -p no:cacheprovider ${workers[@]+"${workers[@]}"} \
        tests/pytorch tests/core
}

main() {
    echo "== gpu_check $(git rev-parse --short HEAD 2>/dev/null || echo '?') on $(hostname) $(date -u)"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
    if compgen -G "$WHEELS/*.whl" >/dev/null; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site "$WHEELS"/*.whl || failed+=("wheel install")
        export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
    else
        export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
    fi
    local det037=""
    if compgen -G "$WHEELS037/*.whl" >/dev/null; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site037 "$WHEELS037"/*.whl || failed+=("0.37 wheel install")
        det037=/tmp/site037
    elif [ -d .refvenv ]; then  # a development machine: 0.37 as CONTRIBUTING.md installs it
        det037=$(ls -d "$PWD"/.refvenv/lib/python*/site-packages | head -1)
    fi
    step imports 120 "$PY" -c "
import sys, torch, zmq, determined.core, determined.pytorch, determined.pytorch._staging
print('zmq from', zmq.__file__)
print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else '(none: CUDA tests skip)')
"
    for s in $STEPS; do
        case $s in
            tests) run_tests ;;
            overhead)
                # Per-batch cost, AMP off and on: plain loop, ours, 0.37, Lightning (issue 32).
                DET037_PATH=$det037 && export DET037_PATH
                step overhead 300 "$PY" benchmarks/gpu_overhead.py \
                    --device cuda --reps 2
                ;;
            stall)
                df -T "${TMPDIR:-/tmp}" | tail -1
                grep -o 'sha_ni' /proc/cpuinfo | head -1 || echo "no sha_ni"
                step "bench cuda" 240 "$PY" benchmarks/checkpoint_stall.py --device cuda \
                    --sizes 100,1000
                step "bench cpu" 240 "$PY" benchmarks/checkpoint_stall.py --device cpu \
                    --sizes 100,1000
                ;;
            *) echo "unknown step $s (tests, overhead, stall)"; failed+=("$s (unknown)") ;;
        esac
    done
    echo
    if [ ${#failed[@]} -eq 0 ]; then
        echo "== gpu_check: all steps passed"
    else
        echo "== gpu_check: FAILED: ${failed[*]}"
        return 1
    fi
}

main 2>&1 | tee "$OUT/log"
