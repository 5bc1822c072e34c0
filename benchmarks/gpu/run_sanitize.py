"""compute-sanitizer over every op and every copy path, one process and one log per (tool, script).

    python benchmarks/gpu/run_sanitize.py --logs DIR --budget 270          # on a GPU
    python benchmarks/gpu/run_sanitize.py --logs DIR --cpu                 # CI: the scripts' CPU path

Runs, in this order, while the budget lasts (what does not fit is listed as not started, so the
most telling runs come first): memcheck over every op and path, racecheck over the same, then
synccheck and initcheck over the ops (the kernels' barriers and reads of memory nothing wrote).
memcheck and initcheck run with PYTORCH_NO_CUDA_MEMORY_CACHING=1, so that an access outside a
live allocation is outside any allocation; every run has --error-exitcode=1; the worker ring's
runs follow its DataLoader workers (--target-processes all). --jobs runs go at once, taken in
that order. DIR/sanitize.json has each run's status and error count; DIR/<tool>-<target>.log
its output.

On the CPU (--cpu) it runs each script's CPU path (sanitize_ops.py all, sanitize_copy.py all,
--device cpu), so a script that would fail on the GPU for a reason of its own fails here first.

    python benchmarks/gpu/run_sanitize.py --logs DIR --changed --budget 140 --record-copy OUT

--changed runs only the targets (ops and copy paths) whose sources changed since their last clean
run (SOURCES below; benchmarks/gpu/changed.py says how, and writes the record): gpu_check.sh's
sanitize_changed stage. On a GPU, every target all of whose runs came out clean is then recorded
clean at this commit in build/gpu_check/gpu_clean_runs.json (and a copy in --record-copy; the session commits that copy over benchmarks/results/gpu_clean_runs.json).
With --cpu it runs the selected targets' CPU paths and records nothing: no sanitizer ran.
"""
import concurrent.futures
import os
import re
import shutil
import sys
import threading
import time

import _common  # noqa: F401
import changed
from _common import ROOT, note, run_limited, write_json
from sanitize_copy import PATHS  # every path the script can run
from sanitize_ops import OPS  # every op the script can run, so a new op is sanitized too

SKIP = 77

# What each target's device code and the host code that launches it are built from (git
# pathspecs): a change to any of them makes the target's clean run stale. A kernel's folder and
# the shared device code, its op's folder in the torch layer (its plan: sizes and pointers the
# launch gets; its CUDA registration), the launch and
# argument code every op shares, and the sanitize script's own cases (a new case is new ground).
_OP_SHARED = ["csrc/kernels/common", "csrc/torch/ops/cuda_registration.h", "csrc/torch/ops/plan_common.cpp",
              "csrc/torch/ops/plan_common.h", "csrc/torch/ops/kernel_args.cpp",
              "csrc/torch/ops/kernel_args.h", "csrc/torch/ops/geometry_inputs.cpp",
              "csrc/torch/ops/geometry_inputs.h", "csrc/torch/ops/output_pool.cpp",
              "csrc/torch/ops/output_pool.h", "benchmarks/gpu/sanitize_ops.py"]
# The CPU builds of the kernels (the *_cpu* files, the CPU dispatch and stores): no device code,
# so a change there leaves a clean sanitizer run standing (git pathspec excludes).
_NOT_DEVICE = [":(exclude,glob)csrc/kernels/**/*_cpu*", ":(exclude,glob)csrc/kernels/common/cpu_*",
               ":(exclude)csrc/kernels/common/float16_store_f16c.h"]
_KERNEL_OF = {"histograms": "histogram"}  # the op's name where its kernel's folder differs
_COPY_SHARED = ["csrc/core", "csrc/torch/engine_binding.cpp", "csrc/torch/module.cpp",
                "csrc/torch/cuda_support.cpp",
                "csrc/torch/slot_table_binding.cpp", "csrc/torch/readable.cpp",
                "csrc/torch/packed_layout.cpp", "prefetch/_engine", "prefetch/_core",
                "prefetch/sources", "benchmarks/gpu/sanitize_copy.py"]
_COPY_OWN = {"prefetcher": ["prefetch/prefetcher.py"],
             "array_loader_host": ["prefetch/array_loader.py"],
             "array_loader_device": ["prefetch/array_loader.py", "csrc/kernels/normalize_flip"],
             "worker_ring": ["prefetch/prefetcher.py", "prefetch/collate.py"],
             "ragged": ["prefetch/prefetcher.py", "csrc/kernels/resized_crop"]}
SOURCES = {}
for _op in OPS:
    if _op == "decode":
        SOURCES[_op] = ["csrc/decode", "csrc/torch/ops/decode_ops.cpp", "csrc/torch/ops/*jpeg*",
                        "prefetch/ops/decode.py", "prefetch/ops/gpu_decoders.py",
                        "prefetch/ops/gpu_backends.py", "prefetch/ops/gpu_streams.py",
                        "prefetch/ops/jpeg_headers.py"] + _OP_SHARED + _NOT_DEVICE
    else:
        _k = _KERNEL_OF.get(_op, _op)
        SOURCES[_op] = ["csrc/kernels/%s" % _k, "csrc/torch/ops/%s" % _k] + _OP_SHARED + _NOT_DEVICE
for _path in PATHS:
    SOURCES[_path] = _COPY_OWN[_path] + _COPY_SHARED


def plan(tools=None, targets=None):
    """[(tool, script, target)] in the order they run (only `tools` and `targets` if given)."""
    runs = []
    for tool in ("memcheck", "racecheck"):
        runs += [(tool, "sanitize_ops.py", op) for op in OPS]
        runs += [(tool, "sanitize_copy.py", path) for path in PATHS]
    for tool in ("synccheck", "initcheck"):
        # initcheck leaves decode out: nvJPEG itself reads device memory nothing wrote
        # (6,503 reports inside libnvjpeg's nvjpegDecodeBatched on an H200, 2026-11-27, none in
        # prefetch's frames); memcheck and racecheck still run over it.
        runs += [(tool, "sanitize_ops.py", op) for op in OPS
                 if not (tool == "initcheck" and op == "decode")]
    if tools:
        runs = [r for r in runs if r[0] in tools]
    if targets is not None:
        runs = [r for r in runs if r[2] in targets]
    return runs


def command(sanitizer, tool, script, target):
    cmd = [sanitizer, "--tool", tool, "--error-exitcode=1"]
    if target == "worker_ring":
        cmd += ["--target-processes", "all"]
    return cmd + [sys.executable, os.path.join(ROOT, "benchmarks", "gpu", script), target,
                  "--device", "cuda"]


def errors_in(text):
    """compute-sanitizer's 'ERROR SUMMARY: N errors', or None when it did not get that far."""
    found = re.findall(r"ERROR SUMMARY: (\d+) error", text)
    return int(found[-1]) if found else None


def run_gpu(args):
    sanitizer = shutil.which("compute-sanitizer")
    if sanitizer is None:
        for d in ("/usr/local/cuda/bin", "/usr/local/cuda/compute-sanitizer"):
            if os.path.exists(os.path.join(d, "compute-sanitizer")):
                sanitizer = os.path.join(d, "compute-sanitizer")
    if sanitizer is None:
        print("sanitize: compute-sanitizer is not on this machine: nothing to run")
        return SKIP, {"skipped": "no compute-sanitizer"}
    deadline = time.monotonic() + args.budget if args.budget else None
    lock = threading.Lock()
    runs = plan(args.tools and args.tools.split(","), args.targets)
    results = [None] * len(runs)

    def one(k):
        tool, script, target = runs[k]
        name = "%s-%s" % (tool, target)
        limit = args.run_limit
        if deadline is not None:
            limit = min(limit, deadline - time.monotonic())
        if limit < 20:
            results[k] = {"run": name, "tool": tool, "target": target, "status": "not started (budget)"}
            return
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if tool in ("memcheck", "initcheck"):
            env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
        log = os.path.join(args.logs, name + ".log")
        t0 = time.monotonic()
        rc, text = run_limited(command(sanitizer, tool, script, target), limit, log, env=env, cwd=ROOT)
        errors = errors_in(text)
        if rc == "timeout":
            state = "timeout"
        elif rc == SKIP:
            state = "skipped"
        elif rc == 0 and errors in (0, None):
            state = "ok"
        else:
            state = "failed"
        r = {"run": name, "tool": tool, "target": target, "status": state, "returncode": rc, "errors": errors,
             "seconds": round(time.monotonic() - t0, 1), "log": os.path.basename(log)}
        with lock:
            results[k] = r
            print("sanitize: %-32s %-8s %s errors, %.1f s" % (
                name, state, "?" if errors is None else errors, r["seconds"]), flush=True)
            if state == "failed":
                print(text[-2500:], flush=True)
            write_json(os.path.join(args.logs, "sanitize.json"),
                       {"runs": [x for x in results if x], "jobs": args.jobs})

    # Several runs at once: each is mostly one CPU thread instrumenting small kernels, and the
    # GPU and the machine's cores have room for a few (the budget is what is scarce).
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(one, range(len(runs))))
    states = [r["status"] for r in results]
    detail = {"runs": results, "jobs": args.jobs}
    if args.record:
        detail["recorded_clean"] = record_clean(results, runs, sanitizer, args.record_copy, args.repo)
        note(args, "recorded clean at this commit: %s" % (",".join(detail["recorded_clean"]) or "none"))
    write_json(os.path.join(args.logs, "sanitize.json"), dict(detail, selection=args.selection))
    status = 1 if "failed" in states else 124 if "timeout" in states else 0
    return status, detail


def clean_targets(results, runs):
    """The targets every one of whose planned runs came out ok (a run not started, timed out or
    failed leaves its target unproven)."""
    by_target = {}
    for (tool, script, target), r in zip(runs, results):
        by_target.setdefault(target, []).append(r)
    return [t for t, rs in by_target.items() if rs and all(r and r["status"] == "ok" for r in rs)]


def _first_line(cmd):
    try:
        import subprocess

        p = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        lines = [x.strip() for x in p.stdout.splitlines() if x.strip()]
        return lines[-1] if lines else None
    except (OSError, subprocess.SubprocessError):
        return None


def record_clean(results, runs, sanitizer, copy_to=None, repo=ROOT):
    """Records each clean target at `repo`'s commit (changed.py's record); returns their names."""
    names = clean_targets(results, runs)
    if not names:
        return []
    device = _first_line(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"])
    version = _first_line([sanitizer, "--version"])
    changed.update("sanitize", {
        t: changed.entry_for(SOURCES[t], repo, device=device, sanitizer=version,
                             tools=sorted({tool for tool, _, target in runs if target == t}))
        for t in names}, repo, copy_to=copy_to)
    print("sanitize: recorded clean at this commit: %s" % ", ".join(names), flush=True)
    return names


def run_cpu(args):
    results, status = [], 0
    ops = [t for t in OPS if args.targets is None or t in args.targets]
    paths = [t for t in PATHS if args.targets is None or t in args.targets]
    for script, names in (("sanitize_ops.py", ops), ("sanitize_copy.py", paths)):
        if not names:
            continue
        target = ",".join(names) if args.targets is not None else "all"
        path = os.path.join(ROOT, "benchmarks", "gpu", script)
        for extra in (["--help"], [target, "--device", "cpu"] + (["--repeat", "1"] if "ops" in script else [])):
            name = "cpu-%s%s" % (script[:-3], "-help" if extra == ["--help"] else "")
            rc, text = run_limited([sys.executable, path] + extra, args.run_limit,
                                   os.path.join(args.logs, name + ".log"), cwd=ROOT)
            state = "ok" if rc == 0 else "timeout" if rc == "timeout" else "failed"
            results.append({"run": name, "status": state, "returncode": rc})
            print("sanitize: %-40s %s" % (name, state), flush=True)
            if state != "ok":
                print(text[-2500:], flush=True)
                status = status or (124 if rc == "timeout" else 1)
    write_json(os.path.join(args.logs, "sanitize.json"),
               {"runs": results, "mode": "cpu", "selection": args.selection})
    return status, {"runs": results}


def select_changed(repo=ROOT):
    """changed.py's selection over SOURCES: {target: {"run", "why", "files"}}."""
    return changed.select(changed.load(repo).get("sanitize", {}), SOURCES, repo)


def main(argv=None):
    p = _common.parser(__doc__)
    p.add_argument("--logs", required=True, help="folder for the logs and sanitize.json")
    p.add_argument("--cpu", action="store_true", help="the scripts' CPU path, without the sanitizer")
    p.add_argument("--budget", type=float, default=None, help="seconds for all runs together")
    p.add_argument("--run-limit", type=float, default=90, help="seconds per run at most (default 90)")
    p.add_argument("--jobs", type=int, default=4, help="runs at once on the GPU (default 4)")
    p.add_argument("--tools", default=None, help="only these tools (memcheck,racecheck,synccheck,initcheck)")
    p.add_argument("--targets", default=None,
                   help="only these ops and copy paths, joined by commas (default every one)")
    p.add_argument("--changed", action="store_true",
                   help="only the targets whose sources changed since their last clean run, and "
                        "on a GPU record the clean ones (changed.py)")
    p.add_argument("--record", action="store_true",
                   help="on a GPU, record each target that came out clean (implied by --changed)")
    p.add_argument("--record-copy", default=None, help="a folder for a copy of the updated record")
    p.add_argument("--repo", default=ROOT,
                   help="the checkout whose history and record --changed reads and writes "
                        "(default this one; tests give a temporary one)")
    p.add_argument("--note-file", default=None,
                   help="a file to append one line to: what was selected, what was recorded")
    p.add_argument("--list", action="store_true", help="print the runs in order and exit")
    args = p.parse_args(argv)
    if args.targets is not None:
        args.targets = [t for t in args.targets.split(",") if t]
        unknown = sorted(set(args.targets) - set(SOURCES))
        if unknown:
            p.error("--targets: unknown %s; choose from %s" % (",".join(unknown), ",".join(SOURCES)))
    args.selection = None
    if args.changed:
        args.selection = select_changed(args.repo)
        for name, sel in args.selection.items():
            print("sanitize: %-20s %-4s %s" % (name, "run" if sel["run"] else "skip", sel["why"]),
                  flush=True)
        chosen = [t for t, sel in args.selection.items() if sel["run"]]
        args.targets = chosen if args.targets is None else [t for t in args.targets if t in chosen]
        why = sorted({sel["why"] for sel in args.selection.values() if sel["run"]})
        note(args, "%d of %d targets to run%s%s" % (
            len(args.targets), len(SOURCES), ": " + ",".join(args.targets) if args.targets else "",
            " (%s)" % "; ".join(why[:3]) if len(why) <= 3 and why else ""))
    # A record says every tool passed: not after a run of some tools only.
    args.record = (args.record or args.changed) and not args.tools
    if args.list:
        for tool, script, target in plan(args.tools and args.tools.split(","), args.targets):
            print("%s %s %s" % (tool, script, target))
        return 0
    os.makedirs(args.logs, exist_ok=True)
    if args.targets is not None and not args.targets:
        print("sanitize: no target changed since its last clean run: nothing to run", flush=True)
        write_json(os.path.join(args.logs, "sanitize.json"),
                   {"runs": [], "selection": args.selection, "mode": "cpu" if args.cpu else "gpu"})
        return 0
    status, detail = (run_cpu if args.cpu else run_gpu)(args)
    runs = detail.get("runs", [])
    counts = {}
    for r in runs:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    print("sanitize: %s" % (", ".join("%d %s" % (v, k) for k, v in sorted(counts.items())) or detail))
    return status


if __name__ == "__main__":
    sys.exit(main())
