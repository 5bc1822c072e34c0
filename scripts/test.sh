#!/usr/bin/env bash
# Every test: the C++ core's GoogleTest suite (ctest, with the CUDA backend compiled and linked
# when nvcc is found) and the Python suite (pytest; CUDA cases skip without a GPU unless
# FAIL_WITHOUT_CUDA=1).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
BUILD=${PREFETCH_CORE_BUILD:-build/core}

# PREFETCH_SKIP_CTEST=1 skips the C++ suite, for machines without GoogleTest where nothing can be
# installed (the GPU image); CI always runs it.
if [ "${PREFETCH_SKIP_CTEST:-0}" = 1 ]; then
  echo "test.sh: PREFETCH_SKIP_CTEST=1: the C++ core's tests are skipped"
else
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$BUILD" -j "${MAX_JOBS:-2}"
  ctest --test-dir "$BUILD" --output-on-failure
fi

# A hard bound on the whole suite: a hang fails the run (after faulthandler_timeout has printed
# the stuck test's stacks) instead of eating CI's time.
source scripts/pytest_workers.sh "$PY"
timeout --signal=TERM --kill-after=30 "${PREFETCH_TEST_TIMEOUT:-1800}" "$PY" -m pytest tests -q -p no:cacheprovider \
  "${pytest_workers[@]}"
