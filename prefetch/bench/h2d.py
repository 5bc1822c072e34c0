"""Host -> device: batches through the Prefetcher's ring, against ``tensor.pin_memory().to(dev,
non_blocking=True)`` per batch, against a raw loop of pinned-memory copies of the same size
on one stream (the bus's speed as a plain loop reaches it), in the same run; and the zero-copy variant (the fused op reading the batch straight
from pinned memory) against copy-then-op. CUDA only."""
import torch

import prefetch
from prefetch._engine.pipeline import derived_fractions

from . import text, timing
from .ops import MEAN, STD
from .pinned import cuda_view_of_pinned
from .section import Section, SectionResult, Skipped


def measure(device, batch_bytes=256 * 224 * 224 * 3, count=20, threads=None, repeats=5):
    """GB/s of `count` batches of `batch_bytes` per timed repetition (median of `repeats`, after
    two untimed repetitions: allocations, the ring's first growth, and torch's pinned-memory cache
    filled for `pin_memory()`, whose repeats ran 17–51 GB/s after one warm-up and 3 repeats on the
    H200, 2026-11-27)."""
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError("the h2d section needs a CUDA device")
    # Pinned under the measured device, as every allocation here: pin_memory() pins under the
    # current device, and the zero-copy view (pinned.py) needs its blocks pinned for `device`.
    with torch.cuda.device(device):
        return _measure(device, batch_bytes, count, threads, repeats)


def _measure(device, batch_bytes, count, threads, repeats):
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, 256, (batch_bytes,), dtype=torch.uint8, generator=g) for _ in range(4)]
    pinned = batches[0].pin_memory()
    dst = torch.empty(batch_bytes, dtype=torch.uint8, device=device)
    stream = torch.cuda.Stream(device)

    def raw():
        with torch.cuda.stream(stream):
            for _ in range(count):
                dst.copy_(pinned, non_blocking=True)
        stream.synchronize()

    def pin_each():
        for i in range(count):
            batches[i % 4].pin_memory().to(device, non_blocking=True)

    ranges = {}

    def gbps(fn, key):
        seconds = timing.samples(fn, repeats, device=device, warmup=2)
        ranges[key + "_range"] = [batch_bytes * count / max(seconds) / 1e9,
                                  batch_bytes * count / min(seconds) / 1e9]
        return batch_bytes * count / timing.median(seconds) / 1e9

    # One epoch of the Prefetcher is the `count` batches.
    with prefetch.Prefetcher([batches[i % 4] for i in range(count)], device=device,
                             num_threads=threads) as pf:
        def ring():
            for _ in pf:
                pass

        out = {
            "batch_mib": batch_bytes / 2**20,
            "repeats": repeats,
            "h2d_raw_gbps": gbps(raw, "h2d_raw_gbps"),
            "pin_memory_gbps": gbps(pin_each, "pin_memory_gbps"),
        }
        before = pf.stats()
        out["h2d_gbps"] = gbps(ring, "h2d_gbps")
        out["ring_stages"] = ring_stages(before, pf.stats())
        out.update(ranges)
    out["h2d_fraction_of_raw"] = out["h2d_gbps"] / out["h2d_raw_gbps"]
    out["h2d_vs_pin_memory"] = out["h2d_gbps"] / out["pin_memory_gbps"]
    return out


def ring_stages(before, after):
    """Where the ring's epochs spent the producer's time, from two ``Prefetcher.stats()``: the
    collation's speed while the copies run (``collate_gbps``: against the `collate` section's,
    which has no copy beside it, it says whether the host's memory is shared out), and each
    stage's share of the producer's time (``blocked``: waiting for the consumer, ``handoff``:
    allocating the destination, enqueuing the copy, publishing). The first GPU runs measured the
    ring at 0.55 of raw pinned copies with the sum of the collation's and the copy's times per
    batch: this says which of the two explanations holds (benchmarks/NOTES.md)."""
    d = {k: after.get(k, 0) - before.get(k, 0) for k in
         ("bytes_collated", "collate_s", "source_s", "producer_blocked_s", "transform_s",
          "produce_s", "batches", "wait_s", "consumer_s")}
    # The shares as stats() derives them, from these epochs' counters instead of the totals.
    fractions = derived_fractions(d)
    out = {
        "batches": d["batches"],
        "collate_gbps": d["bytes_collated"] / d["collate_s"] / 1e9 if d["collate_s"] > 0 else 0.0,
        "produce_ms_per_batch": 1e3 * d["produce_s"] / d["batches"] if d["batches"] else 0.0,
        "consumer_wait_fraction": fractions["wait_fraction"],
    }
    out.update((k, v) for k, v in fractions.items() if k.endswith("_share"))
    return out


def measure_zero_copy(device, n=256, size=224, crop=224, padding=4, repeats=5):
    """The zero-copy variant against copy-then-op, in the same run: the fused op reading the
    uint8 batch straight from pinned host memory across the bus (one pass), against a copy of
    the batch to the device followed by the op (two passes, the Prefetcher's path), for float16
    output in both memory formats. >1 in `zero_copy_vs_copy_then_op` means zero-copy wins."""
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError("the zero-copy variant needs a CUDA device")
    with torch.cuda.device(device):
        return _measure_zero_copy(device, n, size, crop, padding, repeats)


def _measure_zero_copy(device, n, size, crop, padding, repeats):
    g = torch.Generator().manual_seed(0)
    # The device's context exists before the block is pinned (torch pins under the current
    # device only when it has one), so the block maps to `device` and the view is zero-copy.
    staged = torch.empty((n, size, size, 3), dtype=torch.uint8, device=device)
    pinned = torch.randint(0, 256, (n, size, size, 3), dtype=torch.uint8, generator=g).pin_memory()
    view = cuda_view_of_pinned(pinned, device)
    aug = prefetch.FusedAugment(MEAN, STD, crop=crop, padding=padding, hflip=0.5, seed=1)
    draws = aug.draws(n, size, size).to(device)
    rows = []
    for channels_last in (False, True):
        def op(images):
            return prefetch.ops.normalize_flip(images, MEAN, STD, hflip=draws.hflip, crop=draws.crop,
                                               offsets=draws.offsets, dtype=torch.float16,
                                               channels_last=channels_last)

        def copy_then_op():
            staged.copy_(pinned, non_blocking=True)
            return op(staged)

        if not torch.equal(op(view), copy_then_op()):
            raise AssertionError("zero-copy and copy-then-op outputs differ")
        zero = timing.kernel_samples(lambda: op(view), repeats, device)
        two = timing.kernel_samples(copy_then_op, repeats, device)
        zero_s, two_s = timing.median(zero), timing.median(two)
        rows.append({
            "dtype": "float16", "channels_last": channels_last, "images": n, "repeats": repeats,
            "zero_copy_s": zero_s, "copy_then_op_s": two_s,
            "zero_copy_s_range": [min(zero), max(zero)],
            "copy_then_op_s_range": [min(two), max(two)],
            "zero_copy_vs_copy_then_op": two_s / zero_s,
        })
    return rows


def table(row, zero_copy_rows):
    def cell(key):
        return text.spread(row[key], *row[key + "_range"])

    lines = ["", "h2d (%.1f MiB batches; GB/s, median (range) of %d repetitions)"
             % (row["batch_mib"], row["repeats"])]
    lines += text.columns(
        ["", "ring (Prefetcher)", "pin_memory().to()", "raw pinned copies, one stream",
         "ring / raw pinned copies", "ring / pin_memory().to()"],
        [["GB/s", cell("h2d_gbps"), cell("pin_memory_gbps"), cell("h2d_raw_gbps"),
          "%.2f" % row["h2d_fraction_of_raw"], "%.2f" % row["h2d_vs_pin_memory"]]])
    st = row.get("ring_stages")
    if st:
        lines.append("  the ring's producer: %.2f ms a batch; collation at %.1f GB/s beside the copies; "
                     "shares: collate %.2f, blocked %.2f, handoff %.2f (allocate, enqueue, publish)"
                     % (st["produce_ms_per_batch"], st["collate_gbps"], st["collate_share"],
                        st["blocked_share"], st["handoff_share"]))
    for z in zero_copy_rows:
        lines.append("  zero-copy fp16%s: %s ms | copy, then op %s ms | copy-then-op / zero-copy "
                     "%.2f (above 1: zero-copy is faster)" % (
                         " channels_last" if z["channels_last"] else "",
                         text.spread(z["zero_copy_s"] * 1e3, *(1e3 * t for t in z["zero_copy_s_range"]),
                                     fmt="%.3f"),
                         text.spread(z["copy_then_op_s"] * 1e3,
                                     *(1e3 * t for t in z["copy_then_op_s_range"]), fmt="%.3f"),
                         z["zero_copy_vs_copy_then_op"]))
    return "\n".join(lines)


def run(config):
    if config.device.type != "cuda":
        raise Skipped("no CUDA device: host-to-device copies do not apply; the CPU pipeline's copy "
                      "is in collate's 'whole epochs' column (pipeline_gbps) and in e2e")
    size, largest = config.image_size, max(config.batch_sizes)
    config.progress("h2d: %d-image batches through the ring, pin_memory().to(), raw pinned copies"
                    % largest)
    row = measure(config.device, largest * size ** 2 * 3, count=8 if config.quick else 20,
                  threads=config.threads)
    n = 64 if config.quick else largest
    config.progress("h2d: zero-copy (the op reading pinned memory) against copy, then op")
    zrows = measure_zero_copy(config.device, n=n, size=size, crop=size,
                              repeats=2 if config.quick else 5)
    metrics = {k: row[k] for k in ("h2d_gbps", "h2d_raw_gbps", "h2d_fraction_of_raw",
                                   "h2d_vs_pin_memory")}
    metrics["zero_copy_vs_copy_then_op"] = zrows[0]["zero_copy_vs_copy_then_op"]
    return SectionResult(row, metrics, table(row, zrows), details={"h2d_zero_copy": zrows})


SECTION = Section("h2d", "host -> device through the ring, vs pin_memory().to() and raw pinned "
                         "copies on one stream (GPU)", run)
