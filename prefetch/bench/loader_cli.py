"""``python -m prefetch.bench --loader module:function [--step ...] [--transform ...]``: the
harness on the user's loader. Prints the figures, writes ``results.json`` and ends with the
verdict as its last line. A bad ``module:function`` is a one-line error and exit status 2."""
import datetime
import json
import os
import platform
import sys

import torch

import prefetch

from .loader import check_step, is_step_factory, measure_loader
from .loader_table import flat_metrics, format_report
from .target import TargetError, call_factory, resolve


def add_arguments(p):
    g = p.add_argument_group("your own loader (instead of the sections)")
    g.add_argument("--loader", metavar="MODULE:FUNCTION",
                   help="a function returning your loader (a DataLoader or any re-iterable of "
                        "batches); a module in the current directory works, as with python -m")
    g.add_argument("--step", metavar="MODULE:FUNCTION",
                   help="your training step: a function taking one batch, or a function of no "
                        "arguments that returns it")
    g.add_argument("--transform", metavar="MODULE:FUNCTION",
                   help="a function of no arguments returning a prefetch transform (e.g. "
                        "FusedAugment) for the Prefetcher")
    g.add_argument("--seconds", type=float, default=2.0,
                   help="each timed pass stops after this many seconds (default 2)")
    g.add_argument("--batches", type=int, default=500,
                   help="... or this many batches, whichever comes first (default 500)")
    g.add_argument("--rounds", type=int, default=3, help="interleaved repetitions (default 3)")
    g.add_argument("--warmup", type=int, default=2,
                   help="untimed batches at the start of each pass (default 2)")


def load(args):
    """(loader, step, transform) from the --loader/--step/--transform functions."""
    make_loader = resolve(args.loader, "--loader")
    loader = call_factory(make_loader, args.loader, "--loader", "the loader")
    step = transform = None
    if args.step:
        fn = resolve(args.step, "--step")
        step = call_factory(fn, args.step, "--step", "the step") if is_step_factory(fn) else fn
        step = check_step(step, "--step %r" % args.step)
    if args.transform:
        transform = call_factory(resolve(args.transform, "--transform"), args.transform,
                                 "--transform", "the transform")
        if not callable(transform):
            raise TargetError("--transform %r: returned a %s, not a transform (a "
                              "prefetch.transforms.Transform or any callable taking a batch)"
                              % (args.transform, type(transform).__name__))
    return loader, step, transform


def run(args, device_name):
    """The --loader mode of ``python -m prefetch.bench``; returns the exit status."""
    for name in ("seconds", "batches", "rounds"):
        if getattr(args, name) <= 0:
            print("prefetch.bench: --%s must be > 0, got %s" % (name, getattr(args, name)),
                  file=sys.stderr)
            return 2
    if args.warmup < 0:
        print("prefetch.bench: --warmup must be >= 0, got %s" % args.warmup, file=sys.stderr)
        return 2
    try:
        loader, step, transform = load(args)
        print("prefetch %s loader bench | torch %s | --loader %s%s%s"
              % (prefetch.__version__, torch.__version__, args.loader,
                 " --step %s" % args.step if args.step else "",
                 " --transform %s" % args.transform if args.transform else ""), flush=True)
        report = measure_loader(loader, step, transform=transform, device=args.device,
                                seconds=args.seconds, batches=args.batches, rounds=args.rounds,
                                warmup=args.warmup, num_threads=args.threads,
                                progress=lambda msg: print("  .. " + msg, flush=True))
    except TargetError as exc:
        print("prefetch.bench: %s" % exc, file=sys.stderr)
        return 2
    device = torch.device(report.config["device"])
    result = {
        "mode": "loader",
        "device": device_name(device),
        "torch": torch.__version__,
        "prefetch": prefetch.__version__,
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "config": dict(report.config, loader_spec=args.loader, step_spec=args.step,
                       transform_spec=args.transform),
        "metrics": flat_metrics(report),
        "details": {"loader": report.as_dict()},
        "verdict": report.verdict.line,
    }
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "results.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    for line in format_report(report):
        print(line)
    print("  wrote %s" % path)
    print(report.verdict.line, flush=True)
    return 0
