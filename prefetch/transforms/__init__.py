"""Transforms: what a loader does to each batch, and the contract every transform follows.

- :mod:`.contract`: the contract itself (:class:`Transform`, :class:`BatchPosition`, the host
  stage, gathering from a resident dataset, leaves by key) — read it before writing a transform;
- :mod:`.fused_augment`: :class:`FusedAugment`, the library's own (crop, flips, normalize, cast;
  one kernel on the device), with its resizing path in :mod:`.resizing` and RandomResizedCrop's
  window draws in :mod:`.crop_boxes`;
- :mod:`.policies`: each sample's draws of TrivialAugmentWide, RandAugment, AutoAugment and
  ColorJitter, with torchvision's distributions, as one table of ops and magnitudes;
  :mod:`.policy_ops` applies such a table to a uint8 batch on any device, each sample its own
  ops, with torchvision's values: one batched call per op kind, run by the fused kernels of
  :mod:`prefetch.ops` (``color_jitter``, ``sharpness``, ``lookup`` with ``histograms``,
  ``affine_warp``; Posterize and Invert are one torch op each); the geometric ops match
  torchvision's within float32 rounding of their source points (:mod:`.policy_ops` says which
  op matches how);
  :class:`PolicyAugment` (:mod:`.policy_augment`) is the Transform a loader runs with them;
- :class:`RandomErasing` (:mod:`.erasing`): each sample's own erased box;
- :class:`MixUpCutMix` (:mod:`.mixup`): timm's MixUp/CutMix with soft targets, seeded per batch;
  :class:`RollMix` (:mod:`.roll_mix`): torchvision v2's (``v2.MixUp``, ``v2.CutMix``);
- :class:`Compose` (:mod:`.compose`): several transforms as a loader's one ``transform=``;
- :mod:`.v2`: torchvision.transforms.v2's names for the supported subset, a recipe compiled into
  the transforms above (``from prefetch.transforms import v2 as T``).

A new transform is a module here that subclasses :class:`Transform`. A new option of FusedAugment
belongs there only when it runs in the same fused pass; anything else (another pass, another
kind of augmentation) is a Transform of its own, composed in the loader's ``transform=``.
"""
from .contract import (DIRECT_EPOCH, BatchPosition, SeededTransform, Transform, gathered_keys,
                       get_leaf, has_host_stage, load_transform_state, run_transform,
                       save_transform_state, set_leaf)
from .fused_augment import Draws, FusedAugment
from .compose import Compose
from .erasing import RandomErasing
from .mixup import MixUpCutMix
from .roll_mix import RollMix
from .policy_augment import PolicyAugment
from .affine_augment import AffineAugment
from .augmix import AugMixAugment
from .blur_augment import GaussianBlurAugment
from . import v2  # after the transforms it compiles into
from .multi_view import MultiView

__all__ = ["Transform", "BatchPosition", "get_leaf", "set_leaf", "run_transform", "has_host_stage",
           "gathered_keys", "save_transform_state", "load_transform_state", "DIRECT_EPOCH",
           "FusedAugment", "Draws", "PolicyAugment", "AffineAugment", "AugMixAugment",
           "GaussianBlurAugment",
           "SeededTransform",
           "RandomErasing", "Compose", "MixUpCutMix", "RollMix", "MultiView"]
