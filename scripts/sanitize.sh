#!/usr/bin/env bash
# Builds the C++ core and its tests under a sanitizer and runs them; any report fails the run.
#   scripts/sanitize.sh address   # AddressSanitizer + UndefinedBehaviorSanitizer
#   scripts/sanitize.sh thread    # ThreadSanitizer
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:?usage: sanitize.sh address|thread}
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
