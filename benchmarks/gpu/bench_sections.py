"""`python -m prefetch.bench`, one section per process, each under its own time limit, merged
into one results.json (with the charts and the tables of docs/benchmarks.md) after every section.

A bench run writes results.json only at its end: one section that hangs or outlasts the
device call would lose every figure. Here a section that fails or runs out of time loses only
itself (recorded under ``failed``), and the sections run in the order a GPU run needs them
most (h2d, ops, e2e, arrays, collate, workers, recipes).

    python benchmarks/gpu/bench_sections.py --out gpu-out/bench --work /tmp/bench-work --budget 330
    python benchmarks/gpu/bench_sections.py --out DIR --device cpu --quick --sections collate,ops \\
        --batch-size 8 --image-size 32                                  # CI: the same path, small

Writes DIR/results.json (python -m prefetch.bench's format, plus ``failed``, ``section_runs``
and the measured ``commit``), DIR/readme_table.md and the charts (DIR/e2e.png, DIR/ops.png); each
section's own output and log stay in --work. Exit 1 when a section failed or timed out.

    python benchmarks/gpu/bench_sections.py --out DIR --fair --budget 150 --record-copy OUT

--fair (gpu_check.sh's bench_fair stage): the fair sections (FAIR: h2d with its timeline, e2e,
recipes, workers), only those with new code or no fair figure yet (FAIR_SOURCES, by
benchmarks/gpu/changed.py), every pipeline with N = --workers (default: the usable cores)
DataLoader workers and engine threads. On a GPU each section that finished is recorded as this
commit's fair figure (build/gpu_check/gpu_clean_runs.json, and a copy in --record-copy that
the session commits over benchmarks/results/gpu_clean_runs.json).

Every section gets --allow-dirty where the bench has it: the device's copy of the tree often
carries uncommitted files, and results.json then says "dirty" and names them.
"""
import datetime
import importlib.util
import json
import os
import platform
import shutil
import sys
import time

import _common  # noqa: F401  (puts the checkout's prefetch first on sys.path)
import changed
from _common import ROOT, note, run_limited, write_json

ORDER = ("h2d", "ops", "e2e", "arrays", "collate", "workers", "recipes")
RESERVE_S = 10  # merging, charts and the table after the last section

# The sections whose fair figures (equal N, interleaved) the README waits for, in the order a
# GPU run needs them (the ring's copy with its timeline, the training loops, the recipe, the
# workers), and what each measures: its bench module, the bench's shared machinery,
# and the product code on its path (git pathspecs; changed.py).
FAIR = ("h2d", "e2e", "recipes", "workers")
_BENCH_SHARED = ["prefetch/bench/__main__.py", "prefetch/bench/section.py",
                 "prefetch/bench/timing.py", "prefetch/bench/target.py",
                 "prefetch/bench/constants.py", "prefetch/bench/datasets.py",
                 "prefetch/bench/pipelines.py", "prefetch/bench/epochs.py"]
_ENGINE = ["csrc/core", "csrc/torch/engine_binding.cpp", "csrc/torch/module.cpp",
           "csrc/torch/cuda_support.cpp", "prefetch/_engine", "prefetch/_core", "prefetch/sources",
           "prefetch/prefetcher.py", "prefetch/collate.py"]
FAIR_SOURCES = {  # (git pathspecs: "*" matches across folders)
    "h2d": ["prefetch/bench/h2d*.py", "prefetch/bench/pinned.py", "prefetch/bench/ops.py",
            "csrc/kernels/normalize_flip"] + _ENGINE + _BENCH_SHARED,
    "e2e": ["prefetch/bench/e2e*.py", "prefetch/bench/workers.py", "prefetch/bench/recipes.py",
            "csrc/kernels", "csrc/decode", "csrc/torch/ops", "prefetch/ops",
            "prefetch/transforms"] + _ENGINE + _BENCH_SHARED,
    "recipes": ["prefetch/bench/recipes*.py", "prefetch/bench/workers.py", "csrc/kernels",
                "csrc/decode", "csrc/torch/ops", "prefetch/ops", "prefetch/transforms"]
               + _ENGINE + _BENCH_SHARED,
    "workers": ["prefetch/bench/workers*.py", "prefetch/bench/e2e.py", "prefetch/samples.py",
                "csrc/kernels/normalize_flip", "csrc/kernels/flip_crop", "csrc/torch/ops",
                "prefetch/ops"] + _ENGINE + _BENCH_SHARED,
}


def usable_cores():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def bench_options():
    """The options `python -m prefetch.bench --help` lists (the bench grows options while this
    script stays: --allow-dirty, --threads are passed only where they exist)."""
    import re
    import subprocess

    try:
        p = subprocess.run([sys.executable, "-m", "prefetch.bench", "--help"], capture_output=True,
                           text=True, timeout=120, cwd=ROOT,
                           env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                               x for x in (ROOT, os.environ.get("PYTHONPATH")) if x)))
    except (OSError, subprocess.SubprocessError):
        return set()
    return set(re.findall(r"(--[a-z][a-z-]*)", p.stdout))


def parse_args(argv=None):
    p = _common.parser(__doc__)
    p.add_argument("--out", required=True, help="results.json, readme_table.md and charts go here")
    p.add_argument("--work", default=None, help="each section's output and log (default OUT/sections)")
    p.add_argument("--sections", default=",".join(ORDER), help="comma-separated, run in this order")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds for every section together; a section that no longer fits is "
                        "recorded as failed (not run) instead of being started")
    p.add_argument("--section-limit", type=float, default=240, help="seconds per section at most")
    p.add_argument("--device", default=None)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--batch-size", type=int, action="append", dest="batch_sizes")
    p.add_argument("--image-size", type=int, default=None)
    p.add_argument("--workers", type=int, default=None,
                   help="N: DataLoader workers and engine threads of every pipeline (default with "
                        "--fair: the usable cores; else the bench's own default)")
    p.add_argument("--fair", action="store_true",
                   help="the fair sections with new code or no fair figure yet, at N = --workers, "
                        "recorded on a GPU when they finish (see above)")
    p.add_argument("--record-copy", default=None, help="a folder for a copy of the updated record")
    p.add_argument("--repo", default=ROOT,
                   help="the checkout whose history and record --fair reads and writes "
                        "(default this one; tests give a temporary one)")
    p.add_argument("--note-file", default=None,
                   help="a file to append one line to: what was selected, what was recorded")
    args = p.parse_args(argv)
    if args.fair and args.workers is None:
        args.workers = usable_cores()
    if args.workers is not None and args.workers < 1:
        p.error("--workers must be at least 1, got %d" % args.workers)
    return args


def bench_command(name, out, args, options=frozenset()):
    """The bench's command line for section `name`; `options`: what the bench accepts."""
    cmd = [sys.executable, "-m", "prefetch.bench", "--sections", name, "--out", out]
    if args.device:
        cmd += ["--device", args.device]
    if args.quick:
        cmd.append("--quick")
    for b in args.batch_sizes or []:
        cmd += ["--batch-size", str(b)]
    if args.image_size:
        cmd += ["--image-size", str(args.image_size)]
    if args.workers is not None:
        # Equal resources: N workers for the usual pipeline, N threads for prefetch's engine.
        cmd += ["--workers", str(args.workers)]
        if "--threads" in options:
            cmd += ["--threads", str(args.workers)]
    if "--allow-dirty" in options:
        # The device's copy of the tree often carries uncommitted files; results.json then says
        # "dirty" and names them (a refusal would cost the lent GPU's minutes for nothing).
        cmd.append("--allow-dirty")
    return cmd


def not_started(limit, took=None):
    """Why a section is not started with `limit` seconds left (None: start it); `took`: the
    seconds its last fair GPU run took, when recorded (10% margin)."""
    if limit < 20:
        return "not started: %.0f s of the budget left" % max(0, limit + RESERVE_S)
    if took and 1.1 * took > limit:
        return "not started: its last fair run took %.0f s, %.0f s left" % (took, limit)
    return None


def select_fair(repo=ROOT):
    """changed.py's selection over FAIR_SOURCES: {section: {"run", "why", "files"}}."""
    return changed.select(changed.load(repo).get("bench_fair", {}), FAIR_SOURCES, repo)


def merge(parts, runs, device_type):
    """One results.json out of the sections' own (a list of dicts, in the order they ran)."""
    merged = {"metrics": {}, "details": {}, "skipped": {}, "failed": {}, "section_runs": runs}
    for part in parts:
        # What ran and on what: the first section's (every section runs on this checkout, N).
        for key in ("device", "torch", "cuda", "prefetch", "python", "date", "workers", "cores",
                    "torch_threads", "cpu_kernel_build", "commit", "source", "dirty",
                    "changed_files", "changed"):
            if key in part:
                merged.setdefault(key, part[key])
        if "resources" in part:
            merged.setdefault("resources", {}).update(part["resources"])
        if "config" not in merged:
            merged["config"] = dict(part.get("config", {}), sections=[])
        merged["config"]["sections"] += part.get("config", {}).get("sections", [])
        merged["metrics"].update(part.get("metrics", {}))
        merged["details"].update(part.get("details", {}))
        merged["skipped"].update(part.get("skipped", {}))
    for name, run in runs.items():
        if run["status"] != "ok":
            merged["failed"][name] = run["why"]
    # The commit measured, dirty or not, also where no section finished (or an older bench).
    commit, dirty = changed.head(ROOT)
    merged.setdefault("commit", commit)
    merged.setdefault("uncommitted_files", dirty)
    merged.setdefault("python", platform.python_version())
    merged.setdefault("date", datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    merged.setdefault("config", {"sections": []})
    try:
        from prefetch.bench.summary import verdict

        merged["verdict"] = verdict(merged["metrics"], device_type)
    except Exception as exc:  # noqa: BLE001 - the figures matter more than the closing line
        merged["verdict"] = "no verdict (%s: %s)" % (type(exc).__name__, exc)
    return merged


def publish(merged, out, device_type, final=False):
    import readme_table

    write_json(os.path.join(out, "results.json"), merged)
    with open(os.path.join(out, "readme_table.md"), "w") as f:
        f.write(readme_table.render(merged))
    if importlib.util.find_spec("matplotlib") is None and not final:
        return  # write_charts says so once, at the end
    try:
        from prefetch.bench.charts import write_charts

        write_charts(merged, out)
    except Exception as exc:  # noqa: BLE001 - a chart must not cost the numbers
        print("bench: charts failed: %s: %s" % (type(exc).__name__, exc), flush=True)


def main(argv=None):
    args = parse_args(argv)
    names = [s for s in args.sections.split(",") if s]
    unknown = [s for s in names if s not in ORDER]
    if unknown:
        raise SystemExit("unknown section(s) %s; choose from %s" % (unknown, ", ".join(ORDER)))
    selection = None
    if args.fair:
        selection = select_fair(args.repo)
        for name, sel in selection.items():
            print("bench: %-8s %-4s %s" % (name, "run" if sel["run"] else "skip",
                                           sel["why"] if sel["why"] != "no clean run recorded"
                                           else "no fair figure recorded"), flush=True)
        asked = names if args.sections != ",".join(ORDER) else list(FAIR)
        names = [n for n in FAIR if n in asked and selection[n]["run"]]
        note(args, "N = %d workers = threads; sections to run: %s" % (
            args.workers, ", ".join("%s (%s)" % (n, "no fair figure yet" if selection[n]["why"]
                                                 == "no clean run recorded" else "new code")
                                    for n in names) or "none"))
        if not names:
            print("bench: every fair section has a figure at its current code: nothing to run")
            os.makedirs(args.out, exist_ok=True)
            write_json(os.path.join(args.out, "selection.json"), selection)
            return 0
    options = bench_options()
    if "--allow-dirty" not in options:
        print("bench: this bench has no --allow-dirty: a dirty tree is measured as the bench allows",
              flush=True)
    import torch

    device_type = (args.device or ("cuda" if torch.cuda.is_available() else "cpu")).split(":")[0]
    work = args.work or os.path.join(args.out, "sections")
    os.makedirs(args.out, exist_ok=True)
    deadline = time.monotonic() + args.budget if args.budget else None
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    parts, runs = [], {}
    # What a fair section took at its last GPU run: one that cannot finish in what is left is
    # not started (a section stopped at its limit leaves no figure), and the next one gets the time.
    took = {n: e.get("seconds") for n, e in changed.load(args.repo).get("bench_fair", {}).items()
            } if args.fair and device_type == "cuda" else {}
    for name in names:
        limit = args.section_limit
        if deadline is not None:
            limit = min(limit, deadline - time.monotonic() - RESERVE_S)
        why = not_started(limit, took.get(name))
        if why:
            runs[name] = {"status": "skipped", "seconds": 0, "why": why}
            print("bench: %s: %s" % (name, why), flush=True)
            continue
        out = os.path.join(work, name)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        cmd = bench_command(name, out, args, options)
        print("bench: %s (limit %.0f s): %s" % (name, limit, " ".join(cmd[1:])), flush=True)
        t0 = time.monotonic()
        log = os.path.join(work, name + ".log")
        rc, output = run_limited(cmd, limit, log, cwd=ROOT, env=env)
        seconds = round(time.monotonic() - t0, 1)
        path = os.path.join(out, "results.json")
        if rc == 0 and os.path.exists(path):
            with open(path) as f:
                parts.append(json.load(f))
            runs[name] = {"status": "ok", "seconds": seconds, "why": ""}
        else:
            why = ("timed out after %.0f s" % limit if rc == "timeout"
                   else "exit status %s" % rc)
            runs[name] = {"status": "timeout" if rc == "timeout" else "failed", "seconds": seconds,
                          "why": "%s (log: %s)" % (why, log)}
            print(output[-1500:], flush=True)
        print("bench: %s: %s in %.1f s" % (name, runs[name]["status"], seconds), flush=True)
        publish(merge(parts, runs, device_type), args.out, device_type)  # after every section
    merged = merge(parts, runs, device_type)
    if selection is not None:
        merged["fair_selection"] = selection
        merged.setdefault("workers", args.workers)
    publish(merged, args.out, device_type, final=True)
    if args.fair and device_type == "cuda":
        # A section that finished but skipped its own work (a missing package) measured nothing.
        done = [n for n, r in runs.items() if r["status"] == "ok" and n not in merged["skipped"]]
        if done:
            changed.update("bench_fair", {
                n: changed.entry_for(FAIR_SOURCES[n], args.repo, device=merged.get("device"),
                                     workers=args.workers, cores=usable_cores(),
                                     seconds=runs[n]["seconds"]) for n in done},
                args.repo, copy_to=args.record_copy)
            print("bench: recorded as fair figures at this commit: %s" % ", ".join(done), flush=True)
            note(args, "recorded as fair figures at this commit: %s" % ", ".join(done))
    print("bench: %s" % merged["verdict"], flush=True)
    # --fair: a section not started for want of time is the plan's order at work (the next
    # call runs it), not a failure; what started and failed or ran out of time is.
    bad = {n: r["status"] for n, r in runs.items()
           if r["status"] != "ok" and not (args.fair and r["status"] == "skipped")}
    left = [n for n, r in runs.items() if r["status"] == "skipped"]
    if args.fair and left:
        note(args, "not started (time): %s" % ", ".join(left))
    print("bench: %d section(s) ok%s" % (len(runs) - len(bad) - (len(left) if args.fair else 0),
                                         "; not ok: %s" % bad if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
