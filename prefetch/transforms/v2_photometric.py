"""The photometric steps of :mod:`prefetch.transforms.v2` (:attr:`Phase.PHOTOMETRIC`): on the
uint8 window, before ``ToDtype``, as torchvision's recipes apply them. Today one policy per
recipe — ``TrivialAugmentWide``, ``RandAugment``, ``AutoAugment`` or ``ColorJitter`` — each
compiled into a :class:`~prefetch.transforms.PolicyAugment` stage (one fused kernel per op kind
and step). Arguments and defaults are torchvision's
(``torchvision/transforms/v2/_auto_augment.py``, ``_color.py``).

A photometric step that may repeat (a ``RandomGrayscale``) leaves ``slot`` None and adds its own
stage with :meth:`Plan.add_stage`.
"""
import enum
from typing import Optional, Sequence, Tuple, Union

from . import arguments
from .policy_augment import PolicyAugment
from .v2_geometry import InterpolationMode, interpolation_mode
from .v2_plan import Phase, Plan, Spec

__all__ = ["TrivialAugmentWide", "RandAugment", "AutoAugment", "ColorJitter"]

Fill = Union[None, float, Sequence[float]]
Jitter = Union[None, float, Tuple[float, float]]


class AutoAugmentPolicy(enum.Enum):
    """torchvision's AutoAugment policies by name (``AutoAugment`` compiles ``IMAGENET``)."""

    IMAGENET = "imagenet"
    CIFAR10 = "cifar10"
    SVHN = "svhn"


def _fill(value, what: str):
    """A policy's fill: None, or one number or one per channel, each in [0, 255]; kept as given
    (the compiled PolicyAugment takes it)."""
    arguments.fill_value(what, "fill", value, channels=(1, 3))  # (the policies' ops take 1 or 3)
    return value


class _Policy(Spec):
    """One policy per recipe, compiled into the PolicyAugment :meth:`policy` builds."""

    phase = Phase.PHOTOMETRIC
    rule = ("one policy, on uint8 images before ToDtype (as torchvision's recipes apply it)")
    slot = "the policy (a PolicyAugment on the uint8 images)"

    def policy(self, seed: Optional[int]) -> PolicyAugment:
        """The compiled policy.

        Args:
            seed: its seed (None: drawn).

        Returns:
            A PolicyAugment on NCHW uint8 images.
        """
        raise NotImplementedError

    def _check(self) -> None:
        """The compiled policy built once now, so whatever else it refuses is refused here."""
        self.policy(0)

    def contribute(self, plan: Plan) -> None:
        plan.add_stage(self.policy)


_INTERPOLATIONS = ("nearest", "bilinear")


class TrivialAugmentWide(_Policy):
    """torchvision's ``TrivialAugmentWide``: one op of its wide set per image, at a uniform
    magnitude bin.

    Args:
        num_magnitude_bins: the bins, an int >= 1 (torchvision: 31).
        interpolation: ``"nearest"`` (torchvision's default) or ``"bilinear"``, for the
            geometric ops.
        fill: the geometric ops' outside, None (0), a number or one per channel in [0, 255].

    Raises:
        ValueError: an argument outside those (TypeError too for the wrong type).
    """

    def __init__(self, num_magnitude_bins: int = 31,
                 interpolation: Union[InterpolationMode, str] = "nearest", fill: Fill = None):
        self.num_magnitude_bins = arguments.integer("TrivialAugmentWide", "num_magnitude_bins",
                                                    num_magnitude_bins, low=1)
        self.interpolation = interpolation_mode(interpolation, _INTERPOLATIONS,
                                                "TrivialAugmentWide")
        self.fill = _fill(fill, "TrivialAugmentWide")
        self._check()

    def policy(self, seed: Optional[int]) -> PolicyAugment:
        return PolicyAugment("trivial_augment_wide", num_magnitude_bins=self.num_magnitude_bins,
                             interpolation=self.interpolation, fill=self.fill, seed=seed,
                             layout="NCHW")


class RandAugment(_Policy):
    """torchvision's ``RandAugment``: ``num_ops`` ops per image, each drawn from its set, at
    ``magnitude``.

    Args:
        num_ops: ops per image, an int >= 0 (torchvision: 2).
        magnitude: the bin index, an int in [0, num_magnitude_bins - 1] (torchvision: 9).
        num_magnitude_bins: the bins, an int >= 1 (torchvision: 31).
        interpolation: ``"nearest"`` (torchvision's default) or ``"bilinear"``.
        fill: None (0), a number or one per channel in [0, 255].

    Raises:
        ValueError: an argument outside those (TypeError too for the wrong type).
    """

    def __init__(self, num_ops: int = 2, magnitude: int = 9, num_magnitude_bins: int = 31,
                 interpolation: Union[InterpolationMode, str] = "nearest", fill: Fill = None):
        self.num_ops = arguments.integer("RandAugment", "num_ops", num_ops, low=0)
        self.num_magnitude_bins = arguments.integer("RandAugment", "num_magnitude_bins",
                                                    num_magnitude_bins, low=1)
        # torchvision indexes its magnitude table (num_magnitude_bins values) with it
        self.magnitude = arguments.integer("RandAugment", "magnitude", magnitude, low=0,
                                           high=self.num_magnitude_bins - 1)
        self.interpolation = interpolation_mode(interpolation, _INTERPOLATIONS, "RandAugment")
        self.fill = _fill(fill, "RandAugment")
        self._check()

    def policy(self, seed: Optional[int]) -> PolicyAugment:
        return PolicyAugment("rand_augment", num_ops=self.num_ops, magnitude=self.magnitude,
                             num_magnitude_bins=self.num_magnitude_bins,
                             interpolation=self.interpolation, fill=self.fill, seed=seed,
                             layout="NCHW")


class AutoAugment(_Policy):
    """torchvision's ``AutoAugment`` with its ImageNet policy (one of its 25 sub-policies per
    image).

    Args:
        policy: ``AutoAugmentPolicy.IMAGENET`` or ``"imagenet"`` (torchvision's default).
        interpolation: ``"nearest"`` (torchvision's default) or ``"bilinear"``.
        fill: None (0), a number or one per channel in [0, 255].

    Raises:
        ValueError: another policy (CIFAR10, SVHN), or another bad argument.
    """

    def __init__(self, policy: Union[AutoAugmentPolicy, str] = AutoAugmentPolicy.IMAGENET.value,
                 interpolation: Union[InterpolationMode, str] = "nearest", fill: Fill = None):
        name = getattr(policy, "value", policy)
        if not isinstance(name, str) or name.lower() != "imagenet":
            arguments.fail("AutoAugment", "policy", "the ImageNet policy "
                           "(AutoAugmentPolicy.IMAGENET)", policy)
        self.interpolation = interpolation_mode(interpolation, _INTERPOLATIONS, "AutoAugment")
        self.fill = _fill(fill, "AutoAugment")
        self._check()

    def policy(self, seed: Optional[int]) -> PolicyAugment:
        return PolicyAugment("auto_augment", interpolation=self.interpolation, fill=self.fill,
                             seed=seed, layout="NCHW")


class ColorJitter(_Policy):
    """torchvision's ``ColorJitter``: brightness, contrast, saturation and hue factors drawn
    per image, applied in a random order per image.

    Args:
        brightness, contrast, saturation: None or 0 (no jitter; torchvision v2's default is
            None, its ``_check_input`` gives None for 0 too), a factor v >= 0 meaning
            [max(0, 1 - v), 1 + v], or a (min, max) with 0 <= min <= max.
        hue: None or 0, a number in [0, 0.5] meaning [-v, v], or a (min, max) in [-0.5, 0.5].

    Raises:
        ValueError: a value outside those, as torchvision's ``ColorJitter._check_input``
            (TypeError too for the wrong type).
    """

    def __init__(self, brightness: Jitter = 0, contrast: Jitter = 0, saturation: Jitter = 0,
                 hue: Jitter = 0):
        # Kept as given (the compiled policy reads them); _check() checks them as torchvision's
        # ColorJitter._check_input does (arguments.jitter_range).
        self.brightness, self.contrast = brightness, contrast
        self.saturation, self.hue = saturation, hue
        self._check()

    def policy(self, seed: Optional[int]) -> PolicyAugment:
        return PolicyAugment("color_jitter", brightness=self.brightness, contrast=self.contrast,
                             saturation=self.saturation, hue=self.hue, seed=seed, layout="NCHW")
