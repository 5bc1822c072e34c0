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
C does, except Color's and Sharpness's, each one fused kernel (:func:`prefetch.ops.color_jitter`'s
``"pillow_color"`` step; :func:`prefetch.ops.sharpness` with ``pillow=True``); the geometry is
:func:`prefetch.ops.pil_affine`; the Gaussian blur is Pillow's box blur in integer torch ops.
"""
import math
from typing import Sequence

import torch

from ...ops.color import COLOR_STEPS, color_jitter, lookup, sharpness as sharpness_op
from ...ops.pil_geometry import pil_affine
from ..policy_ops import equalize, equalize_tables, put_rows, take_rows

__all__ = ["grayscale", "blend", "color", "contrast", "brightness", "sharpness", "autocontrast",
           "solarize", "solarize_add", "posterize", "invert", "equalize", "rotate_matrix",
           "affine", "contrast_tables", "brightness_tables", "autocontrast_tables",
           "solarize_tables", "solarize_add_tables", "posterize_tables", "invert_tables",
           "equalize_tables", "lookup_tables", "gaussian_blur", "gaussian_box_radius"]

_PILLOW_COLOR = COLOR_STEPS.index("pillow_color")


def lookup_tables(images: torch.Tensor, tables: torch.Tensor) -> torch.Tensor:
    """``images`` through one table per image or per channel (:func:`prefetch.ops.lookup`).

    Args:
        images (Tensor[N, C, H, W], uint8).
        tables (Tensor[N, 256] or Tensor[N, C, 256]): values in [0, 255], any integer dtype, any
            device (moved to the images').

    Returns:
        Tensor[N, C, H, W], uint8.
    """
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
    every channel, :func:`blend` of :func:`grayscale` fused in one kernel
    (:func:`prefetch.ops.color_jitter`'s ``"pillow_color"`` step). Args and returns as
    :func:`blend`."""
    n = images.shape[0]
    f = torch.as_tensor(factor, dtype=torch.float64).to(images.device).expand(n).reshape(n, 1)
    steps = torch.full((n, 1), _PILLOW_COLOR, dtype=torch.int64, device=images.device)
    return color_jitter(images, steps, f)


def _blend_constant_tables(levels: torch.Tensor, n: int, factor: torch.Tensor,
                           device: torch.device) -> torch.Tensor:
    """:func:`blend` with a degenerate image of one value per image (``levels``, Tensor[N] or a
    scalar, uint8) is a function of each value alone: one table per image, the blend of the 256
    values with the same float32 operations (a lookup then, where blending the pixels takes six
    passes over the batch). Returns Tensor[n, 256], uint8."""
    ramp = torch.arange(256, dtype=torch.uint8, device=device).view(1, 1, 1, 256)
    degenerate = levels.to(device).expand(n).reshape(n, 1, 1, 1)
    return blend(degenerate, ramp.expand(n, 1, 1, 256), factor).reshape(n, 256)


def contrast_tables(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """:func:`contrast`'s tables. Returns Tensor[N, 256], uint8, on ``images``' device."""
    n = images.shape[0]
    grey = grayscale(images).reshape(n, -1)
    sums = grey.sum(dim=1, dtype=torch.int64).to(torch.float64)
    mean = torch.floor(sums / grey.shape[1] + 0.5)  # (ImageStat's mean: sum / count, float64)
    return _blend_constant_tables(mean.to(torch.uint8), n, factor, images.device)


def contrast(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """``ImageEnhance.Contrast(img).enhance(factor)``: blended with the image's mean grey, the
    float64 mean of ``convert("L")`` rounded as ``int(mean + 0.5)``. Args and returns as
    :func:`blend`."""
    return lookup_tables(images, contrast_tables(images, factor))


def brightness_tables(n: int, factor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """:func:`brightness`'s tables for ``n`` images. Returns Tensor[n, 256], uint8."""
    return _blend_constant_tables(torch.zeros((), dtype=torch.uint8), n, factor, device)


def brightness(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """``ImageEnhance.Brightness(img).enhance(factor)``: blended with black. Args and returns
    as :func:`blend`."""
    return lookup_tables(images, brightness_tables(images.shape[0], factor, images.device))


def sharpness(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """``ImageEnhance.Sharpness(img).enhance(factor)``: blended with ``ImageFilter.SMOOTH``'s
    result, Pillow's float32 arithmetic fused in one kernel (:func:`prefetch.ops.sharpness` with
    ``pillow=True``). Args and returns as :func:`blend`."""
    n = images.shape[0]
    f = torch.as_tensor(factor, dtype=torch.float64).to(images.device).expand(n).contiguous()
    return sharpness_op(images, f, pillow=True)


def autocontrast(images: torch.Tensor) -> torch.Tensor:
    """``ImageOps.autocontrast(img)`` (no cutoff): :func:`autocontrast_tables` read by
    :func:`prefetch.ops.lookup`."""
    return lookup_tables(images, autocontrast_tables(images))


def autocontrast_tables(images: torch.Tensor) -> torch.Tensor:
    """:func:`autocontrast`'s tables, Tensor[N, C, 256] uint8: each channel's values from its
    lowest ``lo`` to its highest ``hi`` stretched by the table ``int(i * scale + offset)`` clipped to [0, 255],
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
    return table.to(torch.uint8)


def solarize_tables(threshold: torch.Tensor, n: int, device: torch.device) -> torch.Tensor:
    """:func:`solarize`'s tables for ``n`` images. Returns Tensor[n, 256], int64."""
    i = _ramp(n, device)
    return torch.where(i < _column(threshold, n, device, torch.int64), i, 255 - i)


def solarize(images: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """``ImageOps.solarize(img, threshold)``: values at or above the threshold inverted
    (threshold 256: none).

    Args:
        images (Tensor[N, C, H, W], uint8).
        threshold (Tensor[N]): int64, one per image, in [0, 256].
    """
    return lookup_tables(images, solarize_tables(threshold, images.shape[0], images.device))


def solarize_add_tables(add: torch.Tensor, n: int, device: torch.device,
                        threshold: int = 128) -> torch.Tensor:
    """:func:`solarize_add`'s tables for ``n`` images. Returns Tensor[n, 256], int64."""
    i = _ramp(n, device)
    return torch.where(i < threshold, (i + _column(add, n, device, torch.int64)).clamp(max=255), i)


def solarize_add(images: torch.Tensor, add: torch.Tensor, threshold: int = 128) -> torch.Tensor:
    """timm's ``solarize_add``: values below the threshold raised by ``add``, at most 255 (its
    table through ``Image.point``).

    Args:
        images (Tensor[N, C, H, W], uint8).
        add (Tensor[N]): int64, one per image.
        threshold (int): timm's 128.
    """
    return lookup_tables(images, solarize_add_tables(add, images.shape[0], images.device, threshold))


def posterize_tables(bits: torch.Tensor, n: int, device: torch.device) -> torch.Tensor:
    """:func:`posterize`'s tables for ``n`` images. Returns Tensor[n, 256], int64."""
    b = _column(bits, n, device, torch.int64).clamp(max=8)
    mask = 256 - (1 << (8 - b))  # ~(2 ** (8 - bits) - 1) & 0xff
    return _ramp(n, device) & mask


def posterize(images: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """timm's ``posterize``: ``ImageOps.posterize(img, bits)`` (each value's top ``bits`` bits),
    the image as it is for 8 bits or more.

    Args:
        images (Tensor[N, C, H, W], uint8).
        bits (Tensor[N]): int64, one per image, >= 0.
    """
    return lookup_tables(images, posterize_tables(bits, images.shape[0], images.device))


def invert_tables(n: int, device: torch.device) -> torch.Tensor:
    """:func:`invert`'s table for ``n`` images. Returns Tensor[n, 256], int64."""
    return 255 - _ramp(n, device)


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


def _f32(v: float) -> float:
    """``v`` rounded to a C float (a float32 value as a Python float)."""
    return float(torch.tensor(v, dtype=torch.float32))


def gaussian_box_radius(radius: float, passes: int = 3) -> float:
    """Pillow's ``_gaussian_blur_radius`` (``BoxBlur.c``): the extended box radius whose
    ``passes`` box blurs approximate a Gaussian of standard deviation ``radius`` (Gwosdek et al.,
    "Theoretical foundations of Gaussian convolution by extended box filtering", SSVM 2011),
    computed in C floats as Pillow computes it (the square root and the floor in double).

    Args:
        radius (float): the Gaussian's standard deviation (``ImageFilter.GaussianBlur``'s
            radius), >= 0.
        passes (int): Pillow's 3.

    Returns:
        float: a float32 value, the box's radius: its integer part whole taps on each side, its
        fraction the weight of the next tap.
    """
    r = _f32(radius)
    sigma2 = _f32(_f32(r * r) / passes)
    big_l = _f32(math.sqrt(12.0 * sigma2 + 1.0))
    small_l = _f32(math.floor((big_l - 1.0) / 2.0))
    a = _f32(_f32(_f32(2 * small_l) + 1) * _f32(_f32(small_l * _f32(small_l + 1)) - _f32(3 * sigma2)))
    a = _f32(a / _f32(6 * _f32(sigma2 - _f32(_f32(small_l + 1) * _f32(small_l + 1)))))
    return _f32(small_l + a)


def _box_weights(box_radius: float):
    """``ImagingHorizontalBoxBlur``'s integer radius and 24-bit fixed-point weights: ``ww`` for
    each whole tap (the float quotient ``2^24 / (2 r + 1)`` truncated) and ``fw`` for the two
    taps just outside (half what the whole taps leave of 2^24)."""
    whole = int(box_radius)
    ww = int(_f32(16777216.0 / _f32(_f32(box_radius * 2) + 1)))
    return whole, ww, (16777216 - (2 * whole + 1) * ww) // 2


def _box_blur_lines(lines: torch.Tensor, whole: torch.Tensor, ww: torch.Tensor,
                    fw: torch.Tensor) -> torch.Tensor:
    """One pass of ``ImagingLineBoxBlur`` along the last dimension of ``lines`` (int64
    ``[N, C, H, W]``), each image its own integer radius and weights (int64 ``[N]``): a window of
    ``2 r + 1`` values around each, the line's ends repeated beyond them, weighted ``ww``, the two
    values just outside it weighted ``fw``, rounded from 24-bit fixed point."""
    n, w = lines.shape[0], lines.shape[-1]
    pad = int(whole.max()) + 2
    at = torch.arange(-pad, w + pad, device=lines.device).clamp_(0, w - 1)
    ext = lines.index_select(-1, at)  # ext[..., k]: the value at k - pad, the ends repeated
    prefix = torch.nn.functional.pad(ext.cumsum(-1), (1, 0))  # prefix[k]: ext[:k]'s sum
    x = torch.arange(w, device=lines.device).view(1, w) + pad
    r = whole.view(n, 1)

    def take(t, index):  # t[..., index[n, x]] for each image n
        return t.gather(-1, index.view(n, 1, 1, w).expand(t.shape[:-1] + (w,)))

    acc = take(prefix, x + r + 1) - take(prefix, x - r)
    far = take(ext, x - r - 1) + take(ext, x + r + 1)
    bulk = acc * ww.view(n, 1, 1, 1) + far * fw.view(n, 1, 1, 1)
    return (bulk + (1 << 23)) >> 24


def gaussian_blur(images: torch.Tensor, radius: torch.Tensor) -> torch.Tensor:
    """``img.filter(ImageFilter.GaussianBlur(radius))`` for each image (what timm's 3-Augment
    blur calls): Pillow's extended box blur (``BoxBlur.c``), three passes along the rows then
    three along the columns, each image its own radius, in Pillow's 24-bit fixed point: equal to
    Pillow byte for byte (the tests compare with Pillow itself). A radius of 0 is the image.

    Args:
        images (Tensor[N, C, H, W], uint8).
        radius (Tensor[N]): each image's Gaussian standard deviation in pixels (float, >= 0).

    Returns:
        Tensor[N, C, H, W], uint8.
    """
    n = images.shape[0]
    boxes = [_box_weights(gaussian_box_radius(float(r))) if float(r) != 0.0 else (0, 0, 0)
             for r in torch.as_tensor(radius, dtype=torch.float64).reshape(-1).tolist()]
    if n == 0 or all(b == (0, 0, 0) for b in boxes):
        return images.clone()
    whole, ww, fw = (torch.tensor(v, dtype=torch.int64, device=images.device) for v in zip(*boxes))
    # (Pillow blurs a radius whose box radius is 0 with ww = 2^24, fw = 0: the line itself, as
    # the pad-0 rows here give; a radius of 0 skips the blur: ww = 2^24 as well)
    ww = torch.where(ww == 0, torch.full_like(ww, 1 << 24), ww)
    x = images.to(torch.int64)
    for _ in range(3):
        x = _box_blur_lines(x, whole, ww, fw)
    x = x.transpose(-1, -2)
    for _ in range(3):
        x = _box_blur_lines(x, whole, ww, fw)
    return x.transpose(-1, -2).to(torch.uint8).contiguous()
