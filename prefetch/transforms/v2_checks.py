"""Argument checks of :mod:`prefetch.transforms.v2`'s classes, made when a step is built (as
torchvision checks its own), each failure naming the class and the argument in one shape:
``"prefetch: <Class> <arg> must be <expected>, got <actual!r>"``; and the names torchvision's v2
has that prefetch does not compile, for the module's ``__getattr__``.
"""
import math
import numbers

import numpy as np
import torch

__all__ = ["ArgumentError", "fail", "whole_number", "size", "probability", "flag", "finite",
           "pair", "jitter", "TORCHVISION_V2_NAMES", "is_torchvision_object"]

# torchvision.transforms.v2's public names (torchvision 0.15 to 0.23): a missing attribute of
# prefetch.transforms.v2 in this list is a step prefetch does not compile yet, not a typo.
TORCHVISION_V2_NAMES = frozenset("""
    AugMix AutoAugment AutoAugmentPolicy CenterCrop ClampBoundingBoxes ClampKeyPoints ColorJitter
    Compose ConvertBoundingBoxFormat ConvertImageDtype CutMix ElasticTransform FiveCrop
    GaussianBlur GaussianNoise Grayscale Identity InterpolationMode JPEG Lambda
    LinearTransformation MixUp Normalize PILToTensor Pad RGB RandAugment RandomAdjustSharpness
    RandomAffine RandomApply RandomAutocontrast RandomChannelPermutation RandomChoice RandomCrop
    RandomEqualize RandomErasing RandomGrayscale RandomHorizontalFlip RandomInvert RandomIoUCrop
    RandomOrder RandomPerspective RandomPhotometricDistort RandomPosterize RandomResize
    RandomResizedCrop RandomRotation RandomShortestSize RandomSolarize RandomVerticalFlip
    RandomZoomOut Resize SanitizeBoundingBoxes SanitizeKeyPoints ScaleJitter TenCrop ToDtype
    ToImage ToPILImage ToPureTensor ToTensor Transform TrivialAugmentWide
    UniformTemporalSubsample
""".split())


class ArgumentError(ValueError):
    """A bad argument of a v2 step (a ValueError, as torchvision raises for its own)."""


def fail(cls, arg, expected, value):
    """The one message shape: ``prefetch: <Class> <arg> must be <expected>, got <value!r>``."""
    raise ArgumentError("prefetch: %s %s must be %s, got %r" % (cls, arg, expected, value))


def _is_number(value):
    return isinstance(value, (numbers.Real, np.floating, np.integer)) and \
        not isinstance(value, (bool, np.bool_))


def whole_number(value, cls, arg, low=None, high=None):
    """An int (numpy's too; not a bool, not a float: torchvision's sizes and counts are ints) in
    ``[low, high]``."""
    ok = isinstance(value, (numbers.Integral, np.integer)) and not isinstance(value, (bool, np.bool_))
    if ok:
        value = int(value)
        ok = (low is None or value >= low) and (high is None or value <= high)
    if not ok:
        bounds = (" >= %d" % low if high is None else " in [%d, %d]" % (low, high)) \
            if low is not None else ""
        fail(cls, arg, "an int%s" % bounds, value)
    return value


def size(value, cls, arg="size", pair_allowed=True):
    """torchvision's ``_setup_size``: an int, or a sequence of one or two ints (>= 1) -> an int
    (square) or ``(h, w)``."""
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    expected = "an int >= 1 or (h, w) of them" if pair_allowed else "an int >= 1"
    if isinstance(value, (list, tuple)):
        if len(value) != 2 or not pair_allowed:
            fail(cls, arg, expected, value)
        try:
            return tuple(whole_number(v, cls, arg, 1) for v in value)
        except ArgumentError:
            fail(cls, arg, expected, value)
    try:
        return whole_number(value, cls, arg, 1)
    except ArgumentError:
        fail(cls, arg, expected, value)


def finite(value, cls, arg, low=None, high=None, low_open=False):
    """A finite real number (not a bool) in the range given, as a float."""
    ok = _is_number(value) and math.isfinite(float(value))
    if ok:
        f = float(value)
        ok = (low is None or (f > low if low_open else f >= low)) and (high is None or f <= high)
    if not ok:
        if low is not None and high is not None:
            expected = "a finite number in %s%g, %g]" % ("(" if low_open else "[", low, high)
        elif low is not None:
            expected = "a finite number %s %g" % (">" if low_open else ">=", low)
        else:
            expected = "a finite number"
        fail(cls, arg, expected, value)
    return float(value)


def probability(value, cls, arg="p"):
    """A probability: a finite number in [0, 1] (a 0-d tensor too)."""
    if isinstance(value, torch.Tensor) and value.dim() == 0 and value.dtype != torch.bool:
        value = value.item()
    return finite(value, cls, arg, 0.0, 1.0) if _is_number(value) else \
        fail(cls, arg, "a probability in [0, 1]", value)


def flag(value, cls, arg):
    """True or False (numpy's too): a string or a number would silently mean True."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    fail(cls, arg, "True or False", value)


def pair(value, cls, arg, low=None, high=None, low_open=False):
    """A ``(min, max)`` sequence of two finite numbers in range with ``min <= max``."""
    if low is not None and high is not None:
        where = " in %s%g, %g]" % ("(" if low_open else "[", low, high)
    elif low is not None:
        where = " %s %g" % (">" if low_open else ">=", low)
    else:
        where = "" if high is None else " <= %g" % high
    expected = "(min, max) of finite numbers%s with min <= max" % where
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        fail(cls, arg, expected, value)
    try:
        lo, hi = (finite(v, cls, arg, low, high, low_open) for v in value)
    except ArgumentError:
        fail(cls, arg, expected, value)
    if lo > hi:
        fail(cls, arg, expected, value)
    return lo, hi


def jitter(value, cls, arg, center=1.0, bound=(0.0, math.inf), clip_first_on_zero=True):
    """ColorJitter's factor (torchvision's ``ColorJitter._check_input``): a number ``v >= 0``
    meaning ``[center - v, center + v]`` (its lower end clipped at 0 for brightness, contrast and
    saturation), or a ``(min, max)`` pair inside ``bound``. Returns the argument as given (the
    policy reads it), after checking it."""
    lo_bound, hi_bound = bound
    if _is_number(value):
        v = finite(value, cls, arg, 0.0)
        if center - v < lo_bound and not clip_first_on_zero or center + v > hi_bound:
            fail(cls, arg, "a number in [0, %g]" % min(center - lo_bound, hi_bound - center), value)
        return value
    if isinstance(value, (list, tuple)):
        pair(value, cls, arg, lo_bound, None if math.isinf(hi_bound) else hi_bound)
        return value
    fail(cls, arg, "a number >= 0 or (min, max)", value)


def is_torchvision_object(step):
    """Whether ``step`` is one of torchvision's objects (told by its class's module, without
    importing torchvision)."""
    return type(step).__module__.split(".")[0] == "torchvision"
