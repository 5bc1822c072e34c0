"""python -m prefetch.bench: measures prefetch against the alternatives and against plain copies
of as many bytes, in the same run, writes a table and results.json, and closes with a verdict.
With --loader module:function it measures your own loader (and --step) instead."""
import argparse
import contextlib
import datetime
import json
import os
import platform
import sys
import time

import torch

import prefetch
from prefetch.ops import cpu_kernel_build

from . import arrays, collate, e2e, h2d, loader_cli, ops, recipes, workers
from .charts import write_charts
from .summary import verdict
from .section import Config, Skipped

# Every section, in the default order of --sections.
SECTIONS = [collate.SECTION, h2d.SECTION, ops.SECTION, arrays.SECTION, e2e.SECTION, workers.SECTION,
            recipes.SECTION]
BY_NAME = {s.name: s for s in SECTIONS}


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m prefetch.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="sections:\n" + "\n".join(
                                    "  %-8s %s" % (s.name, s.description) for s in SECTIONS))
    p.add_argument("--sections", default=",".join(BY_NAME),
                   help="comma-separated: %s" % ", ".join(BY_NAME))
    p.add_argument("--quick", action="store_true", help="small run (well under a minute on 2 cores)")
    p.add_argument("--device", default=None, help="target device (default: cuda if available, else cpu)")
    p.add_argument("--batch-size", type=int, action="append", dest="batch_sizes",
                   help="images per batch (repeatable; default 64 and 256)")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--workers", type=int, default=2, help="DataLoader worker processes in e2e and workers (default 2)")
    p.add_argument("--threads", type=int, default=None, help="engine collation threads (default: cores, <= 8)")
    p.add_argument("--steps", type=int, default=None, help="training steps per e2e pipeline")
    p.add_argument("--out", default="bench-out", help="directory for results.json")
    loader_cli.add_arguments(p)
    args = p.parse_args(argv)
    for name in ("step", "transform"):
        if getattr(args, name) and not args.loader:
            p.error("--%s needs --loader" % name)
    return args


def progress(msg):
    print("  .. %s" % msg, flush=True)


def device_name(device):
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu (%s, %d cores)" % (platform.processor() or platform.machine(), os.cpu_count() or 1)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.loader:
        return loader_cli.run(args, device_name)
    names = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = [s for s in names if s not in BY_NAME]
    if unknown:
        sys.exit("unknown section(s) %s; choose from %s" % (unknown, list(BY_NAME)))
    torch.manual_seed(0)
    device = torch.device(args.device) if args.device else (
        torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu"))
    config = Config(device=device, quick=args.quick, batch_sizes=args.batch_sizes or [64, 256],
                    image_size=args.image_size, workers=args.workers, threads=args.threads,
                    steps=args.steps, progress=progress)

    print("prefetch %s bench | torch %s | device %s | CPU kernels: %s build"
          % (prefetch.__version__, torch.__version__, device_name(device), cpu_kernel_build()))
    t0 = time.perf_counter()
    metrics, details, skipped = {}, {}, {}
    for name in names:
        try:
            # The bench's device current while a section runs: what it does not name a device for
            # (DataLoader's pin_memory, timm's PrefetchLoader's stream) lands there, not on GPU 0.
            with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
                result = BY_NAME[name].run(config)
        except Skipped as why:
            skipped[name] = str(why)
            print("  -- %s: skipped (%s)" % (name, skipped[name]))
            continue
        details[name] = result.rows
        details.update(result.details)
        for part, why in result.skipped.items():
            skipped["%s:%s" % (name, part)] = why
            print("  -- %s %s: skipped (%s)" % (name, part, why))
        print(result.table)
        metrics.update(result.metrics)

    os.makedirs(args.out, exist_ok=True)
    result = {
        "device": device_name(device),
        "torch": torch.__version__,
        "prefetch": prefetch.__version__,
        "python": platform.python_version(),
        "cpu_kernel_build": cpu_kernel_build(),  # (the CPU kernels' figures depend on it)
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "config": {"sections": names, "quick": args.quick, "batch_sizes": config.batch_sizes,
                   "image_size": args.image_size, "workers": args.workers,
                   "metrics_batch_size": max(config.batch_sizes)},
        "metrics": metrics,
        "details": details,
        "skipped": skipped,
        "verdict": verdict(metrics, device.type),
    }
    path = os.path.join(args.out, "results.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    write_charts(result, args.out)
    print("\nwrote %s in %.1f s" % (path, time.perf_counter() - t0))
    print(verdict(metrics, device.type))
    return 0


if __name__ == "__main__":
    sys.exit(main())
