#!/usr/bin/env bash
# The GPU run in one device call: build the extension for Hopper, every test with
# FAIL_WITHOUT_CUDA=1, compute-sanitizer memcheck over the CUDA tests, and the full benchmark.
# Logs and results go to $OUT (the device tool's folder; default ./gpu-out), at most 8 files:
#   env.txt build.log tests.log memcheck.log bench.log bench/results.json bench/e2e.png bench/ops.png
# Usage (device tool): bash benchmarks/gpu_check.sh [steps]   steps: build,tests,memcheck,bench
# Each step has its own timeout (build 300 s, tests 240, memcheck 200, bench 240), which together
# exceed one device call's 10 minutes in the worst case. Unless a first run shows the whole
# script well inside 10 minutes, use two calls on the warm machine (the build is then a no-op):
#   bash benchmarks/gpu_check.sh build,tests,memcheck      then      bash benchmarks/gpu_check.sh build,bench
# Never run on a GPU yet (written without one): expect the first run to need fixes.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
STEPS=${1:-build,tests,memcheck,bench}
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} MAX_JOBS=${MAX_JOBS:-16}
export PYTHONUNBUFFERED=1 PREFETCH_SKIP_EXTRAS=1 FORCE_CUDA=1
status=()
t_start=$(date +%s)

step() {  # step NAME TIMEOUT_S LOG COMMAND...
  local name=$1 limit=$2 log=$3; shift 3
  case ",$STEPS," in *",$name,"*) ;; *) return 0 ;; esac
  local t0=$(date +%s)
  timeout --signal=TERM --kill-after=15 "$limit" "$@" >"$OUT/$log" 2>&1
  local rc=$?
  status+=("$name: rc=$rc in $(( $(date +%s) - t0 )) s (log: $log)")
  echo "gpu_check: ${status[-1]}"
  return $rc
}

{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 -c "import sys, torch; print('python', sys.version.split()[0]); print('torch', torch.__version__, 'cuda', torch.version.cuda); print(torch.cuda.get_device_name())"
  nvcc --version | tail -n 2
  python3 -c "import timm; print('timm', timm.__version__)" 2>&1 | tail -n 1
} >"$OUT/env.txt" 2>&1

step build 300 build.log bash scripts/install.sh || { echo "gpu_check: build failed"; tail -n 40 "$OUT/build.log"; exit 1; }

# The C++ suite needs GoogleTest; without it (nothing can be installed there) run Python only.
if [ -f /usr/include/gtest/gtest.h ] || [ -f /usr/local/include/gtest/gtest.h ]; then
  skip_ctest=0
else
  skip_ctest=1
fi
step tests 240 tests.log env FAIL_WITHOUT_CUDA=1 PREFETCH_SKIP_CTEST=$skip_ctest \
  PREFETCH_TEST_TIMEOUT=220 bash scripts/test.sh

# Every CUDA case under memcheck, without torch's caching allocator (so a stray access outside a
# live allocation is seen), failing on the first error report.
step memcheck 200 memcheck.log env PYTORCH_NO_CUDA_MEMORY_CACHING=1 FAIL_WITHOUT_CUDA=1 \
  compute-sanitizer --tool memcheck --error-exitcode=1 --target-processes all \
  python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_ops.py tests/test_prefetcher.py \
  tests/test_transforms.py tests/test_array_loader.py

step bench 240 bench.log python3 -m prefetch.bench --out "$OUT/bench"

echo "gpu_check: done in $(( $(date +%s) - t_start )) s"
printf '  %s\n' "${status[@]}"
for s in "${status[@]}"; do case $s in *"rc=0 "*) ;; *) exit 1 ;; esac; done
