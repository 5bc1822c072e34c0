"""The pipelines the ``workers`` and ``recipes`` sections time (and ``e2e_pipelines`` reuses): each
built once (persistent DataLoader workers, one Prefetcher) and iterated epoch by epoch.

- the usual pipeline: a DataLoader with ``default_collate``, then in the main process ``.to``,
  NCHW, float, /255, normalize (:func:`usual_pipeline`, :func:`usual_to_device`);
- prefetch: a Prefetcher over a DataLoader with a transform (:func:`prefetch_pipeline`), an
  ArrayLoader over a store (:func:`store_pipeline`), and the engine's in-process reference
  (:class:`EnginePipeline`);
- the peers, optional: webdataset's tar shards read by DataLoader workers
  (:func:`webdataset_pipeline`) and NVIDIA DALI's CPU pipeline (:class:`DaliPipeline`).

Every pipeline records the resources it was built with (``section.resources``).
"""
import io
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, default_collate

import prefetch

from .constants import CLASSES, MEAN, STD
from .datasets import random_hflip, random_resized_crop, to_hwc_tensor, write_shards
from .section import resources


# --- the main process's part of the usual pipeline -------------------------------------------

_NORMALIZE = {}  # device -> (mean, std) [1, 3, 1, 1] on it, made once


def usual_to_device(images: torch.Tensor, device: torch.device) -> torch.Tensor:
    """What users write after the DataLoader: to the device, NCHW, float, /255, normalize. The
    mean and std tensors are made once per device: made per batch, torch.tensor(..., device=cuda)
    is a blocking host-to-device copy that would synchronise the loop at every batch.

    Args:
        images (Tensor[N, H, W, 3]): uint8 (pinned on CUDA for a non-blocking copy).
        device (torch.device): where to.

    Returns:
        Tensor[N, 3, H, W]: float32 on ``device``, ``(x / 255 - MEAN) / STD`` per channel.
    """
    x = images.to(device, non_blocking=True).permute(0, 3, 1, 2).float().div_(255)
    key = torch.device(device)
    if key not in _NORMALIZE:
        _NORMALIZE[key] = (torch.tensor(MEAN, device=key).view(1, 3, 1, 1),
                           torch.tensor(STD, device=key).view(1, 3, 1, 1))
    mean, std = _NORMALIZE[key]
    return x.sub_(mean).div_(std)


# --- pipelines ---------------------------------------------------------------------------------

class Pipeline:
    """One pipeline built once (persistent workers, one Prefetcher), iterated epoch by epoch;
    ``resources`` is what it was built with (``section.resources``: DataLoader workers, threads
    in the main process).

    Args:
        name (str): its name in the section's rows and ratios.
        batches (callable): returns a new iterator over one epoch's image batches (tensors whose
            first dimension is the batch).
        loader: the DataLoader (or other loader) it reads, kept for the section to inspect.
        prefetcher: its Prefetcher or ArrayLoader, closed by :meth:`close`.
        workers (int): its DataLoader workers.
        threads (int): its threads in the main process.
    """

    def __init__(self, name: str, batches: Callable[[], Iterator[torch.Tensor]],
                 loader: Any = None, prefetcher: Any = None, *, workers: int = 0, threads: int):
        self.name, self._batches = name, batches
        self.loader, self.prefetcher = loader, prefetcher
        self.resources = resources(workers=workers, threads=threads)

    def epoch(self) -> int:
        """Runs one epoch.

        Returns:
            int: the images it delivered.
        """
        n = 0
        for images in self._batches():
            n += images.shape[0]
        return n

    def close(self) -> None:
        """Closes its Prefetcher (its threads and buffers) and lets go of its loader (and workers)."""
        if self.prefetcher is not None:
            self.prefetcher.close()
        self.prefetcher = self.loader = self._batches = None


def _loader(ds, batch_size, workers, collate_fn, pin_memory=False):
    return DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=workers,
                      collate_fn=collate_fn, persistent_workers=workers > 0, pin_memory=pin_memory)


def usual_pipeline(name: str, ds: Any, batch_size: int, workers: int, device: torch.device,
                   normalize: bool = True) -> Pipeline:
    """The usual pipeline: ``workers`` DataLoader workers; the main process's ``.to``, ToDtype
    and Normalize on torch's intra-op threads (N during a bench run).

    Args:
        name (str): the pipeline's name.
        ds (Dataset): samples ``(Tensor[H, W, 3] uint8, label)`` (any image with ``normalize``
            off), shuffled, ``default_collate``'d; ``pin_memory`` on CUDA.
        batch_size (int): images per batch.
        workers (int): DataLoader workers (persistent when above 0).
        device (torch.device): where the batches go.
        normalize (bool): :func:`usual_to_device` on each batch; off, the batch is only moved.

    Returns:
        Pipeline: its batches ``Tensor[B, 3, H, W]`` float32 normalized (or the collated batch
        as it is), its labels moved to ``device`` too.
    """
    # pin_memory on CUDA, as users write it for non_blocking copies (the Prefetcher pins itself).
    loader = _loader(ds, batch_size, workers, default_collate, pin_memory=device.type == "cuda")

    def batches():
        for images, labels in loader:
            labels.to(device, non_blocking=True)
            yield usual_to_device(images, device) if normalize else images.to(device, non_blocking=True)
    return Pipeline(name, batches, loader=loader, workers=workers, threads=torch.get_num_threads())


def prefetch_pipeline(name: str, ds: Any, batch_size: int, workers: int, device: torch.device,
                      collate_fn: Callable, threads: int, transform: bool = True,
                      aug: Optional[Any] = None) -> Pipeline:
    """prefetch's pipeline: a Prefetcher with ``threads`` threads over a shuffled DataLoader.

    Args:
        name (str): the pipeline's name.
        ds (Dataset): its samples (uint8 HWC images, or encoded bytes for a decoding ``aug``).
        batch_size (int): images per batch.
        workers (int): DataLoader workers (persistent when above 0).
        device (torch.device): the Prefetcher's device.
        collate_fn (callable): the DataLoader's (``prefetch.collate.samples`` or
            ``default_collate``).
        threads (int): the Prefetcher's ``num_threads``.
        transform (bool): without ``aug``, ``FusedAugment(MEAN, STD, hflip=0.5, seed=0)``; off, no
            transform (the batches as delivered).
        aug: the Prefetcher's transform, instead of the default one.

    Returns:
        Pipeline: its batches are the Prefetcher's images.
    """
    loader = _loader(ds, batch_size, workers, collate_fn)
    if aug is None and transform:
        aug = prefetch.FusedAugment(MEAN, STD, hflip=0.5, seed=0)
    pf = prefetch.Prefetcher(loader, device=device, num_threads=threads, transform=aug)

    def batches():
        for images, _ in pf:
            yield images
    return Pipeline(name, batches, loader=loader, prefetcher=pf, workers=workers, threads=threads)


def webdataset_available() -> bool:
    """Whether ``webdataset`` imports (the optional peer's row)."""
    try:
        import webdataset  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return False
    return True


class _WdsDecode:
    """A webdataset sample as the usual pipeline's JpegImages("flip") makes it: PIL decode,
    RandomResizedCrop, HWC uint8, a random flip (picklable, for the workers)."""

    def __init__(self, size):
        self.crop, _ = random_resized_crop(size)

    def __call__(self, sample):
        from PIL import Image

        with Image.open(io.BytesIO(sample["jpg"])) as f:
            img = f.convert("RGB")
        return random_hflip(to_hwc_tensor(self.crop(img)), 1), int(sample["cls"])


def webdataset_pipeline(paths: Sequence[str], directory: str, batch_size: int, workers: int,
                        device: torch.device, size: int) -> Pipeline:
    """webdataset's usual use: tar shards read sequentially by DataLoader workers (a shuffle
    buffer, one shard list per worker), PIL decode + the same transforms in the workers,
    default_collate, normalize in the main process.

    Args:
        paths (Sequence[str]): the JPEG files, written into ``max(2, 2 * workers)`` shards.
        directory (str): where the shards go.
        batch_size (int): images per batch.
        workers (int): DataLoader workers.
        device (torch.device): where the batches go.
        size (int): the crop's side in pixels.

    Returns:
        Pipeline: named ``webdataset``; its batches ``Tensor[B, 3, size, size]`` float32
        normalized.

    Raises:
        ImportError: webdataset is not installed (:func:`webdataset_available`).
    """
    import webdataset as wds

    urls = write_shards(paths, directory, max(2, 2 * workers))
    ds = (wds.WebDataset(urls, shardshuffle=len(urls), nodesplitter=None, seed=0, empty_check=False)
          .shuffle(256).map(_WdsDecode(size)))
    loader = DataLoader(ds, batch_size=batch_size, num_workers=workers, collate_fn=default_collate,
                        persistent_workers=workers > 0, pin_memory=device.type == "cuda")

    def batches():
        for images, labels in loader:
            labels.to(device, non_blocking=True)
            yield usual_to_device(images, device)
    return Pipeline("webdataset", batches, loader=loader, workers=workers,
                    threads=torch.get_num_threads())


def store_pipeline(store: Any, batch_size: int, device: torch.device, threads: int,
                   aug: Any) -> Pipeline:
    """An ArrayLoader over a store (``datasets.pack_store``): no worker processes, no Python per
    sample.

    Args:
        store: the opened store.
        batch_size (int): images per batch (shuffled, seed 0).
        device (torch.device): the ArrayLoader's device.
        threads (int): its ``num_threads``.
        aug: its transform (one that decodes the stored bytes).

    Returns:
        Pipeline: named ``prefetch_store``.
    """
    loader = prefetch.ArrayLoader(store, batch_size, shuffle=True, seed=0, device=device,
                                  num_threads=threads, transform=aug)

    def batches():
        for images, _ in loader:
            yield images
    return Pipeline("prefetch_store", batches, prefetcher=loader, threads=threads)


class EnginePipeline(Pipeline):
    """The in-process reference: a Prefetcher over Samples batches made in the main process (no
    workers, no transform); ``collates`` holds each epoch's collated bytes and seconds
    (``stats()``'s ``bytes_collated`` and ``collate_s``).

    Args:
        batch_size (int): images per batch.
        image_size (int): the images' side (uint8 ``[image_size, image_size, 3]``).
        batches (int): batches per epoch (two groups of samples, alternating).
        device (torch.device): the Prefetcher's device.
        threads (int): its ``num_threads``.
    """

    def __init__(self, batch_size: int, image_size: int, batches: int, device: torch.device,
                 threads: int):
        from .collate import make_samples

        pool = make_samples(2 * batch_size, image_size)  # two alternating groups, as collate does
        groups = [prefetch.Samples(pool[i % 2 * batch_size:(i % 2 + 1) * batch_size])
                  for i in range(batches)]
        pf = prefetch.Prefetcher(groups, device=device, num_threads=threads)
        super().__init__("engine", lambda: iter(pf), prefetcher=pf, threads=threads)
        self.collates = []  # (bytes, seconds) of each epoch's collation, in order

    def epoch(self) -> int:
        """:meth:`Pipeline.epoch`, recording the epoch's collation in ``collates``."""
        before = self.prefetcher.stats()
        n = super().epoch()
        after = self.prefetcher.stats()
        self.collates.append((after["bytes_collated"] - before["bytes_collated"],
                              after["collate_s"] - before["collate_s"]))
        return n


# The batches a DALI pipeline schedules ahead of the one it hands out. 1: at depth 2 DALI's
# executor still computed one iteration past an epoch's last scheduled one (a process used 0.13 s
# of CPU in the 0.1 s after each epoch; none at depth 1).
DALI_QUEUE = 1


def dali_epoch_outputs(pipe, iterations: int, convert, queue: int = DALI_QUEUE):
    """One epoch of a built DALI pipeline whose ``prefetch_queue_depth`` is ``queue``, scheduled
    by hand (``schedule_run``, not ``run``): yields ``convert(pipe.outputs())`` ``iterations``
    times. Each batch's outputs are converted (copied out of DALI's buffers), released, and the
    next run scheduled before the value is yielded, so DALI computes the next batch while the
    consumer uses this one; exactly ``iterations`` runs are scheduled, at most ``queue`` ahead of
    the one handed out.

    Why by hand: ``pipe.run()`` schedules the next iteration after every batch, so DALI kept
    computing batches past an epoch's end, during the next pipeline's timed epoch: it stole CPU
    from the usual pipeline timed after it (827 -> 700 images/s on 2 cores) and started its own
    epochs with half their 4 batches done (1,050-1,200 images/s interleaved against ~880 alone).
    Used by :class:`DaliPipeline` and by the SSL bench's DALI peer (benchmarks/ssl_views_bench.py).
    """
    scheduled = 0
    while scheduled < min(queue, iterations):
        pipe.schedule_run()
        scheduled += 1
    for _ in range(iterations):
        out = pipe.outputs()
        try:
            value = convert(out)
        finally:
            pipe.release_outputs()
        if scheduled < iterations:
            pipe.schedule_run()
            scheduled += 1
        yield value


class DaliPipeline(Pipeline):
    """NVIDIA DALI's CPU pipeline on the same files: readers.file -> decoders.image_random_crop
    (libjpeg-turbo, only the window decoded) -> resize -> [DALI's trivial_augment_wide, bilinear,
    fill 0, when `trivial_augment`] -> crop_mirror_normalize (random mirror, float CHW), on
    `threads` CPU threads (device_id=None). Needs `pip install nvidia-dali-cuda130` (optional: the
    sections skip this row without it).

    Args:
        paths (Sequence[str]): the JPEG files (an epoch: all of them, shuffled; file ``i``'s label
            ``i % CLASSES``).
        batch_size (int): images per batch.
        size (int): the output's side in pixels.
        threads (int): DALI's ``num_threads``.
        trivial_augment (bool): DALI's ``trivial_augment_wide`` after the resize.

    Raises:
        ImportError: DALI is not installed (:func:`dali_available`); DALI's own errors when it
            cannot build its pipeline here.
    """

    def __init__(self, paths: Sequence[str], batch_size: int, size: int, threads: int,
                 trivial_augment: bool = False):
        from nvidia.dali import fn, pipeline_def, types

        @pipeline_def(batch_size=batch_size, num_threads=threads, device_id=None, seed=0,
                      prefetch_queue_depth=self.QUEUE, enable_conditionals=trivial_augment)
        def pipe():
            jpegs, labels = fn.readers.file(files=paths, labels=[i % CLASSES for i in range(len(paths))],
                                            random_shuffle=True, name="reader")
            images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                                   random_area=(0.08, 1.0),
                                                   random_aspect_ratio=(3 / 4, 4 / 3))
            images = fn.resize(images, resize_x=size, resize_y=size)
            if trivial_augment:  # its automatic augmentations take CPU samples since DALI 1.25
                from nvidia.dali.auto_aug import trivial_augment as ta

                images = ta.trivial_augment_wide(images, fill_value=0,
                                                 interp_type=types.INTERP_LINEAR)
            images = fn.crop_mirror_normalize(
                images, dtype=types.FLOAT, output_layout="CHW", mirror=fn.random.coin_flip(),
                mean=[m * 255 for m in MEAN], std=[s * 255 for s in STD])
            return images, labels

        self._pipe = pipe()
        self._pipe.build()
        self._iterations = -(-len(paths) // batch_size)
        super().__init__("dali_cpu", self._batches_of_epoch, threads=threads)

    # DALI's prefetch_queue_depth, and the batches an epoch schedules ahead of the one it takes
    # (dali_epoch_outputs says why 1).
    QUEUE = DALI_QUEUE

    def _batches_of_epoch(self):
        # Into a torch tensor, as DALI's PyTorch iterator copies it (a training step needs one).
        yield from dali_epoch_outputs(self._pipe, self._iterations,
                                      lambda out: torch.from_numpy(np.array(out[0].as_tensor())),
                                      self.QUEUE)

    def close(self) -> None:
        """Lets go of DALI's pipeline (its threads), then :meth:`Pipeline.close`."""
        self._pipe = None
        super().close()


def dali_available() -> bool:
    """Whether NVIDIA DALI imports (the optional peer's row)."""
    try:
        import nvidia.dali  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return False
    return True
