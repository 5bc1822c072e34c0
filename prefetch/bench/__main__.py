"""python -m prefetch.bench: measures prefetch against the alternatives and against plain copies
of as many bytes, in the same run, writes a table and results.json, and closes with a verdict.
Every pipeline gets the same N (--workers: DataLoader workers, prefetch's and DALI's threads);
every comparison is timed in interleaved rounds; results.json names the commit measured.
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

from . import arrays, collate, decode_host, e2e, h2d, loader_cli, ops, recipes, workers
from . import provenance
from .charts import write_charts
from .summary import verdict
from .section import Config, Skipped, unequal_resources, usable_cores

# Every section, in the default order of --sections.
SECTIONS = [collate.SECTION, h2d.SECTION, ops.SECTION, arrays.SECTION, e2e.SECTION, workers.SECTION,
            recipes.SECTION, decode_host.SECTION]
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
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="every pipeline's resources: N DataLoader workers for the usual pipeline "
                        "(and for prefetch where it has workers), N threads for prefetch, DALI and "
                        "torch's intra-op work (default: the usable cores, %d here)" % usable_cores())
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="deprecated: the same N as --workers (refused if it differs); with "
                        "--loader, the Prefetcher's threads around your loader")
    p.add_argument("--allow-dirty", action="store_true",
                   help="write results from a checkout with uncommitted changes (results.json then "
                        "says \"dirty\": true and names them)")
    p.add_argument("--steps", type=int, default=None,
                   help="timed training steps per e2e pipeline (at least 50 on a GPU)")
    p.add_argument("--out", default="bench-out", help="directory for results.json")
    loader_cli.add_arguments(p)
    args = p.parse_args(argv)
    for name in ("step", "transform"):
        if getattr(args, name) and not args.loader:
            p.error("--%s needs --loader" % name)
    for name in ("workers", "threads"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error("--%s must be >= 1, got %d" % (name, getattr(args, name)))
    # One N, not two: --threads (once the engine's threads, beside 2 workers) survives as an
    # alias that cannot make the pipelines unequal. (--loader passes args.threads on as the
    # Prefetcher's threads around the user's own loader, whose workers are the user's.)
    if args.workers is not None and args.threads is not None and args.workers != args.threads:
        p.error("--threads %d differs from --workers %d: every pipeline gets the same N "
                "(--threads is a deprecated alias of --workers; pass --workers alone)"
                % (args.threads, args.workers))
    if args.threads is not None and args.workers is None and not args.loader:
        print("python -m prefetch.bench: --threads is deprecated; it is --workers %d (every "
              "pipeline's N)" % args.threads, file=sys.stderr)
    args.n = args.workers or args.threads or usable_cores()
    # Every argument checked before any measurement: a bad one would otherwise fail minutes in.
    for name, values in (("--batch-size", args.batch_sizes or []), ("--image-size", [args.image_size]),
                         ("--steps", [] if args.steps is None else [args.steps])):
        for v in values:
            if v < 1:
                p.error("%s must be >= 1, got %d" % (name, v))
    if not args.loader:
        names = [s.strip() for s in args.sections.split(",") if s.strip()]
        unknown = [s for s in names if s not in BY_NAME]
        if unknown or not names:
            p.error("--sections %r: %s; choose from %s"
                    % (args.sections, "unknown section(s) %s" % ", ".join(unknown) if unknown
                       else "no section named", ", ".join(BY_NAME)))
        args.section_names = names
    if args.device is not None:
        try:
            device = torch.device(args.device)
        except RuntimeError as e:
            p.error("--device %r is no torch device (%s)" % (args.device, str(e).splitlines()[0]))
        if device.type == "cuda" and not torch.cuda.is_available():
            p.error("--device %r: this torch (%s) sees no CUDA device" % (args.device, torch.__version__))
        if device.type not in ("cpu", "cuda"):
            p.error("--device %r: the bench measures cpu or cuda devices" % args.device)
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        p.error("--out %r exists and is not a directory (results.json is written inside it)" % args.out)
    return args


def progress(msg):
    print("  .. %s" % msg, flush=True)


def device_name(device):
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu (%s, %d cores)" % (platform.processor() or platform.machine(), usable_cores())


def environment(device, n, state):
    """results.json's record of what ran: N and the cores, the device, the versions, and the
    code measured (``provenance.checkout_state``)."""
    return {
        "device": device_name(device),
        "workers": n,                  # N: every pipeline's workers / threads
        "cores": usable_cores(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "prefetch": prefetch.__version__,
        "python": platform.python_version(),
        "cpu_kernel_build": cpu_kernel_build(),  # (the CPU kernels' figures depend on it)
        "commit": state["commit"],
        "source": state["source"],
        "dirty": state["dirty"],
        "changed_files": state["changed_files"],
        "changed": state["changed"],
    }


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.loader:
        return loader_cli.run(args, device_name)
    names = args.section_names
    # Before any measurement: a dirty checkout is refused now, not after minutes of running.
    state = provenance.checkout_state()
    if not args.allow_dirty and provenance.refusal(state):
        sys.exit(provenance.refusal(state))
    torch.manual_seed(0)
    device = torch.device(args.device) if args.device else (
        torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu"))
    config = Config(device=device, quick=args.quick, batch_sizes=args.batch_sizes or [64, 256],
                    image_size=args.image_size, workers=args.n, steps=args.steps,
                    progress=progress)
    # N intra-op threads in the main process for every pipeline alike (prefetch's transforms and
    # decodes run on them, as do the usual pipeline's ToDtype and Normalize after its workers).
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(config.workers)
    try:
        return _run_sections(args, names, config, device, state)
    finally:
        torch.set_num_threads(torch_threads)


def _run_sections(args, names, config, device, state):
    env = environment(device, config.workers, state)
    print("prefetch %s bench | torch %s | device %s | CPU kernels: %s build | N = %d (workers = "
          "threads) on %d cores | commit %s%s"
          % (prefetch.__version__, torch.__version__, env["device"], env["cpu_kernel_build"],
             config.workers, env["cores"], (state["commit"] or "none")[:12],
             " with %d uncommitted change(s)" % state["changed_files"] if state["dirty"] else ""))
    t0 = time.perf_counter()
    metrics, details, skipped, resources = {}, {}, {}, {}
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
        bad = unequal_resources(result.resources, config.workers)
        if bad:  # a section's own defect: never a figure of unequal pipelines
            raise RuntimeError("prefetch bench: section %s built pipelines without N = %d: %s"
                               % (name, config.workers, "; ".join("%s: %s" % b for b in bad)))
        details[name] = result.rows
        details.update(result.details)
        resources[name] = result.resources
        for part, why in result.skipped.items():
            skipped["%s:%s" % (name, part)] = why
            print("  -- %s %s: skipped (%s)" % (name, part, why))
        print(result.table)
        metrics.update(result.metrics)

    os.makedirs(args.out, exist_ok=True)
    result = dict(env)
    result.update({
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "config": {"sections": names, "quick": args.quick, "batch_sizes": config.batch_sizes,
                   "image_size": args.image_size, "workers": config.workers,
                   "metrics_batch_size": max(config.batch_sizes)},
        # section -> pipeline -> {"workers", "threads"}: what each pipeline was built with
        "resources": resources,
        "metrics": metrics,
        "details": details,
        "skipped": skipped,
        "verdict": verdict(metrics, device.type),
    })
    path = os.path.join(args.out, "results.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    write_charts(result, args.out)
    print("\nwrote %s in %.1f s" % (path, time.perf_counter() - t0))
    print(verdict(metrics, device.type))
    return 0


if __name__ == "__main__":
    sys.exit(main())
