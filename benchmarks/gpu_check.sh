#!/usr/bin/env bash
# The GPU check: everything only a GPU can prove, stage by stage, offline, each stage under its
# own time limit, each stage's result written as it finishes (with the commit it measured), so
# that one failure or timeout loses nothing else.
#
# THE FOCUSED PLAN, the first call of a session that is lent a GPU (15 minutes of device
# time, start-ups and builds included): one device call, the device tool's `run` with
#     command: bash benchmarks/gpu_check.sh --pack --plan focused        timeout_s: 590
# It runs build, tests (every CUDA test on the current code, 60 s a test, the stage bounded only
# by what is left of the budget), sanitize_changed (compute-sanitizer on the kernels and copy
# paths changed since their last clean run), bench_fair (the fair sections with new code or no
# fair figure yet, N = the cores) under --budget 560 (nccl is not in it: 2 NCCL ranks need 2 GPUs,
# and on this one-GPU machine NCCL refuses them, "Duplicate GPU detected", 2026-11-30):
# start-up ~60 s + transfers ~15 s + at most 590 s = 665 s. `bash benchmarks/gpu_check.sh --plan
# focused --list` prints the arithmetic. Then give_back at once. The one exception: a section the
# call did not reach can follow in a second call sent AT ONCE, prepared beforehand, because the
# machine is held only 30 s after a call.
# On 2026-11-29 the session read the results first, the machine had gone back, and a fresh one
# (~35 s) built again (130-140 s) and got nowhere; on 2026-11-30 a second call sent at once found
# it warm, the build up to date (6 s), and ran the unfinished section:
#     GPU_CHECK_FAIR_SECTIONS=workers bash benchmarks/gpu_check.sh --pack --budget 240 build,bench_fair
# (name the sections the first call's output says were not reached), then give_back. Without
# GPU_CHECK_FAIR_SECTIONS it does the same: bench_fair skips the sections recorded at this commit
# on this machine (2026-11-30, run 6: `--pack --budget 200 build,bench_fair,profile` ran workers and
# the profile; a third call at once, `--pack --budget 150 build,memory,ddp`, the rest). A section or
# target no call reached is what the next lent session's focused call runs first: the clean runs
# it records let that call skip what this one finished. Commit what came back: $OUT/summary.json
# (as benchmarks/results/h200-<date>-gpu-check.json), $OUT/bench_fair/results.json, and
# $OUT/gpu_clean_runs.json over benchmarks/results/gpu_clean_runs.json (the record of what ran
# clean at which commit: benchmarks/gpu/changed.py).
#
#   bash benchmarks/gpu_check.sh [options] [STAGES]      STAGES: comma-separated, default
#                                                        build,tests,sanitize,memory,ddp,bench
#   --plan focused the stages build,tests,sanitize_changed,bench_fair, --budget 560 unless
#                  given, and the tests stage's limit is all that is left of the budget
#   --cpu          CPU mode (also automatic when torch sees no GPU): the same preflight, order,
#                  limits and files; each stage runs its CPU path or says "skipped (no GPU)"
#   --budget S     seconds for this whole invocation: a stage's limit is cut to what is left,
#                  and a stage that no longer fits is recorded as skipped, not started
#   --pack         keep the logs out of $OUT, in a temporary folder, and write them to
#                  $OUT/logs.tar.gz after every stage (the device tool returns at most 8 files)
#   --list         print the stages and their limits (with --plan focused: the plan's arithmetic)
# Environment: OUT (default ./gpu-out), GPU_CHECK_LIMIT_<STAGE>=seconds overrides a limit,
# GPU_CHECK_TEST_LIMIT=seconds a test may take in the tests stage (default 60),
# GPU_CHECK_FAIR_SECTIONS=e2e,... only these of bench_fair's sections (still only if changed),
# GPU_CHECK_SELFTEST=1 adds a stage that sleeps past a 2-second limit (it must come out as
# "timeout" while the following stages still run), PYTHON (default python3).
#
# Stages (limit in seconds; preflight always runs first):
#   preflight   45  what the machine has: $OUT/preflight.txt, and its JSON in summary.json
#   build      300  scripts/install.sh, TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 FORCE_CUDA=1, nothing
#                   fetched (PREFETCH_SKIP_EXTRAS=1, no extras, pip offline, apt-get refused); a
#                   no-op when the sources are those of the last build on this machine
#   tests      200  every CUDA test and the build's own checks: FAIL_WITHOUT_CUDA=1 pytest
#                   -m 'cuda or gpu_machine' tests, one xdist worker, each test ended after
#                   GPU_CHECK_TEST_LIMIT s (benchmarks/gpu/pytest_limits.py: the suite's
#                   faulthandler, made to end the worker, which xdist replaces); pytest is
#                   interrupted 30 s before the stage's limit, so its report names what ran
#   sanitize   280  compute-sanitizer memcheck/racecheck on each op and copy path, then
#                   synccheck/initcheck on the ops (benchmarks/gpu/run_sanitize.py)
#   sanitize_changed 150  the same, only for the ops and copy paths whose sources changed since
#                   their last clean run (run_sanitize.py --changed); each clean one is recorded
#                   at this commit in build/gpu_check/ and $OUT/ (gpu_clean_runs.json)
#   memory     140  20 epochs after 2 warm-ups of every pipeline: nothing may grow; empty_cache()
#                   after close under expandable_segments (benchmarks/gpu/memory.py)
#   ddp         90  torchrun: each rank's CUDA contexts on its own device only (ddp_contexts.py)
#   bench      360  python -m prefetch.bench, one section per process, merged: $OUT/bench/
#                   results.json, readme_table.md (docs/benchmarks.md's GPU tables), e2e.png, ops.png
#   bench_fair 360  the fair sections (h2d, e2e, recipes, workers, in that order) that have new
#                   code or no fair figure yet, --workers = the usable cores: $OUT/bench_fair/ as bench's;
#                   each finished section is recorded at this commit in gpu_clean_runs.json
#   nccl        60  2 ranks with NCCL (ddp_contexts.py --nccl2); on one GPU both on it, which NCCL
#                   refuses ("Duplicate GPU detected"): then skipped with NCCL's words
#   profile    120  not by default: Nsight Compute over one launch of each fused op and variant
#                   (benchmarks/gpu/profile_ops.py): $LOGS/profile/{ncu.txt,summary.txt}
#   suite      420  not by default: the whole Python suite on the GPU (scripts/test.sh,
#                   PREFETCH_SKIP_CTEST=1: no GoogleTest there)
# Together (the default stages) 1415 s, over 10 minutes: the focused plan is the first call;
# these calls (each under 10 minutes, timeout_s=600) are for a session with more device time:
#   call 1: bash benchmarks/gpu_check.sh --pack --budget 570 build,tests
#   call 2: bash benchmarks/gpu_check.sh --pack --budget 570 build,sanitize,memory,ddp
#   call 3: bash benchmarks/gpu_check.sh --pack --budget 570 build,bench
#   call 4 (if device time is left): bash benchmarks/gpu_check.sh --pack --budget 570 build,profile,suite
# Measured on an H200 (2026-11-26/27): a start ~30-60 s, preflight 10, build 80-100, tests 83-117
# (287 tests), profile ~25, sanitize 63-79 (every target), memory ~30, ddp ~27, bench ~145 with
# every section at 2 workers (benchmarks/results/h200-2026-11-27*); on 2026-11-29, after the ops
# got their own files (69 translation units): build 130-139, tests 121 (292), sanitize_changed 64
# (14 targets), bench_fair's h2d 6-7 and e2e at N = 16 ~5.5 s a pass (h200-2026-11-29-gpu-check.json).
# Run 6 (2026-11-30, 362 tests): build 111, tests 112, sanitize_changed 67
# (12 targets), bench_fair 188 (h2d, e2e, recipes), workers 100, profile 25, memory 34, ddp 26.
#
# Files under $OUT: summary.json (every stage so far: status ok|failed|timeout|skipped, seconds,
# limit, note, commit, uncommitted_files, details — the tests stage's details name its failed,
# ended and skipped tests, with reasons, and how many of the collected ran; the preflight;
# "result"), preflight.txt, bench/ and bench_fair/{results.json,readme_table.md,e2e.png,ops.png},
# gpu_clean_runs.json (when a stage recorded a clean target), and the logs: $OUT/logs/ (or
# logs.tar.gz with --pack) with <stage>.log, <stage>.status.json and each stage's own files
# (tests.xml, sanitize/, memory/, ddp/, bench/). Exit status 0 when summary.json's result is "ok".
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
# The checkout's prefetch, whatever is installed (the build installs this checkout anyway).
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
# Nothing here may wait on a network (the GPU machine has none), a test's pip call included:
# pip looks at no index and skips its own version check, which ignores --no-index.
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
GPU=benchmarks/gpu
SKIP=77  # a body's "nothing to run here" (its note says why)

limit_of() {  # limit_of STAGE: seconds, GPU_CHECK_LIMIT_<STAGE> first
  local default var
  case $1 in
    preflight) default=45 ;; selftest) default=2 ;; build) default=300 ;; tests) default=200 ;;
    sanitize) default=280 ;; memory) default=140 ;; ddp) default=90 ;; bench) default=360 ;;
    profile) default=120 ;; suite) default=420 ;; sanitize_changed) default=150 ;;
    bench_fair) default=360 ;; nccl) default=60 ;; *) default=60 ;;
  esac
  var="GPU_CHECK_LIMIT_$(printf '%s' "$1" | tr '[:lower:]' '[:upper:]')"
  printf '%s\n' "${!var:-$default}"
}

note() {  # note TEXT: the running stage's note (appended), shown in summary.json
  printf '%s\n' "$*" >>"$GPU_CHECK_LOGS/$GPU_CHECK_STAGE.note"
}

# ---- stage bodies: each runs as its own process under `timeout` --------------------------

body_preflight() {
  local args=(--out "$GPU_CHECK_LOGS")
  [ "$GPU_CHECK_FORCE_CPU" = 1 ] && args+=(--cpu)
  "$PY" "$GPU/preflight.py" "${args[@]}" || return 1
  cp "$GPU_CHECK_LOGS/preflight.txt" "$OUT/preflight.txt"
  note "$(sed -n 2p "$GPU_CHECK_LOGS/preflight.txt")"
}

body_selftest() {
  note "sleeps 30 s under a ${GPU_CHECK_STAGE_LIMIT}-second limit: must be reported as timeout"
  sleep 30
}

source_sum() {  # what the extension is built from, with the interpreter and torch it is for
  {
    find csrc -type f -print0 | sort -z | xargs -0 sha256sum
    sha256sum setup.py pyproject.toml scripts/install.sh scripts/cuda_from_pip.py
    "$PY" -c 'import sys, torch; print(sys.version, torch.__version__, torch.version.cuda)'
    printf '%s %s\n' "${TORCH_CUDA_ARCH_LIST:-}" "${FORCE_CUDA:-}"
  } 2>&1 | sha256sum | cut -c1-32
}

body_build() {
  export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} MAX_JOBS=${MAX_JOBS:-16} FORCE_CUDA=1
  local stamp=build/gpu_check/build.stamp sum
  sum=$(source_sum)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sum" ] &&
     "$PY" -c 'import sys, prefetch; sys.exit(0 if prefetch.built_with_cuda() else 1)' 2>/dev/null; then
    note "up to date: the sources, Python and torch of the last build on this machine"
    return 0
  fi
  # install.sh's apt-get (for GoogleTest or libjpeg headers the image may lack) is refused at
  # once instead of waiting on a network that is not there (pip is offline: the top).
  local offline="$GPU_CHECK_LOGS/offline-bin"
  mkdir -p "$offline"
  for tool in apt-get apt; do
    printf '#!/bin/sh\necho "gpu_check: refused: %s $*: this machine is offline" >&2\nexit 100\n' \
      "$tool" >"$offline/$tool"
    chmod +x "$offline/$tool"
  done
  echo "gpu_check: TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST MAX_JOBS=$MAX_JOBS FORCE_CUDA=1" \
    "PREFETCH_SKIP_EXTRAS=1 PREFETCH_EXTRAS= bash scripts/install.sh"
  PATH="$offline:$PATH" PREFETCH_SKIP_EXTRAS=1 PREFETCH_EXTRAS="" bash scripts/install.sh || {
      note "scripts/install.sh failed (see build.log)"; return 1; }
  "$PY" -c 'import prefetch; print("gpu_check: prefetch", prefetch.__version__, "CUDA",
prefetch.built_with_cuda(), "JPEG", prefetch.built_with_jpeg())
raise SystemExit(0 if prefetch.built_with_cuda() else 1)' || {
    note "the extension was built without CUDA (see build.log)"; return 1; }
  mkdir -p "$(dirname "$stamp")" && printf '%s\n' "$sum" >"$stamp"
  note "built ($("$PY" -c 'import prefetch; print("JPEG decoding", prefetch.built_with_jpeg())'))"
}

# The CUDA tests, and the checks of the build itself (gpu_machine): the GPU image's compiler and
# libstdc++ are not CI's (its build once carried a static libstdc++ that crashed every error
# message with a number in it, on the CPU too, and only one CUDA test raised such a message).
TEST_MARKERS="cuda or gpu_machine"

body_tests() {
  # pytest_limits (benchmarks/gpu): a limit per test and the count of tests collected.
  export PYTHONPATH="$ROOT/$GPU:$PYTHONPATH"
  local limits=(-p pytest_limits --collected-file "$GPU_CHECK_LOGS/tests.collected")
  if [ "$GPU_CHECK_MODE" != gpu ]; then
    # No GPU: collecting them still proves every CUDA test module imports and is selected (and
    # that the per-test plugin loads and counts).
    local out n
    out=$("$PY" -m pytest -m "$TEST_MARKERS" tests --collect-only -q -p no:cacheprovider \
          "${limits[@]}" 2>&1)
    local rc=$?
    printf '%s\n' "$out"
    n=$(cat "$GPU_CHECK_LOGS/tests.collected" 2>/dev/null || echo "?")
    note "no GPU: collected $n tests marked $TEST_MARKERS, not run"
    return $rc
  fi
  # -v: a test per line as it ends, so a stage stopped at its limit still shows how far it got;
  # one module that fails to import must not cost the others (it still fails the stage).
  local per_test=${GPU_CHECK_TEST_LIMIT:-60}
  local args=(-m "$TEST_MARKERS" tests -v -p no:cacheprovider -rfE --durations=15 --continue-on-collection-errors
              --junitxml="$GPU_CHECK_LOGS/tests.xml" "${limits[@]}")
  if "$PY" -c 'import xdist' 2>/dev/null; then
    # One xdist worker: still one test at a time on the GPU, but a test that crashes the process
    # (the first H200 run lost every result to one SIGSEGV) or outlasts its limit is reported as
    # failed and the worker replaced, so the rest run and the junit report is written.
    args+=(-n 1 --max-worker-restart=20 --test-limit "$per_test" -o faulthandler_timeout=0)
    note "every CUDA test, ${per_test} s a test (pytest_limits, xdist)"
  elif "$PY" -c 'import pytest_timeout' 2>/dev/null; then
    # No xdist: an ended process would end the run; pytest-timeout's signal fails the test only
    # (but cannot stop one stuck in C with the GIL held: the stage's limit then does).
    args+=(--timeout="$per_test" --timeout-method=signal)
    note "every CUDA test, ${per_test} s a test (pytest-timeout, no xdist)"
  else
    note "no pytest-xdist nor pytest-timeout: only the stage's limit bounds a stuck test"
  fi
  # SIGINT 30 s before the stage's own limit: pytest stops as after Ctrl-C and still writes its
  # junit report of the tests that ran (a TERM or KILL would leave none).
  FAIL_WITHOUT_CUDA=1 timeout --signal=INT --kill-after=20 $((GPU_CHECK_STAGE_LIMIT - 30)) \
    "$PY" -m pytest "${args[@]}"
  local rc=$?
  [ $rc = 124 ] && note "interrupted 30 s before the stage's limit of ${GPU_CHECK_STAGE_LIMIT} s"
  junit_note "$GPU_CHECK_LOGS/tests.xml" "$GPU_CHECK_LOGS/tests.collected"
  return $rc
}

junit_note() {  # junit_note FILE [COLLECTED]: "N passed, ..." as the stage's note and detail
  "$PY" - "$1" "$GPU_CHECK_LOGS/$GPU_CHECK_STAGE" "${2:-}" <<'EOF' || true
import json, sys, xml.etree.ElementTree as ET
path, base, collected_file = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    suites = ET.parse(path).getroot()
except (OSError, ET.ParseError) as exc:
    open(base + ".note", "a").write("no junit report (%s)\n" % exc)
    raise SystemExit(0)
suites = [suites] if suites.tag == "testsuite" else list(suites)
total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
failed = [c.get("classname", "") + "::" + c.get("name", "") for s in suites for c in s.iter("testcase")
          if c.find("failure") is not None or c.find("error") is not None]
# The skipped ones by name and reason: what a GPU run did not check is as much its result.
skipped = [c.get("classname", "") + "::" + c.get("name", "") + ": " + (c.find("skipped").get("message") or "")[:160]
           for s in suites for c in s.iter("testcase") if c.find("skipped") is not None]
# A test whose worker was ended (its time limit, or a crash): xdist's words in the report.
ended = [c.get("classname", "") + "::" + c.get("name", "") for s in suites for c in s.iter("testcase")
         for e in list(c.findall("error")) + list(c.findall("failure"))
         if "crashed while running" in (e.get("message") or "")]
total["passed"] = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
total["failed_tests"] = failed[:50]
total["ended_tests"] = ended[:50]
total["skipped_tests"] = skipped[:100]
try:
    total["collected"] = int(open(collected_file).read())
except (OSError, ValueError):
    total["collected"] = None
json.dump(total, open(base + ".detail.json", "w"), indent=2)
text = "%(passed)d passed, %(failures)d failed, %(errors)d errors, %(skipped)d skipped" % total
if total["collected"] is not None:
    text += " (%d of %d collected ran)" % (total["tests"], total["collected"])
if ended:
    text += "; %d ended at the test limit or crashed" % len(ended)
open(base + ".note", "a").write(text + "\n")
EOF
}

body_sanitize() {
  if [ "$GPU_CHECK_MODE" != gpu ]; then
    note "no GPU: each sanitize script's CPU path, without compute-sanitizer"
    "$PY" "$GPU/run_sanitize.py" --logs "$GPU_CHECK_LOGS/sanitize" --cpu
  else
    "$PY" "$GPU/run_sanitize.py" --logs "$GPU_CHECK_LOGS/sanitize" \
      --budget $((GPU_CHECK_STAGE_LIMIT - 10))
  fi
  local rc=$?
  cp "$GPU_CHECK_LOGS/sanitize/sanitize.json" "$GPU_CHECK_LOGS/sanitize.detail.json" 2>/dev/null
  [ $rc = $SKIP ] && note "compute-sanitizer is not on this machine"
  return $rc
}

body_sanitize_changed() {
  # The ops and copy paths changed since their last clean run (benchmarks/gpu/changed.py); on a
  # GPU each clean one is recorded at this commit, in the checkout, build/gpu_check/ and $OUT.
  local dir="$GPU_CHECK_LOGS/sanitize_changed"
  local args=(--logs "$dir" --changed --record-copy "$OUT" --note-file "$GPU_CHECK_LOGS/$GPU_CHECK_STAGE.note")
  if [ "$GPU_CHECK_MODE" != gpu ]; then
    note "no GPU: the changed targets' CPU paths, without compute-sanitizer; nothing recorded clean"
    "$PY" "$GPU/run_sanitize.py" "${args[@]}" --cpu
  else
    "$PY" "$GPU/run_sanitize.py" "${args[@]}" --budget $((GPU_CHECK_STAGE_LIMIT - 10))
  fi
  local rc=$?
  cp "$dir/sanitize.json" "$GPU_CHECK_LOGS/$GPU_CHECK_STAGE.detail.json" 2>/dev/null
  [ $rc = $SKIP ] && note "compute-sanitizer is not on this machine"
  return $rc
}

body_memory() {
  local device=cuda
  if [ "$GPU_CHECK_MODE" != gpu ]; then
    device=cpu
    note "no GPU: the same scenarios on the CPU (host memory only)"
  fi
  "$PY" "$GPU/memory.py" --device $device --out "$GPU_CHECK_LOGS/memory/memory.json"
  local rc=$?
  "$PY" - "$GPU_CHECK_LOGS" <<'EOF' || true
import json, sys
logs = sys.argv[1]
try:
    r = json.load(open(logs + "/memory/memory.json"))
except (OSError, ValueError):
    raise SystemExit(0)
detail = {"ok": r.get("ok"), "growth": {n: s.get("growth", s.get("error", "")[-300:])
                                         for n, s in r["scenarios"].items()}}
if "empty_cache_after_close" in r:
    detail["empty_cache_after_close"] = r["empty_cache_after_close"]["ok"]
json.dump(detail, open(logs + "/memory.detail.json", "w"), indent=2)
EOF
  return $rc
}

body_ddp() {
  # One GPU means two torchrun runs (ddp_contexts.py: NCCL refuses two ranks on one device).
  local device=cuda runs=2
  if [ "$GPU_CHECK_MODE" != gpu ]; then
    device=cpu runs=1
    note "no GPU: 2 CPU ranks with gloo (the script and its check; no CUDA context to count)"
  fi
  [ "${GPU_CHECK_GPUS:-0}" -ge 2 ] && runs=1
  "$PY" "$GPU/ddp_contexts.py" --launch --device $device --out "$GPU_CHECK_LOGS/ddp" \
    --timeout $(( (GPU_CHECK_STAGE_LIMIT - 10) / runs ))
  local rc=$?
  cp "$GPU_CHECK_LOGS/ddp/ddp.json" "$GPU_CHECK_LOGS/ddp.detail.json" 2>/dev/null
  return $rc
}

body_bench() {
  local args=(--out "$OUT/bench" --work "$GPU_CHECK_LOGS/bench" --budget $((GPU_CHECK_STAGE_LIMIT - 15)))
  if [ "$GPU_CHECK_MODE" != gpu ]; then
    # The same runner, merge, charts and table, on two small sections.
    args+=(--device cpu --quick --sections collate,ops --batch-size 8 --image-size 32)
    note "no GPU: the section runner on collate and ops, --quick, batch 8, 32x32 (figures mean nothing)"
  fi
  "$PY" "$GPU/bench_sections.py" "${args[@]}"
}

body_bench_fair() {
  # Equal resources: N = the usable cores for the usual pipeline's workers and prefetch's threads.
  local args=(--out "$OUT/bench_fair" --work "$GPU_CHECK_LOGS/bench_fair" --fair --workers "$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"
              --record-copy "$OUT" --budget $((GPU_CHECK_STAGE_LIMIT - 15))
              --note-file "$GPU_CHECK_LOGS/$GPU_CHECK_STAGE.note")
  [ -n "${GPU_CHECK_FAIR_SECTIONS:-}" ] && args+=(--sections "$GPU_CHECK_FAIR_SECTIONS")
  if [ "$GPU_CHECK_MODE" != gpu ]; then
    args+=(--device cpu --quick --batch-size 8 --image-size 32)
    note "no GPU: the selected fair sections, --quick, batch 8, 32x32 (figures mean nothing; nothing recorded)"
  fi
  "$PY" "$GPU/bench_sections.py" "${args[@]}"
  local rc=$?
  "$PY" - "$OUT/bench_fair" "$GPU_CHECK_LOGS/$GPU_CHECK_STAGE.detail.json" <<'EOF' || true
import json, os, sys
out, detail = sys.argv[1:]
try:
    r = json.load(open(os.path.join(out, "results.json")))
except (OSError, ValueError):
    try:
        r = {"fair_selection": json.load(open(os.path.join(out, "selection.json")))}
    except (OSError, ValueError):
        raise SystemExit(0)
keys = ("commit", "uncommitted_files", "device", "workers", "metrics", "failed", "skipped",
        "section_runs", "fair_selection")
json.dump({k: r[k] for k in keys if k in r}, open(detail, "w"), indent=2)
EOF
  return $rc
}

body_nccl() {
  # 2 NCCL ranks: on one GPU both on it, which NCCL refuses (the script then exits 77, saying so).
  local device=cuda
  if [ "$GPU_CHECK_MODE" != gpu ]; then
    device=cpu
    note "no GPU: NCCL runs on GPUs only; the script says so and runs nothing"
  fi
  "$PY" "$GPU/ddp_contexts.py" --launch --nccl2 --device $device --out "$GPU_CHECK_LOGS/nccl" \
    --timeout $((GPU_CHECK_STAGE_LIMIT - 10))
  local rc=$?
  cp "$GPU_CHECK_LOGS/nccl/ddp.json" "$GPU_CHECK_LOGS/nccl.detail.json" 2>/dev/null
  if [ $rc = $SKIP ] && [ "$device" = cuda ]; then
    note "$("$PY" -c 'import json, sys
r = json.load(open(sys.argv[1]))
print("; ".join("%s refused by NCCL: %s" % (x["name"], x["refused_by_nccl"]) for x in r["runs"]
                if x.get("refused_by_nccl")))' "$GPU_CHECK_LOGS/nccl/ddp.json" 2>/dev/null)"
  fi
  return $rc
}

body_profile() {
  local dir="$GPU_CHECK_LOGS/profile"
  mkdir -p "$dir"
  if [ "$GPU_CHECK_MODE" != gpu ]; then
    note "no GPU: the profiled script's calls on the CPU, without ncu"
    "$PY" "$GPU/profile_ops.py" --device cpu
    return $?
  fi
  if ! command -v ncu >/dev/null 2>&1; then
    note "ncu is not on this machine"
    return $SKIP
  fi
  local n
  n=$("$PY" "$GPU/profile_ops.py" --launches | "$PY" -c 'import json, sys; print(len(json.load(sys.stdin)))') ||
    return 1
  # The first n launches are the warm-ups; the next n, one per variant in --launches' order.
  # --clock-control none: the clocks the bench ran at (ncu locks them to base by default).
  # Demangled names: the plane_rows ops all run plane_rows_kernel<Thread> (profile_ops.py says more).
  ncu --target-processes all --clock-control none --kernel-name-base demangled \
    -k 'regex:normalize_flip|flip_crop|resized_crop|AffineWarpThread|PilAffineThread|SharpnessThread|GaussianBlur|LookupThread|ColorJitterThread|histogram_kernel' \
    --launch-skip "$n" --launch-count "$n" --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section Occupancy --section LaunchStats --section WarpStateStats \
    "$PY" "$GPU/profile_ops.py" >"$dir/ncu.txt" 2>&1
  local rc=$?
  "$PY" "$GPU/profile_ops.py" --launches >"$dir/variants.json"
  # The figures to read first: one line a launch, named by its variant.
  "$PY" "$GPU/ncu_summary.py" "$dir/ncu.txt" "$dir/variants.json" >"$dir/summary.txt"
  note "ncu over $n launches (variants.json's order); one line a launch in profile/summary.txt"
  return $rc
}

body_suite() {
  FAIL_WITHOUT_CUDA=1 PREFETCH_SKIP_CTEST=1 PREFETCH_TEST_TIMEOUT=$((GPU_CHECK_STAGE_LIMIT - 20)) \
    bash scripts/test.sh
}

if [ "${1:-}" = --stage-body ]; then
  export GPU_CHECK_STAGE=$2
  "body_$2"
  exit $?
fi

# ---- the runner --------------------------------------------------------------------------

usage() { sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }

ALL_STAGES=build,tests,sanitize,sanitize_changed,memory,ddp,bench,bench_fair,nccl,profile,suite

# The focused plan: what a lent GPU's first call runs (the header says how to call it).
# (nccl left out: it needs 2 GPUs; one GPU only records NCCL's refusal, 25 s of device time.)
FOCUSED_STAGES=build,tests,sanitize_changed,bench_fair
FOCUSED_BUDGET=560     # seconds of the script itself
FOCUSED_TIMEOUT=590    # the device call's timeout_s: the budget, the last stage's kill-after and packing
STARTUP_S=60           # device time before the command starts: a machine's start (30-60 s seen)
TRANSFER_S=15          # the tree there and $OUT back
LEASE_S=900            # a session's device time, start-ups and idle time included
MIN_START_S=240        # the device tool starts no machine with less than this left
WARM_S=30              # a machine is held this long after a call before it goes back
# A second call finds the machine gone (2026-11-29: the session's reply took longer than WARM_S),
# so it pays a start and a build again before its first stage:
COLD_START_S=35 COLD_BUILD_S=140

expected_of() {  # expected_of STAGE: seconds on an H200 (the 2026-11-26/27/29 runs; header)
  case $1 in
    preflight) echo 10 ;; build) echo 140 ;; tests) echo 125 ;;  # 2026-11-29: 10-13, 130-139, 121
    sanitize_changed) echo 75 ;;  # every target, as on a first run with no record (64 s, 14 targets)
    bench_fair) echo 170 ;;       # h2d ~7, e2e at N = 16 ~170 (24 passes: 11 ran in 60 s); then the rest
    nccl) echo 25 ;;              # torchrun, 2 ranks importing torch, NCCL's answer
    *) echo 0 ;;
  esac
}

plan_list() {  # the focused plan's stages and arithmetic, one "key value" per line
  local total=0 s e
  echo "plan focused $FOCUSED_STAGES"
  for s in preflight ${FOCUSED_STAGES//,/ }; do
    e=$(expected_of "$s"); total=$((total + e))
    if [ "$s" = tests ]; then
      printf 'stage %-16s limit rest expected %s\n' "$s" "$e"
    else
      printf 'stage %-16s limit %s expected %s\n' "$s" "$(limit_of "$s")" "$e"
    fi
  done
  local device=$((STARTUP_S + TRANSFER_S + FOCUSED_TIMEOUT))
  printf '%s %s\n' per_test_limit_s "${GPU_CHECK_TEST_LIMIT:-60}" expected_s "$total" \
    reserve_s "$RESERVE" budget_s "$FOCUSED_BUDGET" call_timeout_s "$FOCUSED_TIMEOUT" \
    startup_s "$STARTUP_S" transfer_s "$TRANSFER_S" device_s "$device" \
    warm_s "$WARM_S" lease_s "$LEASE_S" min_start_s "$MIN_START_S" \
    left_after_s "$((LEASE_S - device - WARM_S))" \
    second_call_overhead_s "$((COLD_START_S + TRANSFER_S + $(expected_of preflight) + COLD_BUILD_S))"
}

RESERVE=15  # recording and packing after the last stage
FORCE_CPU=0 BUDGET="" PACK=0 STAGES="" PLAN="" LIST=0
while [ $# -gt 0 ]; do
  case $1 in
    --cpu) FORCE_CPU=1 ;;
    --budget) BUDGET=${2:?--budget needs seconds}; shift ;;
    --budget=*) BUDGET=${1#--budget=} ;;
    --plan) PLAN=${2:?--plan needs a name (focused)}; shift ;;
    --plan=*) PLAN=${1#--plan=} ;;
    --pack) PACK=1 ;;
    --list) LIST=1 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "gpu_check: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) STAGES=$1 ;;
  esac
  shift
done
case $PLAN in
  "") ;;
  focused) STAGES=${STAGES:-$FOCUSED_STAGES} BUDGET=${BUDGET:-$FOCUSED_BUDGET} ;;
  *) echo "gpu_check: unknown plan '$PLAN'; plans: focused" >&2; exit 2 ;;
esac
if [ "$LIST" = 1 ]; then
  if [ "$PLAN" = focused ]; then plan_list; exit 0; fi
  for s in preflight selftest ${ALL_STAGES//,/ }; do
    printf '%-16s %s s\n' "$s" "$(limit_of $s)"; done
  exit 0
fi
STAGES=${STAGES:-build,tests,sanitize,memory,ddp,bench}
[ "$STAGES" = all ] && STAGES=$ALL_STAGES
for s in ${STAGES//,/ }; do
  case ,$ALL_STAGES, in *,"$s",*) ;;
    *) echo "gpu_check: unknown stage '$s'; stages: $ALL_STAGES" >&2
       exit 2 ;;
  esac
done
if [ -n "$BUDGET" ] && ! [[ $BUDGET =~ ^[0-9]+$ ]]; then
  echo "gpu_check: --budget takes whole seconds, got '$BUDGET'" >&2; exit 2
fi

OUT=${OUT:-gpu-out}
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
if [ "$PACK" = 1 ]; then
  LOGS=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-logs.XXXXXX")
else
  LOGS="$OUT/logs"
fi
# A fresh record: stale results of an earlier run in the same $OUT must not read as this one's.
rm -rf "$OUT/logs" "$OUT/bench" "$OUT/bench_fair" "$OUT/summary.json" "$OUT/preflight.txt" \
  "$OUT/logs.tar.gz" "$OUT/gpu_clean_runs.json"
mkdir -p "$LOGS"
export OUT GPU_CHECK_LOGS=$LOGS GPU_CHECK_FORCE_CPU=$FORCE_CPU
T_START=$(date +%s)
DEADLINE=$(( T_START + ${BUDGET:-999999} ))

"$PY" - "$LOGS/run.json" "$STAGES" "$BUDGET" "$PACK" "$(git rev-parse HEAD 2>/dev/null)" \
  "$(git status --porcelain 2>/dev/null | wc -l)" "$PLAN" <<'EOF' 2>/dev/null
import datetime, json, sys
path, stages, budget, pack, commit, dirty, plan = sys.argv[1:]
json.dump({"started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "plan": plan or None, "stages_asked": stages.split(","),
           "budget_s": int(budget) if budget else None,
           "packed_logs": pack == "1", "commit": commit or None,
           "uncommitted_files": int(dirty) if commit else None}, open(path, "w"), indent=2)
EOF

pack_logs() {
  [ "$PACK" = 1 ] || return 0
  tar -czf "$OUT/logs.tar.gz.tmp" -C "$LOGS" . 2>/dev/null && mv "$OUT/logs.tar.gz.tmp" "$OUT/logs.tar.gz"
}

record() {  # record STAGE STATUS RC SECONDS LIMIT [NOTE]
  "$PY" "$GPU/record.py" --logs "$LOGS" --out "$OUT" --stage "$1" --status "$2" --rc "$3" \
    --seconds "$4" --limit "$5" --note "${6:-}" --log "$1.log" ||
    echo "gpu_check: $1: $2 (rc $3, $4 s; record.py failed)"
  pack_logs
}

BUILD_FAILED=0
run_stage() {  # run_stage NAME
  local name=$1 limit cut="" t0 rc status
  limit=$(limit_of "$name")
  if [ "$MODE" != gpu ]; then
    case $name in
      build) record build skipped 0 0 "$limit" "no GPU: the CUDA build is only for a GPU run (CI builds the CPU extension and, without a GPU, the CUDA one: scripts/check_cuda_build.sh)"; return ;;
      suite) record suite skipped 0 0 "$limit" "no GPU: the CPU suite is scripts/test.sh's, run by .ci/run"; return ;;
    esac
  fi
  if [ "$BUILD_FAILED" = 1 ] && [ "$name" != selftest ]; then
    record "$name" skipped 0 0 "$limit" "the build stage failed: no extension to run"
    return
  fi
  local left=$(( DEADLINE - $(date +%s) - RESERVE ))
  # The preflight decides the mode and costs seconds: it always runs.
  [ "$name" = preflight ] && [ "$left" -lt 15 ] && left=15
  # Below this a stage proves nothing (NCCL's start, a bench section's warm-ups alone).
  local least=20
  case $name in nccl|bench_fair) least=40 ;; esac
  if [ "$PLAN" = focused ] && [ "$name" = tests ] && [ -n "$BUDGET" ]; then
    # The focused plan's tests stage: every CUDA test, each under its own limit; the stage gets
    # all that is left of the budget (the stages after it take what it leaves).
    limit=$left cut="the plan gives it all that is left of --budget $BUDGET: $left s"
  elif [ "$left" -lt "$limit" ]; then
    if [ "$left" -lt "$least" ] && [ "$name" != preflight ]; then
      record "$name" skipped 0 0 "$limit" "not started: ${left} s left of --budget $BUDGET"
      return
    fi
    limit=$left cut="limit cut to $left s by --budget $BUDGET"
  fi
  echo "gpu_check: $name (limit $limit s) ..."
  t0=$(date +%s)
  GPU_CHECK_MODE=$MODE GPU_CHECK_STAGE_LIMIT=$limit GPU_CHECK_GPUS=$GPUS \
    timeout --signal=TERM --kill-after=10 "$limit" bash "$ROOT/benchmarks/gpu_check.sh" \
    --stage-body "$name" >"$LOGS/$name.log" 2>&1
  rc=$?
  case $rc in
    0) status=ok ;;
    "$SKIP") status=skipped ;;
    124|137) status=timeout; cut="${cut:+$cut; }stopped at its limit of $limit s" ;;
    *) status=failed ;;
  esac
  if [ "$status" = failed ] || [ "$status" = timeout ]; then
    echo "---- last lines of $name.log:"; tail -n 25 "$LOGS/$name.log"; echo "----"
    [ "$name" = build ] && BUILD_FAILED=1
  fi
  record "$name" "$status" "$rc" $(( $(date +%s) - t0 )) "$limit" "$cut"
}

# The preflight decides the mode; it runs whatever the stages.
MODE=cpu GPUS=0
run_stage preflight
if [ -f "$LOGS/preflight.json" ]; then
  read -r MODE GPUS < <("$PY" -c 'import json, sys; r = json.load(open(sys.argv[1]))
print(r["mode"], r.get("gpu_count") or 0)' "$LOGS/preflight.json" 2>/dev/null || echo cpu 0)
elif [ "$FORCE_CPU" = 0 ] && nvidia-smi -L >/dev/null 2>&1; then
  MODE=gpu GPUS=$(nvidia-smi -L | grep -c '^GPU')
fi
echo "gpu_check: mode $MODE ($GPUS GPU(s)); ${PLAN:+plan $PLAN: }stages $STAGES${BUDGET:+; budget $BUDGET s}; logs $LOGS"
[ "${GPU_CHECK_SELFTEST:-0}" = 1 ] && run_stage selftest
for s in ${STAGES//,/ }; do
  run_stage "$s"
done

"$PY" "$GPU/record.py" --logs "$LOGS" --out "$OUT" --summary-only
# The packed copy is the record: the temporary folder would only pile up on a warm machine.
pack_logs && [ "$PACK" = 1 ] && [ -s "$OUT/logs.tar.gz" ] && rm -rf "$LOGS"
echo "gpu_check: done in $(( $(date +%s) - T_START )) s; $OUT/summary.json:"
"$PY" - "$OUT/summary.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
for st in s["stages"]:
    print("  %-16s %-8s %5s s / %5s s  %s" % (st["stage"], st["status"], st["seconds"], st["limit_s"],
                                            st["note"][:150]))
print("result: %s%s" % (s["result"], " (not ok: %s)" % ", ".join(s["not_ok"]) if s["not_ok"] else ""))
raise SystemExit(0 if s["result"] == "ok" else 1)
EOF
