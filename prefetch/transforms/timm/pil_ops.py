"""The ops of timm's RandAugment (``timm/data/auto_augment.py``) on a batch, each image its own
parameter, with Pillow's arithmetic: timm applies them to PIL images, so these equal Pillow's
``ImageEnhance``, ``ImageOps``, ``Image.point`` and ``Image.transform`` byte for byte (the tests
compare each with Pillow itself), not torchvision's tensor ops (:mod:`prefetch.transforms.
policy_ops`), which round differently (torchvision's grey is ``0.2989 R + 0.587 G + 0.114 B``
truncated, Pillow's ``(19595 R + 38470 G + 7471 B + 0x8000) >> 16``; torchvision's affine is
grid_sample's, Pillow's its own).

Every op takes uint8 ``images [N, C, H, W]`` (C 1 or 3, any device) and returns uint8 of the
same shape on that device. Per-image parameters are float64 or int64 tensors of N on any device
(moved to the images'). The value-wise ops are a 256-entry table per image (or channel) read by
:func:`prefetch.ops.lookup`; the blends are float32 torch ops, each rounded on its own as Pillow's
C does; the geometry is :func:`prefetch.ops.pil_affine`.
"""
import math
from typing import Sequence

import torch

from ...ops.color import lookup
from ...ops.pil_geometry import pil_affine
from ..policy_ops import equalize, put_rows, take_rows

__all__ = ["grayscale", "blend", "color", "contrast", "brightness", "sharpness", "autocontrast",
           "solarize", "solarize_add", "posterize", "invert", "equalize", "rotate_matrix",
           "affine"]


def _tables(images, tables):
    """``images`` through one table per image ``[N, 256]`` or per channel ``[N, C, 256]``."""
    if tables.dim() == 2:
        tables = tables.unsqueeze(1)
    return lookup(images, tables.to(device=images.device, dtype=torch.uint8).contiguous())


def _ramp(n, device):
    return torch.arange(256, dtype=torch.int64, device=device).expand(n, 256)


def _column(values, n, device, dtype=torch.float64):
    return torch.as_tensor(values, dtype=dtype).to(device).expand(n).reshape(n, 1)


def grayscale(images: torch.Tensor) -> torch.Tensor:
    """Pillow's ``convert("L")`` (ITU-R 601-2 in 16-bit fixed point, ``Convert.c``'s ``L24``):
    ``(19595 R + 38470 G + 7471 B + 0x8000) >> 16``.

    Args:
        images (Tensor[N, C, H, W], uint8): C 3 (C 1 is returned as it is).

    Returns:
        Tensor[N, 1, H, W], uint8.
    """
    if images.shape[1] == 1:
        return images
    r, g, b = images.to(torch.int32).unbind(dim=1)
    return ((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16).to(torch.uint8).unsqueeze(1)


def blend(degenerate: torch.Tensor, images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Pillow's ``Image.blend(degenerate, images, factor)`` (``Blend.c``): ``d + f (i - d)`` in
    float32 (the factor a C float), each operation rounded on its own, clipped to [0, 255] and
    truncated; what every ``ImageEnhance`` class's ``enhance(factor)`` computes.

    Args:
        degenerate (Tensor[N, C or 1, H, W], uint8): the enhancer's degenerate images.
        images (Tensor[N, C, H, W], uint8).
        factor (Tensor[N]): one factor per image (any real).

    Returns:
        Tensor[N, C, H, W], uint8.
    """
    n = images.shape[0]
    f = torch.as_tensor(factor, dtype=torch.float64).to(images.device).to(torch.float32)
    f = f.expand(n).reshape(n, 1, 1, 1)
    d = degenerate.to(torch.float32)
    diff = images.to(torch.float32) - d  # (exact: small integers)
    v = d + diff * f  # two roundings, as the C expression (no fused multiply-add)
    return v.clamp_(0.0, 255.0).to(torch.uint8)


def color(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """``ImageEnhance.Color(img).enhance(factor)``: blended with its grey (``convert("L")``) in
    every channel. Args and returns as :func:`blend`."""
    return blend(grayscale(images), images, factor)


def contrast(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """``ImageEnhance.Contrast(img).enhance(factor)``: blended with the image's mean grey, the
    float64 mean of ``convert("L")`` rounded as ``int(mean + 0.5)``. Args and returns as
    :func:`blend`."""
    n = images.shape[0]
    grey = grayscale(images).reshape(n, -1)
    sums = grey.sum(dim=1, dtype=torch.int64).to(torch.float64)
    mean = torch.floor(sums / grey.shape[1] + 0.5)  # (ImageStat's mean: sum / count, float64)
    degenerate = mean.to(torch.uint8).view(n, 1, 1, 1)
    return blend(degenerate, images, factor)


def brightness(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """``ImageEnhance.Brightness(img).enhance(factor)``: blended with black. Args and returns
    as :func:`blend`."""
    return blend(torch.zeros((), dtype=torch.uint8, device=images.device), images, factor)


# ImageFilter.SMOOTH: the 3x3 kernel [1 1 1; 1 5 1; 1 1 1] / 13, each weight a float32 quotient.
_SMOOTH_EDGE = float(torch.tensor(1.0, dtype=torch.float32) / torch.tensor(13.0, dtype=torch.float32))
_SMOOTH_CENTRE = float(torch.tensor(5.0, dtype=torch.float32) / torch.tensor(13.0, dtype=torch.float32))


def _smooth(images):
    """``img.filter(ImageFilter.SMOOTH)`` (``Filter.c``'s ``ImagingFilter3x3``): the border rows
    and columns kept; inside, per row of the kernel ``(a k0 + b k1) + c k2`` in float32, the rows
    summed onto ``0.5`` (the rounding offset) bottom row first, and truncated to uint8. Each
    product is computed once (the same float32 value whichever sum it enters) and the outer rows'
    sums once for both: nine passes over the image where the written-out order takes eighteen."""
    h, w = images.shape[2], images.shape[3]
    if h < 3 or w < 3:
        return images
    x = images.to(torch.float32)
    edge = x * torch.tensor(_SMOOTH_EDGE, dtype=torch.float32)
    centre = x[:, :, 1:-1, 1:-1] * torch.tensor(_SMOOTH_CENTRE, dtype=torch.float32)
    outer = (edge[:, :, :, :-2] + edge[:, :, :, 1:-1]).add_(edge[:, :, :, 2:])  # rows of 1 1 1
    middle = (edge[:, :, 1:-1, :-2] + centre).add_(edge[:, :, 1:-1, 2:])      # the row 1 5 1
    inner = (outer[:, :, 2:] + 0.5).add_(middle).add_(outer[:, :, :-2])  # below, itself, above
    out = images.clone()
    out[:, :, 1:-1, 1:-1] = inner.clamp_(0.0, 255.0).to(torch.uint8)
    return out


def sharpness(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """``ImageEnhance.Sharpness(img).enhance(factor)``: blended with ``ImageFilter.SMOOTH``'s
    result. Args and returns as :func:`blend`."""
    return blend(_smooth(images), images, factor)


def autocontrast(images: torch.Tensor) -> torch.Tensor:
    """``ImageOps.autocontrast(img)`` (no cutoff): each channel's values from its lowest ``lo``
    to its highest ``hi`` stretched by the table ``int(i * scale + offset)`` clipped to [0, 255],
    ``scale = 255 / (hi - lo)``, ``offset = -lo * scale`` (float64); a channel of one value kept.
    """
    n, c = images.shape[:2]
    flat = images.reshape(n, c, -1)
    lo = flat.amin(dim=2).to(torch.float64).unsqueeze(2)
    hi = flat.amax(dim=2).to(torch.float64).unsqueeze(2)
    ramp = torch.arange(256, dtype=torch.float64, device=images.device).view(1, 1, 256)
    span = (hi - lo).clamp(min=1.0)
    scale = torch.full_like(span, 255.0) / span  # (255.0 / span is a reciprocal times 255 in torch)
    offset = -lo * scale
    table = torch.trunc(ramp * scale + offset).clamp_(0, 255)
    table = torch.where(hi > lo, table, ramp)
    return _tables(images, table.to(torch.uint8))


def solarize(images: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """``ImageOps.solarize(img, threshold)``: values at or above the threshold inverted
    (threshold 256: none).

    Args:
        images (Tensor[N, C, H, W], uint8).
        threshold (Tensor[N]): int64, one per image, in [0, 256].
    """
    n = images.shape[0]
    i = _ramp(n, images.device)
    t = _column(threshold, n, images.device, torch.int64)
    return _tables(images, torch.where(i < t, i, 255 - i))


def solarize_add(images: torch.Tensor, add: torch.Tensor, threshold: int = 128) -> torch.Tensor:
    """timm's ``solarize_add``: values below the threshold raised by ``add``, at most 255 (its
    table through ``Image.point``).

    Args:
        images (Tensor[N, C, H, W], uint8).
        add (Tensor[N]): int64, one per image.
        threshold (int): timm's 128.
    """
    n = images.shape[0]
    i = _ramp(n, images.device)
    a = _column(add, n, images.device, torch.int64)
    return _tables(images, torch.where(i < threshold, (i + a).clamp(max=255), i))


def posterize(images: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """timm's ``posterize``: ``ImageOps.posterize(img, bits)`` (each value's top ``bits`` bits),
    the image as it is for 8 bits or more.

    Args:
        images (Tensor[N, C, H, W], uint8).
        bits (Tensor[N]): int64, one per image, >= 0.
    """
    n = images.shape[0]
    b = _column(bits, n, images.device, torch.int64).clamp(max=8)
    mask = 256 - (1 << (8 - b))  # ~(2 ** (8 - bits) - 1) & 0xff
    return _tables(images, _ramp(n, images.device) & mask)


def invert(images: torch.Tensor) -> torch.Tensor:
    """``ImageOps.invert(img)``: 255 - value."""
    return 255 - images


def rotate_matrix(degrees: float, width: int, height: int) -> Sequence[float]:
    """The coefficients ``Image.rotate(degrees)`` passes to ``Image.transform`` (Pillow's
    ``Image.rotate`` without expand, centre or translate): a rotation about ``(w / 2, h / 2)``,
    its cosine and sine rounded to 15 decimals as Pillow rounds them.

    Returns:
        list of 6 floats: the output-to-input map (pixel centres at +0.5).
    """
    angle = -math.radians(degrees % 360.0)
    m = [round(math.cos(angle), 15), round(math.sin(angle), 15), 0.0,
         round(-math.sin(angle), 15), round(math.cos(angle), 15), 0.0]
    cx, cy = width / 2, height / 2
    m[2] = m[0] * -cx + m[1] * -cy + m[2] + cx
    m[5] = m[3] * -cx + m[4] * -cy + m[5] + cy
    return m


def affine(images: torch.Tensor, matrices: torch.Tensor, bicubic: torch.Tensor,
           fill: Sequence[int]) -> torch.Tensor:
    """``img.transform(img.size, Image.AFFINE, m, resample, fillcolor=fill)`` for each image:
    :func:`prefetch.ops.pil_affine`, one launch for the bilinear images and one for the bicubic.

    Args:
        images (Tensor[N, C, H, W], uint8).
        matrices (Tensor[N, 6]): float64, Pillow's coefficients, on the host.
        bicubic (Tensor[N]): bool, on the host: bicubic (else bilinear) per image.
        fill (sequence of int): one value or one per channel.
    """
    out = torch.empty_like(images, memory_format=torch.contiguous_format)
    for mode, pick in (("bicubic", bicubic), ("bilinear", ~bicubic)):
        idx = torch.nonzero(pick).flatten()
        if idx.numel() == 0:
            continue
        part = pil_affine(take_rows(images, idx.to(images.device)),
                          matrices.index_select(0, idx).to(images.device), interpolation=mode,
                          fill=list(fill))
        put_rows(out, idx.to(images.device), part)
    return out
