#!/usr/bin/env bash
# Runs tests under sanitizers; any report fails the run. The modes and their flags are
# csrc/build_config.txt's (PREFETCH_SANITIZE), the same for CMake and setup.py.
#   scripts/sanitize.sh address   # the C++ core's tests, AddressSanitizer + UndefinedBehaviorSanitizer
#   scripts/sanitize.sh thread    # the C++ core's tests, ThreadSanitizer
#   scripts/sanitize.sh python [pytest args]   # the extension under ASan + UBSan, driven by pytest
#                                              # (default: the whole suite)
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:?usage: sanitize.sh address|thread|python [pytest args]}
shift

if [ "$kind" = python ]; then
  # The C++ tests reach the core and kernels; the torch layer, the bindings and the inputs that
  # the pytest and hypothesis tests generate are reached only from Python. So the extension is
  # built instrumented, in a copy of the checkout (the regular build stays), and the suite runs
  # with the sanitizer runtimes preloaded into the (uninstrumented) interpreter. Leak checking is
  # off: Python and torch keep objects until exit by design; leaks are the flat-memory tests' job.
  tree=build/sanitize-python-tree
  bash scripts/copy_tree.sh "$tree"
  cd "$tree"
  log=$(mktemp)
  # PREFETCH_SANITIZE=address: ASan + UBSan, the same mode and flags as the core's address build
  # below (csrc/build_config.txt).
  if ! PREFETCH_SANITIZE=address python3 setup.py build_ext --inplace >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "sanitize.sh python: the instrumented build failed (log: $log)" >&2
    exit 1
  fi
  reports=$(mktemp -d)
  source scripts/pytest_workers.sh python3
  preload="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)"
  set +e
  PREFETCH_SANITIZED=1 LD_PRELOAD=$preload \
    ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:log_path=$reports/asan \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:log_path=$reports/ubsan \
    timeout --signal=TERM --kill-after=30 "${PREFETCH_TEST_TIMEOUT:-1800}" \
    python3 -m pytest -q -p no:cacheprovider "${pytest_workers[@]}" "${@:-tests}"
  status=$?
  set -e
  # A report from any process (subprocess tests, DataLoader workers) fails the run, whatever
  # pytest concluded.
  if compgen -G "$reports/*" >/dev/null; then
    for f in "$reports"/*; do echo "== $f"; head -n 60 "$f"; done >&2
    echo "sanitize.sh python: sanitizer reports above" >&2
    exit 1
  fi
  exit $status
fi

BUILD=build/sanitize-$kind
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DPREFETCH_SANITIZE="$kind" >/dev/null
cmake --build "$BUILD" -j "${MAX_JOBS:-2}"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:halt_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
# TSan needs the classic address-space layout on kernels with high mmap ASLR entropy.
run=()
if [ "$kind" = thread ] && command -v setarch >/dev/null 2>&1; then run=(setarch "$(uname -m)" -R); fi
"${run[@]}" ctest --test-dir "$BUILD" --output-on-failure
