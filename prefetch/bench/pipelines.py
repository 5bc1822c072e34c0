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

import numpy as np
import torch
from torch.utils.data import DataLoader, default_collate

import prefetch

from .constants import CLASSES, MEAN, STD
from .datasets import random_hflip, random_resized_crop, to_hwc_tensor, write_shards
from .section import resources


# --- the main process's part of the usual pipeline -------------------------------------------

_NORMALIZE = {}  # device -> (mean, std) [1, 3, 1, 1] on it, made once


def usual_to_device(images, device):
    """What users write after the DataLoader: to the device, NCHW, float, /255, normalize. The
    mean and std tensors are made once per device: made per batch, torch.tensor(..., device=cuda)
    is a blocking host-to-device copy that would synchronise the loop at every batch."""
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
    in the main process)."""

    def __init__(self, name, batches, loader=None, prefetcher=None, *, workers=0, threads):
        self.name, self._batches = name, batches
        self.loader, self.prefetcher = loader, prefetcher
        self.resources = resources(workers=workers, threads=threads)

    def epoch(self):
        """One epoch; the number of images it delivered."""
        n = 0
        for images in self._batches():
            n += images.shape[0]
        return n

    def close(self):
        if self.prefetcher is not None:
            self.prefetcher.close()
        self.prefetcher = self.loader = self._batches = None


def _loader(ds, batch_size, workers, collate_fn, pin_memory=False):
    return DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=workers,
                      collate_fn=collate_fn, persistent_workers=workers > 0, pin_memory=pin_memory)


def usual_pipeline(name, ds, batch_size, workers, device, normalize=True):
    """The usual pipeline: ``workers`` DataLoader workers; the main process's ``.to``, ToDtype
    and Normalize on torch's intra-op threads (N during a bench run)."""
    # pin_memory on CUDA, as users write it for non_blocking copies (the Prefetcher pins itself).
    loader = _loader(ds, batch_size, workers, default_collate, pin_memory=device.type == "cuda")

    def batches():
        for images, labels in loader:
            labels.to(device, non_blocking=True)
            yield usual_to_device(images, device) if normalize else images.to(device, non_blocking=True)
    return Pipeline(name, batches, loader=loader, workers=workers, threads=torch.get_num_threads())


def prefetch_pipeline(name, ds, batch_size, workers, device, collate_fn, threads, transform=True,
                      aug=None):
    loader = _loader(ds, batch_size, workers, collate_fn)
    if aug is None and transform:
        aug = prefetch.FusedAugment(MEAN, STD, hflip=0.5, seed=0)
    pf = prefetch.Prefetcher(loader, device=device, num_threads=threads, transform=aug)

    def batches():
        for images, _ in pf:
            yield images
    return Pipeline(name, batches, loader=loader, prefetcher=pf, workers=workers, threads=threads)


def webdataset_available():
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


def webdataset_pipeline(paths, directory, batch_size, workers, device, size):
    """webdataset's usual use: tar shards read sequentially by DataLoader workers (a shuffle
    buffer, one shard list per worker), PIL decode + the same transforms in the workers,
    default_collate, normalize in the main process."""
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


def store_pipeline(store, batch_size, device, threads, aug):
    loader = prefetch.ArrayLoader(store, batch_size, shuffle=True, seed=0, device=device,
                                  num_threads=threads, transform=aug)

    def batches():
        for images, _ in loader:
            yield images
    return Pipeline("prefetch_store", batches, prefetcher=loader, threads=threads)


class EnginePipeline(Pipeline):
    """The in-process reference: a Prefetcher over Samples batches made in the main process."""

    def __init__(self, batch_size, image_size, batches, device, threads):
        from .collate import make_samples

        pool = make_samples(2 * batch_size, image_size)  # two alternating groups, as collate does
        groups = [prefetch.Samples(pool[i % 2 * batch_size:(i % 2 + 1) * batch_size])
                  for i in range(batches)]
        pf = prefetch.Prefetcher(groups, device=device, num_threads=threads)
        super().__init__("engine", lambda: iter(pf), prefetcher=pf, threads=threads)
        self.collates = []  # (bytes, seconds) of each epoch's collation, in order

    def epoch(self):
        before = self.prefetcher.stats()
        n = super().epoch()
        after = self.prefetcher.stats()
        self.collates.append((after["bytes_collated"] - before["bytes_collated"],
                              after["collate_s"] - before["collate_s"]))
        return n


class DaliPipeline(Pipeline):
    """NVIDIA DALI's CPU pipeline on the same files: readers.file -> decoders.image_random_crop
    (libjpeg-turbo, only the window decoded) -> resize -> [DALI's trivial_augment_wide, bilinear,
    fill 0, when `trivial_augment`] -> crop_mirror_normalize (random mirror, float CHW), on
    `threads` CPU threads (device_id=None). Needs `pip install nvidia-dali-cuda130` (optional: the
    sections skip this row without it)."""

    def __init__(self, paths, batch_size, size, threads, trivial_augment=False):
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

    # DALI's prefetch_queue_depth, and the batches an epoch schedules ahead of the one it takes.
    # 1: at depth 2 DALI's executor still computed one iteration past an epoch's last scheduled
    # one (a process used 0.13 s of CPU in the 0.1 s after each epoch; none at depth 1).
    QUEUE = 1

    def _batches_of_epoch(self):
        # Each epoch schedules its own batches and no more. run() schedules the next iteration
        # after every batch, so DALI kept computing batches past an epoch's end —
        # during the next pipeline's timed epoch: it stole CPU from the usual pipeline timed after
        # it (827 -> 700 images/s) and started its own epochs with half their 4 batches done
        # (1,050-1,200 images/s interleaved against ~880 alone; benchmarks/NOTES.md, session 16).
        scheduled = 0
        while scheduled < min(self.QUEUE, self._iterations):
            self._pipe.schedule_run()
            scheduled += 1
        for _ in range(self._iterations):
            images, _ = self._pipe.outputs()
            # Into a torch tensor, as DALI's PyTorch iterator copies it (a training step needs one).
            batch = torch.from_numpy(np.array(images.as_tensor()))
            self._pipe.release_outputs()
            if scheduled < self._iterations:
                self._pipe.schedule_run()
                scheduled += 1
            yield batch

    def close(self):
        self._pipe = None
        super().close()


def dali_available():
    try:
        import nvidia.dali  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return False
    return True
