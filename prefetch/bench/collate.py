"""Collation: per-sample uint8 images -> one batch, three ways, in the same run.

- engine: a Prefetcher on the CPU device over batches of ``Samples``; ``collate_gbps`` is its
  own collation figure (``stats()``: ``bytes_collated`` over ``collate_s``, timed in C++ around
  the thread pool's copies into the batch's buffer), ``pipeline_gbps`` the wall time of whole
  epochs (the producer thread, flattening, the engine and the consumer);
- default_collate: ``torch.utils.data.default_collate`` on the same samples (fresh memory each
  batch, one intra-op thread, as in a DataLoader worker);
- plain copy: one single-threaded ``memcpy`` of the same number of bytes into a preallocated
  buffer (a reference, not a limit: the engine collates on several threads and can beat it;
  ``collate_vs_plain_copy`` is engine / plain copy, ``collate_fraction_of_copy`` its old name);
- ragged: the engine over images of different sizes (each side 0.75-1.25x the image size, as
  decoded JPEGs are), which cross as one ``prefetch.Ragged`` (values + offsets + sizes, no
  padding), against the same engine over fixed-size images in the same run, epochs alternated:
  ``ragged_vs_fixed_collate`` (collation bandwidth) and ``ragged_vs_fixed_pipeline`` (whole
  epochs, where the producer's Python for the shape table counts too);
- numpy: the same engine over the same samples as numpy arrays (views of the very same memory:
  the same bytes, what albumentations and OpenCV pipelines return), epochs alternated with the
  tensors': ``numpy_vs_tensor_pipeline`` (whole epochs: the arrays' conversion is the producer's
  Python) and ``numpy_vs_tensor_collate``, per pair of epochs (median, min, max).
"""
import itertools
import os
import time

import numpy as np
import torch
from torch.utils.data import default_collate

import prefetch

from . import text, timing
from .section import Section, SectionResult

# Epochs the engine and the pipeline are timed over (one sample each), after one untimed epoch.
EPOCHS = 5


def make_samples(n, image_size, seed=0):
    """`n` distinct HWC uint8 images (distinct memory, so no batch is served from cache)."""
    rng = np.random.default_rng(seed)
    return [torch.from_numpy(rng.integers(0, 256, size=(image_size, image_size, 3), dtype=np.uint8))
            for _ in range(n)]


def engine_samples(groups, num_threads, epochs=EPOCHS):
    """Per epoch over `groups` (lists of samples): the engine's collation seconds per batch
    (from the public ``Prefetcher.stats()``) and the pipeline's wall seconds per batch."""
    collate, wall = [], []
    with prefetch.Prefetcher([prefetch.Samples(g) for g in groups], device="cpu", depth=3,
                             num_threads=num_threads) as pf:
        for _ in pf:  # untimed: the batch buffers' first touches
            pass
        for _ in range(epochs):
            before = pf.stats()["collate_s"]
            t0 = time.perf_counter()
            for _ in pf:
                pass
            wall.append((time.perf_counter() - t0) / len(groups))
            collate.append((pf.stats()["collate_s"] - before) / len(groups))
    return collate, wall


def make_ragged_samples(n, image_size, seed=0):
    """`n` distinct HWC uint8 images, each side drawn in [0.75, 1.25] x `image_size`."""
    rng = np.random.default_rng(seed)
    lo, hi = int(0.75 * image_size), int(1.25 * image_size) + 1
    return [torch.from_numpy(rng.integers(0, 256, size=(int(rng.integers(lo, hi)),
                                                        int(rng.integers(lo, hi)), 3),
                                          dtype=np.uint8)) for _ in range(n)]


def _nbytes(sample):
    return sample.nbytes if isinstance(sample, np.ndarray) else sample.numel() * sample.element_size()


def engine_alternating(group_sets, num_threads, epochs=EPOCHS):
    """engine_samples for several sets of groups at once, their epochs alternated (A, B, A,
    B...), so that each pair of epochs sees the same load. Returns one (collate GB/s, pipeline
    GB/s) list of per-epoch figures per set."""
    pfs = [prefetch.Prefetcher([prefetch.Samples(g) for g in groups], device="cpu", depth=3,
                               num_threads=num_threads) for groups in group_sets]
    out = [([], []) for _ in group_sets]
    try:
        for pf in pfs:
            for _ in pf:  # untimed: the batch buffers' first touches
                pass
        for _ in range(epochs):
            for pf, groups, (collate, pipeline) in zip(pfs, group_sets, out):
                gb = sum(_nbytes(t) for g in groups for t in g) / 1e9
                before = pf.stats()["collate_s"]
                t0 = time.perf_counter()
                for _ in pf:
                    pass
                pipeline.append(gb / (time.perf_counter() - t0))
                collate.append(gb / (pf.stats()["collate_s"] - before))
    finally:
        for pf in pfs:
            pf.close()
    return out


def measure_ragged(batch_size, image_size=224, batches=12, num_threads=2):
    """Collation of ragged batches against fixed-size ones, the same engine, epochs
    alternated; ratios per pair of epochs (median, min, max)."""
    fixed_pool = make_samples(batch_size * 2, image_size)
    ragged_pool = make_ragged_samples(batch_size * 2, image_size, seed=1)
    sets = [[pool[i % 2 * batch_size:(i % 2 + 1) * batch_size] for i in range(batches)]
            for pool in (fixed_pool, ragged_pool)]
    (fixed_c, fixed_p), (ragged_c, ragged_p) = engine_alternating(sets, num_threads)

    def summary(values):
        return {"median": timing.median(values), "min": min(values), "max": max(values)}
    return {
        "batch_size": batch_size,
        "ragged_collate_gbps": timing.median(ragged_c),
        "fixed_collate_gbps": timing.median(fixed_c),
        "ragged_vs_fixed_collate": summary([r / f for r, f in zip(ragged_c, fixed_c)]),
        "ragged_vs_fixed_pipeline": summary([r / f for r, f in zip(ragged_p, fixed_p)]),
    }


def measure_numpy(batch_size, image_size=224, batches=12, num_threads=2, epochs=EPOCHS):
    """The engine over numpy samples against the same samples as tensors: one pool of images,
    the numpy groups views of the tensors' memory (the same bytes, the same cache footprint),
    epochs alternated (tensor, numpy, tensor...); GB/s of each and the per-pair ratios."""
    pool = make_samples(batch_size * 2, image_size)
    tensors = [pool[i % 2 * batch_size:(i % 2 + 1) * batch_size] for i in range(batches)]
    arrays = [[t.numpy() for t in g] for g in tensors]
    (tensor_c, tensor_p), (numpy_c, numpy_p) = engine_alternating([tensors, arrays], num_threads,
                                                                  epochs)

    def summary(values):
        return {"median": timing.median(values), "min": min(values), "max": max(values)}
    return {
        "batch_size": batch_size,
        "pairs": len(numpy_p),
        "tensor_pipeline_gbps": summary(tensor_p),
        "numpy_pipeline_gbps": summary(numpy_p),
        "tensor_collate_gbps": summary(tensor_c),
        "numpy_collate_gbps": summary(numpy_c),
        "numpy_vs_tensor_pipeline": summary([n / t for n, t in zip(numpy_p, tensor_p)]),
        "numpy_vs_tensor_collate": summary([n / t for n, t in zip(numpy_c, tensor_c)]),
    }


def measure(batch_size, image_size=224, batches=12, num_threads=2, samples=None):
    """GB/s of the engine's collation, default_collate and a plain copy, for one batch size.

    Every method reads the same footprint: two alternating groups of distinct samples (a copy
    reads two alternating sources), so none is served from cache more than the others."""
    pool = samples if samples is not None else make_samples(batch_size * 2, image_size)
    groups = [pool[i % 2 * batch_size:(i % 2 + 1) * batch_size] for i in range(batches)]
    nbytes = sum(t.numel() for t in groups[0])
    gb = nbytes / 1e9

    rng = np.random.default_rng(1)
    sources = itertools.cycle([rng.integers(0, 256, size=nbytes, dtype=np.uint8) for _ in range(2)])
    dst = np.empty(nbytes, dtype=np.uint8)
    copy_times = timing.samples(lambda: np.copyto(dst, next(sources)), batches)
    copy_s = timing.median(copy_times)

    # default_collate writes fresh memory every batch; on this kind of VM first-touch faults
    # make it swing from ~3 GB/s to ~0.02 GB/s between runs. The ratio uses its best batch, so
    # it is a lower bound on our advantage; the median is reported too.
    # Timed with one intra-op thread, as DataLoader workers run it (they call
    # torch.set_num_threads(1)). With 2 threads on the 2-core CI VM, torch.stack after a large
    # memcpy was seen spinning 0.5 s per batch (benchmarks/NOTES.md), which is not its usual cost.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        inputs = itertools.cycle(groups[:2])
        default_times = timing.samples(lambda: default_collate(next(inputs)), batches)
    finally:
        torch.set_num_threads(threads)
    default_s, default_best_s = timing.median(default_times), min(default_times)

    collate, wall = engine_samples(groups, num_threads)
    collate_s, pipeline_s = timing.median(collate), timing.median(wall)
    def gbps_range(seconds):  # [slowest, fastest] sample, GB/s
        return [gb / max(seconds), gb / min(seconds)]

    return {
        "batch_size": batch_size,
        "image_size": image_size,
        "batch_mib": nbytes / 2**20,
        "num_threads": num_threads,
        "samples": {"engine_epochs": len(collate), "copies": len(copy_times),
                    "default_collate_batches": len(default_times)},
        "collate_gbps_range": gbps_range(collate),
        "pipeline_gbps_range": gbps_range(wall),
        "copy_gbps_range": gbps_range(copy_times),
        "default_collate_gbps_range": gbps_range(default_times),
        "collate_gbps": gb / collate_s,
        "default_collate_gbps": gb / default_s,
        "default_collate_best_gbps": gb / default_best_s,
        "copy_gbps": gb / copy_s,
        "pipeline_gbps": gb / pipeline_s,
        "collate_vs_default_collate": default_best_s / collate_s,
        "collate_vs_plain_copy": copy_s / collate_s,
        "collate_fraction_of_copy": copy_s / collate_s,  # the old name: above 1 it is no fraction
        "ragged": measure_ragged(batch_size, image_size, batches, num_threads),
        "numpy": measure_numpy(batch_size, image_size, batches, num_threads),
    }


def _cell(row, key, fmt="%.2f"):
    """'median (slowest–fastest)' of a GB/s figure."""
    return text.spread(row[key], *row[key + "_range"], fmt=fmt)


def table(rows):
    r0 = rows[0]
    n = r0["samples"]
    head = ("batch", "MiB", "thr", "engine collation", "whole epochs", "plain copy, 1 thread",
            "default_collate", "engine / plain copy", "engine / default_collate's best")
    lines = ["", "collate (uint8 %dx%dx3 images; GB/s, median (range) over %d engine epochs, %d "
             "copies, %d default_collate batches)" % (r0["image_size"], r0["image_size"],
                                                     n["engine_epochs"], n["copies"],
                                                     n["default_collate_batches"]),
             ]
    lines += text.columns(head, [[
        "%d" % r["batch_size"], "%.1f" % r["batch_mib"], "%d" % r["num_threads"],
        _cell(r, "collate_gbps"), _cell(r, "pipeline_gbps"), _cell(r, "copy_gbps"),
        _cell(r, "default_collate_gbps"), "%.2f" % r["collate_vs_plain_copy"],
        "%.1f" % r["collate_vs_default_collate"]] for r in rows])
    lines.append("  whole epochs = the Prefetcher's wall time (producer, flattening, engine, consumer)"
                 " = pipeline_gbps; the plain copy runs on one thread, the engine on %d, so it can "
                 "beat it" % r0["num_threads"])
    lines.append("  ragged images (sides 0.75-1.25x) vs fixed-size, same engine, epochs alternated "
                 "(ragged / fixed, median (range) of per-pair ratios):")
    for r in rows:
        g = r["ragged"]
        lines.append("    batch %d: collation %.2f vs %.2f GB/s, ratio %.2f (%.2f–%.2f); whole "
                     "epochs ratio %.2f (%.2f–%.2f)" % (
                         r["batch_size"], g["ragged_collate_gbps"], g["fixed_collate_gbps"],
                         g["ragged_vs_fixed_collate"]["median"], g["ragged_vs_fixed_collate"]["min"],
                         g["ragged_vs_fixed_collate"]["max"], g["ragged_vs_fixed_pipeline"]["median"],
                         g["ragged_vs_fixed_pipeline"]["min"], g["ragged_vs_fixed_pipeline"]["max"]))
    lines.append("  numpy samples (views of the same images) vs tensors, same engine, epochs "
                 "alternated (GB/s median (range); numpy / tensor per pair):")
    for r in rows:
        g = r.get("numpy")
        if g is None:
            continue

        def cell(key):
            return text.spread(g[key]["median"], g[key]["min"], g[key]["max"])
        lines.append("    batch %d: whole epochs %s numpy vs %s tensors, ratio %s; collation "
                     "ratio %s" % (r["batch_size"], cell("numpy_pipeline_gbps"),
                                   cell("tensor_pipeline_gbps"), cell("numpy_vs_tensor_pipeline"),
                                   cell("numpy_vs_tensor_collate")))
    return "\n".join(lines)


def run(config):
    # The Prefetcher's default thread count (cores, at most 8), passed explicitly so that the
    # table prints the count that ran.
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = config.threads or max(1, min(8, cores or 1))
    batches = 6 if config.quick else 16
    rows = []
    for bs in config.batch_sizes:
        config.progress("collate: batch %d x %dx%dx3 uint8" % (bs, config.image_size, config.image_size))
        rows.append(measure(bs, config.image_size, batches, threads))
    main_row = max(rows, key=lambda r: r["batch_size"])
    metrics = {k: main_row[k] for k in ("collate_gbps", "copy_gbps", "pipeline_gbps",
                                        "collate_vs_default_collate", "collate_vs_plain_copy",
                                        "collate_fraction_of_copy")}
    metrics["ragged_vs_fixed_collate"] = main_row["ragged"]["ragged_vs_fixed_collate"]["median"]
    metrics["ragged_vs_fixed_pipeline"] = main_row["ragged"]["ragged_vs_fixed_pipeline"]["median"]
    metrics["numpy_vs_tensor_pipeline"] = main_row["numpy"]["numpy_vs_tensor_pipeline"]["median"]
    return SectionResult(rows, metrics, table(rows))


SECTION = Section("collate", "samples -> engine -> batch buffer (CPU Prefetcher), vs default_collate "
                             "and a one-thread plain copy", run)
