"""Issue 14 item 6: do the CPU ops' pooled outputs matter, against torch's CPU allocator?

Times ``prefetch.ops.normalize_flip`` on the CPU with its output from the process-wide output
pool (``set_output_pool_limit(default)``) and from ``at::empty`` (``set_output_pool_limit(0)``),
interleaved A/B/A/B in one process, in two steady-state loops:

- ``dropped``: the previous output is dropped before the next call (``del out; out = op(...)``),
  what a training loop that is done with its batch does;
- ``kept``: the previous output is alive during the call (``out = op(...)``), what a loop that
  holds its batch until the next one arrives does.

Each round runs a few untimed calls (the pool refills after being switched off), then times
``--calls`` calls one by one. Reported per case: the median over all timed calls, the spread of
the per-round medians (min–max), and minor page faults per call (getrusage).

    python benchmarks/pool_vs_allocator.py [--rounds 6] [--calls 8] [--quick]
"""
import argparse
import resource
import statistics
import time

import torch

import prefetch.ops as ops

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def cases(quick):
    big = [(256, 224), (64, 224)] if not quick else [(64, 224)]
    out = []
    for n, side in big:
        for dtype in (torch.float32, torch.bfloat16):
            for cl in (False, True):
                out.append((n, side, dtype, cl))
    out.append((1, 224, torch.float32, False))  # 0.6 MB: below the pool's 1 MiB threshold
    return out


def name(n, side, dtype, cl):
    mib = n * 3 * side * side * dtype.itemsize / 2**20
    return "%s%s n=%d (%.1f MiB)" % (str(dtype).replace("torch.", ""), " CL" if cl else "", n, mib)


def minflt():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def one_round(call, loop, warmup, calls):
    """Per-call seconds and minor faults per call for one round of `loop`."""
    out = None
    times = []
    for i in range(warmup + calls):
        if i == warmup:
            faults_before = minflt()
        if loop == "dropped":
            out = None
        t0 = time.perf_counter()
        out = call()
        t1 = time.perf_counter()
        if i >= warmup:
            times.append(t1 - t0)
    faults = (minflt() - faults_before) / calls
    del out
    return times, faults


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=6, help="rounds per mode (interleaved)")
    p.add_argument("--calls", type=int, default=8, help="timed calls per round")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls per round")
    p.add_argument("--quick", action="store_true", help="n=64 cases only")
    args = p.parse_args()

    default_limit = ops.output_pool_stats()["max_idle_bytes"]
    modes = {"pool": default_limit, "allocator": 0}
    print("torch %s, %d threads; pool bound %d MiB" % (torch.__version__, torch.get_num_threads(),
                                                       default_limit >> 20))
    print("| case | loop | pool ms (round medians min–max) | allocator ms (min–max) | "
          "allocator / pool | faults/call pool | faults/call allocator |")
    print("|---|---|---:|---:|---:|---:|---:|")
    g = torch.Generator().manual_seed(0)
    try:
        for n, side, dtype, cl in cases(args.quick):
            images = torch.randint(0, 256, (n, side, side, 3), dtype=torch.uint8, generator=g)
            hflip = torch.rand(n, generator=g) < 0.5

            def call():
                return ops.normalize_flip(images, MEAN, STD, hflip=hflip, dtype=dtype,
                                          channels_last=cl)

            for loop in ("dropped", "kept"):
                res = {m: {"all": [], "rounds": [], "faults": []} for m in modes}
                for r in range(args.rounds):
                    # A/B/B/A...: neither mode always runs first after the other.
                    order = list(modes) if r % 2 == 0 else list(reversed(modes))
                    for mode in order:
                        ops.set_output_pool_limit(modes[mode])
                        times, faults = one_round(call, loop, args.warmup, args.calls)
                        res[mode]["all"] += times
                        res[mode]["rounds"].append(statistics.median(times))
                        res[mode]["faults"].append(faults)
                med = {m: statistics.median(res[m]["all"]) * 1e3 for m in modes}
                spread = {m: "%.2f–%.2f" % (min(res[m]["rounds"]) * 1e3, max(res[m]["rounds"]) * 1e3)
                          for m in modes}
                flt = {m: statistics.median(res[m]["faults"]) for m in modes}
                print("| %s | %s | %.2f (%s) | %.2f (%s) | %.2f | %.0f | %.0f |" % (
                    name(n, side, dtype, cl), loop, med["pool"], spread["pool"],
                    med["allocator"], spread["allocator"], med["allocator"] / med["pool"],
                    flt["pool"], flt["allocator"]), flush=True)
    finally:
        ops.set_output_pool_limit(default_limit)


if __name__ == "__main__":
    main()
