"""The geometry steps of :mod:`prefetch.transforms.v2` (:attr:`Phase.GEOMETRY`): the window —
one of ``RandomResizedCrop``, ``Resize`` + ``CenterCrop``, ``CenterCrop``, ``RandomCrop`` — and
the flips, each compiled into :class:`~prefetch.FusedAugment`'s arguments. Arguments and defaults
are torchvision's (``torchvision/transforms/v2/_geometry.py``); what the fused window cannot do
is refused naming the class and the argument.
"""
import enum
from typing import Optional, Sequence, Tuple, Union

from . import arguments
from .v2_plan import Phase, Plan, Spec

__all__ = ["RandomResizedCrop", "Resize", "CenterCrop", "RandomCrop", "RandomHorizontalFlip",
           "RandomVerticalFlip"]

Size = Union[int, Sequence[int]]

_GEOMETRY = ("one geometry (RandomResizedCrop, Resize + CenterCrop, CenterCrop or RandomCrop), "
             "before the policy and ToDtype")
_WINDOW = "FusedAugment's window"


class InterpolationMode(enum.Enum):
    """torchvision's names for the interpolations the compiled transforms take (each step
    names the ones it takes: the window bilinear and bicubic, the policies nearest and
    bilinear)."""

    NEAREST = "nearest"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"


def interpolation_mode(interpolation, allowed: Tuple[str, ...], what: str) -> str:
    """An interpolation given as torchvision's InterpolationMode (its ``value``) or a string, as
    its lower-case name; refused naming ``what`` unless one of ``allowed``
    (:func:`prefetch.transforms.arguments.interpolation`)."""
    return arguments.interpolation(what, interpolation, allowed)


def _antialias(value, what: str) -> bool:
    """torchvision's ``antialias``: True or False (None, its legacy value, is False for tensors)."""
    return False if value is None else arguments.flag(what, "antialias", value)


class _Window(Spec):
    phase = Phase.GEOMETRY
    rule = _GEOMETRY
    slot = _WINDOW


class RandomResizedCrop(_Window):
    """A random area and aspect of each image, resized to ``size`` (torchvision's
    ``RandomResizedCrop``): FusedAugment's ``random_resized_crop``, one draw per sample.

    Args:
        size: the output ``(h, w)``, or an int for a square.
        scale: the area's range, a fraction of the image's (torchvision: (0.08, 1.0)).
        ratio: the aspect's range, w / h, drawn log-uniformly (torchvision: (3/4, 4/3)).
        interpolation: ``"bilinear"`` (torchvision's default, InterpolationMode.BILINEAR) or
            ``"bicubic"`` (InterpolationMode.BICUBIC: DeiT's, ViT's, ConvNeXt's recipes), as
            :func:`prefetch.ops.resized_crop` computes them.
        antialias: torchvision's default True; None (its legacy value) is False for tensors.

    Raises:
        ValueError: an argument outside the subset (a non-positive size, ``scale`` or ``ratio``
            not an increasing pair > 0, another interpolation); a TypeError too for a value of
            the wrong type (:class:`~prefetch.transforms.arguments.ArgumentTypeError`).
    """

    def __init__(self, size: Size, scale: Tuple[float, float] = (0.08, 1.0),
                 ratio: Tuple[float, float] = (3 / 4, 4 / 3),
                 interpolation: Union[InterpolationMode, str] = "bilinear",
                 antialias: Optional[bool] = True):
        self.size = arguments.size("RandomResizedCrop", "size", size)
        self.scale = arguments.number_pair("RandomResizedCrop", "scale", scale, low=0.0,
                                           low_open=True)
        self.ratio = arguments.number_pair("RandomResizedCrop", "ratio", ratio, low=0.0,
                                           low_open=True)
        self.interpolation = interpolation_mode(interpolation, ("bilinear", "bicubic"),
                                                "RandomResizedCrop")
        self.antialias = _antialias(antialias, "RandomResizedCrop")

    def contribute(self, plan: Plan) -> None:
        plan.set_fused(random_resized_crop=self.size, scale=self.scale, ratio=self.ratio,
                       antialias=self.antialias, interpolation=self.interpolation)


class Resize(_Window):
    """The shorter side resized to ``size`` (torchvision's ``Resize`` with an int), compiled
    with the ``CenterCrop`` that must follow it into FusedAugment's ``resize`` + ``crop``.

    Args:
        size: the shorter side's length, an int (a pair is refused: use an int and CenterCrop).
        interpolation: ``"bilinear"`` (torchvision's default) or ``"bicubic"`` (the eval resize
            of DeiT, ViT, ConvNeXt).
        max_size: the longer side's bound, an int > ``size``, or None (torchvision's default).
        antialias: torchvision's default True; None is False for tensors.

    Raises:
        ValueError: a pair ``size``, a non-positive one, ``max_size <= size`` (torchvision's
            ``_compute_resized_output_size`` refuses it too), another interpolation.
    """

    def __init__(self, size: int, interpolation: Union[InterpolationMode, str] = "bilinear",
                 max_size: Optional[int] = None,
                 antialias: Optional[bool] = True):
        if isinstance(size, (list, tuple)) and len(size) == 2:
            raise ValueError("prefetch: Resize supports a shorter-side size (an int) followed by "
                             "CenterCrop, got %r" % (size,))
        self.size = arguments.size("Resize", "size", size, pair_allowed=False)
        self.interpolation = interpolation_mode(interpolation, ("bilinear", "bicubic"), "Resize")
        if max_size is not None and (arguments.integer("Resize", "max_size", max_size, low=1)
                                     <= self.size):
            arguments.fail("Resize", "max_size", "an int > size (%d)" % self.size, max_size)
        self.max_size = max_size if max_size is None else int(max_size)
        self.antialias = _antialias(antialias, "Resize")

    def contribute(self, plan: Plan) -> None:
        plan.set_fused(resize=self.size, antialias=self.antialias, max_size=self.max_size,
                       interpolation=self.interpolation)
        plan.need("crop", "prefetch: Resize is supported followed by CenterCrop (validation's "
                          "Resize(256) + CenterCrop(224))")


class CenterCrop(_Window):
    """The centre ``size`` window (torchvision's ``CenterCrop``; padded with 0 where the image
    is smaller): FusedAugment's ``crop`` with ``center_crop=True``, alone or after a Resize.

    Args:
        size: the output ``(h, w)``, or an int for a square.

    Raises:
        ValueError: a non-positive size (a TypeError too for one of the wrong type).
    """

    def __init__(self, size: Size):
        self.size = arguments.size("CenterCrop", "size", size)

    def joins(self, holder: Spec) -> bool:
        return isinstance(holder, Resize)  # validation's Resize + CenterCrop is one window

    def contribute(self, plan: Plan) -> None:
        plan.set_fused(crop=self.size, center_crop=True)


class RandomCrop(_Window):
    """A random ``size`` window of the padded image (torchvision's ``RandomCrop``):
    FusedAugment's ``crop`` with ``padding``, ``fill`` and ``pad_if_needed``.

    Args:
        size: the output ``(h, w)``, or an int for a square.
        padding: None (torchvision's default), an int >= 0, or 1, 2 or 4 of them
            (left/right, top/bottom, or left, top, right, bottom).
        pad_if_needed: pad an image smaller than ``size`` (torchvision: False).
        fill: the padding's value, an int in [0, 255] (torchvision: 0).
        padding_mode: ``"constant"`` only (torchvision's default).

    Raises:
        ValueError: another padding_mode, a bad padding or fill (TypeError too for the wrong
            type).
    """

    def __init__(self, size: Size, padding: Union[None, int, Sequence[int]] = None,
                 pad_if_needed: bool = False, fill: int = 0, padding_mode: str = "constant"):
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

    def contribute(self, plan: Plan) -> None:
        plan.set_fused(crop=self.size, padding=self.padding, fill=self.fill,
                       pad_if_needed=self.pad_if_needed)


class _Flip(Spec):
    phase = Phase.GEOMETRY
    rule = "one flip of each kind, before the policy and ToDtype"
    argument: str  # FusedAugment's

    def __init__(self, p: float = 0.5):
        self.p = arguments.probability(type(self).__name__, "p", p)

    def contribute(self, plan: Plan) -> None:
        plan.set_fused(**{self.argument: self.p})


class RandomHorizontalFlip(_Flip):
    """A left-right flip of each image with probability ``p`` (torchvision's
    ``RandomHorizontalFlip``, default 0.5): FusedAugment's ``hflip``, in the same pass.

    Args:
        p: the probability, a number (or a 0-d tensor) in [0, 1].

    Raises:
        ValueError: ``p`` outside [0, 1] or not finite (TypeError too for a bool or a string).
    """

    slot = "FusedAugment's hflip"
    argument = "hflip"


class RandomVerticalFlip(_Flip):
    """torchvision's ``RandomVerticalFlip``: :class:`RandomHorizontalFlip` up-down, as
    FusedAugment's ``vflip``.

    Args:
        p: its probability in [0, 1] (torchvision's default 0.5).

    Raises:
        ValueError: as :class:`RandomHorizontalFlip`'s ``p``.
    """

    slot = "FusedAugment's vflip"
    argument = "vflip"
