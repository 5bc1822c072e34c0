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

__all__ = ["RandomResizedCrop", "Resize", "CenterCrop", "RandomCrop", "Pad",
           "RandomHorizontalFlip", "RandomVerticalFlip"]

Size = Union[int, Sequence[int]]

_GEOMETRY = ("one geometry (RandomResizedCrop, Resize + CenterCrop, CenterCrop, RandomCrop or "
             "Pad + RandomCrop), before the policy and ToDtype")
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
        self.padding = 0 if padding is None else _padding("RandomCrop", padding, "None, ")
        self.pad_if_needed = arguments.flag("RandomCrop", "pad_if_needed", pad_if_needed)
        _constant_padding("RandomCrop", padding_mode)
        self.fill = arguments.integer("RandomCrop", "fill", fill, low=0, high=255)

    def joins(self, holder: Spec) -> bool:
        return isinstance(holder, Pad)  # Pad + RandomCrop is one window: RandomCrop's padding

    def contribute(self, plan: Plan) -> None:
        padding, fill = self.padding, self.fill
        pad = plan.joined
        if isinstance(pad, Pad):
            # torchvision pads twice (Pad's fill inside, then this step's padding and
            # pad_if_needed with its own fill): one padding of the summed sides when the fills
            # agree or this step pads nothing of its own.
            if (any(_sides(self.padding)) or self.pad_if_needed) and pad.fill != self.fill:
                raise ValueError(
                    "prefetch: %s pads with fill=%d after Pad's fill=%d: the window pads with one "
                    "value; give both the same fill, or pad once"
                    % (plan.where, self.fill, pad.fill))
            padding = tuple(a + b for a, b in zip(_sides(pad.padding), _sides(self.padding)))
            fill = pad.fill
        plan.set_fused(crop=self.size, padding=padding, fill=fill, pad_if_needed=self.pad_if_needed)


class Pad(_Window):
    """Constant padding of each image (torchvision's ``Pad``), compiled as the padding of the
    ``RandomCrop`` that must follow it: ``Pad(4), RandomCrop(32)`` is ``RandomCrop(32,
    padding=4)`` (the CIFAR recipe's two ways of writing it). A RandomCrop's own padding adds to
    Pad's, as torchvision pads twice.

    Args:
        padding: an int >= 0, or 2 or 4 of them (torchvision's left/right, top/bottom, or left,
            top, right, bottom).
        fill: the padding's value, an int in [0, 255] (torchvision: 0).
        padding_mode: ``"constant"`` only (torchvision's default).

    Raises:
        ValueError: another padding_mode, a bad padding or fill (TypeError too for the wrong
            type); when the Compose is built, a Pad not followed by a RandomCrop, or a
            RandomCrop padding with another fill after it.
    """

    def __init__(self, padding: Union[int, Sequence[int]], fill: int = 0,
                 padding_mode: str = "constant"):
        self.padding = _padding("Pad", padding)
        self.fill = arguments.integer("Pad", "fill", fill, low=0, high=255)
        _constant_padding("Pad", padding_mode)

    def contribute(self, plan: Plan) -> None:
        plan.need("crop", "prefetch: Pad is compiled as the padding of the RandomCrop that must "
                          "follow it (Pad(4) + RandomCrop(32) is RandomCrop(32, padding=4)); pad "
                          "otherwise in the DataLoader's workers")


def _padding(cls: str, padding, also: str = "") -> Union[int, Tuple[int, ...]]:
    """torchvision's ``padding``: an int >= 0, or 1, 2 or 4 of them (one int when given one);
    ``also`` starts the refusal's words (RandomCrop's "None, ")."""
    values = padding if isinstance(padding, (list, tuple)) else [padding]
    with arguments.reworded(cls, "padding", also + "an int >= 0, or 1, 2 or 4 of them "
                            "(torchvision's left/right, top/bottom or left, top, right, bottom)",
                            padding):
        if len(values) not in (1, 2, 4):
            arguments.fail(cls, "padding", "1, 2 or 4 values", padding)
        values = [arguments.integer(cls, "padding", v, low=0) for v in values]
    return values[0] if len(values) == 1 else tuple(values)


def _sides(padding) -> Tuple[int, int, int, int]:
    """A checked padding as (left, top, right, bottom), torchvision's order."""
    values = list(padding) if isinstance(padding, tuple) else [padding]
    if len(values) == 1:
        return (values[0],) * 4
    if len(values) == 2:
        return (values[0], values[1], values[0], values[1])
    return tuple(values)


def _constant_padding(cls: str, padding_mode) -> None:
    if padding_mode != "constant":
        arguments.fail(cls, "padding_mode", "'constant' (the window's outside is fill; keep "
                       "edge, reflect or symmetric padding in the workers)", padding_mode)


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
