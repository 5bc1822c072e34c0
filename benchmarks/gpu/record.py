"""gpu_check.sh's bookkeeping: one stage's result, and summary.json rewritten from all of them.

    python benchmarks/gpu/record.py --logs L --out O --stage NAME --status ok|failed|timeout|skipped \\
        --rc RC --seconds S --limit S [--note TEXT]
    python benchmarks/gpu/record.py --logs L --out O --summary-only

A stage's result goes to L/NAME.status.json (with what its body left in L/NAME.note and
L/NAME.detail.json, and the commit it measured: `git rev-parse HEAD` as the stage ends, with the
number of uncommitted files, dirty or not); O/summary.json then lists every stage recorded so far
in this run, in order, with the preflight's findings and the overall result ("ok" when every
stage is ok or skipped, or is the self-test's expected timeout). Standard library only: it must
work whatever else is broken.
"""
import argparse
import datetime
import json
import os
import sys

from changed import ROOT, head

STATUSES = ("ok", "failed", "timeout", "skipped")


def _load(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def _write(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, default=str)
        f.write("\n")
    os.replace(tmp, path)


def record_stage(args):
    note = args.note or ""
    note_file = os.path.join(args.logs, args.stage + ".note")
    if os.path.exists(note_file):
        with open(note_file, errors="replace") as f:
            body_note = " ".join(f.read().split())
        note = "; ".join(x for x in (note, body_note) if x)
    entry = {"stage": args.stage, "status": args.status, "rc": args.rc,
             "seconds": args.seconds, "limit_s": args.limit, "note": note,
             "log": args.log or "", "finished": datetime.datetime.now(
                 datetime.timezone.utc).isoformat(timespec="seconds")}
    # The commit as the stage ends: a stage that rebuilt or edited nothing measured this tree.
    entry["commit"], entry["uncommitted_files"] = head(ROOT)
    detail = _load(os.path.join(args.logs, args.stage + ".detail.json"))
    if detail is not None:
        entry["detail"] = detail
    _write(os.path.join(args.logs, args.stage + ".status.json"), entry)
    with open(os.path.join(args.logs, "stages.list"), "a") as f:
        f.write(args.stage + "\n")
    return entry


def overall(stages):
    bad = [s["stage"] for s in stages
           if s["status"] not in ("ok", "skipped")
           and not (s["stage"] == "selftest" and s["status"] == "timeout")]
    return ("ok" if not bad else "failed"), bad


def write_summary(args):
    order = []
    try:
        with open(os.path.join(args.logs, "stages.list")) as f:
            for name in f.read().split():
                if name not in order:
                    order.append(name)
    except OSError:
        pass
    stages = [s for s in (_load(os.path.join(args.logs, n + ".status.json")) for n in order) if s]
    run = _load(os.path.join(args.logs, "run.json"), {})
    preflight = _load(os.path.join(args.logs, "preflight.json"))
    result, bad = overall(stages)
    skipped = {s["stage"]: s["note"] for s in stages if s["status"] == "skipped"}
    summary = dict(run, result=result, not_ok=bad, skipped=skipped, stages=stages,
                   updated=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    if preflight is not None:
        summary["preflight"] = {k: preflight.get(k) for k in
                                ("mode", "mode_why", "gpu_count", "python", "torch", "gpus",
                                 "tools", "packages", "prefetch", "host", "limits")}
    _write(os.path.join(args.out, "summary.json"), summary)
    return summary


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--logs", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--stage")
    p.add_argument("--status", choices=STATUSES)
    p.add_argument("--rc", type=int, default=None)
    p.add_argument("--seconds", type=int, default=None)
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--note", default="")
    p.add_argument("--log", default="")
    p.add_argument("--summary-only", action="store_true")
    args = p.parse_args(argv)
    if not args.summary_only:
        if not args.stage or not args.status:
            p.error("--stage and --status are needed unless --summary-only")
        e = record_stage(args)
        print("gpu_check: %-10s %-8s %4s s (limit %s s)%s" % (
            e["stage"], e["status"], e["seconds"], e["limit_s"],
            " — " + e["note"] if e["note"] else ""), flush=True)
    write_summary(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
