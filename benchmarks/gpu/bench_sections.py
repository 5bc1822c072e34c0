"""`python -m prefetch.bench`, one section per process, each under its own time limit, merged
into one results.json (with the charts and the README's tables) after every section.

A bench run writes results.json only at its end: one section that hangs or outlasts the
device call would lose every figure. Here a section that fails or runs out of time loses only
itself (recorded under ``failed``), and the sections run in the order a GPU run needs them
most (h2d, ops, e2e, arrays, collate, workers, recipes).

    python benchmarks/gpu/bench_sections.py --out gpu-out/bench --work /tmp/bench-work --budget 330
    python benchmarks/gpu/bench_sections.py --out DIR --device cpu --quick --sections collate,ops \\
        --batch-size 8 --image-size 32                                  # CI: the same path, small

Writes DIR/results.json (python -m prefetch.bench's format, plus ``failed`` and
``section_runs``), DIR/readme_table.md and the charts (DIR/e2e.png, DIR/ops.png); each
section's own output and log stay in --work. Exit 1 when a section failed or timed out.
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
from _common import ROOT, run_limited, write_json

ORDER = ("h2d", "ops", "e2e", "arrays", "collate", "workers", "recipes")
RESERVE_S = 10  # merging, charts and the table after the last section


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
    return p.parse_args(argv)


def bench_command(name, out, args):
    cmd = [sys.executable, "-m", "prefetch.bench", "--sections", name, "--out", out]
    if args.device:
        cmd += ["--device", args.device]
    if args.quick:
        cmd.append("--quick")
    for b in args.batch_sizes or []:
        cmd += ["--batch-size", str(b)]
    if args.image_size:
        cmd += ["--image-size", str(args.image_size)]
    return cmd


def merge(parts, runs, device_type):
    """One results.json out of the sections' own (a list of dicts, in the order they ran)."""
    merged = {"metrics": {}, "details": {}, "skipped": {}, "failed": {}, "section_runs": runs}
    for part in parts:
        for key in ("device", "torch", "prefetch", "python", "date"):
            merged.setdefault(key, part.get(key))
        if "config" not in merged:
            merged["config"] = dict(part.get("config", {}), sections=[])
        merged["config"]["sections"] += part.get("config", {}).get("sections", [])
        merged["metrics"].update(part.get("metrics", {}))
        merged["details"].update(part.get("details", {}))
        merged["skipped"].update(part.get("skipped", {}))
    for name, run in runs.items():
        if run["status"] != "ok":
            merged["failed"][name] = run["why"]
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
    import torch

    device_type = (args.device or ("cuda" if torch.cuda.is_available() else "cpu")).split(":")[0]
    work = args.work or os.path.join(args.out, "sections")
    os.makedirs(args.out, exist_ok=True)
    deadline = time.monotonic() + args.budget if args.budget else None
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    parts, runs = [], {}
    for name in names:
        limit = args.section_limit
        if deadline is not None:
            limit = min(limit, deadline - time.monotonic() - RESERVE_S)
        if limit < 20:
            runs[name] = {"status": "skipped", "seconds": 0,
                          "why": "not started: %.0f s of the budget left" % max(0, limit + RESERVE_S)}
            print("bench: %s: %s" % (name, runs[name]["why"]), flush=True)
            continue
        out = os.path.join(work, name)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        cmd = bench_command(name, out, args)
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
    publish(merged, args.out, device_type, final=True)
    print("bench: %s" % merged["verdict"], flush=True)
    bad = {n: r["status"] for n, r in runs.items() if r["status"] != "ok"}
    print("bench: %d section(s) ok%s" % (len(runs) - len(bad), "; not ok: %s" % bad if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
