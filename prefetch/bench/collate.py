"""Collation: per-sample uint8 images -> one batch, three ways, in the same run.

- engine: the engine's collation step alone (``collate_only``: the same ring, pool and copy plan
  as every submitted batch, without the copy after it), and the whole CPU pipeline
  (``pipeline_gbps``: Prefetcher iteration, which on the host backend adds a second memcpy);
- default_collate: ``torch.utils.data.default_collate`` on the same samples (fresh memory each
  batch, one intra-op thread, as in a DataLoader worker);
- copy: one single-threaded ``memcpy`` of the same number of bytes into a preallocated buffer,
  the speed a collation cannot beat on one core.
"""
import statistics
import time

import numpy as np
import torch
from torch.utils.data import default_collate

import prefetch
from prefetch._tree import Leaf


def _times(fn, inputs, warmup=1):
    """Seconds of fn(x) for every x in `inputs`, after `warmup` untimed calls."""
    for x in inputs[:warmup]:
        fn(x)
    times = []
    for x in inputs:
        t0 = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - t0)
    return times


def _median_seconds(fn, inputs, warmup=1):
    return statistics.median(_times(fn, inputs, warmup))


def make_samples(n, image_size, seed=0):
    """`n` distinct HWC uint8 images (distinct memory, so no batch is served from cache)."""
    rng = np.random.default_rng(seed)
    return [torch.from_numpy(rng.integers(0, 256, size=(image_size, image_size, 3), dtype=np.uint8))
            for _ in range(n)]


def measure(batch_size, image_size=224, batches=12, num_threads=None, samples=None):
    """GB/s of the engine's collation, default_collate and a plain copy, for one batch size.

    Every method reads the same footprint: two alternating groups of distinct samples (a copy
    reads two alternating sources), so none is served from cache more than the others."""
    pool = samples if samples is not None else make_samples(batch_size * 2, image_size)
    groups = [pool[i % 2 * batch_size:(i % 2 + 1) * batch_size] for i in range(batches)]
    nbytes = sum(t.numel() for t in groups[0])
    gb = nbytes / 1e9

    rng = np.random.default_rng(1)
    sources = [rng.integers(0, 256, size=nbytes, dtype=np.uint8) for _ in range(2)]
    dst = np.empty_like(sources[0])
    copy_s = _median_seconds(lambda src: np.copyto(dst, src), [sources[i % 2] for i in range(batches)])

    # default_collate writes fresh memory every batch; on this kind of VM first-touch faults
    # make it swing from ~3 GB/s to ~0.02 GB/s between runs. The ratio uses its best batch, so
    # it is a lower bound on our advantage; the median is reported too.
    # Timed with one intra-op thread, as DataLoader workers run it (they call
    # torch.set_num_threads(1)). With 2 threads on the 2-core CI VM, torch.stack after a large
    # memcpy was seen spinning 0.5 s per batch (benchmarks/NOTES.md), which is not its usual cost.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        default_times = _times(default_collate, groups)
    finally:
        torch.set_num_threads(threads)
    default_s, default_best_s = statistics.median(default_times), min(default_times)

    with prefetch.Prefetcher([prefetch.Samples(g) for g in groups], device="cpu", depth=3,
                             num_threads=num_threads) as pf:
        engine = pf._engine
        leaves = [[Leaf("batch", prefetch.Samples(g))] for g in groups]
        collate_s = _median_seconds(engine.collate_only, leaves)
        for _ in pf:  # first epoch grows the ring
            pass
        t0 = time.perf_counter()
        for _ in pf:
            pass
        pipeline_s = (time.perf_counter() - t0) / len(groups)
        threads = engine.num_threads

    return {
        "batch_size": batch_size,
        "image_size": image_size,
        "batch_mib": nbytes / 2**20,
        "num_threads": threads,
        "collate_gbps": gb / collate_s,
        "default_collate_gbps": gb / default_s,
        "default_collate_best_gbps": gb / default_best_s,
        "copy_gbps": gb / copy_s,
        "pipeline_gbps": gb / pipeline_s,
        "collate_vs_default_collate": default_best_s / collate_s,
        "collate_fraction_of_copy": copy_s / collate_s,
    }


def run(batch_sizes=(64, 256), image_size=224, batches=12, num_threads=None, progress=None):
    rows = []
    for bs in batch_sizes:
        if progress:
            progress("collate: batch %d x %dx%dx3 uint8" % (bs, image_size, image_size))
        rows.append(measure(bs, image_size, batches, num_threads))
    return rows
