"""Per-sample draws of torchvision's automatic augmentation policies — TrivialAugmentWide,
RandAugment, AutoAugment (ImageNet) — and of ColorJitter: for each sample of a batch, the ops it
gets, in order, with their signed magnitudes, as one table (:class:`OpTable`) that the fused
augment kernels are to read (issue 27: the draws are built, the ops that apply them are not yet).

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
import dataclasses
import math

import torch

__all__ = ["OPS", "OP_CODES", "OpTable", "trivial_augment_wide", "rand_augment", "auto_augment",
           "color_jitter", "op_parameters", "AUTO_AUGMENT_IMAGENET"]

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
    """Each sample's ops, applied in column order: ``ops`` int64 ``[N, K]`` codes into
    :data:`OPS` (Identity where a sample's step does nothing), ``magnitudes`` float32 ``[N, K]``,
    torchvision's signed magnitudes (0 for ops without one)."""

    ops: torch.Tensor
    magnitudes: torch.Tensor

    def __len__(self):
        return self.ops.shape[0]

    def steps(self, i):
        """Sample ``i``'s ops as ``[(name, magnitude), ...]``, Identity steps left out."""
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


def _check_bins(num_magnitude_bins):
    if isinstance(num_magnitude_bins, bool) or not isinstance(num_magnitude_bins, int) \
            or num_magnitude_bins < 2:
        raise ValueError("prefetch: num_magnitude_bins must be an int >= 2, got %r"
                         % (num_magnitude_bins,))


def trivial_augment_wide(n, generator, *, height, width, num_magnitude_bins=31):
    """TrivialAugmentWide for ``n`` samples: one op each, uniform over its 14 ops, a uniform
    magnitude bin, the sign of a signed op negative with probability 1/2. ``height`` and
    ``width``: the images' size (a number or one per sample; its translations do not depend on
    it, but the signature is every policy's)."""
    _check_bins(num_magnitude_bins)
    ops = torch.randint(len(_RAND_AUGMENT_OPS), (n,), generator=generator)
    bins = torch.randint(num_magnitude_bins, (n,), generator=generator)
    negate = torch.rand(n, generator=generator) <= 0.5
    names = [_RAND_AUGMENT_OPS[int(o)] for o in ops]
    heights, widths = _sizes(n, height, width)
    mags = _magnitudes(_WIDE, names, bins, num_magnitude_bins, heights, widths, negate)
    return OpTable(torch.tensor([OP_CODES[x] for x in names], dtype=torch.int64).view(n, 1),
                   mags.view(n, 1))


def rand_augment(n, generator, *, height, width, num_ops=2, magnitude=9, num_magnitude_bins=31):
    """RandAugment for ``n`` samples: ``num_ops`` ops each, uniform over its 14 ops (repeats
    allowed), all at bin ``magnitude``, each signed op's sign negative with probability 1/2."""
    _check_bins(num_magnitude_bins)
    if isinstance(num_ops, bool) or not isinstance(num_ops, int) or num_ops < 0:
        raise ValueError("prefetch: num_ops must be a non-negative int, got %r" % (num_ops,))
    if isinstance(magnitude, bool) or not isinstance(magnitude, int) \
            or not 0 <= magnitude < num_magnitude_bins:
        raise ValueError("prefetch: magnitude must be an int bin in [0, %d), got %r"
                         % (num_magnitude_bins, magnitude))
    ops = torch.randint(len(_RAND_AUGMENT_OPS), (n, num_ops), generator=generator)
    negate = torch.rand(n, num_ops, generator=generator) <= 0.5
    names = [_RAND_AUGMENT_OPS[int(o)] for o in ops.flatten()]
    heights, widths = _sizes(n, height, width)
    mags = _magnitudes(_NARROW, names, [magnitude] * len(names), num_magnitude_bins,
                       heights.repeat_interleave(num_ops), widths.repeat_interleave(num_ops),
                       negate.flatten())
    codes = torch.tensor([OP_CODES[x] for x in names], dtype=torch.int64)
    return OpTable(codes.view(n, num_ops), mags.view(n, num_ops))


def auto_augment(n, generator, *, height, width, policy=AUTO_AUGMENT_IMAGENET):
    """AutoAugment for ``n`` samples: a uniform sub-policy each; each of its two steps applied
    with its probability (else Identity), at its bin of 10, a signed op's sign negative with
    probability 1/2."""
    choice = torch.randint(len(policy), (n,), generator=generator)
    applied = torch.rand(n, 2, generator=generator)
    negate = torch.rand(n, 2, generator=generator) <= 0.5
    heights, widths = _sizes(n, height, width)
    ops = torch.zeros(n, 2, dtype=torch.int64)
    mags = torch.zeros(n, 2, dtype=torch.float32)
    for i in range(n):
        for k, (name, p, b) in enumerate(policy[int(choice[i])]):
            if not applied[i, k] <= p:
                continue
            ops[i, k] = OP_CODES[name]
            if b is not None:
                mags[i, k] = _magnitudes(_NARROW, [name], [b], 10, heights[i:i + 1],
                                         widths[i:i + 1], negate[i, k:k + 1])[0]
    return OpTable(ops, mags)


def _jitter_range(value, name, center, bound=None):
    """ColorJitter's (min, max) for one of its arguments: a number v gives
    ``[max(0, center - v), center + v]``, a pair is taken as it is."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < 0:
            raise ValueError("prefetch: %s must be non-negative, got %r" % (name, value))
        low, high = center - value, center + value
        if bound is None:
            low = max(low, 0.0)
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        low, high = float(value[0]), float(value[1])
    else:
        raise TypeError("prefetch: %s must be a number or a (min, max) pair, got %r" % (name, value))
    if bound is not None and not bound[0] <= low <= high <= bound[1]:
        raise ValueError("prefetch: %s must lie in %s, got (%g, %g)" % (name, bound, low, high))
    if bound is None and not 0 <= low <= high:
        raise ValueError("prefetch: %s must be 0 <= min <= max, got (%g, %g)" % (name, low, high))
    return low, high


def color_jitter(n, generator, *, brightness=0, contrast=0, saturation=0, hue=0):
    """ColorJitter for ``n`` samples: each sample its own random order of the four adjustments
    (torchvision draws ``randperm(4)`` per image) and its own factors, uniform in each range.
    Brightness, contrast and saturation are stored as magnitudes ``factor - 1`` (Brightness,
    Contrast and Color ops, as the policies'), hue as its factor in [-0.5, 0.5] (Hue). An
    adjustment whose range is the identity (0, or (1, 1); hue (0, 0)) is left out (Identity),
    as torchvision leaves it out."""
    ranges = [_jitter_range(brightness, "brightness", 1.0), _jitter_range(contrast, "contrast", 1.0),
              _jitter_range(saturation, "saturation", 1.0),
              _jitter_range(hue, "hue", 0.0, bound=(-0.5, 0.5))]
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
    return OpTable(ops, mags)


def op_parameters(table):
    """What each step's functional op takes, from its magnitude (float64 ``[N, K]``, torchvision's
    ``_apply_image_or_video_transform`` on uint8 images): the factor ``1 + m`` (Brightness, Color,
    Contrast, Sharpness), degrees (Rotate as m, ShearX/Y as ``degrees(atan(m))``), whole pixels
    (TranslateX/Y: ``int(m)``, towards zero), bits (Posterize: ``int(m)``), the threshold ``255 * m``
    (Solarize), the hue factor (Hue), 0 (the rest). Computed with Python's ``math`` on each
    magnitude as a Python float, as torchvision computes them (a vectorised atan may differ from
    libm's in the last bit, and so move a sheared pixel)."""
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
