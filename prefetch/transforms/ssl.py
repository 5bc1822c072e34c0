"""The self-supervised recipes' views, as their repositories write them, each a
:class:`~prefetch.transforms.multi_view.MultiView` of :class:`prefetch.transforms.v2.Compose`
views: :func:`simclr_views`, :func:`byol_views`, :func:`dino_views`, :func:`swav_views`::

    from prefetch.transforms.ssl import dino_views
    loader = prefetch.Prefetcher(dataloader, transform=dino_views(seed=0))
    for views, labels in loader:  # views: 2 tensors [N, 3, 224, 224], then 8 [N, 3, 96, 96]
        ...
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import torch

from . import arguments
from . import v2 as T
from .contract import LeafKey
from .multi_view import MultiView

__all__ = ["simclr_views", "byol_views", "dino_views", "swav_views"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
Size = Union[int, Tuple[int, int]]


def _view(window, flip_and_colour, blur_p, solarize_p, blur_kernel, mean, std, dtype, decode,
          keys=(0, 1)):
    """One view as the SSL repositories write it: the window, the flip and colour steps, blur
    with probability ``blur_p`` (sigma uniform in [0.1, 2.0]), solarize (threshold 128) with
    ``solarize_p``, then the float conversion and normalisation."""
    steps = [window, *flip_and_colour]
    if blur_p > 0:
        blur = T.GaussianBlur(blur_kernel, (0.1, 2.0))
        steps.append(blur if blur_p >= 1 else T.RandomApply([blur], p=blur_p))
    if solarize_p > 0:
        steps.append(T.RandomSolarize(128, p=solarize_p))
    steps += [T.ToDtype(dtype, scale=True), T.Normalize(mean, std)]
    return T.Compose(steps, decode=decode, image_key=keys[0], label_key=keys[1])


def _flip_and_colour(brightness, contrast, saturation, hue):
    """The flip and colour distortion every recipe below shares: RandomHorizontalFlip(0.5),
    RandomApply([ColorJitter(...)], p=0.8), RandomGrayscale(0.2)."""
    return [T.RandomHorizontalFlip(0.5),
            T.RandomApply([T.ColorJitter(brightness, contrast, saturation, hue)], p=0.8),
            T.RandomGrayscale(0.2)]


def simclr_views(size: Size = 224, *, strength: float = 1.0, blur_p: float = 0.5,
                 blur_kernel: Optional[int] = None, interpolation: str = "bicubic",
                 mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD,
                 dtype: torch.dtype = torch.float32, decode: bool = False,
                 seed: Optional[int] = None,
                 shared_decode: Optional[bool] = None, image_key: LeafKey = 0,
                 label_key: LeafKey = 1) -> MultiView:
    """SimCLR's two views (Chen et al., "A Simple Framework for Contrastive Learning of Visual
    Representations", ICML 2020, appendix A): RandomResizedCrop(size, scale=(0.08, 1)), flip,
    ``RandomApply([ColorJitter(0.8 s, 0.8 s, 0.8 s, 0.2 s)], p=0.8)``, RandomGrayscale(0.2),
    Gaussian blur with probability ``blur_p`` (0.5 on ImageNet; CIFAR recipes pass 0), kernel 10%
    of the size (odd), then ToDtype and Normalize.

    Args:
        size: the views' output side (or (h, w)).
        strength: the colour distortion's strength s (SimCLR: 1.0).
        blur_p: the blur's probability per view.
        blur_kernel: the blur's kernel side (default: 10% of the size, made odd).
        interpolation: the crop's resampling (the SimCLR repository resizes bicubic; its
            PyTorch ports use torchvision's default "bilinear").
        mean, std: the normalisation (ImageNet's).
        dtype: the views' float dtype.
        decode: the image leaf holds encoded JPEGs (``Compose(decode=True)`` views): each
            image decoded once for every view, or each view its windows, as
            :class:`~prefetch.transforms.multi_view.MultiView` chooses (``shared_decode``).
        seed, shared_decode: the views' seed and how ``decode=True`` views decode
            (:class:`MultiView`).
        image_key, label_key: the batch's image and label leaves (an index or a dict's key).

    Returns:
        MultiView: two views.

    Raises:
        ValueError: an argument the steps refuse, naming it.
    """
    side = size if isinstance(size, int) else min(size)
    kernel = blur_kernel if blur_kernel is not None else max(1, int(0.1 * side) // 2 * 2 + 1)
    s = arguments.number("simclr_views", "strength", strength, low=0.0)
    keys = (image_key, label_key)
    views = [_view(T.RandomResizedCrop(size, scale=(0.08, 1.0), interpolation=interpolation),
                   _flip_and_colour(0.8 * s, 0.8 * s, 0.8 * s, 0.2 * s), blur_p, 0.0, kernel,
                   mean, std, dtype, decode, keys) for _ in range(2)]
    return MultiView(views, seed=seed, shared_decode=shared_decode)


def byol_views(size: Size = 224, *, blur_kernel: int = 23, interpolation: str = "bicubic",
               mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD,
               dtype: torch.dtype = torch.float32, decode: bool = False,
               seed: Optional[int] = None,
               shared_decode: Optional[bool] = None, image_key: LeafKey = 0,
               label_key: LeafKey = 1) -> MultiView:
    """BYOL's two asymmetric views (Grill et al., "Bootstrap Your Own Latent", NeurIPS 2020,
    table 6): both RandomResizedCrop(size, scale=(0.08, 1), bicubic), flip,
    ``RandomApply([ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8)``, RandomGrayscale(0.2); the blur
    always on the first view and with probability 0.1 on the second; solarization (threshold
    128) only on the second, with probability 0.2.

    The Gaussian blur is torchvision's ``GaussianBlur(blur_kernel, sigma=(0.1, 2.0))``
    (:class:`prefetch.transforms.v2.GaussianBlur`); the repository blurs with PIL's
    ``ImageFilter.GaussianBlur(radius)``, radius uniform in [0.1, 2.0], whose box approximation
    of the Gaussian differs from the exact kernel by a few levels at edges.

    Args:
        size: the views' output side (or (h, w)).
        blur_kernel: the blur's kernel side (23: 10% of 224, odd).
        interpolation: the crop's resampling.
        mean, std: the normalisation (ImageNet's).
        dtype: the views' float dtype.
        decode: the image leaf holds encoded JPEGs (``Compose(decode=True)`` views): each
            image decoded once for every view, or each view its windows, as
            :class:`~prefetch.transforms.multi_view.MultiView` chooses (``shared_decode``).
        seed, shared_decode: the views' seed and how ``decode=True`` views decode
            (:class:`MultiView`).
        image_key, label_key: the batch's image and label leaves (an index or a dict's key).

    Returns:
        MultiView: two views.

    Raises:
        ValueError: an argument the steps refuse, naming it.
    """
    def window():
        return T.RandomResizedCrop(size, scale=(0.08, 1.0), interpolation=interpolation)

    colour, keys = (0.4, 0.4, 0.2, 0.1), (image_key, label_key)
    return MultiView([_view(window(), _flip_and_colour(*colour), 1.0, 0.0, blur_kernel, mean, std,
                            dtype, decode, keys),
                      _view(window(), _flip_and_colour(*colour), 0.1, 0.2, blur_kernel, mean, std,
                            dtype, decode, keys)], seed=seed, shared_decode=shared_decode)


def dino_views(global_size: Size = 224, local_size: Size = 96, *,
               global_crops_scale: Tuple[float, float] = (0.4, 1.0),
               local_crops_scale: Tuple[float, float] = (0.05, 0.4), local_crops_number: int = 8,
               blur_kernel: int = 23, interpolation: str = "bicubic",
               mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD,
               dtype: torch.dtype = torch.float32, decode: bool = False,
               seed: Optional[int] = None,
               shared_decode: Optional[bool] = None, image_key: LeafKey = 0,
               label_key: LeafKey = 1) -> MultiView:
    """DINO's multi-crop (Caron et al., "Emerging Properties in Self-Supervised Vision
    Transformers", ICCV 2021; its repository's ``DataAugmentationDINO``, whose argument names
    these are): two global views, RandomResizedCrop(global_size, global_crops_scale, bicubic),
    flip, ``RandomApply([ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8)``, RandomGrayscale(0.2), the
    blur always on the first and with probability 0.1 on the second, solarization (p=0.2) on
    the second; then ``local_crops_number`` local views, RandomResizedCrop(local_size,
    local_crops_scale, bicubic), the same flip and colour, blur with probability 0.5.

    The Gaussian blur is torchvision's ``GaussianBlur(blur_kernel, sigma=(0.1, 2.0))``
    (:class:`prefetch.transforms.v2.GaussianBlur`); the repository blurs with PIL's
    ``ImageFilter.GaussianBlur(radius)``, radius uniform in [0.1, 2.0], whose box approximation
    of the Gaussian differs from the exact kernel by a few levels at edges.

    Args:
        global_size, local_size: the views' output sides (or (h, w)).
        global_crops_scale, local_crops_scale: the windows' area ranges.
        local_crops_number: the number of local views (DINO: 8; 0 for the two global ones).
        blur_kernel: the blur's kernel side.
        interpolation: the crops' resampling.
        mean, std: the normalisation (ImageNet's).
        dtype: the views' float dtype.
        decode: the image leaf holds encoded JPEGs (``Compose(decode=True)`` views): each
            image decoded once for every view, or each view its windows, as
            :class:`~prefetch.transforms.multi_view.MultiView` chooses (``shared_decode``).
        seed, shared_decode: the views' seed and how ``decode=True`` views decode
            (:class:`MultiView`).
        image_key, label_key: the batch's image and label leaves (an index or a dict's key).

    Returns:
        MultiView: 2 + ``local_crops_number`` views, the global ones first.

    Raises:
        ValueError: an argument the steps refuse, naming it.
    """
    local_crops_number = arguments.integer("dino_views", "local_crops_number", local_crops_number,
                                           low=0)
    colour, keys = (0.4, 0.4, 0.2, 0.1), (image_key, label_key)

    def crop(size, scale):
        return T.RandomResizedCrop(size, scale=scale, interpolation=interpolation)

    views = [_view(crop(global_size, global_crops_scale), _flip_and_colour(*colour), 1.0, 0.0,
                   blur_kernel, mean, std, dtype, decode, keys),
             _view(crop(global_size, global_crops_scale), _flip_and_colour(*colour), 0.1, 0.2,
                   blur_kernel, mean, std, dtype, decode, keys)]
    views += [_view(crop(local_size, local_crops_scale), _flip_and_colour(*colour), 0.5, 0.0,
                    blur_kernel, mean, std, dtype, decode, keys) for _ in range(local_crops_number)]
    return MultiView(views, seed=seed, shared_decode=shared_decode)


def swav_views(size_crops: Sequence[int] = (224, 96), nmb_crops: Sequence[int] = (2, 6),
               min_scale_crops: Sequence[float] = (0.14, 0.05),
               max_scale_crops: Sequence[float] = (1.0, 0.14), *, blur_kernel: int = 23,
               interpolation: str = "bilinear", mean: Sequence[float] = IMAGENET_MEAN,
               std: Sequence[float] = (0.228, 0.224, 0.225), dtype: torch.dtype = torch.float32,
               decode: bool = False, seed: Optional[int] = None,
               shared_decode: Optional[bool] = None, image_key: LeafKey = 0,
               label_key: LeafKey = 1) -> MultiView:
    """SwAV's multi-crop (Caron et al., "Unsupervised Learning of Visual Features by Contrasting
    Cluster Assignments", NeurIPS 2020; its repository's ``MultiCropDataset``, whose argument
    names these are): ``nmb_crops[i]`` views of side ``size_crops[i]``, each
    RandomResizedCrop(size, scale=(min_scale_crops[i], max_scale_crops[i])) (torchvision's
    default bilinear, as there), flip, ``RandomApply([ColorJitter(0.8, 0.8, 0.8, 0.2)], p=0.8)``,
    RandomGrayscale(0.2), blur with probability 0.5, Normalize with the repository's std
    (0.228, 0.224, 0.225).

    The Gaussian blur is torchvision's ``GaussianBlur(blur_kernel, sigma=(0.1, 2.0))``
    (:class:`prefetch.transforms.v2.GaussianBlur`); the repository blurs with PIL's
    ``ImageFilter.GaussianBlur(radius)``, radius uniform in [0.1, 2.0], whose box approximation
    of the Gaussian differs from the exact kernel by a few levels at edges.

    Args:
        size_crops, nmb_crops, min_scale_crops, max_scale_crops: per group of views, their side,
            count and area range (SwAV's 2 x 224 and 6 x 96).
        blur_kernel: the blur's kernel side.
        interpolation: the crops' resampling.
        mean, std: the normalisation (SwAV's).
        dtype: the views' float dtype.
        decode: the image leaf holds encoded JPEGs (``Compose(decode=True)`` views): each
            image decoded once for every view, or each view its windows, as
            :class:`~prefetch.transforms.multi_view.MultiView` chooses (``shared_decode``).
        seed, shared_decode: the views' seed and how ``decode=True`` views decode
            (:class:`MultiView`).
        image_key, label_key: the batch's image and label leaves (an index or a dict's key).

    Returns:
        MultiView: ``sum(nmb_crops)`` views, group by group.

    Raises:
        ValueError: lists of different lengths, or an argument the steps refuse, naming it.
    """
    groups = (size_crops, nmb_crops, min_scale_crops, max_scale_crops)
    if len({len(g) for g in groups}) != 1:
        raise ValueError("prefetch: swav_views takes size_crops, nmb_crops, min_scale_crops and "
                         "max_scale_crops of one length (one entry per group), got %r"
                         % (tuple(list(g) for g in groups),))
    views, keys = [], (image_key, label_key)
    for size, count, low, high in zip(*groups):
        count = arguments.integer("swav_views", "nmb_crops", count, low=0)
        views += [_view(T.RandomResizedCrop(size, scale=(low, high), interpolation=interpolation),
                        _flip_and_colour(0.8, 0.8, 0.8, 0.2), 0.5, 0.0, blur_kernel, mean, std,
                        dtype, decode, keys) for _ in range(count)]
    return MultiView(views, seed=seed, shared_decode=shared_decode)
