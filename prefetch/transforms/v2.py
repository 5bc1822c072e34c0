"""A ``torchvision.transforms.v2``-compatible front end (issue 27): the same names and arguments
for the supported subset, compiled by :class:`Compose` into one prefetch Transform that runs on
the batch, each sample with its own draws::

    from prefetch.transforms import v2 as T          # was: from torchvision.transforms import v2 as T
    train = T.Compose([T.RandomResizedCrop(176), T.RandomHorizontalFlip(),
                       T.TrivialAugmentWide(interpolation="bilinear"),
                       T.ToDtype(torch.float32, scale=True),
                       T.Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
                       T.RandomErasing(0.1)], seed=0)
    loader = prefetch.Prefetcher(dataloader, transform=train)

The order a recipe may have (torchvision's recipes have it): one geometry —
``RandomResizedCrop``, ``Resize`` + ``CenterCrop``, ``CenterCrop`` or ``RandomCrop`` — with
flips, on uint8 images; at most one policy (``TrivialAugmentWide``, ``RandAugment``,
``AutoAugment``, ``ColorJitter``) on uint8; ``ToDtype(float, scale=True)``; ``Normalize``;
``RandomErasing``; last, ``MixUp``, ``CutMix`` or a ``RandomChoice`` of them, on the batch's
images and labels as torchvision's v2 does (:class:`~prefetch.transforms.roll_mix.RollMix`).
``ToImage``/``PILToTensor`` are accepted and do nothing (batches are tensors).
A transform outside the subset, or out of that order, is refused when the Compose is built,
naming it: keep it in the DataLoader's workers, before collation.

What it compiles to: without a policy, one :class:`~prefetch.FusedAugment` (crop, resample,
flips, normalisation and cast in one pass) and the erasings. With a policy the uint8 image after
the geometry is needed first, as torchvision's recipes apply the policy to it: FusedAugment
resamples and rounds to uint8 in its store (``dtype=torch.uint8``; torchvision's uint8 resize
rounds in fixed point on the CPU: 18% of resampled pixels differ from it by 1, and a threshold op
of the policy can enlarge that for those pixels; a crop without resampling is exact), then
:class:`PolicyAugment` (one fused kernel per op kind and step), then
:func:`prefetch.ops.normalize_flip` — three passes over the uint8 image.
"""
import enum

import torch

from ..ops.augment import normalize_flip
from .compose import Compose as _Compose
from .contract import Transform, get_leaf, set_leaf
from .erasing import RandomErasing as _Erasing
from .fused_augment import FusedAugment
from .policy_augment import PolicyAugment
from .roll_mix import RollMix

__all__ = ["Compose", "InterpolationMode", "RandomResizedCrop", "Resize", "CenterCrop", "RandomCrop",
           "RandomHorizontalFlip", "RandomVerticalFlip", "TrivialAugmentWide", "RandAugment",
           "AutoAugment", "ColorJitter", "ToDtype", "Normalize", "RandomErasing", "MixUp", "CutMix",
           "RandomChoice", "ToImage", "PILToTensor"]


class InterpolationMode(enum.Enum):
    """torchvision's names for the two interpolations the compiled transforms take."""

    NEAREST = "nearest"
    BILINEAR = "bilinear"


def _mode(interpolation, allowed, what):
    """An interpolation given as torchvision's InterpolationMode (its ``value``) or a string."""
    name = getattr(interpolation, "value", interpolation)
    name = str(name).lower()
    if name not in allowed:
        raise ValueError("prefetch: %s supports interpolation %s, got %r" % (
            what, " or ".join(repr(a) for a in allowed), interpolation))
    return name


def _size(size, what):
    if isinstance(size, (list, tuple)):
        if len(size) == 1:
            size = size[0]
        elif len(size) == 2:
            return (int(size[0]), int(size[1]))
        else:
            raise ValueError("prefetch: %s's size must be an int or (h, w), got %r" % (what, size))
    return int(size)


class _Spec:
    """A recipe step: its torchvision name and arguments, compiled by :class:`Compose`."""

    def __repr__(self):
        args = ", ".join("%s=%r" % kv for kv in vars(self).items())
        return "%s(%s)" % (type(self).__name__, args)


class RandomResizedCrop(_Spec):
    def __init__(self, size, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), interpolation="bilinear",
                 antialias=True):
        self.size = _size(size, "RandomResizedCrop")
        self.scale, self.ratio = tuple(scale), tuple(ratio)
        self.interpolation = _mode(interpolation, ("bilinear",), "RandomResizedCrop")
        self.antialias = bool(antialias)


class Resize(_Spec):
    def __init__(self, size, interpolation="bilinear", antialias=True):
        if not isinstance(size, int) and not (isinstance(size, (list, tuple)) and len(size) == 1):
            raise ValueError("prefetch: Resize supports a shorter-side size (an int) followed by "
                             "CenterCrop, got %r" % (size,))
        self.size = _size(size, "Resize")
        self.interpolation = _mode(interpolation, ("bilinear",), "Resize")
        self.antialias = bool(antialias)


class CenterCrop(_Spec):
    def __init__(self, size):
        self.size = _size(size, "CenterCrop")


class RandomCrop(_Spec):
    def __init__(self, size, padding=None, pad_if_needed=False, fill=0, padding_mode="constant"):
        if padding is not None and not isinstance(padding, int):
            raise ValueError("prefetch: RandomCrop supports one padding for every side (an int), "
                             "got %r" % (padding,))
        if pad_if_needed or padding_mode != "constant":
            raise ValueError("prefetch: RandomCrop supports constant padding without "
                             "pad_if_needed, got pad_if_needed=%r, padding_mode=%r"
                             % (pad_if_needed, padding_mode))
        self.size, self.padding, self.fill = _size(size, "RandomCrop"), int(padding or 0), fill


class RandomHorizontalFlip(_Spec):
    def __init__(self, p=0.5):
        self.p = float(p)


class RandomVerticalFlip(_Spec):
    def __init__(self, p=0.5):
        self.p = float(p)


class _Policy(_Spec):
    def policy(self, seed):
        raise NotImplementedError


class TrivialAugmentWide(_Policy):
    def __init__(self, num_magnitude_bins=31, interpolation="nearest", fill=None):
        self.num_magnitude_bins = num_magnitude_bins
        self.interpolation = _mode(interpolation, ("nearest", "bilinear"), "TrivialAugmentWide")
        self.fill = fill

    def policy(self, seed):
        return PolicyAugment("trivial_augment_wide", num_magnitude_bins=self.num_magnitude_bins,
                             interpolation=self.interpolation, fill=self.fill, seed=seed,
                             layout="NCHW")


class RandAugment(_Policy):
    def __init__(self, num_ops=2, magnitude=9, num_magnitude_bins=31, interpolation="nearest",
                 fill=None):
        self.num_ops, self.magnitude, self.num_magnitude_bins = num_ops, magnitude, num_magnitude_bins
        self.interpolation = _mode(interpolation, ("nearest", "bilinear"), "RandAugment")
        self.fill = fill

    def policy(self, seed):
        return PolicyAugment("rand_augment", num_ops=self.num_ops, magnitude=self.magnitude,
                             num_magnitude_bins=self.num_magnitude_bins,
                             interpolation=self.interpolation, fill=self.fill, seed=seed,
                             layout="NCHW")


class AutoAugment(_Policy):
    def __init__(self, policy="imagenet", interpolation="nearest", fill=None):
        name = str(getattr(policy, "value", policy)).lower()
        if name != "imagenet":
            raise ValueError("prefetch: AutoAugment supports the ImageNet policy, got %r" % (policy,))
        self.interpolation = _mode(interpolation, ("nearest", "bilinear"), "AutoAugment")
        self.fill = fill

    def policy(self, seed):
        return PolicyAugment("auto_augment", interpolation=self.interpolation, fill=self.fill,
                             seed=seed, layout="NCHW")


class ColorJitter(_Policy):
    def __init__(self, brightness=0, contrast=0, saturation=0, hue=0):
        self.brightness, self.contrast = brightness, contrast
        self.saturation, self.hue = saturation, hue

    def policy(self, seed):
        return PolicyAugment("color_jitter", brightness=self.brightness, contrast=self.contrast,
                             saturation=self.saturation, hue=self.hue, seed=seed, layout="NCHW")


class ToImage(_Spec):
    """Accepted and does nothing: the loader's batches are tensors already."""


class PILToTensor(ToImage):
    pass


class ToDtype(_Spec):
    def __init__(self, dtype, scale=False):
        if dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise ValueError("prefetch: ToDtype supports float32, float16 and bfloat16, got %r"
                             % (dtype,))
        if not scale:
            raise ValueError("prefetch: ToDtype supports scale=True (values in [0, 1], as "
                             "torchvision's recipes use it); scale=False would keep 0-255")
        self.dtype, self.scale = dtype, True


class Normalize(_Spec):
    def __init__(self, mean, std, inplace=False):
        self.mean, self.std = tuple(float(m) for m in mean), tuple(float(s) for s in std)


class RandomErasing(_Spec):
    def __init__(self, p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0, inplace=False):
        self.p, self.scale, self.ratio, self.value = p, tuple(scale), tuple(ratio), value


class _Mix(_Spec):
    kind = None

    def __init__(self, *, alpha=1.0, num_classes=None, labels_getter="default"):
        if labels_getter != "default":
            raise ValueError("prefetch: %s takes the labels from the Compose's label_key; "
                             "labels_getter must be 'default'" % type(self).__name__)
        self.alpha, self.num_classes = float(alpha), num_classes


class MixUp(_Mix):
    kind = "mixup"


class CutMix(_Mix):
    kind = "cutmix"


class RandomChoice(_Spec):
    """Of MixUp and CutMix only (the batch transforms torchvision's recipes choose between)."""

    def __init__(self, transforms, p=None):
        self.transforms, self.p = list(transforms), p
        others = [type(t).__name__ for t in self.transforms if not isinstance(t, _Mix)]
        if others or not self.transforms:
            raise ValueError("prefetch: RandomChoice compiles a choice between MixUp and CutMix; "
                             "got %s" % (", ".join(others) or "no transform"))
        classes = {t.num_classes for t in self.transforms}
        if len(classes) != 1:
            raise ValueError("prefetch: RandomChoice: its MixUp and CutMix must have the same "
                             "num_classes, got %s" % sorted(classes, key=str))


def _roll_mix(step, seed, image_key, label_key):
    """The RollMix of a MixUp, a CutMix or a RandomChoice of them."""
    mixes = step.transforms if isinstance(step, RandomChoice) else [step]
    num_classes = mixes[0].num_classes
    if num_classes is None:
        raise ValueError("prefetch: %s needs num_classes (its targets are one-hot)"
                         % type(mixes[0]).__name__)
    return RollMix([(m.kind, m.alpha) for m in mixes], num_classes=num_classes,
                   p=getattr(step, "p", None), seed=seed, image_key=image_key,
                   label_key=label_key, layout="NCHW")


_GEOMETRY = (RandomResizedCrop, Resize, CenterCrop, RandomCrop)
_FLIPS = (RandomHorizontalFlip, RandomVerticalFlip)


class _Normalize(Transform):
    """``ToDtype(scale=True)`` + ``Normalize`` of uint8 NCHW images in one pass."""

    def __init__(self, mean, std, dtype, image_key):
        self.mean, self.std, self.dtype, self.image_key = mean, std, dtype, image_key

    def apply(self, batch, position):
        x = get_leaf(batch, self.image_key)
        c = x.shape[1]
        mean = self.mean if len(self.mean) == c else self.mean * c
        std = self.std if len(self.std) == c else self.std * c
        return set_leaf(batch, self.image_key, normalize_flip(
            x, mean, std, dtype=self.dtype, layout="NCHW"))


class Compose(_Compose):
    """torchvision's recipe ``transforms`` compiled into prefetch transforms (see the module
    docstring for the order it takes and what it compiles to).

    Args:
        seed: the draws are a function of ``(seed, rank, epoch, batch index)``; each compiled
            transform gets its own seed derived from it; None draws them (a loader's state
            saves them).
        decode: the image leaf holds encoded JPEGs (``FusedAugment(decode=True)``).
        image_key, layout: the image leaf and its layout (FusedAugment's ``"auto"`` by default).
        channels: the images' channel count when the recipe has no ``Normalize`` (default 3).
    """

    def __init__(self, transforms, *, seed=None, decode=False, image_key=0, label_key=1,
                 layout="auto", channels=3):
        steps = list(transforms)
        self.steps = steps
        geometry, flips, policy, to_dtype, normalize, erasing = [], {}, None, None, None, []
        mix = None
        phase = 0  # 0 geometry and flips, 1 policy, 2 after ToDtype, 3 after Normalize
        for k, step in enumerate(steps):
            where = "step %d (%s)" % (k, type(step).__name__)
            if mix is not None:
                raise ValueError("prefetch: %s comes after %s: MixUp/CutMix act on the finished "
                                 "batch, last" % (where, type(mix).__name__))
            if isinstance(step, ToImage):
                if phase >= 2:
                    raise ValueError("prefetch: %s comes after ToDtype" % where)
                continue
            if isinstance(step, _GEOMETRY):
                if phase > 0 or (geometry and not (isinstance(geometry[-1], Resize)
                                                   and isinstance(step, CenterCrop))):
                    raise ValueError(
                        "prefetch: %s: one geometry (RandomResizedCrop, Resize + CenterCrop, "
                        "CenterCrop or RandomCrop), before the policy and ToDtype" % where)
                geometry.append(step)
            elif isinstance(step, _FLIPS):
                if phase > 0 or type(step) in flips:
                    raise ValueError("prefetch: %s: one flip of each kind, before the policy and "
                                     "ToDtype" % where)
                flips[type(step)] = step.p
            elif isinstance(step, _Policy):
                if phase > 0:
                    raise ValueError("prefetch: %s: one policy, on uint8 images before ToDtype "
                                     "(as torchvision's recipes apply it)" % where)
                policy, phase = step, 1
            elif isinstance(step, ToDtype):
                if phase >= 2:
                    raise ValueError("prefetch: %s: one ToDtype" % where)
                to_dtype, phase = step, 2
            elif isinstance(step, Normalize):
                if phase != 2:
                    raise ValueError("prefetch: %s: Normalize comes right after ToDtype" % where)
                normalize, phase = step, 3
            elif isinstance(step, RandomErasing):
                if phase < 2:
                    raise ValueError("prefetch: %s: RandomErasing comes after ToDtype (and "
                                     "Normalize), on the float images" % where)
                erasing.append(step)
                phase = max(phase, 2)
            elif isinstance(step, (_Mix, RandomChoice)):
                if phase < 2:
                    raise ValueError("prefetch: %s: MixUp/CutMix come last, on the float images "
                                     "(after ToDtype, Normalize and RandomErasing)" % where)
                mix = step
            else:
                raise ValueError(
                    "prefetch: %s is not one prefetch.transforms.v2 compiles (%s); keep it in the "
                    "DataLoader's workers, before collation, or apply it in the training step"
                    % (where, ", ".join(__all__[2:])))
        if geometry and isinstance(geometry[-1], Resize):
            raise ValueError("prefetch: Resize is supported followed by CenterCrop (validation's "
                             "Resize(256) + CenterCrop(224))")
        if to_dtype is None:
            raise ValueError("prefetch: the recipe needs ToDtype(torch.float32 (or float16, "
                             "bfloat16), scale=True): prefetch's transforms return float images")
        seeds = _seeds(seed, 3 + len(erasing))  # FusedAugment, policy, erasings, mix
        mean = normalize.mean if normalize else (0.0,) * channels
        std = normalize.std if normalize else (1.0,) * channels
        geo = _geometry(geometry)
        geo["hflip"] = flips.get(RandomHorizontalFlip, 0.0)
        geo["vflip"] = flips.get(RandomVerticalFlip, 0.0)
        common = dict(seed=seeds[0], image_key=image_key, layout=layout, decode=decode)
        if decode and not geo.get("random_resized_crop") and not geo.get("resize"):
            raise ValueError("prefetch: decode=True needs RandomResizedCrop or Resize + CenterCrop "
                             "(FusedAugment decodes each window as it resamples it)")
        if not decode:
            common.pop("decode")
        if policy is None:
            members = [FusedAugment(mean, std, dtype=to_dtype.dtype, **geo, **common)]
        else:
            n = len(mean)
            members = [FusedAugment((0.0,) * n, (1.0 / 255,) * n, dtype=torch.uint8, **geo,
                                    **common),
                       policy.policy(seeds[1]),
                       _Normalize(mean, std, to_dtype.dtype, image_key)]
        members += [_Erasing(e.p, e.scale, e.ratio, e.value, seed=s, image_key=image_key,
                             layout="NCHW") for e, s in zip(erasing, seeds[2:])]
        if mix is not None:
            members.append(_roll_mix(mix, seeds[-1], image_key, label_key))
        super().__init__(members)

    def __repr__(self):
        return "prefetch.transforms.v2.Compose([%s])" % ", ".join(repr(s) for s in self.steps)


def _seeds(seed, count):
    """One seed per compiled transform, derived from ``seed`` (None: each drawn)."""
    if seed is None:
        return [None] * count
    return [(int(seed) + k * 0x9E3779B97F4A7C15) % (1 << 63) for k in range(count)]


def _geometry(steps):
    """FusedAugment's geometry arguments for the recipe's geometry steps."""
    if not steps:
        return {}
    first = steps[0]
    if isinstance(first, RandomResizedCrop):
        return dict(random_resized_crop=first.size, scale=first.scale, ratio=first.ratio,
                    antialias=first.antialias)
    if isinstance(first, Resize):
        return dict(resize=first.size, crop=steps[1].size, center_crop=True,
                    antialias=first.antialias)
    if isinstance(first, CenterCrop):
        return dict(crop=first.size, center_crop=True)
    return dict(crop=first.size, padding=first.padding, fill=first.fill)

