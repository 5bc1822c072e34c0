"""timm's data transforms by their own names and arguments (``timm.data``), compiled into
prefetch's fused transforms: a timm user ports ``create_transform`` by changing the import.

- :func:`create_transform`: timm's train and eval recipes as one
  :class:`prefetch.transforms.v2.Compose`;
- :class:`RandomErasing`: timm's erasing (``const``/``rand``/``pixel`` fills, several boxes,
  ``num_splits``), each image its own boxes, on the device;
- :class:`RandomResizedCropAndInterpolation`: timm's window, with its ``"random"`` interpolation;
- :func:`create_loader`: timm's loader over a :class:`prefetch.Prefetcher` (a
  :class:`PrefetchLoader` with the attributes timm's ``train.py`` reads).

Not yet: timm's RandAugment, AugMix and AutoAugment strings (refused by name).
"""
from .loader import PrefetchLoader, create_loader, image_to_uint8
from .random_erasing import RandomErasing
from .steps import RandomResizedCropAndInterpolation
from .transforms_factory import (DEFAULT_CROP_PCT, IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD,
                                 create_transform)

__all__ = ["create_transform", "create_loader", "PrefetchLoader", "image_to_uint8", "RandomErasing", "RandomResizedCropAndInterpolation",
           "IMAGENET_DEFAULT_MEAN", "IMAGENET_DEFAULT_STD", "DEFAULT_CROP_PCT"]
