"""Collation: per-sample uint8 images -> one batch, three ways, in the same run.

- engine: a Prefetcher on the CPU device over batches of ``Samples``, on N threads
  (``--workers``); ``collate_gbps`` is its own collation figure (``stats()``: ``bytes_collated``
  over ``collate_s``, timed in C++ around the thread pool's copies into the batch's buffer),
  ``pipeline_gbps`` the wall time of whole epochs (the producer thread, flattening, the engine
  and the consumer);
- ``default_collate, 1 thread (main process)``: ``torch.utils.data.default_collate`` on the same
  samples (fresh memory each batch, one intra-op thread, as in a DataLoader worker): single-
  threaded by nature, and named so (the same function on N cores is the workers section's usual
  pipeline);
- ``plain copy, 1 thread``: one single-threaded ``memcpy`` of the same number of bytes into a
  preallocated buffer (a reference, not a limit: the engine collates on N threads and can beat
  it; ``collate_vs_plain_copy`` is engine / plain copy, ``collate_fraction_of_copy`` its old
  name);
- ragged: the engine over images of different sizes (each side 0.75-1.25x the image size, as
  decoded JPEGs are), which cross as one ``prefetch.Ragged`` (values + offsets + sizes, no
  padding), against the same engine over fixed-size images: ``ragged_vs_fixed_collate``
  (collation bandwidth) and ``ragged_vs_fixed_pipeline`` (whole epochs, where the producer's
  Python for the shape table counts too);
- numpy: the same engine over the same samples as numpy arrays (views of the very same memory:
  the same bytes, what albumentations and OpenCV pipelines return) against the tensors:
  ``numpy_vs_tensor_pipeline`` (whole epochs: the arrays' conversion is the producer's Python)
  and ``numpy_vs_tensor_collate``.

Every comparison is timed in interleaved rounds (``timing.interleaved``: A, B, C, A, B, C...), a
round one epoch of ``batches`` batches of each, ``repeats`` rounds (at least 5) after one warm-up
round (the buffers' first touches); figures are medians (ranges) over the rounds and ratios
medians (ranges) of per-round ratios.
"""
import itertools

import numpy as np
import torch
from torch.utils.data import default_collate

import prefetch

from . import text, timing
from .section import SINGLE_THREAD, Section, SectionResult, resources

# The pipelines, as the rows and results.json's resources name them.
ENGINE = "engine"
DEFAULT_COLLATE = "default_collate, %s (main process)" % SINGLE_THREAD
PLAIN_COPY = "plain copy, %s" % SINGLE_THREAD

WARMUP = 1  # untimed rounds before the timed ones


def make_samples(n, image_size, seed=0):
    """`n` distinct HWC uint8 images (distinct memory, so no batch is served from cache)."""
    rng = np.random.default_rng(seed)
    return [torch.from_numpy(rng.integers(0, 256, size=(image_size, image_size, 3), dtype=np.uint8))
            for _ in range(n)]


def make_ragged_samples(n, image_size, seed=0):
    """`n` distinct HWC uint8 images, each side drawn in [0.75, 1.25] x `image_size`."""
    rng = np.random.default_rng(seed)
    lo, hi = int(0.75 * image_size), int(1.25 * image_size) + 1
    return [torch.from_numpy(rng.integers(0, 256, size=(int(rng.integers(lo, hi)),
                                                        int(rng.integers(lo, hi)), 3),
                                          dtype=np.uint8)) for _ in range(n)]


def _nbytes(sample):
    return sample.nbytes if isinstance(sample, np.ndarray) else sample.numel() * sample.element_size()


class EngineEpochs:
    """A CPU Prefetcher over ``groups`` (lists of samples) on ``num_threads`` threads; each call
    runs one epoch and appends the engine's collation seconds of it (``stats()``'s ``collate_s``)
    to ``collate_s``."""

    def __init__(self, groups, num_threads):
        self.pf = prefetch.Prefetcher([prefetch.Samples(g) for g in groups], device="cpu", depth=3,
                                      num_threads=num_threads)
        self.bytes = sum(_nbytes(t) for g in groups for t in g)
        self.collate_s = []

    def __call__(self):
        before = self.pf.stats()["collate_s"]
        for _ in self.pf:
            pass
        self.collate_s.append(self.pf.stats()["collate_s"] - before)

    def close(self):
        self.pf.close()


def engines_interleaved(group_sets, num_threads, repeats):
    """Epochs of one engine per entry of ``group_sets`` (name -> groups), interleaved; per name
    the per-round (collation GB/s, whole-epoch GB/s) lists."""
    engines = {name: EngineEpochs(groups, num_threads) for name, groups in group_sets.items()}
    try:
        wall = timing.interleaved(engines, repeats, warmup=WARMUP)
    finally:
        for e in engines.values():
            e.close()
    return {name: ([e.bytes / 1e9 / s for s in e.collate_s[WARMUP:]],
                   [e.bytes / 1e9 / s for s in wall[name]]) for name, e in engines.items()}


def _summary(values):
    s = timing.Summary.of(values)
    return {"median": s.median, "min": s.low, "max": s.high}


def _ratios(a, b):
    """Median, min and max of a[r] / b[r] over the rounds."""
    return _summary([x / y for x, y in zip(a, b)])


def measure_ragged(batch_size, image_size=224, batches=12, num_threads=2, repeats=5):
    """Collation of ragged batches against fixed-size ones, the same engine, interleaved rounds;
    ratios per round (median, min, max)."""
    fixed_pool = make_samples(batch_size * 2, image_size)
    ragged_pool = make_ragged_samples(batch_size * 2, image_size, seed=1)
    sets = {name: [pool[i % 2 * batch_size:(i % 2 + 1) * batch_size] for i in range(batches)]
            for name, pool in (("fixed", fixed_pool), ("ragged", ragged_pool))}
    got = engines_interleaved(sets, num_threads, repeats)
    (fixed_c, fixed_p), (ragged_c, ragged_p) = got["fixed"], got["ragged"]
    return {
        "batch_size": batch_size,
        "rounds": len(ragged_c),
        "ragged_collate_gbps": timing.median(ragged_c),
        "fixed_collate_gbps": timing.median(fixed_c),
        "ragged_vs_fixed_collate": _ratios(ragged_c, fixed_c),
        "ragged_vs_fixed_pipeline": _ratios(ragged_p, fixed_p),
    }


def measure_numpy(batch_size, image_size=224, batches=12, num_threads=2, repeats=5):
    """The engine over numpy samples against the same samples as tensors: one pool of images,
    the numpy groups views of the tensors' memory (the same bytes, the same cache footprint),
    interleaved rounds; GB/s of each and the per-round ratios."""
    pool = make_samples(batch_size * 2, image_size)
    tensors = [pool[i % 2 * batch_size:(i % 2 + 1) * batch_size] for i in range(batches)]
    arrays = [[t.numpy() for t in g] for g in tensors]
    got = engines_interleaved({"tensor": tensors, "numpy": arrays}, num_threads, repeats)
    (tensor_c, tensor_p), (numpy_c, numpy_p) = got["tensor"], got["numpy"]
    return {
        "batch_size": batch_size,
        "pairs": len(numpy_p),
        "tensor_pipeline_gbps": _summary(tensor_p),
        "numpy_pipeline_gbps": _summary(numpy_p),
        "tensor_collate_gbps": _summary(tensor_c),
        "numpy_collate_gbps": _summary(numpy_c),
        "numpy_vs_tensor_pipeline": _ratios(numpy_p, tensor_p),
        "numpy_vs_tensor_collate": _ratios(numpy_c, tensor_c),
    }


def measure(batch_size, image_size=224, batches=12, num_threads=2, repeats=5, samples=None):
    """GB/s of the engine's collation (on ``num_threads`` threads), default_collate on one thread
    and a one-thread plain copy, for one batch size: ``repeats`` interleaved rounds of one epoch
    of ``batches`` batches each.

    Every method reads the same footprint: two alternating groups of distinct samples (a copy
    reads two alternating sources), so none is served from cache more than the others."""
    pool = samples if samples is not None else make_samples(batch_size * 2, image_size)
    groups = [pool[i % 2 * batch_size:(i % 2 + 1) * batch_size] for i in range(batches)]
    nbytes = sum(t.numel() for t in groups[0])
    gb = nbytes * batches / 1e9  # one epoch

    rng = np.random.default_rng(1)
    sources = itertools.cycle([rng.integers(0, 256, size=nbytes, dtype=np.uint8) for _ in range(2)])
    dst = np.empty(nbytes, dtype=np.uint8)

    def plain_copy():
        for _ in range(batches):
            np.copyto(dst, next(sources))

    # default_collate writes fresh memory every batch; on this kind of VM first-touch faults
    # make it swing from ~3 GB/s to ~0.02 GB/s between runs (its best round is reported too).
    # Timed with one intra-op thread, as DataLoader workers run it (they call
    # torch.set_num_threads(1)). With 2 threads on the 2-core CI VM, torch.stack after a large
    # memcpy was seen spinning 0.5 s per batch, which is not its usual cost.
    def collate_default():
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            for g in groups:
                default_collate(g)
        finally:
            torch.set_num_threads(threads)

    engine = EngineEpochs(groups, num_threads)
    try:
        wall = timing.interleaved({ENGINE: engine, DEFAULT_COLLATE: collate_default,
                                   PLAIN_COPY: plain_copy}, repeats, warmup=WARMUP)
    finally:
        engine.close()
    collate = engine.collate_s[WARMUP:]
    default_s, copy_s, pipeline_s = wall[DEFAULT_COLLATE], wall[PLAIN_COPY], wall[ENGINE]

    def gbps(seconds):  # median, [slowest, fastest] round
        return gb / timing.median(seconds), [gb / max(seconds), gb / min(seconds)]

    row = {"batch_size": batch_size, "image_size": image_size, "batch_mib": nbytes / 2**20,
           "num_threads": num_threads, "rounds": len(collate), "batches_per_round": batches,
           "pipelines": {ENGINE: resources(threads=num_threads),
                         DEFAULT_COLLATE: resources(threads=1),
                         PLAIN_COPY: resources(threads=1)}}
    for key, seconds in (("collate_gbps", collate), ("pipeline_gbps", pipeline_s),
                         ("copy_gbps", copy_s), ("default_collate_gbps", default_s)):
        row[key], row[key + "_range"] = gbps(seconds)
    row["default_collate_best_gbps"] = gb / min(default_s)
    # Ratios per round (the same round's epochs, back to back): median and range.
    for key, r in (("collate_vs_default_collate", _ratios(default_s, collate)),
                   ("pipeline_vs_default_collate", _ratios(default_s, pipeline_s)),
                   ("collate_vs_plain_copy", _ratios(copy_s, collate))):
        row[key], row[key + "_range"] = r["median"], [r["min"], r["max"]]
    row["collate_fraction_of_copy"] = row["collate_vs_plain_copy"]  # the old name: above 1 it is no fraction
    row["ragged"] = measure_ragged(batch_size, image_size, batches, num_threads, repeats)
    row["numpy"] = measure_numpy(batch_size, image_size, batches, num_threads, repeats)
    return row


def _cell(row, key, fmt="%.2f"):
    """'median (slowest–fastest)' of a GB/s figure."""
    return text.spread(row[key], *row[key + "_range"], fmt=fmt)


def table(rows):
    r0 = rows[0]
    head = ("batch", "MiB", "engine collation", "engine whole epochs", PLAIN_COPY,
            DEFAULT_COLLATE, "engine / plain copy", "engine / default_collate")
    lines = ["", "collate (uint8 %dx%dx3 images; the engine on N = %d threads; GB/s, median (range) "
             "of %d interleaved rounds of %d batches each; ratios: medians (ranges) of per-round "
             "ratios)" % (r0["image_size"], r0["image_size"], r0["num_threads"], r0["rounds"],
                          r0["batches_per_round"])]
    lines += text.columns(head, [[
        "%d" % r["batch_size"], "%.1f" % r["batch_mib"],
        _cell(r, "collate_gbps"), _cell(r, "pipeline_gbps"), _cell(r, "copy_gbps"),
        _cell(r, "default_collate_gbps"), _cell(r, "collate_vs_plain_copy"),
        _cell(r, "collate_vs_default_collate", "%.1f")] for r in rows])
    lines.append("  whole epochs = the Prefetcher's wall time (producer, flattening, engine, consumer)"
                 " = pipeline_gbps; the plain copy and default_collate run on one thread by nature "
                 "(as in one DataLoader worker), the engine on %d, so it can beat them"
                 % r0["num_threads"])
    lines.append("  ragged images (sides 0.75-1.25x) vs fixed-size, same engine, interleaved "
                 "(ragged / fixed, median (range) of per-round ratios):")
    for r in rows:
        g = r["ragged"]
        lines.append("    batch %d: collation %.2f vs %.2f GB/s, ratio %.2f (%.2f–%.2f); whole "
                     "epochs ratio %.2f (%.2f–%.2f)" % (
                         r["batch_size"], g["ragged_collate_gbps"], g["fixed_collate_gbps"],
                         g["ragged_vs_fixed_collate"]["median"], g["ragged_vs_fixed_collate"]["min"],
                         g["ragged_vs_fixed_collate"]["max"], g["ragged_vs_fixed_pipeline"]["median"],
                         g["ragged_vs_fixed_pipeline"]["min"], g["ragged_vs_fixed_pipeline"]["max"]))
    lines.append("  numpy samples (views of the same images) vs tensors, same engine, interleaved "
                 "(GB/s median (range); numpy / tensor per round):")
    for r in rows:
        g = r["numpy"]

        def cell(key):
            return text.spread(g[key]["median"], g[key]["min"], g[key]["max"])
        lines.append("    batch %d: whole epochs %s numpy vs %s tensors, ratio %s; collation "
                     "ratio %s" % (r["batch_size"], cell("numpy_pipeline_gbps"),
                                   cell("tensor_pipeline_gbps"), cell("numpy_vs_tensor_pipeline"),
                                   cell("numpy_vs_tensor_collate")))
    return "\n".join(lines)


def sizes(config):
    """(batches per round, rounds): small with --quick, but never under 5 rounds."""
    return (4, 5) if config.quick else (16, 7)


def run(config):
    threads = config.workers  # N
    batches, repeats = sizes(config)
    rows = []
    for bs in config.batch_sizes:
        config.progress("collate: batch %d x %dx%dx3 uint8, %d threads" % (
            bs, config.image_size, config.image_size, threads))
        rows.append(measure(bs, config.image_size, batches, threads, repeats))
    main_row = max(rows, key=lambda r: r["batch_size"])
    metrics = {k: main_row[k] for k in ("collate_gbps", "copy_gbps", "pipeline_gbps",
                                        "collate_vs_default_collate", "collate_vs_plain_copy",
                                        "collate_fraction_of_copy")}
    metrics["ragged_vs_fixed_collate"] = main_row["ragged"]["ragged_vs_fixed_collate"]["median"]
    metrics["ragged_vs_fixed_pipeline"] = main_row["ragged"]["ragged_vs_fixed_pipeline"]["median"]
    metrics["numpy_vs_tensor_pipeline"] = main_row["numpy"]["numpy_vs_tensor_pipeline"]["median"]
    used = dict(main_row["pipelines"])
    used.update({"engine, %s samples" % kind: resources(threads=threads)
                 for kind in ("fixed", "ragged", "tensor", "numpy")})
    return SectionResult(rows, metrics, table(rows), resources=used)


SECTION = Section("collate", "samples -> engine -> batch buffer (CPU Prefetcher on N threads), vs "
                             "default_collate and a plain copy, each on one thread by nature", run)
