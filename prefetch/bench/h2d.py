"""Host -> device: batches through the Prefetcher's ring, against ``tensor.pin_memory().to(dev,
non_blocking=True)`` per batch, against a raw loop of pinned-memory copies of the same size
on one stream (the bus's speed as a plain loop reaches it), interleaved in the same run, with the
ring's copy timeline (each copy's start and end by CUDA timing events, beside the producer's
collation on the host clock); and the zero-copy variant (the fused op reading the batch straight
from pinned memory) against copy-then-op. CUDA only, but for :func:`model`: the ring on the host
backend's model of a GPU's copy engine, which any machine runs (the CPU run's part of the section).
"""
import statistics
import time

import torch

import prefetch
from prefetch._core.extension import C as _C
from prefetch._engine.pipeline import Pipeline, derived_fractions

from . import text, timing
from .constants import MEAN, STD
from .pinned import cuda_view_of_pinned
from .section import SINGLE_THREAD, Section, SectionResult, Skipped, resources

# The pipelines of the comparison, by the names their resources are recorded under.
RING = "ring"
PIN_MEMORY = "pin_memory().to() (%s)" % SINGLE_THREAD
RAW = "raw pinned copies (%s)" % SINGLE_THREAD

# Copies kept on a ring run's timeline: a round's batches (20 at most) fit, and results.json stays
# small (6 numbers a copy).
TIMELINE_CAPACITY = 64


def measure(device, batch_bytes=256 * 224 * 224 * 3, count=20, threads=1, repeats=5):
    """GB/s of `count` batches of `batch_bytes` per timed repetition: the ring (the Prefetcher's
    Pipeline with `threads` collation threads), ``pin_memory().to()`` and raw pinned copies,
    interleaved (one of each a round, `repeats` rounds, median and range), after two untimed
    rounds (allocations, the ring's first growth, and torch's pinned-memory cache filled for
    ``pin_memory()``, whose repeats ran 17–51 GB/s after one warm-up on an H200).
    Also the ring's stage counters over the timed rounds (:func:`ring_stages`) and the copy
    timeline of its last round (:func:`copy_timeline`)."""
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

    # The Prefetcher's own pipeline (prefetch._engine.pipeline, what Prefetcher.__iter__ runs),
    # so that its engine's copy timeline can be read; one epoch is the `count` batches.
    pipeline = Pipeline(device, num_threads=threads)
    source = [batches[i % 4] for i in range(count)]
    rounds = []  # each timed ring round's copy records, read outside the timed call (its setup)
    timed = [None]  # how many timed ring rounds have run (None: still warming up)

    def ring_setup():
        if timed[0] and len(rounds) < timed[0]:  # the timed round before this one
            rounds.append(pipeline.engine.copy_timeline())
        pipeline.engine.record_copies(TIMELINE_CAPACITY)  # this round's copies

    def ring(_=None):
        for _ in pipeline.run(source, epoch=0):
            pass
        if timed[0] is not None:
            timed[0] += 1

    calls = {RAW: raw, PIN_MEMORY: pin_each, RING: (ring_setup, ring)}
    order = []
    try:
        for _ in range(2):  # warm-up rounds, outside the stage counters below
            for setup, fn in ((None, raw), (None, pin_each), (ring_setup, ring)):
                fn(setup()) if setup else fn()
                timing.sync(device)
        before = pipeline.stats()
        timed[0] = 0  # from here on, each ring_setup keeps the timed round before it
        # Odd rounds in reverse: the ring follows pin_memory() in some rounds and itself in the
        # others (previous_calls below), so that what one call leaves behind is seen, not averaged
        # in: on the H200 (2026-11-29) each epoch's first batches collated 2-3x slower than the
        # rest, with the ring always timed right after pin_memory(), whose copy runs on torch's
        # OpenMP threads. And each call starts after SETTLE_S on idle cores: those threads spin
        # for milliseconds after pin_memory()'s last region, on the cores the ring's collation
        # then needs (the sixth run: the ring's epochs 36.9 GB/s after pin_memory(), 45.9 after
        # itself), a handicap of the order, not of either side. pin_memory()'s own pool then
        # wakes from sleep, as it does between a user's training steps.
        seconds = timing.interleaved(calls, repeats, device=device, warmup=0, order=order,
                                     alternate=True, settle=SETTLE_S)
        stages = ring_stages(before, pipeline.stats())
        timeline = pipeline.engine.copy_timeline()
        rounds.append(timeline)  # the last round's: no setup after it
    finally:
        pipeline.close()

    def gbps(key, name):
        s = seconds[name]
        return {key: batch_bytes * count / timing.median(s) / 1e9,
                key + "_range": [batch_bytes * count / max(s) / 1e9, batch_bytes * count / min(s) / 1e9]}

    out = {"batch_mib": batch_bytes / 2**20, "repeats": repeats, "batches": count, "threads": threads,
           "interleaved": True, "alternate_rounds": True, "settle_s": SETTLE_S}
    out.update(gbps("h2d_raw_gbps", RAW))
    out.update(gbps("pin_memory_gbps", PIN_MEMORY))
    out.update(gbps("h2d_gbps", RING))
    out["ring_stages"] = stages
    out["copy_timeline"] = copy_timeline(timeline)
    # Ratios within each round (the pairs ran next to each other), then their median and range.
    for key, other in (("h2d_fraction_of_raw", RAW), ("h2d_vs_pin_memory", PIN_MEMORY)):
        per_round = [o / r for r, o in zip(seconds[RING], seconds[other])]
        out[key] = timing.median(per_round)
        out[key + "_range"] = [min(per_round), max(per_round)]
    out["ring_by_previous"] = by_previous_call(
        timing.previous_calls(order, RING, before=RING), seconds[RING], rounds, batch_bytes * count)
    return out


EPOCH_START = 3  # an epoch's first batches: one per slot of the ring's default depth
# Seconds each timed call of the section waits first (timing.interleaved's settle): more than the
# few milliseconds libgomp's threads spin after a region, small against a round (~20 ms a call).
SETTLE_S = 0.05


def epoch_start_collation(records, first=EPOCH_START):
    """The median collation (ms) of an epoch's first `first` batches and of the rest, from one
    epoch's copy records (``Engine.copy_timeline()``, oldest first): ``(start_ms, steady_ms)``,
    None for a part with no batch."""
    ms = [1e3 * (r["collate_end_s"] - r["collate_start_s"]) for r in records]
    return (statistics.median(ms[:first]) if ms[:first] else None,
            statistics.median(ms[first:]) if ms[first:] else None)


def by_previous_call(previous, seconds, rounds, nbytes):
    """The ring's rounds grouped by the call timed just before each (`previous`, one per round,
    :func:`timing.previous_calls`): for each, the rounds, the median GB/s (`nbytes` a round over
    its `seconds`) and the median of its epochs' start and steady collation
    (:func:`epoch_start_collation` of each round's copy `rounds`; absent when no round has a
    timeline, as on a CPU)."""
    out = {}
    for i, prev in enumerate(previous):
        g = out.setdefault(str(prev), {"rounds": 0, "_gbps": [], "_start": [], "_steady": []})
        g["rounds"] += 1
        g["_gbps"].append(nbytes / seconds[i] / 1e9)
        if i < len(rounds) and rounds[i]:
            start, steady = epoch_start_collation(rounds[i])
            if start is not None and steady is not None:
                g["_start"].append(start)
                g["_steady"].append(steady)
    for g in out.values():
        g["gbps"] = statistics.median(g.pop("_gbps"))
        start, steady = g.pop("_start"), g.pop("_steady")
        if start:
            g["epoch_start_collate_ms"] = statistics.median(start)
            g["steady_collate_ms"] = statistics.median(steady)
    return out


def ring_stages(before, after):
    """Where the ring's epochs spent the producer's time, from two ``Prefetcher.stats()``: the
    collation's speed while the copies run (``collate_gbps``: against the `collate` section's,
    which has no copy beside it, it says whether the host's memory is shared out), and each
    stage's share of the producer's time (``slot_wait``: waiting for a ring slot's last copy,
    i.e. for the copy engine; ``blocked``: waiting for the consumer; ``handoff``: allocating the
    destination, enqueuing the copy, publishing). The first GPU runs measured the ring at 0.55 of
    raw pinned copies with the sum of the collation's and the copy's times per batch: this says
    which of the explanations holds."""
    d = {k: after.get(k, 0) - before.get(k, 0) for k in
         ("bytes_collated", "collate_s", "slot_wait_s", "allocate_s", "source_s",
          "producer_blocked_s", "transform_s", "produce_s", "batches", "wait_s", "consumer_s")}
    # The shares as stats() derives them, from these epochs' counters instead of the totals.
    fractions = derived_fractions(d)
    n = d["batches"]
    out = {
        "batches": n,
        "collate_gbps": d["bytes_collated"] / d["collate_s"] / 1e9 if d["collate_s"] > 0 else 0.0,
        "produce_ms_per_batch": 1e3 * d["produce_s"] / n if n else 0.0,
        "collate_ms_per_batch": 1e3 * d["collate_s"] / n if n else 0.0,
        "slot_wait_ms_per_batch": 1e3 * d["slot_wait_s"] / n if n else 0.0,
        "allocate_ms_per_batch": 1e3 * d["allocate_s"] / n if n else 0.0,
        "consumer_wait_fraction": fractions["wait_fraction"],
    }
    out.update((k, v) for k, v in fractions.items() if k.endswith("_share"))
    return out


# The timeline's columns, one row a copy, in milliseconds since the timeline started.
TIMELINE_COLUMNS = ["batch", "wait_start_ms", "collate_start_ms", "collate_end_ms",
                    "copy_start_ms", "copy_end_ms"]


def _overlap(a, b, intervals):
    """The length of [a, b] covered by `intervals` (which do not overlap one another: one
    producer collates one batch at a time)."""
    return sum(max(0.0, min(b, hi) - max(a, lo)) for lo, hi in intervals)


def copy_timeline(records):
    """A summary of ``Engine.copy_timeline()``'s records (one a batch, oldest first; times in
    seconds since the timeline began): the rows per ring slot (``slots``: slot -> rows of
    ``TIMELINE_COLUMNS``, ms, rounded to the microsecond), and what they say about the copy
    engine:

    - ``copy_ms``, ``copy_gbps``: a copy's median duration and speed while the ring runs (against
      raw pinned copies: whether the copies themselves are slowed, e.g. by the collation's traffic
      on the host's memory);
    - ``dma_busy_fraction``: the copies' summed time over the span from the first copy's start to
      the last one's end (near 1: the copy engine never waits, it is the bound; lower: it waits
      for the producer between copies);
    - ``gap_ms``: the median idle time between two consecutive copies;
    - ``copy_overlapped_by_collation``: the part of the copies' time during which the producer
      was collating a later batch (near 0 with a busy producer: the two stages run in series).
      On CUDA the host's and the stream's clocks agree within the origin event's wake-up (tens of
      µs; engine.h, CopyRecord);
    - ``per_batch_ms``: the span between the first and the last copy's end over the batches
      between them; ``wait_ms``, ``collate_ms``: the producer's median wait for a slot (and the
      destination's allocation) and collation, from the same records.

    None when there are no records."""
    if not records:
        return None
    ms = 1e3
    slots = {}
    for r in records:
        slots.setdefault(str(r["slot"]), []).append(
            [r["batch"]] + [round(ms * r[k], 3) for k in
                            ("wait_start_s", "collate_start_s", "collate_end_s", "copy_start_s",
                             "copy_end_s")])
    copies = [r["copy_end_s"] - r["copy_start_s"] for r in records]
    span = records[-1]["copy_end_s"] - records[0]["copy_start_s"]
    gaps = [b["copy_start_s"] - a["copy_end_s"] for a, b in zip(records, records[1:])]
    collations = [(r["collate_start_s"], r["collate_end_s"]) for r in records]
    covered = sum(_overlap(r["copy_start_s"], r["copy_end_s"], collations) for r in records)
    speeds = [r["bytes"] / c / 1e9 for r, c in zip(records, copies) if c > 0]
    return {
        "columns": TIMELINE_COLUMNS,
        "slots": slots,
        "batches": len(records),
        "copy_ms": ms * statistics.median(copies),
        "copy_gbps": statistics.median(speeds) if speeds else 0.0,
        "dma_busy_fraction": sum(copies) / span if span > 0 else 0.0,
        "gap_ms": ms * statistics.median(gaps) if gaps else 0.0,
        "copy_overlapped_by_collation": covered / sum(copies) if sum(copies) > 0 else 0.0,
        "per_batch_ms": (ms * (records[-1]["copy_end_s"] - records[0]["copy_end_s"]) / (len(records) - 1)
                         if len(records) > 1 else 0.0),
        "wait_ms": ms * statistics.median(r["collate_start_s"] - r["wait_start_s"] for r in records),
        "collate_ms": ms * statistics.median(r["collate_end_s"] - r["collate_start_s"] for r in records),
    }


# The model's settings: name -> the copy's time over the producer's work a batch. The issue's
# two: the copy the slower stage, and the collation the slower stage.
MODEL_SETTINGS = {"copy_slower": 2.0, "collation_slower": 0.5}


def model(threads, side=2048, count=24, repeats=5, settings=None, skip=4, depth=3):
    """The ring on the host backend's model of a GPU's copy engine (a copy moves its bytes at a
    set rate on the copy stream's thread, one at a time: ``_C._testing.model_copy_engine``),
    through the Prefetcher's pipeline on the CPU, with its batches routed through the ring and
    the copy as on CUDA: what the ring does when the copy is the slower stage and when the
    collation is. Its figure, ``per_batch_vs_slower``, is the steady-state time per batch (the
    median interval between the consumer's receipts, the first `skip` batches left out: the ring
    filling) over the slower of the two stages measured in the same epoch — the producer's work a
    batch and the copy's duration (medians, from the copy timeline; :func:`_model_epoch`): 1 when
    they overlap, up to 2 when they add up.

    A batch is one `side` x `side` uint8 tensor viewed transposed, so that its collation (element
    by element) is slow for its bytes: the model's copy is then mostly its sleep, not its memcpy,
    and the two stages can overlap on any free cores. The copy's rate for a setting (``settings``:
    name -> the copy's time over the producer's work; default MODEL_SETTINGS) is set from the
    producer's work measured first with copies at memcpy's speed. The settings run
    interleaved (one epoch of `count` batches each a round, `repeats` rounds after one warm-up).
    Returns {name: row} with each figure's median and range, and the calibration."""
    settings = MODEL_SETTINGS if settings is None else settings
    if count < skip + 3:
        raise ValueError("prefetch bench: the model needs count >= skip + 3 batches, got count=%d, "
                         "skip=%d" % (count, skip))
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, 256, (side, side), dtype=torch.uint8, generator=g).t() for _ in range(2)]
    source = [batches[i % 2] for i in range(count)]
    nbytes = side * side
    pipeline = Pipeline(torch.device("cpu"), depth=depth, num_threads=threads)
    try:
        engine = pipeline.engine
        _C._testing.model_copy_engine(engine, 0)  # through the ring; copies at memcpy's speed
        for _ in range(2):
            calibration = _model_epoch(pipeline, source, skip)
        work_s = calibration["producer_work_ms"] / 1e3
        epochs = {name: [] for name in settings}

        def setting(name, copy_over_work):
            def run():
                _C._testing.model_copy_engine(engine, nbytes / (copy_over_work * work_s))
                epochs[name].append(_model_epoch(pipeline, source, skip))
            return run

        order = []
        timing.interleaved({name: setting(name, v) for name, v in settings.items()}, repeats,
                           warmup=1, order=order)
    finally:
        pipeline.close()
    rows = {}
    for name, copy_over_work in settings.items():
        timed = epochs[name][-repeats:]  # the warm-up's epoch is the first
        row = {"copy_over_work": copy_over_work, "epochs": len(timed)}
        for key in timed[0]:
            values = [e[key] for e in timed]
            row[key] = statistics.median(values)
            row[key + "_range"] = [min(values), max(values)]
        rows[name] = row
    return {"settings": rows, "batch_mib": nbytes / 2**20, "batches": count, "repeats": repeats,
            "threads": threads, "depth": depth, "order": order,
            "calibration_producer_work_ms": calibration["producer_work_ms"]}


def _model_epoch(pipeline, source, skip):
    """One epoch of the model: the per-batch figures of :func:`model`, from the consumer's clock,
    the engine's copy timeline and the pipeline's stats. Steady-state figures are medians over the
    batches after the first `skip`, so that a stall of a shared machine (another process taking
    a core for a few milliseconds) does not count as the ring's; ``per_batch_mean_ms`` is the
    plain mean over the same batches, for comparison."""
    engine = pipeline.engine
    engine.record_copies(len(source))
    before = pipeline.stats()
    received = []
    t0 = time.perf_counter()
    for _ in pipeline.run(source, epoch=0):
        received.append(time.perf_counter())
    after = pipeline.stats()  # (the run ended: its producer has been joined)
    records = engine.copy_timeline()
    n = len(received)
    steady = records[skip:]
    # The producer's work a batch: from the end of its wait for a slot (and the destination's
    # allocation) to the start of the next batch's wait: the collation, the copy's enqueue,
    # publishing, and the Python around them (the source's next(), flattening, the batch's
    # rebuilding). Its wait for room (the consumer slower) falls there too: ``blocked_ms``.
    work = statistics.median(b["wait_start_s"] - a["collate_start_s"] for a, b in zip(steady, steady[1:]))
    copy = statistics.median(r["copy_end_s"] - r["copy_start_s"] for r in steady)
    per_batch = statistics.median(b - a for a, b in zip(received[skip:], received[skip + 1:]))
    return {
        "per_batch_ms": 1e3 * per_batch,
        "per_batch_mean_ms": 1e3 * (received[-1] - received[skip]) / (n - 1 - skip),
        "producer_work_ms": 1e3 * work,
        "collate_ms": 1e3 * statistics.median(r["collate_end_s"] - r["collate_start_s"] for r in steady),
        "slot_wait_ms": 1e3 * (after["slot_wait_s"] - before["slot_wait_s"]) / n,
        "blocked_ms": 1e3 * (after["producer_blocked_s"] - before["producer_blocked_s"]) / n,
        "copy_ms": 1e3 * copy,
        "first_batch_ms": 1e3 * (received[0] - t0),
        "per_batch_vs_slower": per_batch / max(work, copy),
        "per_batch_vs_sum": per_batch / (work + copy),
    }


def measure_zero_copy(device, n=256, size=224, crop=224, padding=4, repeats=5):
    """The zero-copy variant against copy-then-op, in the same run, interleaved (a sample of
    each a round, `repeats` rounds): the fused op reading the uint8 batch straight from pinned
    host memory across the bus (one pass), against a copy of the batch to the device followed by
    the op (two passes, the Prefetcher's path), for float16 output in both memory formats. >1 in
    `zero_copy_vs_copy_then_op` means zero-copy wins."""
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
        # Interleaved: a sample of each a round (each sample `inner` calls between CUDA events).
        timing.kernel_samples(lambda: op(view), 1, device)  # warm-ups
        timing.kernel_samples(copy_then_op, 1, device)
        zero, two = [], []
        for _ in range(repeats):
            zero += timing.kernel_samples(lambda: op(view), 1, device, warmup=0)
            two += timing.kernel_samples(copy_then_op, 1, device, warmup=0)
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

    lines = ["", "h2d (%.1f MiB batches; GB/s, median (range) of %d interleaved rounds; the ring "
                 "with %d threads)" % (row["batch_mib"], row["repeats"], row["threads"])]
    lines += text.columns(
        ["", "ring (Prefetcher)", "pin_memory().to() (1 thread)", "raw pinned copies, one stream",
         "ring / raw pinned copies", "ring / pin_memory().to()"],
        [["GB/s", cell("h2d_gbps"), cell("pin_memory_gbps"), cell("h2d_raw_gbps"),
          cell("h2d_fraction_of_raw"), cell("h2d_vs_pin_memory")]])
    st = row.get("ring_stages")
    if st:
        lines.append("  the ring's producer: %.2f ms a batch (collate %.2f, slot wait %.2f, allocate "
                     "%.2f); collation at %.1f GB/s beside the copies; shares: collate %.2f, slot "
                     "wait %.2f, blocked %.2f, handoff %.2f"
                     % (st["produce_ms_per_batch"], st["collate_ms_per_batch"],
                        st["slot_wait_ms_per_batch"], st["allocate_ms_per_batch"], st["collate_gbps"],
                        st["collate_share"], st.get("slot_wait_share", 0.0), st["blocked_share"],
                        st["handoff_share"]))
    tl = row.get("copy_timeline")
    if tl:
        lines.append(timeline_line(tl))
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


def timeline_line(tl):
    return ("  copy timeline (%d copies): %.3f ms a copy (%.1f GB/s), copy engine busy %.2f of the "
            "span, %.3f ms between copies, %.2f of the copies' time beside a collation; %.3f ms a "
            "batch" % (tl["batches"], tl["copy_ms"], tl["copy_gbps"], tl["dma_busy_fraction"],
                       tl["gap_ms"], tl["copy_overlapped_by_collation"], tl["per_batch_ms"]))


def model_table(m):
    lines = ["", "h2d, the ring on the host backend's model of a copy engine (%.1f MiB batches, %d "
                 "threads, depth %d; median (range) of %d interleaved rounds)"
             % (m["batch_mib"], m["threads"], m["depth"], m["repeats"])]
    rows = []
    for name, r in m["settings"].items():
        def cell(key, fmt="%.2f"):
            return text.spread(r[key], *r[key + "_range"], fmt=fmt)
        rows.append([name, "%.2f" % r["copy_over_work"], cell("producer_work_ms"), cell("copy_ms"),
                     cell("per_batch_ms"), cell("per_batch_vs_slower"), cell("per_batch_vs_sum")])
    lines += text.columns(["", "copy / work", "producer work ms", "copy ms", "ms a batch",
                           "/ slower stage (goal <= 1.1)", "/ their sum"], rows)
    return "\n".join(lines)


def run(config):
    size, largest = config.image_size, max(config.batch_sizes)
    n = config.workers
    if config.device.type != "cuda":
        config.progress("h2d: no CUDA device; the ring on the host backend's model of a copy engine")
        # 16 MiB batches (the GPU rows' are 36.8 MiB): with 4 MiB ones, the ~0.5-1 ms of Python a
        # batch (the consumer's turn on the GIL between the producer's batches) was 5-13% of the
        # collation-bound setting's time per batch on 2 shared cores; at 16 MiB, 1-2%.
        m = model(n, side=512 if config.quick else 4096, count=12 if config.quick else 24)
        metrics = {"ring_model_%s_vs_slower" % name: r["per_batch_vs_slower"]
                   for name, r in m["settings"].items()}
        return SectionResult(
            {"ring_model": m}, metrics, model_table(m),
            skipped={"copies": "no CUDA device: host-to-device copies do not apply; the CPU "
                               "pipeline's copy is in collate's 'whole epochs' column "
                               "(pipeline_gbps) and in e2e"},
            resources={"ring model": resources(threads=n)})
    config.progress("h2d: %d-image batches through the ring, pin_memory().to(), raw pinned copies"
                    % largest)
    row = measure(config.device, largest * size ** 2 * 3, count=8 if config.quick else 20, threads=n)
    zn = 64 if config.quick else largest
    config.progress("h2d: zero-copy (the op reading pinned memory) against copy, then op")
    zrows = measure_zero_copy(config.device, n=zn, size=size, crop=size, repeats=5)
    metrics = {k: row[k] for k in ("h2d_gbps", "h2d_raw_gbps", "h2d_fraction_of_raw",
                                   "h2d_vs_pin_memory")}
    if row["copy_timeline"]:
        metrics["h2d_dma_busy_fraction"] = row["copy_timeline"]["dma_busy_fraction"]
    metrics["zero_copy_vs_copy_then_op"] = zrows[0]["zero_copy_vs_copy_then_op"]
    return SectionResult(row, metrics, table(row, zrows), details={"h2d_zero_copy": zrows},
                         resources={RING: resources(threads=n), PIN_MEMORY: resources(threads=1),
                                    RAW: resources(threads=1)})


SECTION = Section("h2d", "host -> device through the ring, vs pin_memory().to() and raw pinned "
                         "copies on one stream, with the ring's copy timeline (GPU); on a CPU, the "
                         "ring on the host backend's model of a copy engine", run)
