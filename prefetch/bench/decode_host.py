"""decode_host: the GPU JPEG path's host work, in main-process CPU time per image, measured on any
machine with the fake GPU decoder.

What is timed, per batch of a packed store (``prefetch.pack``): what a loader's producer does on
the host before the copy when ``FusedAugment(decode=True)`` feeds a GPU decoder — the batch's
encoded bytes gathered out of the store's mapping (``host_batch``: the ArrayLoader's batch as its
producer gets it) and FusedAugment's host stage (the headers read, the windows drawn, the GPU
decoder's batched call, the windows cut and packed). The GPU decoder is
``FakeGpuBackend(pixels=False)`` on the meta device: its call decodes nothing on the host, as a
GPU decoder's decodes nothing there, and the windows' copies are meta copies (on a GPU they are
the device's work). What is left is the host's own work per image — what caps one process's
images/s whatever the GPU decodes. Not in it: the GPU decoder's own host work (nvJPEG's; zero
here), and on a GPU the launch of each window's copy (one kernel an image; a GPU run measures it).

Beside it, in the same interleaved rounds: the gather alone (the floor: the encoded bytes copied
once), the same host stage with the CPU decoder instead (what the GPU decoder spares the host),
and on a CUDA device with a GPU decoder installed (TorchCodec, torchvision), the host stage with
that decoder for real (its own host work and the launches included: process time, so not the
waits for the device).

Time, around each pass over the batches (one pass per pipeline a round, rounds interleaved by
``timing.interleaved``, after one warm-up pass each; median and range of the rounds, in µs an
image): ``time.process_time()`` (every thread of the process: the CPU decoder runs on torch's N
intra-op threads, and torch's OpenMP threads count while they spin after a parallel region — the
host stage's small float ops, e.g. the crop draws' ``exp``/``sqrt`` on ``[N, 10]``, go parallel
through MKL's vector functions), ``time.thread_time()`` (the calling thread alone: the producer's
own work, what caps one process's images/s) and the wall clock. Each pass starts after a pause
(``SETTLE_S``) so that the spin of the pass before is not charged to it. N =
``Config.workers``: torch's intra-op threads (set by the bench's main for every section); nothing
here has DataLoader workers.
"""
import os
import shutil
import tempfile
import time

import torch

import prefetch
from prefetch._core.tree import Leaf, PreparedBatch, flatten, host_batch, ragged_fields
from prefetch.ops import gpu_decoders
from prefetch.store.mapped import mapped_file
from prefetch.transforms import BatchPosition

from . import text, timing
from .constants import MEAN, STD
from .section import Section, SectionResult, Skipped, resources
GPU_PATH = "GPU path, fake decoder (host work)"
GATHER = "gather alone"
CPU_DECODER = "CPU decoder in the host stage"
REAL = "GPU path, %s (host work)"
# The pause before each timed pass (see measure's `timed`): libgomp's threads spin up to ~0.3 s
# after a region when OMP_WAIT_POLICY is unset (GOMP_SPINCOUNT), Intel OpenMP's 0.2 s
# (KMP_BLOCKTIME).
SETTLE_S = 0.3


def store_batches(store, batch_size, count=None):
    """The first ``count`` batches (all by default) an ArrayLoader(store, batch_size,
    shuffle=False)'s host path hands its producer, as :class:`PreparedBatch`: the encoded images
    as element ranges of the store's mapped values (the leaf carries the mapping's guard), their
    offsets packed from 0, their sizes' rows, the labels' rows (prefetch/array_loader.py's
    ``_GatherBatches``; ``tests/bench/test_decode_host.py`` checks they are the loader's)."""
    spec, leaves, _ = flatten((store.images, store.labels))
    spec, groups = ragged_fields(spec)
    (values_at, offsets_at, sizes_at), = groups
    values, offsets = leaves[values_at].value, leaves[offsets_at].value
    sizes = leaves[sizes_at].value
    counts = sizes.prod(1)
    mapped = mapped_file(values)
    guard = None if mapped is None else mapped.leaf_guard()
    n = len(store)
    total = -(-n // batch_size) if count is None else count
    out = []
    for b in range(total):
        idx = torch.arange(b * batch_size, min(n, (b + 1) * batch_size))
        batch = [Leaf(leaf.name, leaf.value, idx) for leaf in leaves]
        c = counts[idx]
        batch[values_at] = Leaf(leaves[values_at].name, values, torch.stack((offsets[idx], c), 1), guard)
        batch[offsets_at] = Leaf(leaves[offsets_at].name, torch.cumsum(c, 0) - c)
        batch[sizes_at] = Leaf(leaves[sizes_at].name, sizes, idx)
        out.append(PreparedBatch(spec, batch, []))
    return out


def host_stage(augment, batches, device, epoch=0):
    """What the producer does on the host for each batch: ``host_batch`` then the transform's host
    stage for ``device`` (FusedAugment's ``host_apply``). Returns the last batch it made."""
    out = None
    for index, batch in enumerate(batches):
        out = augment.host_apply(host_batch(batch), BatchPosition(epoch, index, 0), device)
    return out


def measure(n_images=512, batch_size=256, batches=2, repeats=5, scale=1.0, progress=print,
            threads=None, device=None):
    """Main-process CPU µs an image of the pipelines (module docstring), ``repeats`` interleaved
    rounds over ``batches`` batches of ``batch_size`` from a store of ``n_images`` photo-like JPEGs
    (``datasets.write_jpegs``: ~500x375, ~105 kB, times ``scale``); with a CUDA ``device`` and a GPU
    decoder installed, that decoder's pipeline too."""
    from .datasets import write_jpegs

    if not prefetch.built_with_jpeg():
        raise Skipped("prefetch was built without libjpeg-turbo (the store's headers and the CPU "
                      "decoder's row need it)")
    try:
        import PIL  # noqa: F401  (write_jpegs encodes with Pillow)
    except ImportError:
        raise Skipped("Pillow is not installed (the bench writes its JPEGs with it)") from None
    threads = threads or torch.get_num_threads()
    root = tempfile.mkdtemp(prefix="prefetch-decode-host-")
    try:
        os.makedirs(os.path.join(root, "files", "a"))
        progress("decode_host: %d JPEGs into a store" % n_images)
        write_jpegs(os.path.join(root, "files", "a"), n_images, scale=scale)
        store = prefetch.pack(os.path.join(root, "files"), os.path.join(root, "store"))
        chosen = store_batches(store, batch_size, min(batches, len(store) // batch_size))
        if not chosen:
            raise Skipped("%d images make no whole batch of %d" % (len(store), batch_size))
        augment = prefetch.FusedAugment(MEAN, STD, random_resized_crop=224, decode=True, seed=0)
        fake = gpu_decoders.FakeGpuBackend(pixels=False)
        meta = torch.device("meta")
        cpu, thread, wall = {}, {}, {}

        def timed(name, fn):
            cpu[name], thread[name], wall[name] = [], [], []

            def call():
                # Torch's OpenMP threads spin for a while after a parallel region (the CPU
                # decoder's row has many): without a pause, that spin would be process time
                # charged to the pipeline timed next. The pause is outside the three clocks.
                time.sleep(SETTLE_S)
                t0, c0, w0 = time.process_time(), time.thread_time(), time.perf_counter()
                fn()
                wall[name].append(time.perf_counter() - w0)
                thread[name].append(time.thread_time() - c0)
                cpu[name].append(time.process_time() - t0)
            return call

        def gpu_path():
            with gpu_decoders.registered(fake):
                host_stage(augment, chosen, meta)

        def cpu_decoder():
            # The CPU decoder chosen for the GPU path: the windows decoded in the host stage.
            with gpu_decoders.registered(gpu_decoders.CpuBackend()):
                host_stage(augment, chosen, torch.device("cuda", 0))

        calls = {GPU_PATH: timed(GPU_PATH, gpu_path),
                 GATHER: timed(GATHER, lambda: [host_batch(b) for b in chosen]),
                 CPU_DECODER: timed(CPU_DECODER, cpu_decoder)}
        device = torch.device(device or "cpu")
        real = gpu_decoders.select_gpu_decoder().name if device.type == "cuda" else "cpu"
        if real != "cpu":
            def gpu_decoder():
                host_stage(augment, chosen, device)
                torch.cuda.synchronize(device)  # this pass's device work ends inside its sample

            calls[REAL % real] = timed(REAL % real, gpu_decoder)
        progress("decode_host: %d interleaved rounds of %d batches of %d" % (repeats, len(chosen),
                                                                             batch_size))
        order = []
        timing.interleaved(calls, repeats, warmup=1, order=order)
        images = len(chosen) * batch_size
        row = {"num_images": len(store), "batch_size": batch_size, "batches": len(chosen),
               "repeats": repeats, "threads": threads,
               "clock": "time.process_time (all threads), time.thread_time (the calling thread), wall",
               "fake_calls_per_batch": fake.calls / ((repeats + 1) * len(chosen)),
               "mean_file_bytes": store.values.numel() / len(store), "order": order,
               "pipelines": {name: resources(threads=threads) for name in calls},
               "real_gpu_decoder": None if real == "cpu" else real}
        row.update((name, {}) for name in calls)
        for name in calls:
            for key, samples in (("cpu", cpu), ("thread_cpu", thread), ("wall", wall)):
                v = timing.Summary.of([x * 1e6 / images for x in samples[name][1:]])  # no warm-up
                row[name]["%s_us_per_image" % key] = v.median
                row[name]["%s_us_per_image_range" % key] = [v.low, v.high]
        return row
    finally:
        shutil.rmtree(root, ignore_errors=True)


def table(r):
    lines = ["", "decode_host (GPU JPEG path's host work per image: a store of %d JPEGs of %.0f kB, "
             "%d batches of %d, FusedAugment(decode=True, random_resized_crop=224); N = %d threads; "
             "%s; median (range) of %d interleaved rounds)"
             % (r["num_images"], r["mean_file_bytes"] / 1e3, r["batches"], r["batch_size"],
                r["threads"], r["clock"], r["repeats"])]
    lines += text.columns(
        ["pipeline", "process CPU µs / image", "producer thread's CPU µs / image", "wall µs / image"],
        [[name] + [text.spread(r[name]["%s_us_per_image" % k], *r[name]["%s_us_per_image_range" % k],
                               fmt="%.1f") for k in ("cpu", "thread_cpu", "wall")]
         for name in r["pipelines"]])
    lines.append("  fake GPU decoder calls per batch: %.2f (one batched call, no call per image)"
                 % r["fake_calls_per_batch"])
    lines.append("  producer thread: the thread that runs the host stage (a loader's producer; "
                 "here the bench's own), its CPU what caps one process's images/s (the GPU "
                 "path's goal: <= 30 µs an image); process: every thread, torch's "
                 "intra-op threads included (the CPU decoder's, and OpenMP's spin after a "
                 "parallel region)")
    return "\n".join(lines)


def run(config):
    quick = config.quick
    batch = max(config.batch_sizes)
    row = measure(n_images=batch if quick else 2 * batch, batch_size=batch, batches=1 if quick else 2,
                  repeats=5 if quick else 7, scale=0.5 if quick else 1.0, progress=config.progress,
                  threads=config.workers, device=config.device)
    metrics = {"decode_host_gpu_path_cpu_us_per_image": row[GPU_PATH]["cpu_us_per_image"],
               "decode_host_gpu_path_thread_cpu_us_per_image": row[GPU_PATH]["thread_cpu_us_per_image"],
               "decode_host_gather_cpu_us_per_image": row[GATHER]["cpu_us_per_image"],
               "decode_host_cpu_decoder_cpu_us_per_image": row[CPU_DECODER]["cpu_us_per_image"]}
    if row["real_gpu_decoder"]:
        metrics["decode_host_real_gpu_decoder_cpu_us_per_image"] = row[
            REAL % row["real_gpu_decoder"]]["cpu_us_per_image"]
    return SectionResult(row, metrics, table(row), resources=row["pipelines"])


SECTION = Section("decode_host", "the GPU JPEG path's host CPU per image (fake GPU decoder, store "
                                 "source) beside the gather alone and the CPU decoder", run)
