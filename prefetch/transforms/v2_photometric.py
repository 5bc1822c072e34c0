"""The photometric steps of :mod:`prefetch.transforms.v2` (:attr:`Phase.PHOTOMETRIC`): on the
uint8 window, before ``ToDtype``, as torchvision's recipes apply them. One policy per recipe —
``TrivialAugmentWide``, ``RandAugment``, ``AutoAugment`` or ``ColorJitter`` (timm's augmentation
steps, :mod:`prefetch.transforms.timm`, have a slot of their own) — and any number of
torchvision's single-op random transforms (``RandomGrayscale``, ``Grayscale``,
``RandomSolarize``, ``RandomInvert``, ``RandomPosterize``, ``RandomAdjustSharpness``,
``RandomAutocontrast``, ``RandomEqualize``) and ``RandomApply`` over them and ``ColorJitter`` (the
self-supervised recipes' ``RandomApply([ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8)``), each
compiled into a :class:`~prefetch.transforms.PolicyAugment` stage (one fused kernel per op kind
and step, each sample its own draws). Arguments and defaults are torchvision's
(``torchvision/transforms/v2/_auto_augment.py``, ``_color.py``, ``_container.py``).

``GaussianBlur`` (and ``RandomApply([GaussianBlur(...)], p)``) is a
:class:`~prefetch.transforms.GaussianBlurAugment` stage: one fused blur, each image its own sigma.

``RandomAffine`` and ``RandomRotation`` go here too: on the uint8 window after the crop (an
:class:`~prefetch.transforms.AffineAugment` stage, one fused warp, each image its own draw), as
the policies' geometric ops do; written before the crop they are refused by the order.

A photometric step that may repeat leaves ``slot`` None and adds its own stage with
:meth:`Plan.add_stage`.
"""
import enum
from typing import ClassVar, Optional, Sequence, Tuple, Union

from . import arguments
from .affine_augment import AffineAugment
from .augmix import AugMixAugment
from .blur_augment import GaussianBlurAugment, kernel_size_pair, sigma_range
from .policy_augment import PolicyAugment
from .v2_geometry import InterpolationMode, interpolation_mode
from .v2_plan import Phase, Plan, Spec

__all__ = ["TrivialAugmentWide", "RandAugment", "AutoAugment", "ColorJitter", "RandomGrayscale",
           "Grayscale", "RandomSolarize", "RandomInvert", "RandomPosterize",
           "RandomAdjustSharpness", "RandomAutocontrast", "RandomEqualize", "RandomApply",
           "RandomAffine", "RandomRotation", "RandomOrder", "AugMix", "GaussianBlur"]

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


class PolicyStep(Spec):
    """One policy per recipe, compiled into the stage :meth:`policy` builds (a PolicyAugment here;
    timm's RandAugment, AutoAugment and AugMix in :mod:`prefetch.transforms.timm.steps`)."""

    phase = Phase.PHOTOMETRIC
    rule = ("one policy, on uint8 images before ToDtype (as torchvision's recipes apply it)")
    slot = "the policy (a PolicyAugment on the uint8 images)"

    def policy(self, seed: Optional[int]) -> PolicyAugment:
        """The compiled policy.

        Args:
            seed: its seed (None: drawn).

        Returns:
            The stage on NCHW uint8 images (a PolicyAugment for torchvision's policies).
        """
        raise NotImplementedError

    def _check(self) -> None:
        """The compiled policy built once now, so whatever else it refuses is refused here."""
        self.policy(0)

    def contribute(self, plan: Plan) -> None:
        plan.add_stage(self.policy)


_INTERPOLATIONS = ("nearest", "bilinear")


class TrivialAugmentWide(PolicyStep):
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


class RandAugment(PolicyStep):
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


class AutoAugment(PolicyStep):
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


class ColorJitter(PolicyStep):
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
        return PolicyAugment("color_jitter", **self.table_step()[1], seed=seed, layout="NCHW")

    def table_step(self) -> Tuple[str, dict]:
        """This step as a draw of a :class:`RandomApply`'s chain
        (:func:`~prefetch.transforms.policies.chain`).

        Returns:
            ``("color_jitter", its options)``.
        """
        return "color_jitter", dict(brightness=self.brightness, contrast=self.contrast,
                                    saturation=self.saturation, hue=self.hue)


class AugMix(PolicyStep):
    """torchvision's ``AugMix``: each image mixed with ``mixture_width`` chains of its policy ops
    by Dirichlet weights (:class:`~prefetch.transforms.AugMixAugment`, each image its own
    draws), as one policy of the recipe.

    Args:
        severity: an int in [1, 10] (torchvision: 3).
        mixture_width: an int >= 1 (torchvision: 3).
        chain_depth: an int; <= 0 draws each chain's depth in [1, 3] (torchvision: -1).
        alpha: > 0 (torchvision: 1.0).
        all_ops: with the colour ops (torchvision: True).
        interpolation: ``"bilinear"`` (torchvision's default for AugMix) or ``"nearest"``.
        fill: None (0), a number or one per channel in [0, 255].

    Raises:
        ValueError: an argument outside those (TypeError too for a wrong type).
    """

    def __init__(self, severity: int = 3, mixture_width: int = 3, chain_depth: int = -1,
                 alpha: float = 1.0, all_ops: bool = True,
                 interpolation: Union[InterpolationMode, str] = "bilinear", fill: Fill = None):
        self.severity, self.mixture_width, self.chain_depth = severity, mixture_width, chain_depth
        self.alpha, self.all_ops = alpha, all_ops
        self.interpolation = interpolation_mode(interpolation, _INTERPOLATIONS, "AugMix")
        self.fill = _fill(fill, "AugMix")
        self._check()

    def policy(self, seed: Optional[int]) -> AugMixAugment:
        return AugMixAugment(self.severity, self.mixture_width, self.chain_depth, self.alpha,
                             self.all_ops, interpolation=self.interpolation, fill=self.fill,
                             seed=seed, layout="NCHW", name="AugMix")


class _RandomOp(Spec):
    """One of torchvision's single-op random transforms: each image gets the op with probability
    ``p``, drawn per image (:func:`~prefetch.transforms.policies.random_op`), as its own
    PolicyAugment stage. A subclass sets its parameter in ``__init__`` and, where its key in
    ``policies.RANDOM_OPS`` is not the class's name, ``op``."""

    phase = Phase.PHOTOMETRIC
    rule = "on uint8 images before ToDtype, any number of them"
    p: float = 0.5
    op: ClassVar[Optional[str]] = None  # the key in policies.RANDOM_OPS; None: the class's name

    @property
    def parameter(self) -> float:
        """What the step passes its op (0 for the ops that take none)."""
        return 0.0

    def table_step(self) -> Tuple[str, dict]:
        """This step as a draw of a :class:`RandomApply`'s chain.

        Returns:
            ``("random_op", its options)``.
        """
        return "random_op", dict(op=self.op or type(self).__name__, p=self.p, parameter=self.parameter)

    def policy(self, seed: Optional[int]) -> PolicyAugment:
        """The compiled step.

        Args:
            seed: its seed (None: drawn).

        Returns:
            The stage on NCHW uint8 images (a PolicyAugment for torchvision's policies).
        """
        return PolicyAugment("random_op", **self.table_step()[1], seed=seed, layout="NCHW")

    def contribute(self, plan: Plan) -> None:
        plan.add_stage(self.policy)


class _ProbabilityOnly(_RandomOp):
    """A single-op random transform whose one argument is ``p`` (torchvision's default 0.5)."""

    def __init__(self, p: float = 0.5):
        self.p = arguments.probability(type(self).__name__, "p", p)


class RandomGrayscale(_RandomOp):
    """torchvision's ``RandomGrayscale``: each image made grey with probability ``p``, keeping
    its channels (3 equal channels; a 1-channel image is unchanged): ``floor(0.2989 r + 0.587 g +
    0.114 b)`` in float32, torchvision's ``rgb_to_grayscale`` (run as ``adjust_saturation`` with
    factor 0, which torchvision computes as that floored grey).

    Args:
        p: the probability, in [0, 1] (torchvision: 0.1).

    Raises:
        ValueError: p outside [0, 1] (TypeError too for a wrong type).
    """

    def __init__(self, p: float = 0.1):
        self.p = arguments.probability("RandomGrayscale", "p", p)


class Grayscale(_RandomOp):
    """torchvision's ``Grayscale``: every image made grey (as :class:`RandomGrayscale` with p 1).

    Args:
        num_output_channels: 3 (the image keeps 3 equal channels). torchvision's default 1
            changes the images' channel count, which the steps after it (``Normalize``'s mean and
            std, the batch's layout) are not compiled for: refused, naming 3.

    Raises:
        ValueError: num_output_channels other than 3.
    """

    op = "RandomGrayscale"

    def __init__(self, num_output_channels: int = 1):
        if num_output_channels != 3 or isinstance(num_output_channels, bool):
            arguments.fail("Grayscale", "num_output_channels",
                           "3 (prefetch keeps the images' channels: 1 would change them; with "
                           "3-channel images give num_output_channels=3)", num_output_channels)
        self.num_output_channels = 3
        self.p = 1.0


class RandomSolarize(_RandomOp):
    """torchvision's ``RandomSolarize``: with probability ``p`` each image's values at or above
    ``threshold`` inverted (``255 - x``).

    Args:
        threshold: a number at most 255 (the uint8 images' maximum, as torchvision's
            ``solarize`` requires).
        p: in [0, 1] (torchvision: 0.5).

    Raises:
        ValueError: a threshold above 255 or not finite, p outside [0, 1] (TypeError too for a
            wrong type).
    """

    def __init__(self, threshold: float, p: float = 0.5):
        self.threshold = arguments.number("RandomSolarize", "threshold", threshold, high=255.0,
                                          expected="a number at most 255 (uint8 images)")
        self.p = arguments.probability("RandomSolarize", "p", p)

    @property
    def parameter(self) -> float:
        return self.threshold


class RandomInvert(_ProbabilityOnly):
    """torchvision's ``RandomInvert``: each image inverted (``255 - x``) with probability ``p``.

    Args:
        p: in [0, 1] (torchvision: 0.5).

    Raises:
        ValueError: p outside [0, 1] (TypeError too for a wrong type).
    """


class RandomPosterize(_RandomOp):
    """torchvision's ``RandomPosterize``: each image's values kept to their top ``bits`` bits
    with probability ``p``.

    Args:
        bits: an int in [0, 8].
        p: in [0, 1] (torchvision: 0.5).

    Raises:
        ValueError: bits outside [0, 8], p outside [0, 1] (TypeError too for a wrong type).
    """

    def __init__(self, bits: int, p: float = 0.5):
        self.bits = arguments.integer("RandomPosterize", "bits", bits, low=0, high=8)
        self.p = arguments.probability("RandomPosterize", "p", p)

    @property
    def parameter(self) -> float:
        return float(self.bits)


class RandomAdjustSharpness(_RandomOp):
    """torchvision's ``RandomAdjustSharpness``: with probability ``p`` each image blended with
    its 3x3-smoothed version (``adjust_sharpness``; 0 blurs, 1 keeps, 2 sharpens).

    Args:
        sharpness_factor: a number >= 0.
        p: in [0, 1] (torchvision: 0.5).

    Raises:
        ValueError: a negative or non-finite factor, p outside [0, 1] (TypeError too for a
            wrong type).
    """

    def __init__(self, sharpness_factor: float, p: float = 0.5):
        self.sharpness_factor = arguments.number("RandomAdjustSharpness", "sharpness_factor",
                                                 sharpness_factor, low=0.0,
                                                 expected="a number >= 0")
        self.p = arguments.probability("RandomAdjustSharpness", "p", p)

    @property
    def parameter(self) -> float:
        return self.sharpness_factor


class RandomAutocontrast(_ProbabilityOnly):
    """torchvision's ``RandomAutocontrast``: with probability ``p`` each channel of each image
    stretched to [0, 255] (a constant channel kept).

    Args:
        p: in [0, 1] (torchvision: 0.5).

    Raises:
        ValueError: p outside [0, 1] (TypeError too for a wrong type).
    """


class RandomEqualize(_ProbabilityOnly):
    """torchvision's ``RandomEqualize``: with probability ``p`` each channel of each image
    histogram-equalised.

    Args:
        p: in [0, 1] (torchvision: 0.5).

    Raises:
        ValueError: p outside [0, 1] (TypeError too for a wrong type).
    """


class GaussianBlur(Spec):
    """torchvision's ``GaussianBlur``: each image blurred by ``gaussian_blur`` with its own sigma,
    uniform in ``sigma`` (torchvision draws one per call: per image in its recipes), the same for
    both sides; reflect padding, rounded to uint8. On the uint8 window after the crop: a
    :class:`~prefetch.transforms.GaussianBlurAugment` stage, one fused blur. Within a pixel of
    torchvision's output where its float32 value lies within about 1e-3 of a half
    (:func:`prefetch.ops.gaussian_blur`).

    Args:
        kernel_size: an odd positive int or (x, y); ``kernel_size // 2`` must be below the
            images' sides when it runs (torch's reflect padding).
        sigma: a number s > 0 (fixed) or (min, max) with 0 < min <= max (torchvision: (0.1, 2.0)).

    Raises:
        ValueError: an argument outside those, naming it (TypeError too for a wrong type).
    """

    phase = Phase.PHOTOMETRIC
    rule = "on uint8 images before ToDtype, any number of them"

    def __init__(self, kernel_size: Union[int, Sequence[int]],
                 sigma: Union[float, Sequence[float]] = (0.1, 2.0)):
        self.kernel_size = kernel_size_pair("GaussianBlur", kernel_size)
        self.sigma = sigma_range("GaussianBlur", sigma)

    def policy(self, seed: Optional[int], p: float = 1.0) -> GaussianBlurAugment:
        """The compiled step, each image blurred with probability ``p``.

        Args:
            seed: its seed (None: drawn).
            p: the probability (a RandomApply's).

        Returns:
            A GaussianBlurAugment on NCHW uint8 images.
        """
        return GaussianBlurAugment(self.kernel_size, self.sigma, p=p, seed=seed, layout="NCHW",
                                   name="GaussianBlur")

    def contribute(self, plan: Plan) -> None:
        plan.add_stage(self.policy)


# The steps a RandomApply, RandomChoice or RandomOrder takes: those with a table_step.
TABLE_STEPS = (ColorJitter, _RandomOp)


def _table_steps(cls: str, transforms) -> list:
    """A container's steps, each one with a ``table_step`` (:data:`TABLE_STEPS`), refused naming
    the first other one and its position."""
    if isinstance(transforms, Spec) or not hasattr(transforms, "__iter__"):
        arguments.fail(cls, "transforms", "a list of steps", transforms,
                       arguments.ArgumentTypeError)
    steps = list(transforms)
    for k, step in enumerate(steps):
        if not isinstance(step, TABLE_STEPS):
            alone = " (RandomApply: or a GaussianBlur alone)" if cls == "RandomApply" else ""
            arguments.fail(cls, "transforms[%d]" % k, "ColorJitter or one of " + ", ".join(
                c.__name__ for c in _RandomOp.__subclasses__()) + alone, type(step).__name__)
    return steps


class RandomApply(Spec):
    """torchvision's ``RandomApply``: all of ``transforms`` or none, drawn per image with
    probability ``p`` (torchvision draws ``torch.rand(1) < p`` per call: per image in its
    recipes); each step inside keeps its own draws (a RandomGrayscale's p among them). The steps
    are one table of ops (:func:`~prefetch.transforms.policies.chain`), one PolicyAugment stage:
    ``RandomApply([ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8)`` is one colour pass.

    Args:
        transforms: a list of this module's photometric steps: ``ColorJitter`` and the
            single-op random transforms above (not the policies, whose ops depend on the image's
            size, nor the geometry or float steps), or a ``GaussianBlur`` alone (its own stage,
            each image blurred with probability ``p``: BYOL's and SimCLR's blur).
        p: in [0, 1] (torchvision: 0.5).

    Raises:
        ValueError: a step of another kind (naming it and its position), p outside [0, 1]
            (TypeError too for a wrong type).
    """

    phase = Phase.PHOTOMETRIC
    rule = "on uint8 images before ToDtype, any number of them"

    def __init__(self, transforms: Sequence[Spec], p: float = 0.5):
        steps = list(transforms) if isinstance(transforms, (list, tuple)) else transforms
        if isinstance(steps, list) and len(steps) == 1 and isinstance(steps[0], GaussianBlur):
            self.transforms = steps  # the blur with probability p: its own stage
        else:
            self.transforms = _table_steps("RandomApply", transforms)
        self.p = arguments.probability("RandomApply", "p", p)

    def policy(self, seed: Optional[int]) -> Union[PolicyAugment, GaussianBlurAugment]:
        """The compiled step.

        Args:
            seed: its seed (None: drawn).

        Returns:
            A PolicyAugment on NCHW uint8 images; for a GaussianBlur alone, a
            GaussianBlurAugment blurring each image with probability ``p``.
        """
        if isinstance(self.transforms[0], GaussianBlur):
            return self.transforms[0].policy(seed, p=self.p)
        return PolicyAugment("chain", steps=[t.table_step() for t in self.transforms], p=self.p,
                             seed=seed, layout="NCHW")

    def contribute(self, plan: Plan) -> None:
        plan.add_stage(self.policy)


def _number_or_range(cls: str, name: str, value) -> Tuple[float, float]:
    """torchvision's ``_setup_number_or_seq``: a number v >= 0 is ``(-v, v)``; a pair is
    ``(min, max)`` with min <= max."""
    if arguments.is_number(value):
        v = arguments.number(cls, name, value, low=0.0, expected="a number >= 0 or a (min, max)")
        return (-v, v)
    return arguments.number_pair(cls, name, value)


def _fill_of(cls: str, fill):
    """torchvision's ``fill`` for uint8 images: 0 (its default) or None is zeros; a number or one
    per channel in [0, 255]."""
    return arguments.fill_value(cls, "fill", fill, channels=(1, 3))


class RandomAffine(Spec):
    """torchvision's ``RandomAffine``: each image rotated, translated, scaled and sheared by its
    own draw (angle uniform in ``degrees``; translation ``round(uniform(-t * size, t * size))``
    pixels; scale uniform in ``scale``; shear uniform in its ranges), on the uint8 window after
    the crop: an :class:`~prefetch.transforms.AffineAugment` stage, one fused warp.

    Args:
        degrees: a number d >= 0 (the range (-d, d)) or a (min, max).
        translate: None or (a, b), the largest translation as a fraction of the width and the
            height, each in [0, 1].
        scale: None or (min, max), 0 < min <= max.
        shear: None, a number s >= 0 (x shear in (-s, s)), a (min, max) of the x shear, or four
            values: the x then the y shear's ranges.
        interpolation: ``"nearest"`` (torchvision's default) or ``"bilinear"`` (bicubic: not
            yet).
        fill: 0 (torchvision's default), a number or one per channel in [0, 255].
        center: None (the image's centre) or (x, y) in pixels.

    Raises:
        ValueError: an argument outside those, naming it (TypeError too for a wrong type).
    """

    phase = Phase.PHOTOMETRIC
    rule = ("on the uint8 window after the crop and before ToDtype, any number of them "
            "(prefetch cannot warp the image before its crop)")

    def __init__(self, degrees: Union[float, Sequence[float]],
                 translate: Optional[Sequence[float]] = None,
                 scale: Optional[Sequence[float]] = None,
                 shear: Union[None, float, Sequence[float]] = None,
                 interpolation: Union[InterpolationMode, str] = "nearest", fill: Fill = 0,
                 center: Optional[Sequence[float]] = None):
        cls = "RandomAffine"
        self.degrees = _number_or_range(cls, "degrees", degrees)
        self.translate = translate
        self.scale = scale
        self.shear = None if shear is None else (
            _number_or_range(cls, "shear", shear) if arguments.is_number(shear) else shear)
        self.interpolation = interpolation_mode(interpolation, _INTERPOLATIONS, cls)
        self.fill = _fill_of(cls, fill)
        self.center = center
        self.policy(0)  # whatever AffineAugment refuses, refused now (naming RandomAffine)

    def policy(self, seed: Optional[int]) -> AffineAugment:
        """The compiled step.

        Args:
            seed: its seed (None: drawn).

        Returns:
            An AffineAugment on NCHW uint8 images.
        """
        return AffineAugment(self.degrees, translate=self.translate, scale=self.scale,
                             shear=self.shear, interpolation=self.interpolation, fill=self.fill,
                             center=self.center, seed=seed, layout="NCHW", name="RandomAffine")

    def contribute(self, plan: Plan) -> None:
        plan.add_stage(self.policy)


class RandomRotation(Spec):
    """torchvision's ``RandomRotation``: each image rotated by its own angle, uniform in
    ``degrees`` (torchvision's ``rotate``: counter-clockwise, exact quarter turns as copies), on
    the uint8 window after the crop: an :class:`~prefetch.transforms.AffineAugment` stage.

    Args:
        degrees: a number d >= 0 (the range (-d, d)) or a (min, max).
        interpolation: ``"nearest"`` (torchvision's default) or ``"bilinear"``.
        expand: False. True (torchvision's larger output holding the whole rotated image)
            changes the image's size: refused.
        center: None (the image's centre) or (x, y) in pixels.
        fill: 0 (torchvision's default), a number or one per channel in [0, 255].

    Raises:
        ValueError: an argument outside those, naming it (TypeError too for a wrong type).
    """

    phase = Phase.PHOTOMETRIC
    rule = RandomAffine.rule

    def __init__(self, degrees: Union[float, Sequence[float]],
                 interpolation: Union[InterpolationMode, str] = "nearest",
                 expand: bool = False, center: Optional[Sequence[float]] = None,
                 fill: Fill = 0):
        cls = "RandomRotation"
        self.degrees = _number_or_range(cls, "degrees", degrees)
        if arguments.flag(cls, "expand", expand):
            arguments.fail(cls, "expand", "False (expand=True changes the images' size)", expand)
        self.interpolation = interpolation_mode(interpolation, _INTERPOLATIONS, cls)
        self.center = center
        self.fill = _fill_of(cls, fill)
        self.policy(0)

    def policy(self, seed: Optional[int]) -> AffineAugment:
        """The compiled step.

        Args:
            seed: its seed (None: drawn).

        Returns:
            An AffineAugment (``rotation=True``) on NCHW uint8 images.
        """
        return AffineAugment(self.degrees, interpolation=self.interpolation, fill=self.fill,
                             center=self.center, rotation=True, seed=seed, layout="NCHW",
                             name="RandomRotation")

    def contribute(self, plan: Plan) -> None:
        plan.add_stage(self.policy)


class RandomOrder(Spec):
    """torchvision's ``RandomOrder``: all of ``transforms``, each image in its own random order
    (torchvision applies them in ``torch.randperm`` order per call: per image in its recipes);
    each step keeps its own draws. One table of ops, one PolicyAugment stage
    (:func:`~prefetch.transforms.policies.random_order`).

    Args:
        transforms: a list of this module's photometric steps: ``ColorJitter`` and the single-op
            random transforms.

    Raises:
        ValueError: a step of another kind (naming it and its position) (TypeError too for a
            wrong type).
    """

    phase = Phase.PHOTOMETRIC
    rule = RandomApply.rule

    def __init__(self, transforms: Sequence[Spec]):
        self.transforms = _table_steps("RandomOrder", transforms)

    def policy(self, seed: Optional[int]) -> PolicyAugment:
        """The compiled step.

        Args:
            seed: its seed (None: drawn).

        Returns:
            The stage on NCHW uint8 images (a PolicyAugment for torchvision's policies).
        """
        return PolicyAugment("random_order", steps=[t.table_step() for t in self.transforms],
                             seed=seed, layout="NCHW")

    def contribute(self, plan: Plan) -> None:
        plan.add_stage(self.policy)
