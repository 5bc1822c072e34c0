"""timm's data transforms by their own names and arguments (``timm.data``), compiled into
prefetch's fused transforms: a timm user ports ``create_transform`` by changing the import.

- :func:`create_transform`: timm's train and eval recipes as one
  :class:`prefetch.transforms.v2.Compose`;
- :class:`RandomErasing`: timm's erasing (``const``/``rand``/``pixel`` fills, several boxes,
  ``num_splits``), each image its own boxes, on the device;
- :class:`RandomResizedCropAndInterpolation`: timm's window, with its ``"random"`` interpolation;
- :class:`RandAugment`, :class:`AutoAugment` and :class:`AugMix`: timm's by their strings
  (``"rand-m9-mstd0.5-inc1"``, ``"original"``, ``"3a"``, ``"augmix-m5-w4-d2"``), each image its
  own draws, with Pillow's arithmetic (:mod:`.pil_ops`, equal to timm's on PIL images).

timm's loader (``create_loader`` over a :class:`prefetch.Prefetcher`) is :mod:`prefetch.timm`.

"""
from .augmix import AugMix, augmix_config
from .auto_augment import AutoAugment, RandAugment, auto_augment_policy, rand_augment_config
from .random_erasing import RandomErasing
from .steps import RandomResizedCropAndInterpolation
from .transforms_factory import (DEFAULT_CROP_PCT, IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD,
                                 create_transform)

__all__ = ["create_transform", "RandomErasing", "RandAugment", "rand_augment_config",
           "AutoAugment", "auto_augment_policy", "AugMix", "augmix_config", "RandomResizedCropAndInterpolation",
           "IMAGENET_DEFAULT_MEAN", "IMAGENET_DEFAULT_STD", "DEFAULT_CROP_PCT"]
