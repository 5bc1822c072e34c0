"""timm's data loading by its own names: ``from prefetch.timm import create_loader,
create_transform`` in place of ``from timm.data import ...``.

:func:`create_loader` takes timm's ``create_loader`` arguments (``timm/data/loader.py``) and
builds a :class:`prefetch.Prefetcher`: the dataset's workers only read each image into uint8
pixels, and the compiled recipe (:func:`prefetch.transforms.timm.create_transform`) runs on whole
batches where the loader copies them. The loader it returns has the attributes timm's
``train.py`` reads off timm's ``PrefetchLoader`` (``mixup_enabled``, ``sampler``,
``batch_sampler``, ``dataset``, ``len()``). The transforms themselves are in
:mod:`prefetch.transforms.timm`."""
from typing import Any, Callable, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from .collate import samples as collate_samples
from .prefetcher import Prefetcher
from .transforms.compose import Compose
from .transforms.mixup import MixUpCutMix
from .transforms.timm import (DEFAULT_CROP_PCT, IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD,
                              RandomErasing, create_transform)

__all__ = ["create_loader", "create_transform", "PrefetchLoader", "RandomErasing",
           "image_to_uint8", "encoded_to_uint8", "IMAGENET_DEFAULT_MEAN", "IMAGENET_DEFAULT_STD", "DEFAULT_CROP_PCT"]


def image_to_uint8(image: Any) -> torch.Tensor:
    """What the dataset's workers do in place of timm's transform: a PIL image (or an HWC
    ndarray) as an HWC uint8 tensor, ``[H, W, C]``, for the batched recipe. Module level, so
    spawned workers pickle it.

    Raises:
        TypeError: neither a PIL image nor an ndarray/tensor of uint8 ``[H, W, C]`` or ``[H, W]``.
    """
    if isinstance(image, torch.Tensor):
        array = image
    else:
        array = torch.from_numpy(np.array(image, copy=True))
    if array.dtype != torch.uint8 or array.dim() not in (2, 3):
        raise TypeError("prefetch.timm: the dataset's image must be a PIL image or a uint8 "
                        "[H, W, C] array, got %s of shape %s" % (array.dtype, list(array.shape)))
    return array if array.dim() == 3 else array.unsqueeze(-1)


def encoded_to_uint8(data: Any) -> torch.Tensor:
    """What the dataset's workers do in place of timm's transform with ``decode=True``: an encoded
    image's bytes (timm's ``ImageDataset(load_bytes=True)`` hands its transform the file's
    ``bytes``) as a 1-D uint8 tensor, which the recipe decodes window by window. Module level, so
    spawned workers pickle it.

    Raises:
        TypeError: neither bytes-like nor a 1-D uint8 array or tensor.
        ValueError: an empty file (no bytes).
    """
    if isinstance(data, (bytes, bytearray, memoryview)):
        if len(data) == 0:
            raise ValueError("prefetch.timm: with decode=True the dataset gave an empty file (0 "
                             "bytes) where an encoded image's bytes were expected")
        return torch.frombuffer(bytearray(data), dtype=torch.uint8)
    array = data if isinstance(data, torch.Tensor) else torch.from_numpy(np.array(data, copy=True))
    if array.dtype != torch.uint8 or array.dim() != 1:
        raise TypeError("prefetch.timm: with decode=True the dataset's image must be the encoded "
                        "file's bytes (timm's ImageDataset(load_bytes=True)), got %s of shape %s"
                        % (array.dtype, list(array.shape)))
    return array


class _SwitchableMix(MixUpCutMix):
    """timm's Mixup with its ``mixup_enabled`` switch: off, nothing is mixed and the labels are
    its smoothed one-hot targets (timm's ``FastCollateMixup`` with ``lam = 1``)."""

    mixup_enabled = True

    def params(self, n, height, width, epoch=0, index=0, rank=0):
        if not self.mixup_enabled:
            return np.ones(n, dtype=np.float64), np.zeros(n, dtype=bool), np.zeros((n, 4), dtype=np.int64)
        return super().params(n, height, width, epoch, index, rank)


def _mix_from_timm(collate_fn, seed: Optional[int]) -> Optional[_SwitchableMix]:
    """timm's ``FastCollateMixup`` (read by its attributes) as prefetch's MixUpCutMix, which
    draws as it does (tests/transforms/test_mixup.py); None for no collate_fn. Another collate_fn
    is refused: the batches are collated by prefetch.collate.samples."""
    if collate_fn is None:
        return None
    names = ("mixup_alpha", "cutmix_alpha", "cutmix_minmax", "mix_prob", "switch_prob", "mode",
             "correct_lam", "label_smoothing", "num_classes", "_mix_batch_collate")
    if not all(hasattr(collate_fn, a) for a in names):
        raise ValueError("prefetch.timm.create_loader: collate_fn must be None or timm's "
                         "FastCollateMixup (compiled into prefetch's MixUpCutMix); the batches are "
                         "collated by prefetch.collate.samples, got %r" % (collate_fn,))
    mix = _SwitchableMix(num_classes=collate_fn.num_classes, mixup_alpha=collate_fn.mixup_alpha,
                         cutmix_alpha=collate_fn.cutmix_alpha, cutmix_minmax=collate_fn.cutmix_minmax,
                         prob=collate_fn.mix_prob, switch_prob=collate_fn.switch_prob,
                         mode=collate_fn.mode, correct_lam=collate_fn.correct_lam,
                         label_smoothing=collate_fn.label_smoothing, seed=seed)
    mix.mixup_enabled = bool(getattr(collate_fn, "mixup_enabled", True))
    return mix


class PrefetchLoader(Prefetcher):
    """A :class:`prefetch.Prefetcher` with timm's ``PrefetchLoader`` attributes: ``mixup_enabled``
    (the compiled Mixup's switch; False without one), and the DataLoader's ``sampler``,
    ``batch_sampler``, ``dataset`` and ``len()``. :func:`create_loader` builds it.

    Args:
        loader: the DataLoader (``collate_fn=prefetch.collate.samples``).
        mix: the compiled Mixup, or None.
        **kwargs: :class:`prefetch.Prefetcher`'s (``device``, ``transform``, ...).
    """

    def __init__(self, loader: torch.utils.data.DataLoader, *, mix: Optional[_SwitchableMix] = None,
                 **kwargs: Any) -> None:
        self._mix = mix
        super().__init__(loader, **kwargs)

    @property
    def mixup_enabled(self) -> bool:
        """timm's switch of the batch mix (train.py turns it off at ``mixup_off_epoch``)."""
        return self._mix is not None and self._mix.mixup_enabled

    @mixup_enabled.setter
    def mixup_enabled(self, value: bool) -> None:
        if self._mix is not None:
            self._mix.mixup_enabled = bool(value)


def _derived_seed(seed: Optional[int], salt: int) -> Optional[int]:
    """A member's seed from the loader's (None: each member draws its own)."""
    return None if seed is None else (int(seed) * 0x9E3779B97F4A7C15 + salt) % (1 << 63)


def create_loader(dataset: torch.utils.data.Dataset,
                  input_size: Union[int, Tuple[int, int], Tuple[int, int, int]], batch_size: int,
                  is_training: bool = False, no_aug: bool = False, re_prob: float = 0.0,
                  re_mode: str = "const", re_count: int = 1, re_split: bool = False,
                  train_crop_mode: Optional[str] = None,
                  scale: Optional[Tuple[float, float]] = None,
                  ratio: Optional[Tuple[float, float]] = None, hflip: float = 0.5, vflip: float = 0.0,
                  color_jitter: Union[float, Sequence[float], None] = 0.4,
                  color_jitter_prob: Optional[float] = None, grayscale_prob: float = 0.0,
                  gaussian_blur_prob: float = 0.0, auto_augment: Optional[str] = None,
                  num_aug_repeats: int = 0, num_aug_splits: int = 0, interpolation: str = "bilinear",
                  mean: Sequence[float] = IMAGENET_DEFAULT_MEAN,
                  std: Sequence[float] = IMAGENET_DEFAULT_STD, num_workers: int = 1,
                  distributed: bool = False, crop_pct: Optional[float] = None,
                  crop_mode: Optional[str] = None, crop_border_pixels: Optional[int] = None,
                  collate_fn: Optional[Callable] = None, pin_memory: bool = False, fp16: bool = False,
                  img_dtype: torch.dtype = torch.float32,
                  device: Union[torch.device, str, None] = None, use_prefetcher: bool = True,
                  use_multi_epochs_loader: bool = False, persistent_workers: bool = True,
                  worker_seeding: Any = "all", tf_preprocessing: bool = False,
                  input_size_choices: Optional[Sequence[Any]] = None, *,
                  seed: Optional[int] = None, decode: bool = False) -> PrefetchLoader:
    """timm's ``create_loader`` over a Prefetcher (timm 1.0's ``loader.py``, its arguments in its
    order): the DataLoader timm would build (shuffle and ``drop_last`` for training; a
    ``DistributedSampler`` with ``distributed``; neither for an ``IterableDataset``), its
    dataset's ``transform`` set to :func:`image_to_uint8`, and timm's transforms compiled into one
    recipe run on whole batches on ``device`` (:func:`create_transform`). Then, as timm's
    collate and ``PrefetchLoader`` do them: timm's ``FastCollateMixup`` given as ``collate_fn``,
    compiled into prefetch's ``MixUpCutMix`` (timm's Mixup's draws and targets; the mixed images
    in float, where timm's fast collate rounds them to uint8), then timm's ``RandomErasing``
    (``re_prob``, ``re_mode``, ``re_count``; with ``re_split`` the first half of each batch is
    left alone) on the mixed, normalized batch.

    Args:
        dataset: a dataset with a ``transform`` attribute applied to each image (timm's
            ``ImageDataset``), yielding ``(image, target)``.
        input_size, batch_size, is_training, no_aug, re_prob, re_mode, re_count, re_split,
            scale, ratio, hflip, vflip, color_jitter, color_jitter_prob, grayscale_prob,
            gaussian_blur_prob, auto_augment, interpolation, mean, std, num_workers,
            distributed, crop_pct, crop_mode, collate_fn, pin_memory, fp16, img_dtype, device,
            persistent_workers: timm's (``device`` None: the current CUDA device when there is
            one, else the CPU; ``pin_memory`` is moot: the ring is pinned).
        use_prefetcher: True (timm's default); False is refused (that loader is timm's own).
        train_crop_mode, crop_border_pixels, tf_preprocessing: as :func:`create_transform`.
        num_aug_repeats, num_aug_splits, use_multi_epochs_loader, input_size_choices: timm's
            defaults only.
        worker_seeding: accepted; the workers draw nothing (every draw is the recipe's).
        seed: the recipe's, the mix's and the erasing's draws are a function of ``(seed, rank,
            epoch, batch index)``; None draws them (the loader's state saves them).
        decode: the dataset yields encoded JPEG bytes (timm's ``ImageDataset(load_bytes=True)``;
            its transform is :func:`encoded_to_uint8`), decoded window by window by the recipe
            (``create_transform(decode=True)``).

    Returns:
        PrefetchLoader: yields ``(images, targets)`` on ``device``: images ``[N, C, h, w]`` of
        ``img_dtype`` (float16 with ``fp16``), targets as the dataset's (timm's mixed soft targets
        with a Mixup).

    Raises:
        ValueError: an argument this port does not compile (:func:`create_transform`'s refusals,
            ``use_prefetcher=False``, ``num_aug_splits``, ``num_aug_repeats``,
            ``use_multi_epochs_loader``, ``input_size_choices``, a collate_fn that is not timm's
            FastCollateMixup); TypeError: a dataset without ``transform``.
    """
    where = "prefetch.timm.create_loader"
    if not use_prefetcher:
        raise ValueError("%s: use_prefetcher=False is timm's own loader; this port is its prefetcher "
                         "(use timm's create_loader for the other)" % where)
    for name, value in (("num_aug_splits", num_aug_splits), ("num_aug_repeats", num_aug_repeats)):
        if value:
            raise ValueError("%s: %s=%r is not compiled (AugMix's split batches and repeated "
                             "augmentation)" % (where, name, value))
    if use_multi_epochs_loader:
        raise ValueError("%s: use_multi_epochs_loader is not needed: pass persistent_workers=True "
                         "(the Prefetcher's ring keeps its workers)" % where)
    if input_size_choices is not None:
        raise ValueError("%s: input_size_choices (scheduled input sizes) is not compiled" % where)
    if not hasattr(dataset, "transform"):
        raise TypeError("%s: the dataset (%s) has no transform attribute to set: timm's ImageDataset "
                        "has one; give yours one that its __getitem__ applies to the image"
                        % (where, type(dataset).__name__))
    dtype = torch.float16 if fp16 else img_dtype
    # timm's PrefetchLoader erases after the collate's mix: the recipe without its erasing
    # (use_prefetcher=True, as timm's create_loader builds it), the mix, then the erasing.
    recipe = create_transform(input_size, is_training=is_training, no_aug=no_aug,
                              train_crop_mode=train_crop_mode, scale=scale, ratio=ratio, hflip=hflip,
                              vflip=vflip, color_jitter=color_jitter,
                              color_jitter_prob=color_jitter_prob, grayscale_prob=grayscale_prob,
                              gaussian_blur_prob=gaussian_blur_prob, auto_augment=auto_augment,
                              interpolation=interpolation, mean=mean, std=std, re_prob=re_prob,
                              re_mode=re_mode, re_count=re_count, crop_pct=crop_pct,
                              crop_mode=crop_mode, crop_border_pixels=crop_border_pixels,
                              tf_preprocessing=tf_preprocessing, use_prefetcher=True, seed=seed,
                              decode=decode, dtype=dtype)
    members = [recipe]
    mix = _mix_from_timm(collate_fn, _derived_seed(seed, 1))
    if mix is not None:
        members.append(mix)
    if is_training and not no_aug and re_prob > 0.0:
        # inplace: the batch it erases is the recipe's (or the mix's) new float tensor
        members.append(RandomErasing(re_prob, mode=re_mode, max_count=re_count,
                                     num_splits=2 if re_split else 0, seed=_derived_seed(seed, 2),
                                     inplace=True))
    transform = members[0] if len(members) == 1 else Compose(members)
    dataset.transform = encoded_to_uint8 if decode else image_to_uint8
    iterable = isinstance(dataset, torch.utils.data.IterableDataset)
    sampler = None
    if distributed and not iterable:
        # timm's OrderedDistributedSampler for eval gives each rank a contiguous run; this gives
        # every rank-th sample, padded to equal counts the same way.
        sampler = torch.utils.data.distributed.DistributedSampler(dataset, shuffle=is_training)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=batch_size, shuffle=not iterable and sampler is None and is_training,
        sampler=sampler, drop_last=is_training, num_workers=num_workers,
        collate_fn=collate_samples, persistent_workers=persistent_workers and num_workers > 0)
    return PrefetchLoader(loader, mix=mix, device=device, transform=transform)
