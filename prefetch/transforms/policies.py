"""Per-sample draws of torchvision's automatic augmentation policies — TrivialAugmentWide,
RandAugment, AutoAugment (ImageNet) — and of ColorJitter: for each sample of a batch, the ops it
gets, in order, with their signed magnitudes, as one table (:class:`OpTable`) that
:mod:`prefetch.transforms.policy_ops` applies with the fused kernels of :mod:`prefetch.ops`.
The policies: Müller and Hutter, "TrivialAugment", ICCV 2021; Cubuk et al., "RandAugment",
CVPR Workshops 2020; Cubuk et al., "AutoAugment: Learning Augmentation Policies from Data",
CVPR 2019.

torchvision draws one image at a time from the global generator; here a whole batch is drawn from
one generator, the batch's own (``BatchPosition(epoch, index, rank).generator(seed)``, as every
FusedAugment draw), so the draws are a pure function of ``(seed, rank, epoch, index)`` and
resume, DataLoader workers and DDP keep working. The distributions are torchvision's
(``torchvision.transforms.v2._auto_augment``, checked against version 0.29): the same op lists,
magnitude bins, signs and sub-policy probabilities; the random streams are not, so a table equals
torchvision's draws in distribution, not draw for draw.

Magnitudes are torchvision's, in the units its ``_apply_image_or_video_transform`` receives:
:func:`op_parameters` turns them into what each functional op takes (the factor ``1 + m`` of
Brightness, Color, Contrast and Sharpness; the shear angle ``degrees(atan(m))``; ``int(m)`` pixels
of translation and bits of Posterize; Solarize's threshold ``255 * m`` on uint8 images).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence, Tuple, Union

import torch

from . import arguments

__all__ = ["OPS", "OP_CODES", "OpTable", "trivial_augment_wide", "rand_augment", "auto_augment",
           "color_jitter", "random_op", "applied_with", "chain", "choice", "random_order",
           "op_parameters", "AUTO_AUGMENT_IMAGENET",
           "RANDOM_OPS"]

# Every op a table can name; its index is the code the kernels switch on. The first 14 are
# RandAugment's and TrivialAugmentWide's space, in torchvision's order; AutoAugment adds Invert
# (and has no Identity); ColorJitter's hue is Hue.
OPS = ("Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color",
       "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize", "Invert",
       "Hue")
OP_CODES = {name: code for code, name in enumerate(OPS)}

_RAND_AUGMENT_OPS = OPS[:14]

# AutoAugment's ImageNet policy: 25 sub-policies of two (op, probability, magnitude bin) steps.
AUTO_AUGMENT_IMAGENET = (
    (("Posterize", 0.4, 8), ("Rotate", 0.6, 9)),
    (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
    (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
    (("Posterize", 0.6, 7), ("Posterize", 0.6, 6)),
    (("Equalize", 0.4, None), ("Solarize", 0.2, 4)),
    (("Equalize", 0.4, None), ("Rotate", 0.8, 8)),
    (("Solarize", 0.6, 3), ("Equalize", 0.6, None)),
    (("Posterize", 0.8, 5), ("Equalize", 1.0, None)),
    (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)),
    (("Equalize", 0.6, None), ("Posterize", 0.4, 6)),
    (("Rotate", 0.8, 8), ("Color", 0.4, 0)),
    (("Rotate", 0.4, 9), ("Equalize", 0.6, None)),
    (("Equalize", 0.0, None), ("Equalize", 0.8, None)),
    (("Invert", 0.6, None), ("Equalize", 1.0, None)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
    (("Color", 0.8, 8), ("Solarize", 0.8, 7)),
    (("Sharpness", 0.4, 7), ("Invert", 0.6, None)),
    (("ShearX", 0.6, 5), ("Equalize", 1.0, None)),
    (("Color", 0.4, 0), ("Equalize", 0.6, None)),
    (("Equalize", 0.4, None), ("Solarize", 0.2, 4)),
    (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
    (("Invert", 0.6, None), ("Equalize", 1.0, None)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
)

_SIGNED = frozenset({"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness",
                     "Color", "Contrast", "Sharpness"})


def _space(wide):
    """The magnitude bins of each op, ``(num_bins, height, width) -> float tensor or None``:
    TrivialAugmentWide's (``wide``) or RandAugment's and AutoAugment's."""
    def lin(top):
        return lambda n, h, w: torch.linspace(0.0, top, n)

    posterize_span = 6 if wide else 4
    space = {
        "Identity": lambda n, h, w: None,
        "ShearX": lin(0.99 if wide else 0.3),
        "ShearY": lin(0.99 if wide else 0.3),
        "TranslateX": lin(32.0) if wide else (lambda n, h, w: torch.linspace(0.0, 150.0 / 331.0 * w, n)),
        "TranslateY": lin(32.0) if wide else (lambda n, h, w: torch.linspace(0.0, 150.0 / 331.0 * h, n)),
        "Rotate": lin(135.0 if wide else 30.0),
        "Posterize": lambda n, h, w: (8 - (torch.arange(n) / ((n - 1) / posterize_span))).round().int(),
        "Solarize": lambda n, h, w: torch.linspace(1.0, 0.0, n),
        "AutoContrast": lambda n, h, w: None,
        "Equalize": lambda n, h, w: None,
        "Invert": lambda n, h, w: None,
    }
    for name in ("Brightness", "Color", "Contrast", "Sharpness"):
        space[name] = lin(0.99 if wide else 0.9)
    return space


_WIDE, _NARROW = _space(True), _space(False)


@dataclasses.dataclass(frozen=True)
class OpTable:
    """Each sample's ops, applied in column order.

    Args:
        ops (Tensor[N, K], int64): codes into :data:`OPS` (Identity where a sample's step does
            nothing).
        magnitudes (Tensor[N, K], float32): torchvision's signed magnitudes (0 for ops without
            one), in the units of ``_apply_image_or_video_transform``.
        parameters (Tensor[N, K], float64, optional): what each step's functional op takes,
            given exactly (a ``RandomSolarize`` threshold, a ``RandomPosterize`` bit count, a
            ``RandomGrayscale``'s saturation factor 0); None: :func:`op_parameters` computes them
            from the magnitudes, as torchvision's policies do.
    """

    ops: torch.Tensor
    magnitudes: torch.Tensor
    parameters: Optional[torch.Tensor] = None

    def __len__(self):
        return self.ops.shape[0]

    def steps(self, i: int) -> list:
        """One sample's ops in words.

        Args:
            i (int): the sample.

        Returns:
            list[tuple[str, float]]: ``[(op name, magnitude), ...]``, Identity steps left out.
        """
        return [(OPS[int(o)], float(m)) for o, m in zip(self.ops[i], self.magnitudes[i])
                if int(o) != OP_CODES["Identity"]]


def _sizes(n, height, width):
    """Per-sample heights and widths (a number: the same for every sample)."""
    out = []
    for name, value in (("height", height), ("width", width)):
        t = torch.as_tensor(value, dtype=torch.float64)
        if t.dim() == 0:
            t = t.expand(n)
        if t.shape != (n,) or not bool((t > 0).all()):
            raise ValueError("prefetch: %s must be a positive number or %d of them, got %r"
                             % (name, n, value))
        out.append(t)
    return out


def _magnitudes(space, names, bins, num_bins, heights, widths, negate):
    """The signed magnitude of each (op name, bin) pair; the size-dependent bins (translations)
    per sample's height and width. Each op's bins are computed once per size (a batch's samples
    share it; per sample, the ``linspace`` calls were most of a batch's draws)."""
    bins = [int(b) for b in (bins.tolist() if isinstance(bins, torch.Tensor) else bins)]
    heights, widths = heights.tolist(), widths.tolist()
    negate = negate.tolist()
    tables, out = {}, []
    for name, b, h, w, neg in zip(names, bins, heights, widths, negate):
        key = (name, h, w)
        if key not in tables:
            values = space[name](num_bins, float(h), float(w))
            tables[key] = None if values is None else values.tolist()
        values = tables[key]
        m = 0.0 if values is None else float(values[b])
        out.append(-m if neg and values is not None and name in _SIGNED else m)
    return torch.tensor(out, dtype=torch.float32)


def _check_bins(cls, num_magnitude_bins):
    return arguments.integer(cls, "num_magnitude_bins", num_magnitude_bins, low=2,
                             expected="an int >= 2")


def trivial_augment_wide(n: int, generator: Optional[torch.Generator], *,
                         height: Union[float, Sequence[float], torch.Tensor],
                         width: Union[float, Sequence[float], torch.Tensor],
                         num_magnitude_bins: int = 31) -> OpTable:
    """TrivialAugmentWide for ``n`` samples: one op each, uniform over its 14 ops, a uniform
    magnitude bin, the sign of a signed op negative with probability 1/2 (torchvision's
    ``TrivialAugmentWide``, its default ``num_magnitude_bins=31``).

    Args:
        n (int): the number of samples.
        generator (torch.Generator, optional): the batch's random stream.
        height, width (float or Tensor[n]): the images' size in pixels, one or one per sample
            (its translations do not depend on it, but the signature is every policy's).
        num_magnitude_bins (int): >= 2.

    Returns:
        OpTable: ``[n, 1]``.

    Raises:
        ValueError: ``num_magnitude_bins`` below 2 or not an int (its TypeError subclass), or a
            size that is not positive or not one per sample.
    """
    num_magnitude_bins = _check_bins("TrivialAugmentWide", num_magnitude_bins)
    ops = torch.randint(len(_RAND_AUGMENT_OPS), (n,), generator=generator)
    bins = torch.randint(num_magnitude_bins, (n,), generator=generator)
    negate = torch.rand(n, generator=generator) <= 0.5
    names = [_RAND_AUGMENT_OPS[int(o)] for o in ops]
    heights, widths = _sizes(n, height, width)
    mags = _magnitudes(_WIDE, names, bins, num_magnitude_bins, heights, widths, negate)
    return OpTable(torch.tensor([OP_CODES[x] for x in names], dtype=torch.int64).view(n, 1),
                   mags.view(n, 1))


def rand_augment(n: int, generator: Optional[torch.Generator], *,
                 height: Union[float, Sequence[float], torch.Tensor],
                 width: Union[float, Sequence[float], torch.Tensor], num_ops: int = 2,
                 magnitude: int = 9, num_magnitude_bins: int = 31) -> OpTable:
    """RandAugment for ``n`` samples: ``num_ops`` ops each, uniform over its 14 ops (repeats
    allowed), all at bin ``magnitude``, each signed op's sign negative with probability 1/2
    (torchvision's ``RandAugment`` and its defaults).

    Args:
        n (int): the number of samples.
        generator (torch.Generator, optional): the batch's random stream.
        height, width (float or Tensor[n]): the images' size in pixels (the translations' bins
            are ``150 / 331`` of it, as torchvision's).
        num_ops (int): ops per sample, >= 0.
        magnitude (int): the bin, in ``[0, num_magnitude_bins)``.
        num_magnitude_bins (int): >= 2.

    Returns:
        OpTable: ``[n, num_ops]``.

    Raises:
        ValueError: an option out of range or not an int (its TypeError subclass), or a size
            that is not positive or not one per sample.
    """
    num_magnitude_bins = _check_bins("RandAugment", num_magnitude_bins)
    num_ops = arguments.integer("RandAugment", "num_ops", num_ops, low=0, expected="an int >= 0")
    magnitude = arguments.integer(
        "RandAugment", "magnitude", magnitude, low=0, high=num_magnitude_bins - 1,
        expected="an int bin in [0, num_magnitude_bins = %d)" % num_magnitude_bins)
    ops = torch.randint(len(_RAND_AUGMENT_OPS), (n, num_ops), generator=generator)
    negate = torch.rand(n, num_ops, generator=generator) <= 0.5
    names = [_RAND_AUGMENT_OPS[int(o)] for o in ops.flatten()]
    heights, widths = _sizes(n, height, width)
    mags = _magnitudes(_NARROW, names, [magnitude] * len(names), num_magnitude_bins,
                       heights.repeat_interleave(num_ops), widths.repeat_interleave(num_ops),
                       negate.flatten())
    codes = torch.tensor([OP_CODES[x] for x in names], dtype=torch.int64)
    return OpTable(codes.view(n, num_ops), mags.view(n, num_ops))


def auto_augment(n: int, generator: Optional[torch.Generator], *,
                 height: Union[float, Sequence[float], torch.Tensor],
                 width: Union[float, Sequence[float], torch.Tensor],
                 policy: Sequence = AUTO_AUGMENT_IMAGENET) -> OpTable:
    """AutoAugment for ``n`` samples: a uniform sub-policy each; each of its steps applied with
    its probability (else Identity), at its bin of 10, a signed op's sign negative with
    probability 1/2.

    Args:
        n (int): the number of samples.
        generator (torch.Generator, optional): the batch's random stream.
        height, width (float or Tensor[n]): the images' size in pixels.
        policy (sequence): sub-policies of ``(op name, probability, bin or None)`` steps
            (default torchvision's ImageNet policy, ``AutoAugmentPolicy.IMAGENET``, two steps
            each).

    Returns:
        OpTable: as many columns as the longest sub-policy has steps (a shorter one ends with
        Identity), none for a policy with no step (no sub-policy, or only empty ones): the
        identity, as in torchvision a policy whose steps all do nothing.

    Raises:
        ValueError: a malformed custom policy (:func:`check_auto_augment_policy`), or a size
            that is not positive or not one per sample.
    """
    if policy is not AUTO_AUGMENT_IMAGENET:
        policy = check_auto_augment_policy(policy)
    steps = max((len(sub) for sub in policy), default=0)
    if steps == 0:
        return OpTable(torch.zeros(n, 0, dtype=torch.int64), torch.zeros(n, 0, dtype=torch.float32))
    choice = torch.randint(len(policy), (n,), generator=generator)
    applied = torch.rand(n, steps, generator=generator)
    negate = torch.rand(n, steps, generator=generator) <= 0.5
    heights, widths = _sizes(n, height, width)
    ops = torch.zeros(n, steps, dtype=torch.int64)
    mags = torch.zeros(n, steps, dtype=torch.float32)
    for i in range(n):
        for k, (name, p, b) in enumerate(policy[int(choice[i])]):
            if not applied[i, k] <= p:
                continue
            ops[i, k] = OP_CODES[name]
            if b is not None:
                mags[i, k] = _magnitudes(_NARROW, [name], [b], 10, heights[i:i + 1],
                                         widths[i:i + 1], negate[i, k:k + 1])[0]
    return OpTable(ops, mags)


def check_auto_augment_policy(policy: Sequence) -> tuple:
    """Checks a custom AutoAugment policy.

    Args:
        policy (sequence): sub-policies of ``(name, probability, bin)`` steps: ``name`` one of
            the ops RandAugment's space has (and Invert), ``probability`` in [0, 1], ``bin``
            None or an int in [0, 10) (AutoAugment's 10 bins).

    Returns:
        tuple: the policy as a tuple of tuples of ``(str, float, int or None)``.

    Raises:
        ValueError: anything else, naming the sub-policy and step (its TypeError subclass
            :class:`~prefetch.transforms.arguments.ArgumentTypeError` for a wrong type).
    """
    expected = "a sequence of sub-policies, each a sequence of (op name, probability, bin) steps"
    if isinstance(policy, (str, bytes)) or not isinstance(policy, (list, tuple)):
        arguments.fail("AutoAugment", "policy", expected, policy, arguments.ArgumentTypeError)
    out = []
    for j, sub in enumerate(policy):
        if not isinstance(sub, (list, tuple)):
            arguments.fail("AutoAugment", "policy[%d]" % j,
                           "a sequence of (op name, probability, bin) steps", sub,
                           arguments.ArgumentTypeError)
        steps = []
        for k, step in enumerate(sub):
            what = "policy[%d][%d]" % (j, k)
            if not isinstance(step, (list, tuple)) or len(step) != 3:
                arguments.fail("AutoAugment", what, "a step (op name, probability, bin)", step,
                               arguments.ArgumentTypeError)
            name, p, b = step
            arguments.one_of("AutoAugment", what + "'s op", name, tuple(_NARROW))
            p = arguments.probability("AutoAugment", what + "'s probability", p)
            if b is not None:
                b = arguments.integer("AutoAugment", what + "'s bin", b, low=0, high=9,
                                      expected="None or an int bin in [0, 10)")
            steps.append((name, p, b))
        out.append(tuple(steps))
    return tuple(out)


def color_jitter(n: int, generator: Optional[torch.Generator], *,
                 brightness: Union[float, Tuple[float, float], None] = 0,
                 contrast: Union[float, Tuple[float, float], None] = 0,
                 saturation: Union[float, Tuple[float, float], None] = 0,
                 hue: Union[float, Tuple[float, float], None] = 0,
                 p: float = 1.0) -> OpTable:
    """ColorJitter for ``n`` samples: each sample its own random order of the four adjustments
    (torchvision draws ``randperm(4)`` per image) and its own factors, uniform in each range.
    Brightness, contrast and saturation are stored as magnitudes ``factor - 1`` (Brightness,
    Contrast and Color ops, as the policies'), hue as its factor in [-0.5, 0.5] (Hue). An
    adjustment whose range is the identity (None, 0, or (1, 1); hue (0, 0)) is left out
    (Identity), as torchvision leaves it out; with all four left out every sample's chain is
    Identity: the images come back as they are.

    Args:
        n (int): the number of samples.
        generator (torch.Generator, optional): the batch's random stream.
        brightness, contrast, saturation (float or (min, max), optional): a number v is the
            factor range ``[max(0, 1 - v), 1 + v]``, as torchvision's ``ColorJitter``.
        hue (float or (min, max), optional): v in [0, 0.5] is ``[-v, v]``; a pair inside
            [-0.5, 0.5].
        p (float): each sample's probability of the jitter at all, in [0, 1] (torchvision's
            ``RandomApply([ColorJitter(...)], p)``, as the self-supervised recipes write it; 1:
            every sample, ColorJitter alone). Drawn after the jitter's own draws
            (:func:`applied_with`).

    Returns:
        OpTable: ``[n, 4]``.

    Raises:
        ValueError: a range that is negative, not finite, unordered or (hue) outside
            [-0.5, 0.5] (its TypeError subclass for a wrong type), named by ColorJitter's
            argument.
    """
    ranges = [arguments.jitter_range("ColorJitter", "brightness", brightness),
              arguments.jitter_range("ColorJitter", "contrast", contrast),
              arguments.jitter_range("ColorJitter", "saturation", saturation),
              arguments.jitter_range("ColorJitter", "hue", hue, center=0.0, bound=(-0.5, 0.5))]
    names = ("Brightness", "Contrast", "Color", "Hue")
    order = torch.argsort(torch.rand(n, 4, generator=generator), dim=1)  # a uniform permutation
    factors = torch.rand(n, 4, generator=generator, dtype=torch.float64)
    ops = torch.zeros(n, 4, dtype=torch.int64)
    mags = torch.zeros(n, 4, dtype=torch.float32)
    for j, ((low, high), name) in enumerate(zip(ranges, names)):
        identity = (low, high) == ((0.0, 0.0) if name == "Hue" else (1.0, 1.0))
        if identity:
            continue
        value = low + (high - low) * factors[:, j]
        column = order == j  # where adjustment j sits in each sample's order
        ops[column] = OP_CODES[name]
        mags[column] = (value if name == "Hue" else value - 1.0).to(torch.float32)
    return applied_with(OpTable(ops, mags), p, generator, "RandomApply")


def applied_with(table: OpTable, p: float, generator: Optional[torch.Generator],
                 what: str = "RandomApply") -> OpTable:
    """``table`` with each sample's whole row kept with probability ``p`` and made Identity
    otherwise: torchvision's ``RandomApply(transforms, p)``, which draws ``torch.rand(1) < p`` per
    image and then applies all of ``transforms`` or none (``_container.py``). One uniform per
    sample is drawn from ``generator`` even at p = 1 (so a recipe's later draws do not depend on
    p).

    Args:
        table (OpTable): ``[N, K]`` steps.
        p (float): in [0, 1].
        generator (torch.Generator, optional): the batch's random stream.
        what (str): the torchvision class named in a refusal.

    Returns:
        OpTable: the same shape; a dropped row's ops Identity, magnitudes (and parameters) 0.

    Raises:
        ValueError: p outside [0, 1] (TypeError subclass for a wrong type).
    """
    p = arguments.probability(what, "p", p)
    keep = torch.rand(len(table), generator=generator) < p
    if bool(keep.all()):
        return table
    drop = ~keep
    ops, mags = table.ops.clone(), table.magnitudes.clone()
    ops[drop] = OP_CODES["Identity"]
    mags[drop] = 0.0
    params = None
    if table.parameters is not None:
        params = table.parameters.clone()
        params[drop] = 0.0
    return OpTable(ops, mags, params)


# The ops random_op draws, by torchvision v2's class, with what that class passes its functional
# op: the parameter's name (None: the op takes none) and the code it runs as (RandomGrayscale is
# adjust_saturation with factor 0: torchvision's rgb_to_grayscale floors r*0.2989 + g*0.587 +
# b*0.114 in float32, and adjust_saturation(x, 0) blends that floored grey with weight 1).
RANDOM_OPS = {
    "RandomSolarize": ("Solarize", "threshold"),
    "RandomPosterize": ("Posterize", "bits"),
    "RandomInvert": ("Invert", None),
    "RandomAutocontrast": ("AutoContrast", None),
    "RandomEqualize": ("Equalize", None),
    "RandomAdjustSharpness": ("Sharpness", "sharpness_factor"),
    "RandomGrayscale": ("Color", None),
}


def random_op(n: int, generator: Optional[torch.Generator], *, op: str, p: float = 0.5,
              parameter: float = 0.0) -> OpTable:
    """One of torchvision v2's single-op random transforms for ``n`` samples: each sample gets
    the op with probability ``p`` (``torch.rand(1) < p`` per image, as torchvision's
    ``_RandomApplyTransform``), with the same parameter, else Identity.

    Args:
        n (int): the number of samples.
        generator (torch.Generator, optional): the batch's random stream.
        op (str): torchvision's class, a key of :data:`RANDOM_OPS` (``"RandomSolarize"``, ...).
        p (float): in [0, 1] (torchvision's defaults: 0.5; RandomGrayscale 0.1).
        parameter (float): what the class passes its op: the threshold (RandomSolarize, in [0,
            255] on uint8), the bits (RandomPosterize, an int in [0, 8]), the sharpness factor
            (RandomAdjustSharpness, >= 0); ignored by the ops that take none (RandomGrayscale's
            factor 0 is set here).

    Returns:
        OpTable: ``[n, 1]``, with ``parameters`` exact (float64).

    Raises:
        ValueError: an unknown op or a p outside [0, 1] (TypeError subclass for a wrong type).
    """
    arguments.one_of("random_op", "op", op, tuple(sorted(RANDOM_OPS)))
    code, takes = RANDOM_OPS[op]
    value = 0.0 if op == "RandomGrayscale" or takes is None else float(parameter)
    table = OpTable(torch.full((n, 1), OP_CODES[code], dtype=torch.int64),
                    torch.zeros(n, 1, dtype=torch.float32),
                    torch.full((n, 1), value, dtype=torch.float64))
    return applied_with(table, p, generator, op)


# The draws a chain's step may name (policy_augment's names; the sized policies need the image's
# size and are not chained).
_CHAINABLE = {"color_jitter": color_jitter, "random_op": random_op}


def _step_tables(n, generator, steps, what):
    """Each step's table drawn in turn from ``generator``, its parameters made explicit."""
    tables = []
    for name, options in steps:
        arguments.one_of(what, "step", name, tuple(sorted(_CHAINABLE)))
        t = _CHAINABLE[name](n, generator, **options)
        tables.append(OpTable(t.ops, t.magnitudes,
                              op_parameters(t) if t.parameters is None else t.parameters))
    return tables


def _side_by_side(n, tables):
    """The tables' columns side by side, in order (``[n, 0]`` for none)."""
    if not tables:
        return OpTable(torch.zeros(n, 0, dtype=torch.int64), torch.zeros(n, 0),
                       torch.zeros(n, 0, dtype=torch.float64))
    return OpTable(torch.cat([t.ops for t in tables], 1),
                   torch.cat([t.magnitudes for t in tables], 1),
                   torch.cat([t.parameters for t in tables], 1))


def chain(n: int, generator: Optional[torch.Generator], *,
          steps: Sequence[Tuple[str, dict]], p: float = 1.0) -> OpTable:
    """Several photometric steps as one table, applied all or none per sample: torchvision's
    ``RandomApply([ColorJitter(...), RandomGrayscale(...), ...], p)``. Each step draws its own
    table in turn from ``generator`` (``"color_jitter"`` or ``"random_op"`` with its options), the
    tables' columns are put side by side in step order, then each sample's row is kept with
    probability ``p`` (:func:`applied_with`).

    Args:
        n (int): the number of samples.
        generator (torch.Generator, optional): the batch's random stream.
        steps (sequence of (str, dict)): each step's draw and options.
        p (float): in [0, 1].

    Returns:
        OpTable: ``[n, K]`` with K the steps' columns, its ``parameters`` exact.

    Raises:
        ValueError: an unknown draw, or a step's option or p out of range.
    """
    table = _side_by_side(n, _step_tables(n, generator, steps, "RandomApply"))
    return applied_with(table, p, generator, "RandomApply")


def choice(n: int, generator: Optional[torch.Generator], *,
           steps: Sequence[Tuple[str, dict]], p: Optional[Sequence[float]] = None) -> OpTable:
    """One of several photometric steps per sample: torchvision's ``RandomChoice(transforms,
    p)``, which draws ``torch.multinomial(p, 1)`` per call (per image in its recipes) with ``p``
    normalised to sum 1 (None: equal weights). Every step's table is drawn (so a sample's draw of
    the chosen step does not depend on which one it is), then each sample's choice; the other
    steps' columns are Identity in its row.

    Args:
        n (int): the number of samples.
        generator (torch.Generator, optional): the batch's random stream.
        steps (sequence of (str, dict)): each step's draw and options, at least one.
        p (sequence of float, optional): one weight >= 0 per step, not all 0.

    Returns:
        OpTable: ``[n, K]`` with K the steps' columns, its ``parameters`` exact.

    Raises:
        ValueError: no step, an unknown draw, a step's option out of range, or bad weights.
    """
    if not steps:
        arguments.fail("RandomChoice", "transforms", "at least one step", list(steps))
    weights = torch.ones(len(steps), dtype=torch.float64) if p is None else torch.tensor(
        arguments.numbers_list("RandomChoice", "p", p, low=0.0), dtype=torch.float64)
    if weights.numel() != len(steps) or not float(weights.sum()) > 0:
        arguments.fail("RandomChoice", "p", "one weight >= 0 per transform (%d), not all 0"
                       % len(steps), p)
    tables = _step_tables(n, generator, steps, "RandomChoice")
    chosen = (torch.multinomial(weights / weights.sum(), n, replacement=True, generator=generator)
              if n else torch.zeros(0, dtype=torch.int64))
    for j, t in enumerate(tables):
        off = chosen != j
        t.ops[off] = OP_CODES["Identity"]
        t.magnitudes[off] = 0.0
        t.parameters[off] = 0.0
    return _side_by_side(n, tables)


def random_order(n: int, generator: Optional[torch.Generator], *,
                 steps: Sequence[Tuple[str, dict]]) -> OpTable:
    """Several photometric steps per sample, each sample in its own random order: torchvision's
    ``RandomOrder(transforms)``, which applies them in ``torch.randperm(len(transforms))`` order
    per call (per image in its recipes). Every step's table is drawn, then each sample's
    permutation, and its row's column groups are put in that order.

    Args:
        n (int): the number of samples.
        generator (torch.Generator, optional): the batch's random stream.
        steps (sequence of (str, dict)): each step's draw and options.

    Returns:
        OpTable: ``[n, K]`` with K the steps' columns, its ``parameters`` exact.

    Raises:
        ValueError: an unknown draw or a step's option out of range.
    """
    tables = _step_tables(n, generator, steps, "RandomOrder")
    table = _side_by_side(n, tables)
    if len(tables) < 2 or n == 0:
        return table
    starts = [0]
    for t in tables:
        starts.append(starts[-1] + t.ops.shape[1])
    order = torch.argsort(torch.rand(n, len(tables), generator=generator), dim=1)  # randperm
    columns = torch.tensor([[c for j in row for c in range(starts[j], starts[j + 1])]
                            for row in order.tolist()], dtype=torch.int64)
    return OpTable(table.ops.gather(1, columns), table.magnitudes.gather(1, columns),
                   table.parameters.gather(1, columns))


def op_parameters(table: OpTable) -> torch.Tensor:
    """What each step's functional op takes, from its magnitude (torchvision's
    ``_apply_image_or_video_transform`` on uint8 images): the factor ``1 + m`` (Brightness, Color,
    Contrast, Sharpness), degrees (Rotate as m, ShearX/Y as ``degrees(atan(m))``), whole pixels
    (TranslateX/Y: ``int(m)``, towards zero), bits (Posterize: ``int(m)``), the threshold ``255 * m``
    (Solarize), the hue factor (Hue), 0 (the rest). Computed with Python's ``math`` on each
    magnitude as a Python float, as torchvision computes them (a vectorised atan may differ from
    libm's in the last bit, and so move a sheared pixel).

    Args:
        table (OpTable): the steps.

    Returns:
        Tensor[N, K], float64: each step's parameter, on the CPU.
    """
    rules = {"Brightness": lambda m: 1.0 + m, "Color": lambda m: 1.0 + m,
             "Contrast": lambda m: 1.0 + m, "Sharpness": lambda m: 1.0 + m,
             "ShearX": lambda m: math.degrees(math.atan(m)),
             "ShearY": lambda m: math.degrees(math.atan(m)),
             "TranslateX": lambda m: float(int(m)), "TranslateY": lambda m: float(int(m)),
             "Posterize": lambda m: float(int(m)), "Solarize": lambda m: 255 * m,
             "Rotate": lambda m: m, "Hue": lambda m: m}
    codes, mags = table.ops.tolist(), table.magnitudes.tolist()
    out = [[rules[OPS[c]](m) if OPS[c] in rules else 0.0 for c, m in zip(cs, ms)]
           for cs, ms in zip(codes, mags)]
    return torch.tensor(out, dtype=torch.float64).view(table.ops.shape)
