#!/usr/bin/env bash
# Coverage-guided fuzzing of what parses untrusted input: the JPEG decoder (csrc/decode) and the
# collation core (csrc/core/collate), with libFuzzer under AddressSanitizer + UBSan (clang).
# Each target starts from its seed corpus (tests/fuzz/corpus/<target>) and runs for SECONDS
# (default 60) on a scratch copy of it. An input that crashes is written to
# tests/fuzz/regressions/<target>/ and the run fails: commit that file, fix the bug, and the
# replay tests every build runs (ctest: fuzz_inputs_<target>) keep it fixed.
#   bash scripts/fuzz.sh [SECONDS]      (needs clang and libclang-rt: apt install clang)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-60}
BUILD=${PREFETCH_FUZZ_BUILD:-build/fuzz}
if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz.sh: clang++ not found (apt install clang)" >&2
  exit 1
fi
CC=clang CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DPREFETCH_SANITIZE=address -DPREFETCH_FUZZ=ON -DPREFETCH_CUDA=OFF >/dev/null
cmake --build "$BUILD" -j "${MAX_JOBS:-2}" --target jpeg_fuzz collate_fuzz
status=0
for target in jpeg collate; do
  work=$(mktemp -d)
  cp -r "tests/fuzz/corpus/$target/." "$work/"
  mkdir -p "tests/fuzz/regressions/$target"
  echo "fuzz.sh: $target for ${SECONDS_EACH} s"
  if ! "$BUILD/${target}_fuzz" -max_total_time="$SECONDS_EACH" -max_len=65536 -timeout=20 \
      -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="tests/fuzz/regressions/$target/" "$work" >"$BUILD/${target}_fuzz.log" 2>&1; then
    echo "fuzz.sh: $target found an input that fails (tests/fuzz/regressions/$target/):" >&2
    tail -n 40 "$BUILD/${target}_fuzz.log" >&2
    status=1
  else
    grep -E "stat::number_of_executed_units|cov:|ft:" "$BUILD/${target}_fuzz.log" | tail -n 2
  fi
  rm -rf "$work"
done
exit $status
