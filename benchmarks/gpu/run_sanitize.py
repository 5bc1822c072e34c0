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
"""
import concurrent.futures
import os
import re
import shutil
import sys
import threading
import time

import _common  # noqa: F401
from _common import ROOT, run_limited, write_json
from sanitize_ops import OPS  # every op the script can run, so a new op is sanitized too
PATHS = ("prefetcher", "array_loader_host", "array_loader_device", "worker_ring", "ragged")
SKIP = 77


def plan(tools=None):
    """[(tool, script, target)] in the order they run."""
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
    runs = plan(args.tools and args.tools.split(","))
    results = [None] * len(runs)

    def one(k):
        tool, script, target = runs[k]
        name = "%s-%s" % (tool, target)
        limit = args.run_limit
        if deadline is not None:
            limit = min(limit, deadline - time.monotonic())
        if limit < 20:
            results[k] = {"run": name, "status": "not started (budget)"}
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
        r = {"run": name, "status": state, "returncode": rc, "errors": errors,
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
    write_json(os.path.join(args.logs, "sanitize.json"), {"runs": results, "jobs": args.jobs})
    status = 1 if "failed" in states else 124 if "timeout" in states else 0
    return status, {"runs": results}


def run_cpu(args):
    results, status = [], 0
    for script, target in (("sanitize_ops.py", "all"), ("sanitize_copy.py", "all")):
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
    write_json(os.path.join(args.logs, "sanitize.json"), {"runs": results, "mode": "cpu"})
    return status, {"runs": results}


def main(argv=None):
    p = _common.parser(__doc__)
    p.add_argument("--logs", required=True, help="folder for the logs and sanitize.json")
    p.add_argument("--cpu", action="store_true", help="the scripts' CPU path, without the sanitizer")
    p.add_argument("--budget", type=float, default=None, help="seconds for all runs together")
    p.add_argument("--run-limit", type=float, default=90, help="seconds per run at most (default 90)")
    p.add_argument("--jobs", type=int, default=4, help="runs at once on the GPU (default 4)")
    p.add_argument("--tools", default=None, help="only these tools (memcheck,racecheck,synccheck,initcheck)")
    p.add_argument("--list", action="store_true", help="print the runs in order and exit")
    args = p.parse_args(argv)
    if args.list:
        for tool, script, target in plan(args.tools and args.tools.split(",")):
            print("%s %s %s" % (tool, script, target))
        return 0
    os.makedirs(args.logs, exist_ok=True)
    status, detail = (run_cpu if args.cpu else run_gpu)(args)
    runs = detail.get("runs", [])
    counts = {}
    for r in runs:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    print("sanitize: %s" % (", ".join("%d %s" % (v, k) for k, v in sorted(counts.items())) or detail))
    return status


if __name__ == "__main__":
    sys.exit(main())
