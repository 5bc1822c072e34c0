"""What timm's RandAugment and AutoAugment share (``timm/data/auto_augment.py``'s ``AugmentOp``):
each image's ops in layers, applied with that image's draws, by timm's level functions and
Pillow's arithmetic (:mod:`.pil_ops`). A stage subclass draws the layers (:meth:`TimmOpsStage.draws`);
this applies them."""
import math
import operator
import re
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch

from .. import arguments
from ..contract import BatchPosition, check_image_layout
from ..policy_ops import put_rows, take_rows
from ..uint8_stage import Uint8Stage
from . import pil_ops

__all__ = ["OpDraws", "TimmOpsStage", "LEVEL_DENOM", "draw_magnitudes", "config_sections"]

LEVEL_DENOM = 10.0  # timm's: magnitude / 10 is the op's level
# The batched call each of timm's ops joins within a layer (TimmOpsStage.apply_layers): one
# pil_affine for the geometric ops, one lookup for the value-wise ones (a table per image; the
# Contrast and Brightness blends are tables too: their degenerate image is one value), and a call
# of their own for the blends with a per-pixel degenerate image.
_AFFINE_OPS = frozenset(("Rotate", "ShearX", "ShearY", "TranslateX", "TranslateY", "TranslateXRel",
                         "TranslateYRel"))
_TABLE_OPS = frozenset(("AutoContrast", "Equalize", "Invert", "Posterize", "PosterizeIncreasing",
                        "PosterizeOriginal", "Solarize", "SolarizeIncreasing", "SolarizeAdd",
                        "Contrast", "ContrastIncreasing", "Brightness", "BrightnessIncreasing"))
_ENHANCE = {"Color": pil_ops.color, "ColorIncreasing": pil_ops.color, "Desaturate": pil_ops.color,
            "Sharpness": pil_ops.sharpness, "SharpnessIncreasing": pil_ops.sharpness}
# 3-Augment's blurs (DeiT III): Pillow's GaussianBlur, each image its own radius.
_BLUR_OPS = frozenset(("GaussianBlur", "GaussianBlurRand"))


def _call_of(name: str) -> str:
    """``"affine"``, ``"table"`` or the op's own name (Color, Sharpness, Desaturate, the blurs)."""
    if name in _AFFINE_OPS:
        return "affine"
    if name in _TABLE_OPS:
        return "table"
    if name in _ENHANCE or name in _BLUR_OPS:
        return name
    raise ValueError("prefetch: timm op %r has no batched call here" % name)


def config_sections(what: str, config_str: str, kinds: Dict[str, type]) -> Dict[str, object]:
    """The ``key<number>`` sections after the name of one of timm's augmentation strings, parsed
    as timm's ``rand_augment_transform``, ``auto_augment_transform`` and
    ``augment_and_mix_transform`` split them (``re.split(r"(\\d.*)", section)``; a section
    without a number skipped). A ``t<name>`` section, RandAugment's op set, is kept as a string
    under ``"t"`` where ``kinds`` has ``"t"`` (the first one, as timm keeps it).

    Args:
        what (str): the augmentation's name in errors (``"RandAugment"``, ...).
        config_str (str): the whole string.
        kinds (dict): each key timm knows and the type its number parses as.

    Returns:
        dict: key -> parsed value, for the sections given (a later one replaces an earlier).

    Raises:
        ValueError: a key timm does not know (timm asserts), or a number that does not parse,
            naming the string and the section.
    """
    found: Dict[str, object] = {}
    for section in config_str.split("-")[1:]:
        if "t" in kinds and section.startswith("t"):
            found.setdefault("t", section[1:])
            continue
        parts = re.split(r"(\d.*)", section)
        if len(parts) < 2:
            continue
        key, value = parts[:2]
        if key not in kinds:
            raise ValueError("prefetch: timm %s %r: unknown section %r (timm knows %s)"
                             % (what, config_str, section, ", ".join(kinds)))
        try:
            found[key] = kinds[key](value)
        except ValueError:
            raise ValueError("prefetch: timm %s %r: section %r: %r does not parse as its number"
                             % (what, config_str, section, value)) from None
    return found


def draw_magnitudes(g: torch.Generator, base: torch.Tensor, std: float,
                    upper: Optional[float]) -> torch.Tensor:
    """timm's AugmentOp magnitudes: ``base`` (float64) with Gaussian noise of ``std`` (``inf``:
    uniform in [0, base]), clipped to [0, upper or 10], drawn from ``g``."""
    if std == math.inf:
        base = torch.rand(base.shape, generator=g, dtype=torch.float64) * base
    elif std > 0:
        base = base + torch.randn(base.shape, generator=g, dtype=torch.float64) * std
    return base.clamp(max=float(upper or LEVEL_DENOM)).clamp(min=0.0)


def _whole(v):
    """``v`` as an int when it is a whole number (a NumPy integer too), else None."""
    try:
        return operator.index(v)
    except TypeError:
        return None


@dataclass
class OpDraws:
    """One batch's draws, each ``Tensor[N, layers]`` on the host: ``ops`` (int64, indices into
    the stage's ``transforms``), ``applied`` (bool), ``magnitudes`` (float64, after noise and
    clipping), ``negative`` (bool: the signed ops' sign) and ``bicubic`` (bool: the geometric
    ops' resampling); AutoAugment's also ``sub_policy`` (int64 ``Tensor[N]``: each image's
    sub-policy), and ``uniform`` (float64, in [0, 1)) where an op draws a number of its own
    (3-Augment's GaussianBlurRand: its radius)."""

    ops: torch.Tensor
    applied: torch.Tensor
    magnitudes: torch.Tensor
    negative: torch.Tensor
    bicubic: torch.Tensor
    sub_policy: Optional[torch.Tensor] = None
    uniform: Optional[torch.Tensor] = None


class TimmOpsStage(Uint8Stage):
    """A uint8 stage applying timm's ops in layers, each image its own draws.

    Subclasses set ``transforms`` (the op names the draws index) and implement :meth:`draws`.

    Args (of :meth:`_init_common`):
        interpolation (str): ``"random"``, ``"bilinear"`` or ``"bicubic"``.
        fill (int or sequence of int): the geometric ops' ``fillcolor``, each in [0, 255].
        translate_pct (float): TranslateXRel/YRel's largest shift, a fraction of the side.
        translate_const (float): TranslateX/Y's largest shift in pixels (timm: 250, or
            ``int(0.45 * size)`` from create_transform).
    """

    transforms: Tuple[str, ...] = ()

    def _init_common(self, cls, interpolation, fill, translate_pct, translate_const, seed,
                     image_key, layout):
        self.interpolation = arguments.one_of(cls, "interpolation", interpolation,
                                              ("random", "bilinear", "bicubic"))
        values = list(fill) if isinstance(fill, (list, tuple)) else [fill]
        for i, v in enumerate(values):
            whole = None if isinstance(v, bool) else _whole(v)
            if whole is None or not 0 <= whole <= 255:
                raise ValueError("prefetch: %s fill[%d] must be a whole number in [0, 255] "
                                 "(timm's img_mean), got %r" % (cls, i, v))
            values[i] = whole
        if len(values) not in (1, 3):
            raise ValueError("prefetch: %s fill must be one value or one per channel (timm's "
                             "img_mean), got %d values" % (cls, len(values)))
        self.fill = tuple(values)
        self.translate_pct = arguments.number(cls, "translate_pct", translate_pct, low=0.0)
        self.translate_const = arguments.number(cls, "translate_const", translate_const, low=0.0)
        self.image_key = arguments.leaf_key(cls, "image_key", image_key)
        check_image_layout(layout)
        self.layout = layout
        self._set_seed(seed)

    def draws(self, n: int, epoch: int = 0, index: int = 0, rank: int = 0) -> OpDraws:
        raise NotImplementedError

    def _signs_and_filters(self, g, n, layers):
        """The draws every op takes whether it uses them: a sign (negative with probability 1/2,
        timm's ``_randomly_negate``) and bicubic (probability 1/2 under ``"random"``)."""
        negative = torch.rand((n, layers), generator=g, dtype=torch.float64) > 0.5
        if self.interpolation == "random":
            bicubic = torch.rand((n, layers), generator=g, dtype=torch.float64) < 0.5
        else:
            bicubic = torch.full((n, layers), self.interpolation == "bicubic")
        return negative, bicubic

    def check_fill(self, x: torch.Tensor) -> None:
        """Refuses images whose channels the fill does not cover, before any draw (the geometric
        ops that read it are drawn for some batches only).

        Raises:
            ValueError: ``fill`` has neither 1 value nor one per channel of ``x``.
        """
        if len(self.fill) not in (1, x.shape[1]):
            raise ValueError("prefetch: %s fill %r has %d values for images of %d channels (one "
                             "value, or one per channel: timm's img_mean of the recipe's mean)"
                             % (type(self).__name__, self.fill, len(self.fill), x.shape[1]))

    def augment(self, x: torch.Tensor, position: BatchPosition) -> torch.Tensor:
        self.check_fill(x)
        return self.apply_layers(x, self.draws(x.shape[0], *position))

    def apply_layers(self, x: torch.Tensor, d: OpDraws) -> torch.Tensor:
        """Each image of ``x`` through its layers of ops (``d``). Within a layer each image takes
        one op, so the images of every geometric op go through one :func:`prefetch.ops.
        pil_affine` call (each its own matrix) and those of every value-wise op through one
        lookup (each its own table); Color, Sharpness, Desaturate and the blurs are a call each.
        (A two-layer recipe's ~20 op groups a batch of 32 become at most 8 calls; measured, the
        calls' own cost had been small next to their images' work.)

        Args:
            x (Tensor[N, C, H, W], uint8): the images (not written).
            d (OpDraws): their draws.

        Returns:
            Tensor[N, C, H, W], uint8.
        """
        out = x.contiguous()
        for layer in range(d.ops.shape[1]):
            ops, applied = d.ops[:, layer], d.applied[:, layer]
            groups: Dict[str, list] = {}
            for code in torch.unique(ops[applied]).tolist():
                name = self.transforms[code]
                groups.setdefault(_call_of(name), []).append(
                    (name, torch.nonzero(applied & (ops == code)).flatten()))
            for call, members in groups.items():
                idx = torch.cat([i for _, i in members])
                on = idx.to(out.device)
                part = self._call(call, members, take_rows(out, on), d, layer)
                if out is x:
                    out = out.clone()
                put_rows(out, on, part)
        return out

    def _call(self, call, members, x, d, layer):
        """One batched call (:func:`_call_of`) over the images of ``members`` (``(op name,
        image indices)`` pairs, ``x`` their images in that order)."""
        params = [(name, idx.shape[0]) + self._levels(d.magnitudes[idx, layer], d.negative[idx, layer])
                  for name, idx in members]
        if call == "affine":
            h, w = x.shape[2], x.shape[3]
            matrices = torch.cat([self._matrices(name, level, sign, w, h)
                                  for name, _, level, sign in params])
            bicubic = torch.cat([d.bicubic[idx, layer] for _, idx in members])
            return pil_ops.affine(x, matrices, bicubic, self.fill)
        if call == "table":
            n, c = x.shape[:2]
            tables, at = [], 0
            for name, k, level, sign in params:
                table = self._table(name, x[at:at + k], level, sign).to(torch.uint8)
                tables.append(table.reshape(k, -1, 256).expand(k, c, 256))
                at += k
            return pil_ops.lookup_tables(x, torch.cat(tables))
        (name, _, level, sign), = params
        if name in _BLUR_OPS:
            idx = members[0][1]
            uniform = d.uniform[idx, layer] if d.uniform is not None else None
            return pil_ops.gaussian_blur(x, self._blur_radius(name, level, uniform))
        return self._enhance(name, x, level, sign)

    @staticmethod
    def _levels(magnitude, negative):
        """timm's level (magnitude / 10, float64 as timm's Python floats) and the sign its
        ``_randomly_negate`` draws (-1 or 1)."""
        return magnitude / LEVEL_DENOM, torch.where(negative, -1.0, 1.0).to(torch.float64)

    def _table(self, name, x, level, sign):
        """The 256-entry tables of value-wise op ``name`` for images ``x``: Tensor[k, 256] or
        Tensor[k, C, 256]."""
        k, dev = x.shape[0], x.device
        if name == "AutoContrast":
            return pil_ops.autocontrast_tables(x)
        if name == "Equalize":
            return pil_ops.equalize_tables(x)
        if name == "Invert":
            return pil_ops.invert_tables(k, dev)
        if name.startswith("Posterize"):
            bits = torch.trunc(level * 4).to(torch.int64)
            bits = {"Posterize": bits, "PosterizeIncreasing": 4 - bits,
                    "PosterizeOriginal": bits + 4}[name]
            return pil_ops.posterize_tables(bits, k, dev)
        if name in ("Solarize", "SolarizeIncreasing"):
            threshold = torch.trunc(level * 256).to(torch.int64).clamp(max=256)
            return pil_ops.solarize_tables(256 - threshold if name == "SolarizeIncreasing" else threshold,
                                           k, dev)
        if name == "SolarizeAdd":
            return pil_ops.solarize_add_tables(torch.trunc(level * 110).to(torch.int64).clamp(max=128), k, dev)
        factor = self._factor(name, level, sign)
        if name.startswith("Contrast"):
            return pil_ops.contrast_tables(x, factor)
        return pil_ops.brightness_tables(k, factor, dev)  # (_TABLE_OPS: Brightness is the last)

    @staticmethod
    def _blur_radius(name, level, uniform):
        """3-Augment's blur radius: GaussianBlur's ``_minmax_level_to_arg(level, 0.1, 2.0)``;
        GaussianBlurRand's ``random.uniform(0.1, 2.0 * f)`` with ``f`` the level clipped to
        [0, 1] (``_minmax_level_to_arg``'s defaults), ``uniform`` its draw (float64, as timm's
        Python floats)."""
        if name == "GaussianBlur":
            return (0.1 + (2.0 - 0.1) * level).clamp(0.1, 2.0)
        factor = (0.0 + (1.0 - 0.0) * level).clamp(0.0, 1.0)
        return 0.1 + (2.0 * factor - 0.1) * uniform

    @staticmethod
    def _factor(name, level, sign):
        """The enhance ops' factor: timm's ``_enhance_increasing_level_to_arg`` (``1 + 0.9 level``
        randomly negated, at least 0.1) or ``_enhance_level_to_arg`` (``1.8 level + 0.1``);
        Desaturate's ``1 - _minmax_level_to_arg(level, 0.5, 1.0)`` clipped to [0, 1] (Color's
        factor: 0 is grey)."""
        if name == "Desaturate":
            return (1.0 - (0.5 + (1.0 - 0.5) * level).clamp(0.5, 1.0)).clamp(0.0, 1.0)
        if name.endswith("Increasing"):
            return (1.0 + (level * 0.9) * sign).clamp(min=0.1)
        return level * 1.8 + 0.1

    def _enhance(self, name, x, level, sign):
        """Color or Sharpness (a blend with each image's own degenerate image)."""
        return _ENHANCE[name](x, self._factor(name, level, sign))

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
        elif name in ("TranslateX", "TranslateY"):  # in pixels: level times translate_const
            m[:, 2 if name == "TranslateX" else 5] = (level * float(self.translate_const)) * sign
        else:  # TranslateXRel / YRel: the fraction of the side, in pixels
            pct = (level * self.translate_pct) * sign
            if name == "TranslateXRel":
                m[:, 2] = pct * width
            else:
                m[:, 5] = pct * height
        return m
