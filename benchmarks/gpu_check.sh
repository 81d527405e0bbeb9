#!/usr/bin/env bash
# The GPU checks of issue #19 in one run (docs/pytorch.md, "Asynchronous checkpoints"):
#   1. installs the wheels in .whl/ (what a bare torch machine lacks: pyzmq, pathspec, tqdm,
#      psycopg, pytest-timeout) into /tmp/site, if .whl/ is there;
#   2. runs the tests that use CUDA when it is there (async checkpoint staging and bitwise
#      resume on the GPU, to_device, ...);
#   3. runs benchmarks/checkpoint_stall.py on the GPU and on the CPU, 100 MB and 1 GB.
# Everything goes to $OUT/log (default ./gpu-check-out/log). Exits non-zero if a step failed,
# after running all of them. About 3-5 minutes on a 16-core machine with one GPU.
#
#   OUT=/tmp/out bash benchmarks/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
WHEELS=${WHEELS:-.whl}  # another folder of wheels (a simulation on another Python)
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
    step imports 120 "$PY" -c "
import sys, torch, zmq, determined.core, determined.pytorch, determined.pytorch._staging
print('zmq from', zmq.__file__)
print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else '(none: CUDA tests skip)')
"
    # Tests that take the CUDA path when a GPU is there (grep torch.cuda.is_available in tests/
    # and determined/pytorch: to_device, staging, async checkpoints with the model on cuda,
    # checkpoint writing and loading).
    step tests 300 "$PY" -m pytest -q -rs -p no:cacheprovider \
        tests/pytorch/test_to_device.py tests/pytorch/test_staging.py \
        tests/pytorch/test_async_checkpoint.py tests/pytorch/test_save_file.py \
        tests/pytorch/test_legacy.py
    df -T "${TMPDIR:-/tmp}" | tail -1
    grep -o 'sha_ni' /proc/cpuinfo | head -1 || echo "no sha_ni"
    step "bench cuda" 240 "$PY" benchmarks/checkpoint_stall.py --device cuda --sizes 100,1000
    step "bench cpu" 240 "$PY" benchmarks/checkpoint_stall.py --device cpu --sizes 100,1000
    echo
    if [ ${#failed[@]} -eq 0 ]; then
        echo "== gpu_check: all steps passed"
    else
        echo "== gpu_check: FAILED: ${failed[*]}"
        return 1
    fi
}

main 2>&1 | tee "$OUT/log"
