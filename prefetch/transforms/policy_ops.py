"""The ops of the augmentation policies, applied to a batch with each sample's own op and
parameter: the photometric ones (Brightness, Color, Contrast, Sharpness, Hue,
Posterize, Solarize, AutoContrast, Equalize, Invert) and the geometric ones (ShearX/Y,
TranslateX/Y, Rotate, nearest or bilinear, with a fill), on uint8 ``[N, C, H, W]`` images
(C = 1 or 3) on any device.

Every op takes ``images`` as a uint8 ``Tensor[N, C, H, W]`` with C 1 or 3, on any device, and
returns a uint8 ``Tensor[N, C, H, W]`` on that device; other images raise ValueError.

Each op is torchvision v2's functional op on uint8 tensors (``torchvision.transforms.v2
.functional``, 0.29) with its scalar parameter made per sample, run by a fused kernel where one
exists (C++ and CUDA, :mod:`prefetch.ops`):
- Sharpness: :func:`prefetch.ops.sharpness`, torchvision's values exactly;
- Brightness, Solarize, AutoContrast, Equalize (and Contrast past 65,793 pixels an image): a
  256-entry table per image (or channel), built with torchvision's own float32 arithmetic
  (Equalize's from :func:`prefetch.ops.histograms`), read by :func:`prefetch.ops.lookup`:
  torchvision's values exactly;
- Rotate, ShearX/Y, TranslateX/Y: :func:`prefetch.ops.affine_warp` on torchvision's matrices. Its
  source points are computed from pixel indices in float32, not through torchvision's normalised
  grid, so they differ from torchvision's by float32 roundings (~1e-5 pixel): a nearest sample can
  take the other pixel at a tie, a bilinear value can differ by 1 next to a rounding boundary (the
  tolerance tests/transforms/test_policy_ops.py checks and docs/reliability.md states);
- Color (saturation), Hue, Contrast (up to 65,793 pixels an image, where its exact grey sum
  gives torch's float32 mean), and whole tables of colour ops (ColorJitter's: each sample's
  brightness, contrast, saturation and hue in its own order): :func:`prefetch.ops.color_jitter`,
  one pass over the pixels (two with a Contrast), torchvision's values (its float32 arithmetic,
  its fused multiply-adds fused);
- Posterize, Invert: one torch op each (a mask, a ``bitwise_not``).
One batched pass per op kind and column of the table (one for a table of colour ops), on every
device. Parameters given on the host are checked there; the photometric ops use parameters
already on the images' device unread (reading them back would synchronise the loader's producer
thread with the device). The geometric ops compute each image's matrix with Python's ``math``, as
torchvision does, so their angles, shears and translations are read on the host (``apply_table``
passes host parameters: the loader never synchronises).

Length: over 500 lines because each of its 13 public ops documents its arguments, shapes and
errors (about 280 lines of docstrings; under 400 of code), and the ops belong together: the
table's applier dispatches to each of them.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple, Union

import torch

from ..ops.color import COLOR_STEPS, color_jitter, histograms, lookup, sharpness
from ..ops.geometry import affine_warp
from .contract import describe_tensor
from .policies import OPS, OpTable, op_parameters

#: A per-sample parameter: one number for every image, or one per image (a sequence or a 1-D
#: tensor of N; on the images' device it is used unread).
PerImage = Union[float, Sequence[float], torch.Tensor]
#: A fill where a geometric op leaves the image: a number, or one per channel, in [0, 255].
Fill = Union[float, Sequence[float], None]

__all__ = ["adjust_brightness", "adjust_saturation", "adjust_contrast", "adjust_sharpness",
           "adjust_hue", "posterize", "solarize", "autocontrast", "equalize", "invert",
           "affine", "pixel_maps", "apply_table", "equalize_tables"]


def _per_sample(values, images, name):
    """``values`` (a number or one per sample) as float32 ``[N, 1, 1, 1]`` on the images'
    device: the float32 a torchvision scalar becomes in its float32 arithmetic."""
    t = torch.as_tensor(values, dtype=torch.float64)
    n = images.shape[0]
    if t.dim() == 0:
        t = t.expand(n)
    if t.shape != (n,):
        raise ValueError("prefetch: %s must be a number or one per image (%d), got shape %s"
                         % (name, n, tuple(t.shape)))
    return t.to(device=images.device, dtype=torch.float32).view(n, 1, 1, 1)


def _on_host(values):
    """Whether parameters are checked: those given on the host are; those already on a device are
    used unread (reading them back would synchronise the loader's producer thread with the
    device). Out-of-range values on a device give torchvision's arithmetic on them, unchecked."""
    return values.device.type == "cpu"


def _check(images, what):
    if not isinstance(images, torch.Tensor) or images.dtype != torch.uint8 or images.dim() != 4 \
            or images.shape[1] not in (1, 3):
        raise ValueError("prefetch: %s takes uint8 images [N, C, H, W] with C 1 or 3, got %s"
                         % (what, describe_tensor(images)))



def _blend(images, other, factor):
    """torchvision's ``_blend`` on uint8 (for Contrast's table: the 256 values against the mean):
    ``images * ratio + other * (1 - ratio)`` in float32
    (``1 - ratio`` taken in float64 first, as its Python scalar is), clamped, truncated to uint8.
    torchvision's ``add_(other, alpha=1 - ratio)`` is a fused multiply-add (one rounding) where
    the CPU has one, and so is ``addcmul`` with the per-sample ``1 - ratio``."""
    ratio = _per_sample(factor, images, "factor")
    rest = _per_sample(1.0 - torch.as_tensor(factor, dtype=torch.float64), images, "factor")
    out = torch.addcmul(images.float().mul_(ratio), other, rest)
    return out.clamp_(0, 255).to(torch.uint8)


def _grayscale(images):
    """The luma of RGB images in float32 (``0.2989 R + 0.587 G + 0.114 B``), floored."""
    r, g, b = images.float().unbind(dim=1)
    return r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114).floor_().unsqueeze(1)


def _ramp(images, channels=1):
    """The 256 uint8 values as a batch of images ``[N, channels, 1, 256]`` on the images' device:
    a value-wise op applied to it, with torchvision's arithmetic and the images' per-sample (and
    per-channel) parameters, is that op's table for each image (and channel)."""
    n = images.shape[0]
    return torch.arange(256, dtype=torch.uint8, device=images.device).expand(n, channels, 1, 256)


def _by_tables(images, tables):
    """``images`` through their tables (uint8 ``[N, 1 or C, 1, 256]``, a value-wise op applied to
    :func:`_ramp`): the fused :func:`prefetch.ops.lookup`, one read and one write per value."""
    return lookup(images, tables.reshape(images.shape[0], tables.shape[1], 256))


def adjust_brightness(images: torch.Tensor, factor: PerImage) -> torch.Tensor:
    """Each image's values times its factor, clamped to [0, 255] (torchvision's
    ``adjust_brightness``: a blend with black), through a 256-entry table per image read by the
    fused :func:`prefetch.ops.lookup`: torchvision's values exactly.

    Args:
        images (Tensor[N, C, H, W], uint8): as every op here takes them.
        factor (float or Tensor[N]): >= 0 (0: black, 1: unchanged), one or one per image.

    Returns:
        Tensor[N, C, H, W], uint8: each image scaled by its factor.

    Raises:
        ValueError: not such images, or ``factor`` is neither one number nor one per image.
    """
    _check(images, "adjust_brightness")
    table = _ramp(images).float().mul_(_per_sample(factor, images, "factor"))
    return _by_tables(images, table.clamp_(0, 255).to(torch.uint8))


def adjust_saturation(images: torch.Tensor, factor: PerImage) -> torch.Tensor:
    """One saturation step on every image (a blend with its grey, torchvision's float32
    operations): :func:`prefetch.ops.color_jitter` with chains of one step, one pass over the
    pixels instead of torch's several for a batched blend. A grey image is returned as it is (as
    PIL and torchvision: it has no saturation).

    Args:
        images (Tensor[N, C, H, W], uint8): as every op here takes them.
        factor (float or Tensor[N]): the saturation factor, >= 0 (0: grey, 1: unchanged), one
            or one per image.

    Returns:
        Tensor[N, C, H, W], uint8: each image blended with its grey.

    Raises:
        ValueError: not such images, or ``factor`` is neither one number nor one per image
            (a host factor out of range: as :func:`prefetch.ops.color_jitter` refuses it).
    """
    _check(images, "adjust_saturation")
    return _color_steps(images, "saturation", factor, "factor")


def _color_steps(images, step, factors, name):
    """One colour step (:data:`prefetch.ops.COLOR_STEPS`) on every image, each its own factor:
    :func:`prefetch.ops.color_jitter` with chains of one step. Factors already on the images'
    device stay there, unread (color_jitter checks host factors only): no synchronisation."""
    f = torch.as_tensor(factors, dtype=torch.float64)
    if f.device != images.device:
        f = f.cpu()
    n = images.shape[0]
    f = f.expand(n) if f.dim() == 0 else f
    if f.shape != (n,):
        raise ValueError("prefetch: %s must be a number or one per image (%d), got shape %s"
                         % (name, n, tuple(f.shape)))
    steps = torch.full((n, 1), COLOR_STEPS.index(step), dtype=torch.int64, device=f.device)
    return color_jitter(images, steps, f.reshape(n, 1).contiguous())


# The most pixels an image may have for color_jitter's Contrast to equal torchvision's: its grey
# sum (whole values up to 255) stays below 2^24, where torch's float32 mean is exact too.
_EXACT_MEAN_PIXELS = (1 << 24) // 255


def adjust_contrast(images: torch.Tensor, factor: PerImage) -> torch.Tensor:
    """Each image blended with its mean grey (torchvision's ``adjust_contrast``). Up to 65,793
    pixels an image (any training size): :func:`prefetch.ops.color_jitter`'s one-step chain, one
    pass for the grey sums and one for the blend (no table to build); larger images: a table per
    image from torch's float32 mean, as torchvision computes it (past ``2**24 / 255`` pixels the
    kernel's exact grey sum and torch's float32 mean may differ).

    Args:
        images (Tensor[N, C, H, W], uint8): as every op here takes them.
        factor (float or Tensor[N]): >= 0 (0: the mean grey, 1: unchanged), one or one per
            image.

    Returns:
        Tensor[N, C, H, W], uint8: each image blended with its mean grey.

    Raises:
        ValueError: not such images, or ``factor`` is neither one number nor one per image.
    """
    _check(images, "adjust_contrast")
    if images.shape[-2] * images.shape[-1] <= _EXACT_MEAN_PIXELS:
        return _color_steps(images, "contrast", factor, "factor")
    grey = _grayscale(images) if images.shape[1] == 3 else images.float()
    mean = grey.mean(dim=(1, 2, 3), keepdim=True)
    return _by_tables(images, _blend(_ramp(images), mean, factor))


def adjust_sharpness(images: torch.Tensor, factor: PerImage) -> torch.Tensor:
    """Each image blended with its 3x3 smoothing (1s around a 5, over 13; rounded to whole
    values), the one-pixel border kept as it is; images of 2 pixels or fewer a side unchanged:
    the fused :func:`prefetch.ops.sharpness` kernel, torchvision's values exactly.

    Args:
        images (Tensor[N, C, H, W], uint8): as every op here takes them.
        factor (float or Tensor[N]): >= 0 (0: the smoothing, 1: unchanged), one or one per
            image.

    Returns:
        Tensor[N, C, H, W], uint8: each image blended with its smoothing.

    Raises:
        ValueError: not such images, or ``factor`` is neither one number nor one per image.
    """
    _check(images, "adjust_sharpness")
    factors = torch.as_tensor(factor, dtype=torch.float64)
    if factors.device != images.device:
        factors = factors.cpu()  # (a host copy first: a device's factors go to the images' device)
    factors = factors.expand(images.shape[0]) if factors.dim() == 0 else factors
    if factors.shape != (images.shape[0],):
        raise ValueError("prefetch: factor must be a number or one per image (%d), got shape %s"
                         % (images.shape[0], tuple(factors.shape)))
    return sharpness(images, factors.to(images.device, non_blocking=True))


def adjust_hue(images: torch.Tensor, factor: PerImage) -> torch.Tensor:
    """Each image's hue turned by its factor (HSV, as torchvision and PIL), through
    :func:`prefetch.ops.color_jitter`.

    Args:
        images (Tensor[N, C, H, W], uint8): as every op here takes them.
        factor (float or Tensor[N]): in [-0.5, 0.5] (a fraction of the hue circle), one or one
            per image.

    Returns:
        Tensor[N, C, H, W], uint8: each image with its hue turned.

    Raises:
        ValueError: not such images, or a host factor lies outside [-0.5, 0.5].
    """
    _check(images, "adjust_hue")
    given = torch.as_tensor(factor, dtype=torch.float64)
    if _on_host(given) and bool(((given < -0.5) | (given > 0.5)).any()):
        raise ValueError("prefetch: adjust_hue's factors must lie in [-0.5, 0.5]")
    return _color_steps(images, "hue", given, "factor")


def posterize(images: torch.Tensor, bits: Union[int, Sequence[int], torch.Tensor]) -> torch.Tensor:
    """Each image's values kept to their top ``bits`` bits (torchvision's ``posterize``): one
    masked uint8 pass.

    Args:
        images (Tensor[N, C, H, W], uint8): as every op here takes them.
        bits (int or Tensor[N]): in [0, 8], one or one per image.

    Returns:
        Tensor[N, C, H, W], uint8: each value masked to its top bits.

    Raises:
        ValueError: not such images, or host ``bits`` lie outside [0, 8].
    """
    _check(images, "posterize")
    b = torch.as_tensor(bits, dtype=torch.int64).expand(images.shape[0])
    if _on_host(b) and bool(((b < 0) | (b > 8)).any()):
        raise ValueError("prefetch: posterize's bits must lie in [0, 8], got %s" % b.tolist())
    mask = ((1 << b) - 1) << (8 - b)  # bits 8: 0xff, 0: 0
    # One uint8 pass already: a lookup table would add the cost of building it.
    return images & mask.to(device=images.device, dtype=torch.uint8).view(-1, 1, 1, 1)


def solarize(images: torch.Tensor, threshold: PerImage) -> torch.Tensor:
    """Each image's values at or above its threshold inverted (torchvision's ``solarize``),
    through a table per image read by :func:`prefetch.ops.lookup`.

    Args:
        images (Tensor[N, C, H, W], uint8): as every op here takes them.
        threshold (float or Tensor[N]): at most 255, one or one per image.

    Returns:
        Tensor[N, C, H, W], uint8: values at or above the threshold inverted.

    Raises:
        ValueError: not such images, or a host threshold is above 255.
    """
    _check(images, "solarize")
    given = torch.as_tensor(threshold, dtype=torch.float64)
    if _on_host(given) and bool((given > 255).any()):
        raise ValueError("prefetch: solarize's thresholds must be at most 255")
    t = _per_sample(given, images, "threshold")
    ramp = _ramp(images)
    return _by_tables(images, torch.where(ramp >= t, ramp.bitwise_not(), ramp))


def invert(images: torch.Tensor) -> torch.Tensor:
    """Each value ``255 - x`` (torchvision's ``invert``: a ``bitwise_not``).

    Args:
        images (Tensor[N, C, H, W], uint8): as every op here takes them.

    Returns:
        Tensor[N, C, H, W], uint8: ``255 - images``.

    Raises:
        ValueError: ``images`` is not what every op here takes.
    """
    _check(images, "invert")
    return images.bitwise_not()


def autocontrast(images: torch.Tensor) -> torch.Tensor:
    """Each channel of each image stretched to [0, 255] (a constant channel kept), as
    torchvision's ``autocontrast``, through a table per channel read by
    :func:`prefetch.ops.lookup`.

    Args:
        images (Tensor[N, C, H, W], uint8): as every op here takes them.

    Returns:
        Tensor[N, C, H, W], uint8: each channel spanning [0, 255].

    Raises:
        ValueError: ``images`` is not what every op here takes.
    """
    _check(images, "autocontrast")
    if images.numel() == 0:
        return images.clone()
    low = images.amin(dim=(-2, -1), keepdim=True).float()  # (exact: whole values)
    high = images.amax(dim=(-2, -1), keepdim=True).float()
    flat = high == low
    inv_scale = (high - low).mul_(1.0 / 255)
    low = torch.where(flat, 0.0, low)  # (a boolean index would synchronise on a GPU)
    inv_scale = torch.where(flat, 1.0, inv_scale)
    x = _ramp(images, images.shape[1]).float()
    return _by_tables(images, x.sub_(low).div_(inv_scale).clamp_(0, 255).to(torch.uint8))


def equalize(images: torch.Tensor) -> torch.Tensor:
    """Each channel of each image equalized by its histogram (PIL's and torchvision's rule: a
    channel whose values but its most frequent one number fewer than 255 is kept): the
    histograms by :func:`prefetch.ops.histograms`, the tables read by
    :func:`prefetch.ops.lookup`.

    Args:
        images (Tensor[N, C, H, W], uint8): as every op here takes them.

    Returns:
        Tensor[N, C, H, W], uint8: each channel equalized.

    Raises:
        ValueError: ``images`` is not what every op here takes.
    """
    _check(images, "equalize")
    if images.numel() == 0:
        return images.clone()
    return lookup(images, equalize_tables(images))


def equalize_tables(images: torch.Tensor) -> torch.Tensor:
    """:func:`equalize`'s tables: each channel's 256 values as its equalization maps them.

    Args:
        images (Tensor[N, C, H, W], uint8): at least one pixel.

    Returns:
        Tensor[N, C, 256], uint8, on ``images``' device.
    """
    hist = histograms(images)  # int32 [N, C, 256], one fused pass (torch's scatter_add_ is slower)
    cum = hist.cumsum(dim=-1)
    index = cum.argmax(dim=-1, keepdim=True)  # the last non-empty bin
    others = images.shape[-2] * images.shape[-1] - hist.gather(-1, index)
    step = others.div(255, rounding_mode="floor")
    valid = step.ne(0)  # [N, C, 1]
    lut = cum[..., :-1].add(step // 2).div_(step.clamp(min=1), rounding_mode="floor").clamp_(0, 255)
    lut = torch.cat([lut.new_zeros(lut.shape[:-1] + (1,)), lut], dim=-1).to(torch.uint8)
    identity = torch.arange(256, dtype=torch.uint8, device=images.device)
    return torch.where(valid, lut, identity)


def _inverse_affine(angle, translate, shear, center, scale=1.0):
    """torchvision's inverse affine matrix (``_get_inverse_affine_matrix``) of one image, with
    Python's ``math`` as torchvision computes it: 6 floats. Angles and shears in degrees, the
    centre relative to the image's centre; the linear part divided by ``scale`` before the
    translation, as torchvision does (exact at scale 1)."""
    rot, sx, sy = math.radians(angle), math.radians(shear[0]), math.radians(shear[1])
    cos_sy, tan_sx = math.cos(sy), math.tan(sx)
    a = math.cos(rot - sy) / cos_sy
    b = -(a * tan_sx + math.sin(rot))
    c = math.sin(rot - sy) / cos_sy
    d = math.cos(rot) - c * tan_sx
    m = [d / scale, -b / scale, 0.0, -c / scale, a / scale, 0.0]
    cxt, cyt = center[0] + translate[0], center[1] + translate[1]
    m[2] += center[0] - m[0] * cxt - m[1] * cyt
    m[5] += center[1] - m[3] * cxt - m[4] * cyt
    return m


def pixel_maps(n: int, height: int, width: int, *, angle: PerImage = 0.0,
               translate: Tuple[PerImage, PerImage] = (0.0, 0.0),
               shear: Tuple[PerImage, PerImage] = (0.0, 0.0),
               center: Optional[Tuple[float, float]] = None,
               scale: PerImage = 1.0) -> torch.Tensor:
    """The maps :func:`affine` samples by: torchvision's inverse matrices
    (``_get_inverse_affine_matrix``, computed as it computes them) turned from its
    centred coordinates (about ``((w - 1) / 2, (h - 1) / 2)``) into pixel indices, as
    :func:`prefetch.ops.affine_warp` takes them (output pixel ``(x, y)`` reads
    ``(m0 x + m1 y + m2, m3 x + m4 y + m5)``).

    Args:
        n (int): the number of images.
        height, width (int): their size in pixels.
        angle (float or Tensor[n]): counter-clockwise rotation in degrees (torchvision's
            ``affine`` convention).
        translate (pair of float or Tensor[n]): ``(tx, ty)`` in pixels.
        shear (pair of float or Tensor[n]): ``(sx, sy)`` in degrees.
        center (tuple[float, float], optional): ``(x, y)`` in pixels; default the centre.
        scale (float or Tensor[n]): the zoom, > 0 (torchvision's ``affine`` ``scale``).

    Returns:
        Tensor[n, 6], float64: on the CPU.

    Raises:
        ValueError: a parameter that is neither one number nor one per image, or a scale that
            is not > 0.
    """
    def per(v, name):  # Python floats, as torchvision computes its matrix
        t = torch.as_tensor(v, dtype=torch.float64).cpu()
        t = t.expand(n) if t.dim() == 0 else t
        if t.shape != (n,):
            raise ValueError("prefetch: affine's %s must be a number or one per image (%d)"
                             % (name, n))
        return t.tolist()

    cx, cy = (0.0, 0.0) if center is None else (center[0] - width * 0.5, center[1] - height * 0.5)
    scales = per(scale, "scale")
    if not all(v > 0 and math.isfinite(v) for v in scales):
        raise ValueError("prefetch: affine's scale must be > 0 and finite, got %s" % (scales,))
    rows = zip(per(angle, "angle"), per(translate[0], "translate"), per(translate[1], "translate"),
               per(shear[0], "shear"), per(shear[1], "shear"), scales)
    ox, oy = (width - 1) * 0.5, (height - 1) * 0.5
    maps = []
    for a, tx, ty, sx, sy, zoom in rows:
        m0, m1, m2, m3, m4, m5 = _inverse_affine(a, (tx, ty), (sx, sy), (cx, cy), zoom)
        maps.append([m0, m1, m2 + ox - m0 * ox - m1 * oy, m3, m4, m5 + oy - m3 * ox - m4 * oy])
    return torch.tensor(maps, dtype=torch.float64).view(n, 6)


def affine(images: torch.Tensor, *, angle: PerImage = 0.0,
           translate: Tuple[PerImage, PerImage] = (0.0, 0.0),
           shear: Tuple[PerImage, PerImage] = (0.0, 0.0),
           center: Optional[Tuple[float, float]] = None, interpolation: str = "nearest",
           fill: Fill = None, scale: PerImage = 1.0) -> torch.Tensor:
    """torchvision's ``affine`` (``rotate`` is ``affine`` with ``-angle``) with each image's own
    angle, translation, shear and scale: torchvision's inverse matrix
    (:func:`pixel_maps`), sampled at every output pixel by the fused
    :func:`prefetch.ops.affine_warp` (``grid_sample``'s rule, ``align_corners=False``, zeros
    outside), rounded back to uint8.

    Args:
        images (Tensor[N, C, H, W], uint8): as every op here takes them.
        angle (float or Tensor[N]): degrees, one or one per image.
        translate (pair of float or Tensor[N]): ``(tx, ty)`` in pixels.
        shear (pair of float or Tensor[N]): ``(sx, sy)`` in degrees.
        center (tuple[float, float], optional): ``(x, y)`` in pixels, one for every image;
            default the image's centre.
        interpolation (str): ``"nearest"`` or ``"bilinear"``.
        fill (float or sequence of float, optional): where the map leaves the image, a number
            or one per channel in [0, 255]; None: zeros.
        scale (float or Tensor[N]): the zoom, > 0, one or one per image.

    Returns:
        Tensor[N, C, H, W], uint8 (a copy for an empty batch).

    Raises:
        ValueError: not such images, another ``interpolation``, a parameter that is neither
            one number nor one per image, or a scale that is not > 0.
    """
    _check(images, "affine")
    if interpolation not in ("nearest", "bilinear"):
        raise ValueError("prefetch: interpolation must be 'nearest' or 'bilinear', got %r"
                         % (interpolation,))
    n, _, h, w = images.shape
    if images.numel() == 0:
        return images.clone()
    maps = pixel_maps(n, h, w, angle=angle, translate=translate, shear=shear, center=center,
                      scale=scale)
    maps = maps.to(torch.float32).to(images.device, non_blocking=True)
    return affine_warp(images, maps, interpolation=interpolation, fill=fill)


def _rotate(images, angles, interpolation, fill):
    """torchvision's ``rotate`` (no expand, about the centre): its exact quarter turns (0 and 180
    always, 90 and 270 for square images) as copies, the rest through :func:`affine`."""
    a = torch.as_tensor(angles, dtype=torch.float64).remainder(360).tolist()
    square = images.shape[-1] == images.shape[-2]
    turns = {0.0: 0, 180.0: 2}
    if square:
        turns.update({90.0: 1, 270.0: 3})
    rest = [i for i, v in enumerate(a) if v not in turns]
    if len(rest) == len(a):  # no quarter turn (as a rule): no gathering (index_put_ of one
        # 3x176x176 sample was measured at 120 us, a third of the rotation itself)
        return affine(images, angle=[-v for v in a], interpolation=interpolation, fill=fill)
    out = torch.empty_like(images)
    for i, v in enumerate(a):
        if v in turns:
            out[i] = torch.rot90(images[i], k=turns[v], dims=(-2, -1))
    if rest:
        idx = torch.tensor(rest, device=images.device)
        put_rows(out, idx, affine(take_rows(images, idx), angle=[-a[i] for i in rest],
                                   interpolation=interpolation, fill=fill))
    return out


def apply_table(images: torch.Tensor, table: OpTable, *, interpolation: str = "nearest",
                fill: Fill = None) -> torch.Tensor:
    """Every sample's steps of ``table`` in column order, as torchvision's policies apply them
    (``_apply_image_or_video_transform``), on the images' device.

    Each op kind of a column on all the samples that draw it at once: on a GPU a handful of
    launches instead of several per image; on the CPU one call of each fused kernel (its C++
    threads) instead of a Python call per sample, which would hold the GIL. A table with no
    column, or an empty batch, returns a copy of the images (the identity).

    Args:
        images (Tensor[N, C, H, W], uint8): as every op here takes them.
        table (OpTable): ``[N, K]`` steps (:mod:`prefetch.transforms.policies`); its
            ``parameters`` when given, else those of :func:`~prefetch.transforms.policies
            .op_parameters`.
        interpolation (str): the geometric ops' resampling, ``"nearest"`` or ``"bilinear"``.
        fill (float or sequence of float, optional): where a geometric op leaves the image, in
            [0, 255]; None: zeros.

    Returns:
        Tensor[N, C, H, W], uint8: never aliasing ``images``.

    Raises:
        ValueError: not such images, the table has another number of samples, or its
            parameters are not float64 of its shape.
    """
    _check(images, "apply_table")
    if table.ops.shape[0] != images.shape[0]:
        raise ValueError("prefetch: the table has %d samples, the images %d"
                         % (table.ops.shape[0], images.shape[0]))
    if table.ops.shape[1] == 0 or images.shape[0] == 0:
        # No step (RandAugment's num_ops=0, a policy with no step) or no image: the identity,
        # as torchvision returns the image (a copy: the result never aliases the input).
        return images.clone()
    params = op_parameters(table) if table.parameters is None else table.parameters
    if params.shape != table.ops.shape or params.dtype != torch.float64:
        raise ValueError("prefetch: the table's parameters must be float64 of its ops' shape %s, "
                         "got %s" % (list(table.ops.shape), describe_tensor(params)))
    color = _color_codes(table.ops)
    if color is not None:  # ColorJitter's tables: every sample's chain in one pass
        return color_jitter(images, color, params.contiguous())
    if images.shape[0] == 1:  # one sample: its steps in order, no gathering
        out = images
        for code, p in zip(table.ops[0].tolist(), params[0:1].T):
            if OPS[code] != "Identity":
                out = _apply_op(OPS[code], out, p, interpolation, fill)
        return out if out is not images else images.clone()
    out = images
    for k in range(table.ops.shape[1]):
        # The batch sorted by this column's op (one gather), so that each kind's images are one
        # slice: the op reads it as it is and its result is copied back whole; then unsorted
        # (one gather). Per kind drawn: the op and one copy (on the CPU each an OpenMP region —
        # the comment above take_rows says why they are counted).
        codes = table.ops[:, k]
        order = torch.argsort(codes, stable=True)
        kinds, counts = torch.unique_consecutive(codes[order], return_counts=True)
        device_order = order.to(images.device)
        ordered = take_rows(out, device_order)
        start = 0
        for code, count in zip(kinds.tolist(), counts.tolist()):
            name, part = OPS[code], slice(start, start + count)
            if name != "Identity":
                ordered[part].copy_(_apply_op(name, ordered[part], params[order[part], k],
                                              interpolation, fill))
            start += count
        out = take_rows(ordered, torch.argsort(device_order))
    return out


# The table's op codes of the colour ops, as color_jitter's step codes.
_COLOR_OF_OP = {"Identity": "identity", "Brightness": "brightness", "Contrast": "contrast",
                "Color": "saturation", "Hue": "hue"}
_COLOR_CODES = torch.tensor([COLOR_STEPS.index(_COLOR_OF_OP[name]) if name in _COLOR_OF_OP else -1
                             for name in OPS], dtype=torch.int64)


def _color_codes(ops):
    """``ops`` (a table's codes) as color_jitter's steps when every one is a colour op (or
    Identity), else None."""
    codes = _COLOR_CODES[ops]
    return None if bool((codes < 0).any()) else codes


def _as_words(*tensors):
    """Contiguous CPU image batches as ``[n, row]`` views of the widest integers that tile their
    rows and fit their addresses (int64 for 3x176x176 bytes), for the row gathers below; None
    when one is not contiguous."""
    if not all(t.is_contiguous() for t in tensors):
        return None
    row = tensors[0][0].numel() if tensors[0].shape[0] else 0
    for dtype, width in ((torch.int64, 8), (torch.int32, 4), (torch.int16, 2), (torch.uint8, 1)):
        if row % width == 0 and all(t.data_ptr() % width == 0 for t in tensors):
            return [t.view(t.shape[0], row).view(dtype) for t in tensors]
    return None  # pragma: no cover - bytes always fit


# Why the row gathers view rows as words on the CPU: each ``copy_`` of a row is an OpenMP region of
# its own, and so is each row of ``index_select`` on a 4-D batch, and when the main thread runs
# OpenMP work too (any model on the CPU) libgomp stops its threads spinning between regions, so
# every region waits for a thread to wake (tens of microseconds each). One ``index_copy_`` or
# ``index_select`` over word rows is one region, and ``index_copy_`` copies element by element,
# so the widest word that tiles a row moves the fewest elements.

def take_rows(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``x.index_select(0, idx)``; on the CPU over word rows (one OpenMP region, not one a row).

    Args:
        x (Tensor[N, ...]): uint8 (any dtype where a row is not contiguous or off the CPU).
        idx (Tensor[K]): int64 row indices, on ``x``'s device.

    Returns:
        Tensor[K, ...]: the rows, a new tensor of ``x``'s dtype.
    """
    words = _as_words(x) if x.device.type == "cpu" else None
    if words is None:
        return x.index_select(0, idx)
    return words[0].index_select(0, idx).view(torch.uint8).view((idx.shape[0],) + x.shape[1:])


def put_rows(out: torch.Tensor, idx: torch.Tensor, values: torch.Tensor) -> None:
    """``out[idx] = values`` along the first dimension: one ``index_copy_`` (on the CPU over word
    rows, one OpenMP region; one ``copy_`` a row where a batch is not contiguous).

    Args:
        out (Tensor[N, ...]): written in place.
        idx (Tensor[K]): int64 row indices, on ``out``'s device, each at most once.
        values (Tensor[K, ...]): ``out``'s dtype and row shape.
    """
    words = _as_words(out, values) if out.device.type == "cpu" else None
    if words is not None:
        words[0].index_copy_(0, idx, words[1])
    elif out.device.type == "cpu":
        for k, i in enumerate(idx.tolist()):
            out[i].copy_(values[k])
    else:
        out.index_copy_(0, idx, values)


def _apply_op(name, x, p, interpolation, fill):
    """Op ``name`` on images ``x`` with their parameters ``p`` (float64, one per image)."""
    if name in _FACTOR_OPS:
        return _FACTOR_OPS[name](x, p)
    if name == "Posterize":
        return posterize(x, p.to(torch.int64))
    if name == "Solarize":
        return solarize(x, p)
    if name in _PLAIN_OPS:
        return _PLAIN_OPS[name](x)
    if name == "Rotate":
        return _rotate(x, p, interpolation, fill)
    if name in ("ShearX", "ShearY"):  # about the top-left corner, as the policies shear
        shear = (p, 0.0) if name == "ShearX" else (0.0, p)
        return affine(x, shear=shear, center=(0.0, 0.0), interpolation=interpolation, fill=fill)
    if name in ("TranslateX", "TranslateY"):
        translate = (p, 0.0) if name == "TranslateX" else (0.0, p)
        return affine(x, translate=translate, interpolation=interpolation, fill=fill)
    raise AssertionError(name)  # pragma: no cover - every code of OPS is handled above


_FACTOR_OPS = {"Brightness": adjust_brightness, "Color": adjust_saturation,
               "Contrast": adjust_contrast, "Sharpness": adjust_sharpness, "Hue": adjust_hue}
_PLAIN_OPS = {"AutoContrast": autocontrast, "Equalize": equalize, "Invert": invert}
