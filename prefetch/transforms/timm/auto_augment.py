"""timm's RandAugment (``timm/data/auto_augment.py``, timm 1.0) by its config string, each image
its own draws, applied to the uint8 window of a batch with Pillow's arithmetic
(:mod:`.pil_ops`), as timm applies it to each PIL image in a DataLoader worker.

timm's string: ``rand`` then dash-separated sections in any order: ``m<int>`` the magnitude (10),
``n<int>`` ops per image (2), ``p<float>`` each op's probability (0.5), ``mstd<float>`` the
magnitude's Gaussian noise (above 100: uniform in [0, m]), ``mmax<int>`` the magnitude's upper
bound (10), ``inc<0|1>`` the ops that grow with the magnitude, ``t<name>`` the op set
(``weights``: timm's weighted set, chosen without replacement). Per image, as timm draws per call:
``n`` ops (uniformly with replacement, or by weight without), each applied with probability ``p``
at magnitude ``m`` (plus noise, clipped to [0, mmax]), a sign for the signed ops with probability
1/2 each, and for the geometric ops bilinear or bicubic with probability 1/2 each unless
create_transform fixed the interpolation.
"""
import math
import re
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import torch

from .. import arguments
from ..contract import BatchPosition, LeafKey, check_image_layout
from ..uint8_stage import Uint8Stage
from . import pil_ops

__all__ = ["RandAugmentConfig", "rand_augment_config", "RandAugment", "RAND_TRANSFORMS",
           "RAND_INCREASING_TRANSFORMS", "RAND_WEIGHTED_0"]

# timm's op sets (_RAND_TRANSFORMS, _RAND_INCREASING_TRANSFORMS, _RAND_WEIGHTED_0).
RAND_TRANSFORMS = ("AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize",
                   "SolarizeAdd", "Color", "Contrast", "Brightness", "Sharpness", "ShearX",
                   "ShearY", "TranslateXRel", "TranslateYRel")
RAND_INCREASING_TRANSFORMS = ("AutoContrast", "Equalize", "Invert", "Rotate",
                              "PosterizeIncreasing", "SolarizeIncreasing", "SolarizeAdd",
                              "ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing",
                              "SharpnessIncreasing", "ShearX", "ShearY", "TranslateXRel",
                              "TranslateYRel")
RAND_WEIGHTED_0 = (("Rotate", 3), ("ShearX", 2), ("ShearY", 2), ("TranslateXRel", 1),
                   ("TranslateYRel", 1), ("ColorIncreasing", .25), ("SharpnessIncreasing", 0.25),
                   ("AutoContrast", 0.25), ("SolarizeIncreasing", .05), ("SolarizeAdd", .05),
                   ("ContrastIncreasing", .05), ("BrightnessIncreasing", .05), ("Equalize", .05),
                   ("PosterizeIncreasing", 0.05), ("Invert", 0.05))

_LEVEL_DENOM = 10.0  # timm's: magnitude / 10 is the op's level
_GEOMETRIC = ("Rotate", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel")
_ENHANCE = {"Color": pil_ops.color, "Contrast": pil_ops.contrast,
            "Brightness": pil_ops.brightness, "Sharpness": pil_ops.sharpness}


@dataclass(frozen=True)
class RandAugmentConfig:
    """A parsed RandAugment string (timm's ``rand_augment_transform`` defaults).

    Attributes:
        magnitude (int): ``m``, 10 by default.
        num_layers (int): ``n``, ops per image, 2 by default.
        prob (float): ``p``, each op's probability, 0.5 by default.
        magnitude_std (float): ``mstd``, the magnitude's Gaussian noise (``inf``: uniform in
            [0, magnitude]); 0 by default.
        magnitude_max (int or None): ``mmax``, the magnitude's upper bound (None or 0: 10).
        increasing (bool): ``inc``.
        transforms (tuple of str): the op set, timm's names.
        weights (tuple of float or None): the op set's choice weights (``tweights``), normalised.
    """

    magnitude: int = 10
    num_layers: int = 2
    prob: float = 0.5
    magnitude_std: float = 0.0
    magnitude_max: Optional[int] = None
    increasing: bool = False
    transforms: Tuple[str, ...] = RAND_TRANSFORMS
    weights: Optional[Tuple[float, ...]] = None


def _refuse(config_str, message):
    raise ValueError("prefetch: timm RandAugment %r: %s" % (config_str, message))


def rand_augment_config(config_str: str) -> RandAugmentConfig:
    """timm's RandAugment string parsed as ``timm.data.auto_augment.rand_augment_transform``
    parses it.

    Args:
        config_str (str): ``"rand-m9-mstd0.5-inc1"`` and the like (module docstring).

    Returns:
        RandAugmentConfig.

    Raises:
        ValueError: not a ``rand`` string, a section timm does not know (timm asserts), a value
            that does not parse, the ``3a``/``3aw`` op sets (their PIL Gaussian blur is not
            compiled), or more ops per image than a weighted set holds.
    """
    if not isinstance(config_str, str) or config_str.split("-")[0] != "rand":
        raise ValueError("prefetch: a timm RandAugment string starts with 'rand', got %r"
                         % (config_str,))
    fields = dict(magnitude=10, num_layers=2, prob=0.5, magnitude_std=0.0, magnitude_max=None)
    increasing, set_name = False, None
    for section in config_str.split("-")[1:]:
        if section.startswith("t"):
            set_name = set_name or section[1:]
            continue
        parts = re.split(r"(\d.*)", section)
        if len(parts) < 2:
            continue  # (timm skips a section without a number)
        key, value = parts[:2]
        try:
            if key == "mstd":
                std = float(value)
                fields["magnitude_std"] = math.inf if std > 100 else std
            elif key == "mmax":
                fields["magnitude_max"] = int(value)
            elif key == "inc":
                increasing = bool(int(value))
            elif key == "m":
                fields["magnitude"] = int(value)
            elif key == "n":
                fields["num_layers"] = int(value)
            elif key == "p":
                fields["prob"] = float(value)
            else:
                _refuse(config_str, "unknown section %r (timm knows m, n, p, mstd, mmax, inc "
                        "and t)" % (section,))
        except ValueError as e:
            if str(e).startswith("prefetch"):
                raise
            _refuse(config_str, "section %r: %r does not parse as its number" % (section, value))
    weights = None
    if set_name == "weights":
        transforms, raw = zip(*RAND_WEIGHTED_0)
        total = sum(raw)
        weights = tuple(w / total for w in raw)
    elif set_name in ("3a", "3aw"):
        _refuse(config_str, "the op set %r (3-Augment: PIL's GaussianBlur and Desaturate) is "
                "not compiled; the default and 'weights' sets are" % (set_name,))
    else:  # (timm: any other name is the default set)
        transforms = RAND_INCREASING_TRANSFORMS if increasing else RAND_TRANSFORMS
    if fields["num_layers"] < 0:
        _refuse(config_str, "n must be >= 0, got %d" % fields["num_layers"])
    if weights is not None and fields["num_layers"] > len(transforms):
        _refuse(config_str, "n = %d ops chosen without replacement from a set of %d"
                % (fields["num_layers"], len(transforms)))
    return RandAugmentConfig(increasing=increasing, transforms=tuple(transforms),
                             weights=weights, **fields)


@dataclass
class RandAugmentDraws:
    """One batch's draws, each ``Tensor[N, num_layers]`` on the host: ``ops`` (int64, indices
    into the config's transforms), ``applied`` (bool), ``magnitudes`` (float64, after noise and
    clipping), ``negative`` (bool: the signed ops' sign) and ``bicubic`` (bool: the geometric
    ops' resampling)."""

    ops: torch.Tensor
    applied: torch.Tensor
    magnitudes: torch.Tensor
    negative: torch.Tensor
    bicubic: torch.Tensor


class RandAugment(Uint8Stage):
    """timm's RandAugment on the batch's uint8 image leaf, each image its own draws, with
    Pillow's arithmetic (each op equals timm's on a PIL image: :mod:`.pil_ops`).

    Args:
        config_str (str): timm's string, e.g. ``"rand-m9-mstd0.5-inc1"``
            (:func:`rand_augment_config`).
        interpolation (str): the geometric ops' resampling: ``"random"`` (timm's default:
            bilinear or bicubic per op), ``"bilinear"`` or ``"bicubic"`` (create_transform passes
            its own interpolation unless it is ``"random"``).
        fill (int or sequence of int): the geometric ops' ``fillcolor``: timm's ``img_mean``
            (create_transform: ``round(255 * mean)`` per channel), 128 without it.
        translate_pct (float): TranslateXRel/YRel's largest shift as a fraction of the side
            (timm: 0.45).
        seed (int, optional): the draws are a function of ``(seed, rank, epoch, batch index)``;
            None picks one (the loader's state saves it).
        image_key, layout: as :class:`~prefetch.transforms.PolicyAugment`'s.

    Raises:
        ValueError: a bad string (:func:`rand_augment_config`) or argument, naming it.
    """

    what_draws = "RandAugment draws"

    def __init__(self, config_str: str, *, interpolation: str = "random",
                 fill: Sequence[int] = (128, 128, 128), translate_pct: float = 0.45,
                 seed: Optional[int] = None, image_key: LeafKey = 0, layout: str = "auto") -> None:
        self.config_str = config_str
        self.config = rand_augment_config(config_str)
        self.interpolation = arguments.one_of("RandAugment", "interpolation", interpolation,
                                              ("random", "bilinear", "bicubic"))
        values = list(fill) if isinstance(fill, (list, tuple)) else [fill]
        for i, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 255:
                raise ValueError("prefetch: RandAugment fill[%d] must be a whole number in "
                                 "[0, 255] (timm's img_mean), got %r" % (i, v))
        self.fill = tuple(values)
        self.translate_pct = arguments.number("RandAugment", "translate_pct", translate_pct,
                                              low=0.0)
        self.image_key = arguments.leaf_key("RandAugment", "image_key", image_key)
        check_image_layout(layout)
        self.layout = layout
        self._set_seed(seed)

    def __repr__(self):
        return "RandAugment(%r, interpolation=%r, fill=%r, seed=%d)" % (
            self.config_str, self.interpolation, self.fill, self.seed)

    def draws(self, n: int, epoch: int = 0, index: int = 0, rank: int = 0) -> RandAugmentDraws:
        """Each image's draws for one batch, as timm draws them for each image.

        Args:
            n (int): the number of images.
            epoch, index, rank (int): the batch's :class:`~prefetch.transforms.BatchPosition`.

        Returns:
            RandAugmentDraws.
        """
        c = self.config
        g = BatchPosition(epoch, index, rank).generator(self.seed)
        layers = c.num_layers
        if c.weights is None:
            ops = torch.randint(len(c.transforms), (n, layers), generator=g)
        elif n and layers:
            w = torch.tensor(c.weights, dtype=torch.float64).expand(n, -1)
            ops = torch.multinomial(w, layers, replacement=False, generator=g)
        else:
            ops = torch.zeros((n, layers), dtype=torch.int64)
        applied = torch.rand((n, layers), generator=g, dtype=torch.float64) <= c.prob
        magnitudes = torch.full((n, layers), float(c.magnitude), dtype=torch.float64)
        if c.magnitude_std == math.inf:
            magnitudes = torch.rand((n, layers), generator=g, dtype=torch.float64) * c.magnitude
        elif c.magnitude_std > 0:
            noise = torch.randn((n, layers), generator=g, dtype=torch.float64)
            magnitudes = magnitudes + noise * c.magnitude_std
        upper = float(c.magnitude_max or _LEVEL_DENOM)
        magnitudes = magnitudes.clamp(max=upper).clamp(min=0.0)
        negative = torch.rand((n, layers), generator=g, dtype=torch.float64) > 0.5
        if self.interpolation == "random":
            bicubic = torch.rand((n, layers), generator=g, dtype=torch.float64) < 0.5
        else:
            bicubic = torch.full((n, layers), self.interpolation == "bicubic")
        return RandAugmentDraws(ops, applied, magnitudes, negative, bicubic)

    def augment(self, x: torch.Tensor, position: BatchPosition) -> torch.Tensor:
        d = self.draws(x.shape[0], *position)
        out = x.contiguous()
        for layer in range(self.config.num_layers):
            ops, applied = d.ops[:, layer], d.applied[:, layer]
            for code in torch.unique(ops[applied]).tolist():
                idx = torch.nonzero(applied & (ops == code)).flatten()
                name = self.config.transforms[code]
                on = idx.to(out.device)
                part = self._op(name, out.index_select(0, on), d.magnitudes[idx, layer],
                                d.negative[idx, layer], d.bicubic[idx, layer])
                if out is x:
                    out = out.clone()
                out.index_copy_(0, on, part)
        return out

    def _op(self, name, x, magnitude, negative, bicubic):
        """timm's op ``name`` on images ``x`` at their magnitudes (timm's level functions, in
        float64 as timm's Python floats)."""
        level = magnitude / _LEVEL_DENOM
        sign = torch.where(negative, -1.0, 1.0).to(torch.float64)
        if name == "AutoContrast":
            return pil_ops.autocontrast(x)
        if name == "Equalize":
            return pil_ops.equalize(x)
        if name == "Invert":
            return pil_ops.invert(x)
        if name.startswith("Posterize"):
            bits = torch.trunc(level * 4).to(torch.int64)
            bits = {"Posterize": bits, "PosterizeIncreasing": 4 - bits,
                    "PosterizeOriginal": bits + 4}[name]
            return pil_ops.posterize(x, bits)
        if name.startswith("Solarize") and name != "SolarizeAdd":
            threshold = torch.trunc(level * 256).to(torch.int64).clamp(max=256)
            return pil_ops.solarize(x, 256 - threshold if name == "SolarizeIncreasing" else threshold)
        if name == "SolarizeAdd":
            return pil_ops.solarize_add(x, torch.trunc(level * 110).to(torch.int64).clamp(max=128))
        base = name[:-len("Increasing")] if name.endswith("Increasing") else name
        if base in _ENHANCE:
            if name.endswith("Increasing"):
                factor = (1.0 + (level * 0.9) * sign).clamp(min=0.1)
            else:
                factor = level * 1.8 + 0.1
            return _ENHANCE[base](x, factor)
        return pil_ops.affine(x, self._matrices(name, level, sign, x.shape[3], x.shape[2]),
                              bicubic, self.fill)

    def _matrices(self, name, level, sign, width, height):
        """Each image's ``Image.transform`` coefficients for the geometric op ``name``."""
        n = level.shape[0]
        if name == "Rotate":
            degrees = ((level * 30.0) * sign).tolist()
            return torch.tensor([pil_ops.rotate_matrix(a, width, height) for a in degrees],
                                dtype=torch.float64).reshape(n, 6)
        m = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 0.0], dtype=torch.float64).repeat(n, 1)
        if name in ("ShearX", "ShearY"):
            m[:, 1 if name == "ShearX" else 3] = (level * 0.3) * sign
        else:  # TranslateXRel / YRel: the fraction of the side, in pixels
            pct = (level * self.translate_pct) * sign
            if name == "TranslateXRel":
                m[:, 2] = pct * width
            else:
                m[:, 5] = pct * height
        return m
