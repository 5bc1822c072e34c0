"""The ``workers`` section, DataLoader workers: whole epochs of pipelines with worker processes, timed
interleaved (``timing.interleaved``: A, B, C, A, B, C... in one run, at least 5 rounds), each
pipeline built once with persistent workers and warmed up one epoch, so worker start-up is not
what is compared. Every pipeline gets N (``--workers``): N DataLoader workers wherever there are
workers, N threads for prefetch's engine and decodes and for DALI; an epoch holds at least
``BATCHES_PER_WORKER`` batches per worker (``--quick``: one; the JPEG files repeated to fill
it), so no worker sits idle.

(1) Synthetic uint8 HWC images (a fresh tensor per ``__getitem__``, as a decode makes), for each
    batch size:
    - usual: DataLoader(default_collate), a per-sample random hflip with ``torch.flip`` in the
      worker, then in the main process ``.to(device)``, NCHW, float, /255, normalize (pinned
      memory and ``non_blocking`` on CUDA);
    - prefetch: Prefetcher(DataLoader(collate_fn=prefetch.collate.samples)) + FusedAugment;
    - prefetch_default_collate: Prefetcher(DataLoader(default_collate)) + the same FusedAugment;
    - engine: the in-process reference, a Prefetcher over ``prefetch.Samples`` batches made in
      the main process (no workers, no transform); its collation GB/s is ``stats()``'s
      ``bytes_collated`` over ``collate_s`` (as the collate section's ``collate_gbps``).
    - handoff: the "prefetch" pipeline without a transform (uint8 batches as delivered);
    - handoff_stored: the same over a dataset whose samples are already in memory (views of a
      stored array: no per-sample allocation, as the engine's in-process samples), with epochs
      four times longer — the hand-off itself, measured as the engine's collation is;
    The hand-off bandwidth is the uint8 image bytes per second the "prefetch" run delivers, and
    the same for "handoff": on the CPU device the first is bounded by FusedAugment running on the
    host (in the main process), the second by the hand-off and the main process's copy alone.
(2) JPEG: synthetic photo-like JPEGs (random sizes around 500x375, quality 90) decoded with PIL in
    the workers, RandomResizedCrop (torchvision's when importable, else its algorithm with PIL),
    then per pipeline:
    - usual: flip with ``torch.flip`` and an HWC uint8 tensor in the worker, normalize in the
      main process (as in (1));
    - usual_float: torchvision's recipe, everything in the worker: flip, ToTensor (float CHW /255),
      Normalize; the main process only moves the batch;
    - prefetch / prefetch_default_collate: an HWC uint8 tensor in the worker, flip + normalize
      in FusedAugment.
    Plus the CPU time one worker spends per image in each stage (measured in the main process
    with one intra-op thread, as workers run), and every pipeline's CPU time per image in the
    main process (``time.process_time``: all its threads) and in the workers (/proc, Linux).

Ratios are medians of per-repetition ratios (a repetition is one epoch of each pipeline, back to
back), with their min-max.

The datasets are in ``datasets``, the pipelines in ``pipelines``, the interleaved epochs, their
CPU time, rows and ratios in ``epochs`` (shared with the ``recipes`` section); this module sizes
the runs, builds each comparison, and makes the section's results, metrics and table.
"""
import os
import shutil
import tempfile
import time
from typing import Any, Dict, List

import torch
from torch.utils.data import default_collate

import prefetch

from .constants import MEAN, STD
from .datasets import (FreshImages, JpegBytes, JpegImages, StoredImages, pack_store,
                       random_resized_crop, to_hwc_tensor, write_jpegs)
from .epochs import (BATCHES_PER_WORKER, epoch_batches, epoch_files, interleave_then_close, ratio,
                     summarize)
from .pipelines import (DaliPipeline, EnginePipeline, dali_available, prefetch_pipeline,
                        store_pipeline, usual_pipeline, webdataset_available, webdataset_pipeline)
from .section import Section, SectionResult


# --- one worker's stages ---------------------------------------------------------------------

def stage_profile(paths: List[str], size: int, repeats: int = 1) -> Dict[str, Any]:
    """Mean CPU microseconds per image of one worker's stages (this thread's CPU time, one
    intra-op thread as in a DataLoader worker): decode, crop+resize, to-tensor, flip, and the
    float conversion + normalize of torchvision's recipe.

    Args:
        paths (list[str]): the JPEG files.
        size (int): the crop's side in pixels.
        repeats (int): passes over the files.

    Returns:
        dict: ``us_per_image`` (per stage), ``worker_us_per_image`` (per pipeline: the stages it
        runs in a worker, a flip counted half for a random one) and ``images`` (the count).

    Raises:
        ImportError: Pillow is not installed.
    """
    from PIL import Image

    crop, _ = random_resized_crop(size)
    mean, std = torch.tensor(MEAN).view(3, 1, 1), torch.tensor(STD).view(3, 1, 1)
    names = ("decode", "crop_resize", "to_tensor", "flip", "float_normalize")
    total = dict.fromkeys(names, 0.0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    clock = time.thread_time
    try:
        for _ in range(repeats):
            for path in paths:
                t0 = clock()
                with Image.open(path) as f:
                    img = f.convert("RGB")
                t1 = clock()
                img = crop(img)
                t2 = clock()
                x = to_hwc_tensor(img)
                t3 = clock()
                x = torch.flip(x, (1,))  # every sample flipped: the cost of one flip
                t4 = clock()
                x.permute(2, 0, 1).float().div_(255).sub_(mean).div_(std)
                t5 = clock()
                for name, dt in zip(names, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
                    total[name] += dt
    finally:
        torch.set_num_threads(threads)
    count = len(paths) * repeats
    us = {name: 1e6 * t / count for name, t in total.items()}
    # A worker's time per image in each pipeline: the "flip" pipeline flips half the samples.
    per_pipeline = {
        "prefetch": us["decode"] + us["crop_resize"] + us["to_tensor"],
        "usual": us["decode"] + us["crop_resize"] + us["to_tensor"] + 0.5 * us["flip"],
        "usual_float": (us["decode"] + us["crop_resize"] + us["to_tensor"] + 0.5 * us["flip"]
                        + us["float_normalize"]),
    }
    return {"us_per_image": us, "worker_us_per_image": per_pipeline, "images": count}


# --- the section -------------------------------------------------------------------------------

def sizes(config: Any) -> Dict[str, Any]:
    """Images per epoch and rounds: small in quick mode (but at least 5 interleaved rounds),
    under ~3 minutes in all on 2 cores.

    Args:
        config (section.Config): the run's.

    Returns:
        dict: ``synthetic_batches`` (None: :func:`synthetic_images`'s), ``jpegs`` (distinct
        files), ``repeats`` and ``jpeg_repeats`` (timed rounds), ``batches_per_worker``.
    """
    if config.quick:
        return {"synthetic_batches": 2, "jpegs": 2 * jpeg_batch_size(config), "repeats": 5,
                "jpeg_repeats": 5, "batches_per_worker": 1}
    # JPEG epochs are short (~0.3-0.6 s) and many: CPU-bound on every core, they swing most
    # with other load on the machine, and a pair of back-to-back epochs sees the same load.
    return {"synthetic_batches": None, "jpegs": 256, "repeats": 7, "jpeg_repeats": 11,
            "batches_per_worker": BATCHES_PER_WORKER}


def image_size(config: Any) -> int:
    """The images' side: ``--image-size``, at most 64 with --quick (a twelfth of 224²'s pixels
    keeps the quick run's every pipeline and round affordable)."""
    return min(config.image_size, 64) if config.quick else config.image_size


def jpeg_batch_size(config: Any) -> int:
    """The JPEG pipelines' batch: 64 when it is one of ``--batch-size``, else the smallest; at
    most 32 with --quick."""
    size = 64 if 64 in config.batch_sizes else min(config.batch_sizes)
    return min(size, 32) if config.quick else size


def synthetic_images(batch_size: int, image_size: int) -> int:
    """Images per synthetic epoch at default sizes: ~1,000-2,000 images of 224x224 (at least 4
    batches), scaled by the image's area."""
    per_epoch = max(4 * batch_size, int(1536 * (224 * 224) / (image_size * image_size)))
    return -(-per_epoch // batch_size) * batch_size


def run_synthetic(config: Any, batch_size: int, n_sizes: Dict[str, Any]) -> Dict[str, Any]:
    """Part (1): the synthetic uint8 pipelines at one batch size, interleaved.

    Args:
        config (section.Config): the run's (device, N, image size, progress).
        batch_size (int): images per batch.
        n_sizes (dict): :func:`sizes`'s.

    Returns:
        dict: the part's details: its ``pipelines`` rows (``epochs.summarize``), ``ratios``,
        and the hand-off and engine collation bandwidths (GB/s) and their ratios.
    """
    device, workers, size = config.device, config.workers, image_size(config)
    threads = workers  # N
    batches = epoch_batches(n_sizes["synthetic_batches"]
                            or synthetic_images(batch_size, size) // batch_size, workers,
                            n_sizes["batches_per_worker"])
    n = batches * batch_size
    config.progress("workers: synthetic %d images of %dx%dx3 uint8 per epoch, batch %d, %d workers"
                    % (n, size, size, batch_size, workers))
    pipelines = [
        usual_pipeline("usual", FreshImages(n, size, flip=True), batch_size, workers, device),
        prefetch_pipeline("prefetch", FreshImages(n, size, flip=False), batch_size, workers, device,
                          prefetch.collate.samples, threads),
        prefetch_pipeline("prefetch_default_collate", FreshImages(n, size, flip=False), batch_size,
                          workers, device, default_collate, threads),
        prefetch_pipeline("handoff", FreshImages(n, size, flip=False), batch_size, workers, device,
                          prefetch.collate.samples, threads, transform=False),
        prefetch_pipeline("handoff_stored", StoredImages(4 * n, size, flip=False), batch_size,
                          workers, device, prefetch.collate.samples, threads,
                          transform=False),
        EnginePipeline(batch_size, size, batches, device, threads),
    ]
    raw = interleave_then_close(pipelines, n_sizes["repeats"], device, config.progress,
                                "b%d " % batch_size)
    rows = summarize(raw, batch_size, size * size * 3)
    ratios = {
        "prefetch_vs_usual": ratio(raw, "prefetch", "usual"),
        "prefetch_default_collate_vs_usual": ratio(raw, "prefetch_default_collate", "usual"),
        "prefetch_vs_prefetch_default_collate": ratio(raw, "prefetch", "prefetch_default_collate"),
    }
    handoff = rows["prefetch"]["gbps"]["median"]
    handoff_only = rows["handoff"]["gbps"]["median"]
    handoff_stored = rows["handoff_stored"]["gbps"]["median"]
    engine = rows["engine"]["collate_gbps"]["median"]
    return {"batch_size": batch_size, "image_size": size, "workers": workers, "pipelines": rows,
            "ratios": ratios, "handoff_gbps": handoff, "handoff_only_gbps": handoff_only,
            "engine_collate_gbps": engine, "engine_pipeline_gbps": rows["engine"]["gbps"]["median"],
            "handoff_vs_engine_collate": handoff / engine,
            "handoff_only_vs_engine_collate": handoff_only / engine,
            "handoff_stored_gbps": handoff_stored,
            "handoff_stored_vs_engine_collate": handoff_stored / engine}



def run_jpeg(config: Any, batch_size: int, n_sizes: Dict[str, Any]) -> Dict[str, Any]:
    """Part (2): the JPEG pipelines (and the optional peers that run here), interleaved, on
    files written to a temporary folder and removed after.

    Args:
        config (section.Config): the run's (device, N, image size, progress).
        batch_size (int): images per batch.
        n_sizes (dict): :func:`sizes`'s.

    Returns:
        dict: the part's details: its ``pipelines`` rows, ``ratios``, the files' counts and mean
        size, the crop's implementation, the store's figures, why a peer was skipped, and one
        worker's stage profile (:func:`stage_profile`).

    Raises:
        ImportError: Pillow is not installed (:func:`run` checks first).
    """
    device, workers, size = config.device, config.workers, image_size(config)
    threads = workers  # N
    directory = tempfile.mkdtemp(prefix="prefetch-bench-jpeg-")
    try:
        t0 = time.perf_counter()
        files = write_jpegs(directory, n_sizes["jpegs"], scale=size / 224)
        mean_kb = sum(os.path.getsize(p) for p in files) / len(files) / 1e3
        paths = epoch_files(files, batch_size, workers, n_sizes["batches_per_worker"])
        config.progress("workers: jpeg %d files (%.0f kB on average, written in %.1f s), %d a "
                        "epoch, crop %d, batch %d, N = %d workers / threads"
                        % (len(files), mean_kb, time.perf_counter() - t0, len(paths), size,
                           batch_size, workers))
        profile = stage_profile(files, size)
        pipelines = [
            usual_pipeline("usual", JpegImages(paths, size, "flip"), batch_size, workers, device),
            usual_pipeline("usual_float", JpegImages(paths, size, "float"), batch_size, workers, device,
                           normalize=False),
            prefetch_pipeline("prefetch", JpegImages(paths, size, "uint8"), batch_size, workers,
                              device, prefetch.collate.samples, threads),
            prefetch_pipeline("prefetch_default_collate", JpegImages(paths, size, "uint8"), batch_size,
                              workers, device, default_collate, threads),
            # Workers only decode; the images (of their own sizes) cross as one Ragged and
            # FusedAugment draws each window and resizes it in the same pass as the rest.
            prefetch_pipeline("prefetch_resized", JpegImages(paths, size, "decoded"), batch_size,
                              workers, device, prefetch.collate.samples, threads,
                              aug=prefetch.FusedAugment(MEAN, STD, hflip=0.5, seed=0,
                                                        random_resized_crop=size)),
        ]
        store_info = None
        if prefetch.built_with_jpeg():
            def decoding():
                return prefetch.FusedAugment(MEAN, STD, hflip=0.5, seed=0, random_resized_crop=size,
                                             decode=True)
            # The source reads the files' bytes (no workers: they would only read files);
            # FusedAugment decodes only each window, resizes, flips and normalizes, in C++
            # threads of the main process.
            pipelines.append(prefetch_pipeline(
                "prefetch_decode", JpegBytes(paths), batch_size, 0, device,
                prefetch.collate.samples, threads, aug=decoding()))
            # The same with the files read by DataLoader workers (their bytes cross through
            # shared memory): what a user with a Dataset of bytes writes.
            pipelines.append(prefetch_pipeline(
                "prefetch_decode_workers", JpegBytes(paths), batch_size, workers, device,
                prefetch.collate.samples, threads, aug=decoding()))
            # The files packed once into a store, read by an ArrayLoader: no worker processes,
            # no Python per sample (the engine's threads copy each batch's byte ranges out of
            # the memmap).
            store_info, store = pack_store(paths, os.path.join(directory, "store"))
            pipelines.append(store_pipeline(store, batch_size, device, threads, decoding()))
        webdataset_skipped = None
        if webdataset_available():  # a peer's store: tar shards, optional (pip install webdataset)
            pipelines.append(webdataset_pipeline(paths, directory, batch_size, workers, device, size))
        else:
            webdataset_skipped = "webdataset is not installed (pip install webdataset)"
        dali_skipped = None
        if not dali_available():
            dali_skipped = "DALI is not installed (pip install nvidia-dali-cuda130)"
        elif device.type != "cpu":
            dali_skipped = "DALI's row is its CPU pipeline, run when the bench's device is the CPU"
        else:
            try:
                pipelines.append(DaliPipeline(paths, batch_size, size, threads))
            except Exception as e:  # noqa: BLE001 - an optional peer that cannot run here
                # (e.g. its codec library fails to load): the row is skipped, saying why.
                dali_skipped = "DALI could not build its pipeline: %s" % str(e).splitlines()[0][:200]
                config.progress("workers: jpeg: dali_cpu skipped (%s)" % dali_skipped)
        crop_impl = pipelines[0].loader.dataset.crop_impl
        raw = interleave_then_close(pipelines, n_sizes["jpeg_repeats"], device, config.progress,
                                    "jpeg ")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    rows = summarize(raw, batch_size, size * size * 3)
    ratios = {
        "prefetch_vs_usual": ratio(raw, "prefetch", "usual"),
        "prefetch_default_collate_vs_usual": ratio(raw, "prefetch_default_collate", "usual"),
        "prefetch_vs_usual_float": ratio(raw, "prefetch", "usual_float"),
        "prefetch_resized_vs_usual": ratio(raw, "prefetch_resized", "usual"),
        "usual_float_vs_usual": ratio(raw, "usual_float", "usual"),
    }
    for name in ("prefetch_decode", "prefetch_decode_workers", "prefetch_store", "dali_cpu"):
        if name in raw:
            ratios["%s_vs_usual" % name] = ratio(raw, name, "usual")
    for a, b in (("prefetch_decode", "dali_cpu"), ("prefetch_store", "dali_cpu"),
                 ("prefetch_store", "webdataset"), ("webdataset", "usual"),
                 ("prefetch_store", "prefetch_decode_workers"), ("prefetch_store", "prefetch_decode")):
        if a in raw and b in raw:
            ratios["%s_vs_%s" % (a, b)] = ratio(raw, a, b)
    stages = profile["us_per_image"]
    worker_total = profile["worker_us_per_image"]["prefetch"]
    return {"batch_size": batch_size, "image_size": size, "workers": workers, "files": len(paths),
            "distinct_files": len(files), "mean_file_kb": mean_kb, "crop": crop_impl,
            "pipelines": rows, "ratios": ratios,
            "dali_skipped": dali_skipped, "webdataset_skipped": webdataset_skipped,
            "store": store_info,
            "stage_us_per_image": stages, "worker_us_per_image": profile["worker_us_per_image"],
            "prefetch_worker_shares": {k: stages[k] / worker_total
                                       for k in ("decode", "crop_resize", "to_tensor")}}


def slower_reason(config: Dict[str, Any]) -> str:
    """Why a prefetch pipeline can trail in this run (the figures are whole epochs on shared
    cores)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = config.get("loadavg") or [None, None]
    why = ("on a CPU the main process (the consumer, the engine's threads, a decode on its "
           "threads) and the %d workers share the same %d cores" % (config["workers"], cores or 0))
    if config.get("device", "cpu").startswith("cuda"):
        why = "the main process's threads and the %d workers share %d cores" % (config["workers"], cores or 0)
    if None not in load:
        why += "; the load average was %.1f-%.1f, so other work took cycles too" % tuple(load)
    return why


def table(result: Dict[str, Any]) -> str:
    """The section's printed table.

    Args:
        result (dict): :func:`run`'s details (``synthetic``, ``jpeg``, ``config``).

    Returns:
        str: its lines.
    """
    load = result["config"]["loadavg"]
    lines = [] if None in load else [
        "", "workers: load average %.1f before, %.1f after (other work on the machine)" % tuple(load)]
    if result["jpeg"] is None:
        lines += ["", "workers: jpeg skipped: %s" % result["jpeg_skipped"]]
    for part in result["synthetic"] + ([result["jpeg"]] if result["jpeg"] is not None else []):
        jpeg = part is result["jpeg"]
        title = ("jpeg (%d files an epoch, of %d distinct, %.0f kB, PIL decode + RandomResizedCrop "
                 "%d [%s])" % (part["files"], part["distinct_files"], part["mean_file_kb"],
                               part["image_size"], part["crop"]) if jpeg else
                 "synthetic %dx%dx3 uint8" % (part["image_size"], part["image_size"]))
        lines += ["", "workers: %s, batch %d, N = %d workers / threads; images/s: median (range) of "
                  "interleaved rounds" % (title, part["batch_size"], part["workers"]),
                  "  pipeline                 | images/s median (range) | batches/s | main CPU us/img"
                  " | worker CPU us/img"]
        for name, r in part["pipelines"].items():
            ips = r["img_per_s"]
            worker = r.get("worker_cpu_us_per_img")
            lines.append("  %-24s | %7.0f (%7.0f–%7.0f) | %9.1f | %15.0f | %17s" % (
                name, ips["median"], ips["low"], ips["high"], r["batches_per_s"]["median"],
                r["main_cpu_us_per_img"], "-" if worker is None else "%.0f" % worker))
        lines.append("  ratios, a_vs_b = a's images/s / b's (median (range) of per-round ratios; "
                     "above 1: a is faster):")
        slower = []
        for name, s in part["ratios"].items():
            lines.append("  %-40s %5.2fx (%.2f–%.2f)" % (name, s["median"], s["low"], s["high"]))
            if name.startswith("prefetch") and s["median"] < 1:
                slower.append(name)
        if slower:
            lines.append("  %s below 1: %s" % (", ".join(slower), slower_reason(result["config"])))
        if jpeg:
            us = part["stage_us_per_image"]
            lines.append("  one worker, us/img: " + ", ".join("%s %.0f" % kv for kv in us.items()))
            st = part.get("store")
            if st:
                lines.append("  store: %d files packed in %.2f s (%.0f files/s, from the page "
                             "cache), %.0f kB for %.0f kB of files (%+.2f%%)" % (
                                 st["files"], st["pack_s"], st["pack_files_per_s"],
                                 st["store_bytes"] / 1e3, st["files_bytes"] / 1e3,
                                 100 * st["store_overhead"]))
        else:
            lines.append("  hand-off %.2f GB/s (prefetch run), %.2f GB/s (no transform), %.2f GB/s "
                         "(no transform, samples in memory); the engine's in-process collation "
                         "%.2f GB/s; hand-off / in-process collation: %.2f, %.2f, %.2f" % (
                             part["handoff_gbps"], part["handoff_only_gbps"],
                             part["handoff_stored_gbps"], part["engine_collate_gbps"],
                             part["handoff_vs_engine_collate"], part["handoff_only_vs_engine_collate"],
                             part["handoff_stored_vs_engine_collate"]))
    return "\n".join(lines)


def metrics(result: Dict[str, Any]) -> Dict[str, float]:
    """The section's flat metrics (results.json's ``metrics``, the names README.md lists).

    Args:
        result (dict): :func:`run`'s details.

    Returns:
        dict: each ratio's median per batch size (``<ratio>_b<B>``), images/s, the hand-off and
        collation GB/s and their ratios; ``jpeg_<ratio>`` and the store's figures when the JPEG
        part ran.
    """
    m = {}
    for part in result["synthetic"]:
        b = part["batch_size"]
        for name, s in part["ratios"].items():
            m["%s_b%d" % (name, b)] = s["median"]
        m["workers_prefetch_img_per_s_b%d" % b] = part["pipelines"]["prefetch"]["img_per_s"]["median"]
        m["workers_usual_img_per_s_b%d" % b] = part["pipelines"]["usual"]["img_per_s"]["median"]
        m["handoff_gbps_b%d" % b] = part["handoff_gbps"]
        m["engine_collate_gbps_b%d" % b] = part["engine_collate_gbps"]
        m["handoff_vs_engine_collate_b%d" % b] = part["handoff_vs_engine_collate"]
        m["handoff_only_gbps_b%d" % b] = part["handoff_only_gbps"]
        m["handoff_only_vs_engine_collate_b%d" % b] = part["handoff_only_vs_engine_collate"]
        m["handoff_stored_gbps_b%d" % b] = part["handoff_stored_gbps"]
        m["handoff_stored_vs_engine_collate_b%d" % b] = part["handoff_stored_vs_engine_collate"]
    if result["jpeg"] is None:
        return m
    for name, s in result["jpeg"]["ratios"].items():
        m["jpeg_%s" % name] = s["median"]
    m["jpeg_prefetch_img_per_s"] = result["jpeg"]["pipelines"]["prefetch"]["img_per_s"]["median"]
    if result["jpeg"].get("store"):
        m["jpeg_store_pack_files_per_s"] = result["jpeg"]["store"]["pack_files_per_s"]
        m["jpeg_store_overhead"] = result["jpeg"]["store"]["store_overhead"]
    return m


def run(config: Any) -> SectionResult:
    """Runs the section: part (1) at every ``--batch-size``, then part (2) when Pillow imports.

    Args:
        config (section.Config): the run's.

    Returns:
        SectionResult: the details, metrics, table, resources and skipped peers.
    """
    n_sizes = sizes(config)
    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    result = {"synthetic": [run_synthetic(config, b, n_sizes) for b in config.batch_sizes]}
    try:
        import PIL  # noqa: F401 - the JPEG pipelines decode with Pillow
    except ImportError:
        result["jpeg"] = None
        result["jpeg_skipped"] = "Pillow is not installed (pip install pillow, or the [bench] extra)"
    else:
        result["jpeg"] = run_jpeg(config, jpeg_batch_size(config), n_sizes)
    result["config"] = {"workers": config.workers, "repeats": n_sizes["repeats"],
                        "jpeg_repeats": n_sizes["jpeg_repeats"],
                        "device": str(config.device), "threads": config.workers,
                        "batches_per_worker": n_sizes["batches_per_worker"],
                        # 1-minute load average before and after: other work on the machine
                        "loadavg": [load_before and load_before[0],
                                    os.getloadavg()[0] if load_before else None],
                        "ratio": "median (min-max) of per-round ratios; a round is one epoch of "
                                 "each pipeline, back to back"}
    # The optional peers' rows that did not run, and why (absent keys are never placeholders).
    skipped = {}
    if result["jpeg"] is not None:
        for peer in ("webdataset", "dali"):
            why = result["jpeg"].get("%s_skipped" % peer)
            if why:
                skipped["jpeg %s" % ("dali_cpu" if peer == "dali" else peer)] = why
    return SectionResult(result, metrics(result), table(result), resources=used_resources(result),
                         skipped=skipped)


def used_resources(result: Dict[str, Any]) -> Dict[str, Dict[str, int]]:
    """results.json's resources of the section: ``synthetic bN: name`` and ``jpeg: name``."""
    parts = [("synthetic b%d" % p["batch_size"], p) for p in result["synthetic"]]
    if result["jpeg"] is not None:
        parts.append(("jpeg", result["jpeg"]))
    return {"%s: %s" % (label, name): row["resources"]
            for label, part in parts for name, row in part["pipelines"].items()}


SECTION = Section("workers", "whole epochs with DataLoader workers (synthetic uint8 and PIL JPEG): "
                             "the usual pipeline vs Prefetcher + FusedAugment, interleaved", run)
