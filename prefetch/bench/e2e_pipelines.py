"""The e2e section's input pipelines: each built afresh for one pass of the training loop and
closed after it, all from the same JPEG files, with torchvision's ResNet v2 recipe
(RandomResizedCrop, horizontal flip, TrivialAugmentWide, ToDtype + Normalize) and the same N.

- ``baseline`` (the usual pipeline): a DataLoader with N workers, each PIL-decoding a file and
  applying the recipe's crop, flip and TrivialAugmentWide (torchvision's transforms when
  torchvision imports, else the same calls with PIL: ``recipes.RecipeInWorkers``), uint8 HWC
  batches in pinned memory (``pin_memory=True`` on CUDA), ``.to(non_blocking=True)``, then
  ToDtype + Normalize with torch ops on the device. (torchvision's reference script normalizes in
  the workers instead and sends float32 batches: four times the bytes through shared memory and
  the bus. The uint8 hand-off is the faster of the two, so it is the baseline.)
- ``prefetch``: the files' bytes read by a DataLoader with N workers into the worker ring
  (``collate.samples``), a Prefetcher with N threads and ``prefetch.transforms.v2``'s Compose of
  the same recipe with ``decode=True`` (each window decoded, resampled, augmented, normalized by
  prefetch; the README's path for JPEG files).
- ``timm``: timm's ``PrefetchLoader`` (the copy and the normalization on a side stream) over a
  DataLoader with N workers making the same uint8 images, CHW, ``pin_memory=True``.
- ``ceiling``: a few batches made once by the usual pipeline, kept on the device and cycled: the
  same loop with no input work.

Every builder takes ``(paths, size, batch_size, n, device)`` and returns a :class:`Pass`;
:func:`pipeline_resources` says what each was built with (the bench checks it against N).
"""
import gc
import itertools

import torch
from torch.utils.data import DataLoader

import prefetch

from .constants import MEAN, STD
from .datasets import JpegBytes, random_resized_crop
from .pipelines import prefetch_pipeline, usual_pipeline
from .recipes import RecipeInWorkers
from .section import resources


class RecipeImages(RecipeInWorkers):
    """``recipes.RecipeInWorkers`` (PIL decode, RandomResizedCrop, horizontal flip,
    TrivialAugmentWide; an HWC uint8 tensor and a label per sample) at crop ``size`` (the
    recipe's 176 on a GPU, a tiny size on a CPU run)."""

    def __init__(self, paths, size):
        super().__init__(paths)
        self.crop, _ = random_resized_crop(size)


class Pass:
    """One pass of a pipeline: ``batches``, an iterator of ``(images, labels)`` on the device as
    the training step takes them (images float32 NCHW normalized, labels int64 [B]), and
    :meth:`close`, which lets go of its workers, threads and buffers."""

    def __init__(self, batches, close=None):
        self.batches, self._close = batches, close

    def close(self):
        batches, self.batches = self.batches, None
        if hasattr(batches, "close"):  # a generator: its DataLoader iterator (and workers) go
            batches.close()
        del batches
        if self._close is not None:
            self._close()
            self._close = None
        gc.collect()  # the next pass starts with this one's workers gone, not at a later sweep


class DeviceNormalize:
    """ToDtype(float32, scale=True) + Normalize of uint8 NHWC batches, after a non-blocking copy
    to ``device``: the usual pipeline's main-process part. The mean and std are made once: a
    ``torch.tensor(..., device="cuda")`` per batch is a blocking copy that would synchronize the
    loop every step."""

    def __init__(self, device):
        self.device = torch.device(device)
        self.mean = torch.tensor(MEAN, device=self.device).view(1, 3, 1, 1)
        self.std = torch.tensor(STD, device=self.device).view(1, 3, 1, 1)

    def __call__(self, images):
        x = images.to(self.device, non_blocking=True).permute(0, 3, 1, 2).float().div_(255)
        return x.sub_(self.mean).div_(self.std)


def _usual_batches(loader, device):
    normalize = DeviceNormalize(device)
    for images, labels in loader:
        yield normalize(images), labels.to(device, non_blocking=True)


def usual(paths, size, batch_size, n, device):
    """The usual pipeline (``baseline``): ``pipelines.usual_pipeline``'s DataLoader (N workers,
    shuffled, ``pin_memory`` on CUDA) over :class:`RecipeImages`."""
    pipeline = usual_pipeline("baseline", RecipeImages(paths, size), batch_size, n, device)
    return Pass(_usual_batches(pipeline.loader, device), pipeline.close)


def recipe(size):
    """The v2 recipe as ``prefetch.transforms.v2`` compiles it, for encoded JPEGs."""
    from ..transforms import v2 as T

    return T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(),
                      T.TrivialAugmentWide(interpolation=T.InterpolationMode.BILINEAR),
                      T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)],
                     seed=0, decode=True)


def prefetch_pass(paths, size, batch_size, n, device):
    """prefetch: ``pipelines.prefetch_pipeline`` (DataLoader of the files' bytes with N workers and
    ``collate.samples``, Prefetcher with ``num_threads=N``) with :func:`recipe`."""
    pipeline = prefetch_pipeline("prefetch", JpegBytes(paths), batch_size, n, device,
                                 prefetch.collate.samples, n, aug=recipe(size))
    return Pass(iter(pipeline.prefetcher), pipeline.close)


def chw_collate(batch):
    """HWC uint8 samples as one NCHW uint8 batch and int64 labels, as timm's ``fast_collate``
    returns them for its PrefetchLoader."""
    return (torch.stack([x.permute(2, 0, 1) for x, _ in batch]),
            torch.tensor([y for _, y in batch], dtype=torch.int64))


def timm_available():
    try:
        from timm.data.loader import PrefetchLoader  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return False
    return True


def timm_pass(paths, size, batch_size, n, device):
    """timm's PrefetchLoader over a DataLoader with N workers (``pin_memory=True``: timm's
    default is off, and its non-blocking copy then waits for pageable memory)."""
    from timm.data.loader import PrefetchLoader

    loader = DataLoader(RecipeImages(paths, size), batch_size=batch_size, shuffle=True,
                        num_workers=n, pin_memory=True, collate_fn=chw_collate)
    return Pass(iter(PrefetchLoader(loader, mean=MEAN, std=STD, device=device)))


def device_batches(paths, size, batch_size, n, device, count):
    """``count`` batches of the usual pipeline, made once, on the device (the ceiling's)."""
    p = usual(paths, size, batch_size, n, device)
    try:
        return [next(p.batches) for _ in range(count)]
    finally:
        p.close()


def ceiling_pass(ready):
    """The ceiling: the ``ready`` batches (on the device) cycled."""
    return Pass(itertools.cycle(ready))


BUILDERS = {"baseline": usual, "timm": timm_pass, "prefetch": prefetch_pass}


def pipeline_resources(n):
    """Each pipeline's resources (``section.resources``): DataLoader workers and main-process
    threads (N torch intra-op threads for all, which prefetch's decode and transforms run on;
    N engine threads for prefetch); the ceiling has no workers."""
    return {"baseline": resources(n, n), "timm": resources(n, n), "prefetch": resources(n, n),
            "ceiling": resources(0, n)}
