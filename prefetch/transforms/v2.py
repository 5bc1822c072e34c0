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

from ..ops.normalize import normalize_flip
from .compose import Compose as _Compose
from .contract import Transform, get_leaf, set_leaf
from .erasing import RandomErasing as _Erasing
from .fused_augment import FusedAugment
from .policy_augment import PolicyAugment
from .roll_mix import RollMix
from . import arguments
from .v2_names import TORCHVISION_V2_NAMES, is_torchvision_object

__all__ = ["Compose", "InterpolationMode", "AutoAugmentPolicy", "RandomResizedCrop", "Resize", "CenterCrop", "RandomCrop",
           "RandomHorizontalFlip", "RandomVerticalFlip", "TrivialAugmentWide", "RandAugment",
           "AutoAugment", "ColorJitter", "ToDtype", "Normalize", "RandomErasing", "MixUp", "CutMix",
           "RandomChoice", "ToImage", "PILToTensor"]

# The steps Compose compiles (named in its refusals).
_COMPILED = __all__[3:]


class InterpolationMode(enum.Enum):
    """torchvision's names for the two interpolations the compiled transforms take."""

    NEAREST = "nearest"
    BILINEAR = "bilinear"


class AutoAugmentPolicy(enum.Enum):
    """torchvision's AutoAugment policies by name (``AutoAugment`` compiles ``IMAGENET``)."""

    IMAGENET = "imagenet"
    CIFAR10 = "cifar10"
    SVHN = "svhn"


def _mode(interpolation, allowed, what):
    """An interpolation given as torchvision's InterpolationMode (its ``value``) or a string."""
    name = getattr(interpolation, "value", interpolation)
    if not isinstance(name, str) or name.lower() not in allowed:
        arguments.fail(what, "interpolation", " or ".join(repr(a) for a in allowed), interpolation)
    return name.lower()


def _antialias(value, what):
    """torchvision's ``antialias``: True or False (None, its legacy value, is False for tensors)."""
    return False if value is None else arguments.flag(what, "antialias", value)


def _fill(value, what):
    """A policy's fill: None, or one number or one per channel, each in [0, 255]; kept as given
    (the compiled PolicyAugment takes it)."""
    arguments.fill_value(what, "fill", value, channels=(1, 3))  # (the policies' ops take 1 or 3)
    return value


class _Spec:
    """A recipe step: its torchvision name and arguments, compiled by :class:`Compose`."""

    def __repr__(self):
        args = ", ".join("%s=%r" % kv for kv in vars(self).items())
        return "%s(%s)" % (type(self).__name__, args)


class RandomResizedCrop(_Spec):
    def __init__(self, size, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), interpolation="bilinear",
                 antialias=True):
        self.size = arguments.size("RandomResizedCrop", "size", size)
        self.scale = arguments.number_pair("RandomResizedCrop", "scale", scale, low=0.0,
                                           low_open=True)
        self.ratio = arguments.number_pair("RandomResizedCrop", "ratio", ratio, low=0.0,
                                           low_open=True)
        self.interpolation = _mode(interpolation, ("bilinear",), "RandomResizedCrop")
        self.antialias = _antialias(antialias, "RandomResizedCrop")


class Resize(_Spec):
    def __init__(self, size, interpolation="bilinear", max_size=None, antialias=True):
        if isinstance(size, (list, tuple)) and len(size) == 2:
            raise ValueError("prefetch: Resize supports a shorter-side size (an int) followed by "
                             "CenterCrop, got %r" % (size,))
        self.size = arguments.size("Resize", "size", size, pair_allowed=False)
        self.interpolation = _mode(interpolation, ("bilinear",), "Resize")
        if max_size is not None and (arguments.integer("Resize", "max_size", max_size, low=1)
                                     <= self.size):
            # torchvision's _compute_resized_output_size refuses it too
            arguments.fail("Resize", "max_size", "an int > size (%d)" % self.size, max_size)
        self.max_size = max_size if max_size is None else int(max_size)
        self.antialias = _antialias(antialias, "Resize")


class CenterCrop(_Spec):
    def __init__(self, size):
        self.size = arguments.size("CenterCrop", "size", size)


class RandomCrop(_Spec):
    def __init__(self, size, padding=None, pad_if_needed=False, fill=0, padding_mode="constant"):
        self.size = arguments.size("RandomCrop", "size", size)
        values = padding if isinstance(padding, (list, tuple)) else [padding]
        if padding is not None:
            with arguments.reworded("RandomCrop", "padding", "None, an int >= 0, or 1, 2 or 4 of "
                                    "them (torchvision's left/right, top/bottom or left, top, "
                                    "right, bottom)", padding):
                if len(values) not in (1, 2, 4):
                    arguments.fail("RandomCrop", "padding", "1, 2 or 4 values", padding)
                values = [arguments.integer("RandomCrop", "padding", v, low=0) for v in values]
        self.padding = 0 if padding is None else (
            values[0] if len(values) == 1 else tuple(values))
        self.pad_if_needed = arguments.flag("RandomCrop", "pad_if_needed", pad_if_needed)
        if padding_mode != "constant":
            arguments.fail("RandomCrop", "padding_mode", "'constant' (the window's outside is "
                           "fill; keep edge, reflect or symmetric padding in the workers)",
                           padding_mode)
        self.fill = arguments.integer("RandomCrop", "fill", fill, low=0, high=255)


class RandomHorizontalFlip(_Spec):
    def __init__(self, p=0.5):
        self.p = arguments.probability("RandomHorizontalFlip", "p", p)


class RandomVerticalFlip(_Spec):
    def __init__(self, p=0.5):
        self.p = arguments.probability("RandomVerticalFlip", "p", p)


class _Policy(_Spec):
    def policy(self, seed):
        raise NotImplementedError

    def _check(self):
        """The compiled policy built once now, so whatever else it refuses is refused here."""
        self.policy(0)


class TrivialAugmentWide(_Policy):
    def __init__(self, num_magnitude_bins=31, interpolation="nearest", fill=None):
        self.num_magnitude_bins = arguments.integer("TrivialAugmentWide", "num_magnitude_bins",
                                                    num_magnitude_bins, low=1)
        self.interpolation = _mode(interpolation, ("nearest", "bilinear"), "TrivialAugmentWide")
        self.fill = _fill(fill, "TrivialAugmentWide")
        self._check()

    def policy(self, seed):
        return PolicyAugment("trivial_augment_wide", num_magnitude_bins=self.num_magnitude_bins,
                             interpolation=self.interpolation, fill=self.fill, seed=seed,
                             layout="NCHW")


class RandAugment(_Policy):
    def __init__(self, num_ops=2, magnitude=9, num_magnitude_bins=31, interpolation="nearest",
                 fill=None):
        self.num_ops = arguments.integer("RandAugment", "num_ops", num_ops, low=0)
        self.num_magnitude_bins = arguments.integer("RandAugment", "num_magnitude_bins",
                                                    num_magnitude_bins, low=1)
        # torchvision indexes its magnitude table (num_magnitude_bins values) with it
        self.magnitude = arguments.integer("RandAugment", "magnitude", magnitude, low=0,
                                           high=self.num_magnitude_bins - 1)
        self.interpolation = _mode(interpolation, ("nearest", "bilinear"), "RandAugment")
        self.fill = _fill(fill, "RandAugment")
        self._check()

    def policy(self, seed):
        return PolicyAugment("rand_augment", num_ops=self.num_ops, magnitude=self.magnitude,
                             num_magnitude_bins=self.num_magnitude_bins,
                             interpolation=self.interpolation, fill=self.fill, seed=seed,
                             layout="NCHW")


class AutoAugment(_Policy):
    def __init__(self, policy="imagenet", interpolation="nearest", fill=None):
        name = getattr(policy, "value", policy)
        if not isinstance(name, str) or name.lower() != "imagenet":
            arguments.fail("AutoAugment", "policy", "the ImageNet policy "
                           "(AutoAugmentPolicy.IMAGENET)", policy)
        self.interpolation = _mode(interpolation, ("nearest", "bilinear"), "AutoAugment")
        self.fill = _fill(fill, "AutoAugment")
        self._check()

    def policy(self, seed):
        return PolicyAugment("auto_augment", interpolation=self.interpolation, fill=self.fill,
                             seed=seed, layout="NCHW")


class ColorJitter(_Policy):
    def __init__(self, brightness=0, contrast=0, saturation=0, hue=0):
        # Kept as given (the compiled policy reads them); _check() checks them as torchvision's
        # ColorJitter._check_input does (arguments.jitter_range): None, a factor v >= 0 meaning
        # [1 - v, 1 + v] clipped at 0, or a (min, max) >= 0; the hue a number in [0, 0.5] or a
        # (min, max) in [-0.5, 0.5].
        self.brightness, self.contrast = brightness, contrast
        self.saturation, self.hue = saturation, hue
        self._check()

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
            arguments.fail("ToDtype", "dtype", "torch.float32, float16 or bfloat16", dtype)
        if arguments.flag("ToDtype", "scale", scale) is not True:
            raise ValueError("prefetch: ToDtype scale must be True, got False: prefetch supports "
                             "ToDtype(dtype, scale=True) (values in [0, 1], as torchvision's "
                             "recipes use it); scale=False would keep 0-255")
        self.dtype, self.scale = dtype, True


def _numbers(values, cls, arg, positive=False):
    """A non-empty sequence (or a 1-D tensor) of finite numbers (> 0 with ``positive``), as a
    tuple of floats."""
    if isinstance(values, torch.Tensor) and values.dim() == 1:
        values = values.tolist()
    return tuple(arguments.numbers_list(cls, arg, values, low=0.0 if positive else None,
                                        low_open=positive))


class Normalize(_Spec):
    def __init__(self, mean, std, inplace=False):
        self.mean = _numbers(mean, "Normalize", "mean")
        self.std = _numbers(std, "Normalize", "std", positive=True)
        if len(self.mean) != len(self.std):
            arguments.fail("Normalize", "std", "as many values as mean (%d)" % len(self.mean), std)
        arguments.flag("Normalize", "inplace", inplace)


class RandomErasing(_Spec):
    def __init__(self, p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0, inplace=False):
        # checked as the RandomErasing it compiles to checks them (torchvision: "Scale should be
        # between 0 and 1"; the ratio a positive (min, max); the value a number, one per channel
        # or 'random')
        checked = _Erasing(p, scale, ratio, value, seed=0)
        self.p, self.scale, self.ratio = checked.p, checked.scale, checked.ratio
        self.value = value
        arguments.flag("RandomErasing", "inplace", inplace)


class _Mix(_Spec):
    kind = None

    def __init__(self, *, alpha=1.0, num_classes=None, labels_getter="default"):
        name = type(self).__name__
        if labels_getter != "default":
            raise ValueError("prefetch: %s takes the labels from the Compose's label_key; "
                             "labels_getter must be 'default'" % name)
        self.alpha = arguments.number(name, "alpha", alpha, low=0.0, low_open=True)
        if num_classes is not None:
            num_classes = arguments.integer(name, "num_classes", num_classes, low=1,
                                            expected="None or an int >= 1")
        self.num_classes = num_classes


class MixUp(_Mix):
    kind = "mixup"


class CutMix(_Mix):
    kind = "cutmix"


class RandomChoice(_Spec):
    """Of MixUp and CutMix only (the batch transforms torchvision's recipes choose between)."""

    def __init__(self, transforms, p=None):
        self.transforms = list(transforms)
        others = [type(t).__name__ for t in self.transforms if not isinstance(t, _Mix)]
        if others or not self.transforms:
            raise ValueError("prefetch: RandomChoice compiles a choice between MixUp and CutMix; "
                             "got %s" % (", ".join(others) or "no transform"))
        if p is not None:
            weights = _numbers(p, "RandomChoice", "p")
            if len(weights) != len(self.transforms) or min(weights) < 0 or not sum(weights) > 0:
                arguments.fail("RandomChoice", "p", "one weight >= 0 per transform (%d), not all "
                               "0" % len(self.transforms), p)
        self.p = p
        classes = {t.num_classes for t in self.transforms}
        if len(classes) != 1:
            raise ValueError("prefetch: RandomChoice: its MixUp and CutMix must have the same "
                             "num_classes, got %s" % sorted(classes, key=str))


def _roll_mix(step, seed, image_key, label_key):
    """The RollMix of a MixUp, a CutMix or a RandomChoice of them."""
    mixes = step.transforms if isinstance(step, RandomChoice) else [step]
    # num_classes may be None: RollMix then needs [N, K] one-hot or soft labels, as torchvision's
    # MixUp/CutMix do (checked when a batch arrives; class indices then need num_classes).
    return RollMix([(m.kind, m.alpha) for m in mixes], num_classes=mixes[0].num_classes,
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
        if isinstance(transforms, _Spec) or not hasattr(transforms, "__iter__"):
            arguments.fail("Compose", "transforms", "a list of steps", transforms,
                           arguments.ArgumentTypeError)
        steps = list(transforms)
        self.steps = steps
        if seed is not None:  # torch.manual_seed's range; a fraction was truncated silently
            seed = arguments.integer("Compose", "seed", seed, low=-(1 << 63), high=(1 << 64) - 1,
                                     expected="None or an int in [-2**63, 2**64)")
        decode = arguments.flag("Compose", "decode", decode)
        if layout not in ("auto", "NHWC", "NCHW"):
            arguments.fail("Compose", "layout", "'auto', 'NHWC' or 'NCHW'", layout)
        channels = arguments.integer("Compose", "channels", channels, low=1)
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
            elif is_torchvision_object(step):
                raise ValueError(_torchvision_step(where, step))
            else:
                raise ValueError(
                    "prefetch: %s is not one prefetch.transforms.v2 compiles (%s); keep it in the "
                    "DataLoader's workers, before collation, or apply it in the training step"
                    % (where, ", ".join(_COMPILED)))
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


def _torchvision_step(where, step):
    """The refusal of one of torchvision's own objects in the list: what to build instead."""
    name = type(step).__name__
    origin = "torchvision's %s (%s.%s)" % (name, type(step).__module__, name)
    if name in _COMPILED:
        return ("prefetch: %s is %s, not prefetch's: Compose compiles its own classes, with "
                "torchvision's names and arguments. Build the step as "
                "prefetch.transforms.v2.%s(...) with the same arguments (import prefetch.transforms.v2 "
                "as T in place of torchvision.transforms.v2)" % (where, origin, name))
    return ("prefetch: %s is %s, which prefetch does not compile: keep it in the DataLoader's "
            "workers (in the Dataset, before collation) and give Compose the steps it compiles "
            "(%s), built from prefetch.transforms.v2" % (where, origin, ", ".join(_COMPILED)))


def __getattr__(name):
    """torchvision's v2 names that prefetch does not compile get an AttributeError that says so
    and what to do; other names the plain one."""
    if name in TORCHVISION_V2_NAMES:
        raise AttributeError(
            "prefetch: prefetch.transforms.v2 has no %s: it is a torchvision.transforms.v2 %s "
            "prefetch does not compile (yet). Keep that step in the DataLoader's workers "
            "(torchvision's %s in the Dataset, before collation) and compile the rest with "
            "prefetch.transforms.v2.Compose (it compiles %s)"
            % (name, "name" if name in ("Transform", "InterpolationMode") else "transform", name,
               ", ".join(_COMPILED)))
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


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
                    antialias=first.antialias, max_size=first.max_size)
    if isinstance(first, CenterCrop):
        return dict(crop=first.size, center_crop=True)
    return dict(crop=first.size, padding=first.padding, fill=first.fill,
                pad_if_needed=first.pad_if_needed)

