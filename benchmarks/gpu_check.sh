#!/usr/bin/env bash
# The checks that need a CUDA GPU, as one prepared run on a lent accelerator: the gpu-marked
# capture tests (and the torch ones beside them, and two DDP ranks on the GPU), then
# bench_tensors.py with the state on the GPU.
# Without CUDA it says so and exits 0 (CI has no GPU; the gpu tests skip there by themselves).
#
# The accelerator reaches no package index, so its Python packages travel as wheels in .whl/
# (ignored by git), made here first:
#   rm -rf .whl && python3 -m pip wheel -q --no-deps packages/core packages/capture -w .whl
#   python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_17_x86_64 -d .whl \
#     msgspec==0.19.0 cloudpickle==3.1.1 attrs==25.3.0 pathspec==0.12.1 pluggy==1.6.0
# Then, there: bash benchmarks/gpu_check.sh (with .whl carried). Knobs: GPU_TESTS=0 skips the
# tests, GPU_BENCH_GB="4 16" sets the state sizes (empty: no benchmark), GPU_TESTS_S and
# GPU_BENCH_S bound each part. Results go under $OUT (./gpu-out when unset).
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
if ! python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)'; then
    echo "gpu_check: this machine has no CUDA GPU (or no torch); nothing to check"
    exit 0
fi
prefix=/tmp/portal-gpu
python3 -m pip install -q --no-index --no-deps --no-compile --ignore-installed \
    --prefix "$prefix" .whl/*.whl || exit 2
site=$(python3 -c "import sysconfig; print(sysconfig.get_path('purelib', vars={'base': '$prefix', 'platbase': '$prefix'}))")
export PYTHONPATH="$site" PYTHONUNBUFFERED=1
{
    nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv
    python3 -c "import sys, torch, zlib; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name(), 'zlib', zlib.ZLIB_RUNTIME_VERSION)"
    nproc; free -g; df -h "${TMPDIR:-/tmp}"
} >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

if [ "${GPU_TESTS:-1}" = 1 ]; then
    timeout "${GPU_TESTS_S:-240}" python3 -m pytest -p no:cacheprovider -c pyproject.toml --rootdir . \
        -q -W default --durations=8 \
        packages/capture/tests/test_capture_torch_gpu.py \
        packages/capture/tests/test_capture_torch.py \
        packages/capture/tests/test_capture_staged.py \
        packages/capture/tests/test_ranks_runtime.py::test_ranks_on_a_gpu_pause_and_resume_bit_for_bit \
        2>&1 | tee "$OUT/tests.log" | tail -60
    echo "tests: exit ${PIPESTATUS[0]}"
fi
for gb in ${GPU_BENCH_GB-4}; do
    timeout "${GPU_BENCH_S:-200}" python3 benchmarks/bench_tensors.py --device cuda --gb "$gb" \
        --json "$OUT/bench-$gb.json" 2>&1 | tee "$OUT/bench-$gb.txt"
    echo "bench $gb GB: exit ${PIPESTATUS[0]}"
done
