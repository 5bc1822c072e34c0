"""Crop boxes for images of their own sizes: the windows ``prefetch.ops.resized_crop`` reads.

- :func:`random_resized_boxes`: torchvision's ``RandomResizedCrop.get_params`` algorithm, for a
  whole batch at once: per image, up to 10 attempts at a window of ``scale`` of the image's
  area and an aspect ratio drawn log-uniformly from ``ratio``, placed uniformly; if none fits,
  the centred fallback (the whole image, narrowed to the nearest allowed ratio).
- :func:`center_boxes`: validation's ``Resize(resize) + CenterCrop(size)`` as one window of
  the original image: torchvision's resized size (:func:`resized_output_size`) and crop corner
  (:func:`center_anchor`) give the region the two steps keep, and the box is that region to the
  nearest whole pixel, which ``resized_crop`` then resamples to ``size`` in one pass.

Boxes are int64 ``[N, 4]`` rows ``(top, left, height, width)``; draws come from a
``torch.Generator``, so they are as reproducible as its seed.
"""
from __future__ import annotations

import math
import numbers
from typing import Optional, Sequence, Tuple, Union

import torch

from .._core.checks import whole

__all__ = ["random_resized_boxes", "center_boxes", "center_anchor", "resized_output_size"]

ATTEMPTS = 10  # torchvision's RandomResizedCrop.get_params


def _sizes(heights, widths):
    """Heights and widths as int64 tensors; a fractional one is refused, not truncated."""
    def whole_sizes(values, name):
        t = torch.as_tensor(values).reshape(-1)
        if t.dtype == torch.bool or t.is_complex():
            raise ValueError("prefetch: %s must be whole numbers, got %s" % (name, t.dtype))
        if t.is_floating_point():
            if not bool(torch.isfinite(t).all()) or not bool((t == t.round()).all()):
                bad = t[~torch.isfinite(t) | (t != t.round())][0].item()
                raise ValueError("prefetch: %s must be whole numbers (image sizes in pixels), got "
                                 "%r" % (name, bad))
        return t.to(torch.int64)

    h, w = whole_sizes(heights, "heights"), whole_sizes(widths, "widths")
    if h.shape != w.shape:
        raise ValueError("prefetch: %d heights but %d widths" % (h.numel(), w.numel()))
    if h.numel() and int(torch.minimum(h, w).min()) < 1:
        raise ValueError("prefetch: every image needs a height and width >= 1")
    return h, w


def _whole_or_none(value):
    """``value`` as an int when it is a whole number (not a bool), else None."""
    try:
        return whole(value, "value")
    except TypeError:
        return None


def _pair(value, name, positive=True):
    try:
        if isinstance(value, (str, bytes)) or any(isinstance(v, (bool, str, bytes)) for v in value):
            raise TypeError
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError("prefetch: %s must be a pair (lo, hi) of numbers, got %r" % (name, value)) from None
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi or (positive and lo <= 0):
        raise ValueError("prefetch: %s must be finite with 0 < lo <= hi, got %r" % (name, value))
    return lo, hi


def random_resized_boxes(heights: Union[torch.Tensor, Sequence[int]],
                         widths: Union[torch.Tensor, Sequence[int]],
                         scale: Tuple[float, float] = (0.08, 1.0),
                         ratio: Tuple[float, float] = (3 / 4, 4 / 3), *,
                         generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Boxes drawn as torchvision's ``RandomResizedCrop.get_params`` draws them
    (torchvision/transforms/v2/_geometry.py). Every image consumes the same random numbers
    whatever happens (``ATTEMPTS`` area and ratio draws and two placement draws), so the boxes of
    one image do not depend on the others'.

    Args:
        heights, widths (Tensor[N] or sequence of int): the images' sizes in pixels, whole
            numbers >= 1.
        scale (tuple[float, float]): the window's area as a fraction of the image's,
            ``0 < lo <= hi``; torchvision's default ``(0.08, 1.0)``.
        ratio (tuple[float, float]): the window's aspect ratio (width / height), drawn
            log-uniformly, ``0 < lo <= hi``; torchvision's default ``(3/4, 4/3)``.
        generator (torch.Generator, optional): the random stream (None: torch's default).

    Returns:
        Tensor[N, 4], int64: top, left, height, width of each window, in its image's pixels.

    Raises:
        ValueError: sizes that are not whole numbers >= 1 or differ in count, or a ``scale`` /
            ``ratio`` that is not a finite pair with ``0 < lo <= hi``.
    """
    h, w = _sizes(heights, widths)
    lo_scale, hi_scale = _pair(scale, "scale")
    lo_ratio, hi_ratio = _pair(ratio, "ratio")
    n = h.numel()
    hd, wd = h.double(), w.double()
    area = (hd * wd).unsqueeze(1)
    u_area = torch.rand(n, ATTEMPTS, generator=generator, dtype=torch.float64)
    u_ratio = torch.rand(n, ATTEMPTS, generator=generator, dtype=torch.float64)
    u_top = torch.rand(n, generator=generator, dtype=torch.float64)
    u_left = torch.rand(n, generator=generator, dtype=torch.float64)
    target = area * (lo_scale + (hi_scale - lo_scale) * u_area)
    log_lo, log_hi = math.log(lo_ratio), math.log(hi_ratio)
    aspect = torch.exp(log_lo + (log_hi - log_lo) * u_ratio)
    cw = torch.round(torch.sqrt(target * aspect)).long()
    ch = torch.round(torch.sqrt(target / aspect)).long()
    fits = (cw > 0) & (ch > 0) & (cw <= w.unsqueeze(1)) & (ch <= h.unsqueeze(1))
    found = fits.any(dim=1)
    first = fits.int().argmax(dim=1, keepdim=True)  # the first attempt that fits
    bh = ch.gather(1, first).squeeze(1)
    bw = cw.gather(1, first).squeeze(1)
    # torch.randint(0, H - h + 1) uniform over the positions, from one uniform each
    top = torch.minimum((u_top * (h - bh + 1).double()).long(), h - bh)
    left = torch.minimum((u_left * (w - bw + 1).double()).long(), w - bw)
    # The fallback: the whole image, narrowed to the nearest allowed ratio, centred.
    in_ratio = wd / hd
    fw = torch.where(in_ratio < lo_ratio, w, torch.where(
        in_ratio > hi_ratio, torch.round(hd * hi_ratio).long(), w))
    fh = torch.where(in_ratio < lo_ratio, torch.round(wd / lo_ratio).long(), h)
    fw, fh = fw.clamp(1, None), fh.clamp(1, None)
    ftop, fleft = (h - fh) // 2, (w - fw) // 2
    return torch.stack([torch.where(found, top, ftop), torch.where(found, left, fleft),
                        torch.where(found, bh, fh), torch.where(found, bw, fw)], dim=1)


def center_anchor(extent: int, crop: int) -> int:
    """Where torchvision's ``CenterCrop`` starts a window of ``crop`` pixels in an image ``extent``
    pixels long (one axis; torchvision/transforms/v2/functional/_geometry.py): inside the image,
    ``_center_crop_compute_crop_anchor``'s ``int(round((extent - crop) / 2))`` — Python's round,
    half to even, so 35 - 24 = 11 gives 6, 13 gives 6 —; a window larger than the image starts
    ``(crop - extent) // 2`` pixels before it (``_center_crop_compute_padding``'s fill before the
    image; the rest goes after). The kernels' ``center_start`` (csrc/kernels/common/geometry.h)
    is the same function.

    Args:
        extent (int): the image's length along the axis, in pixels.
        crop (int): the window's length, in pixels.

    Returns:
        int: the window's first pixel (negative: before the image, in the fill).
    """
    extent, crop = int(extent), int(crop)
    if crop > extent:
        return -((crop - extent) // 2)
    return int(round((extent - crop) / 2.0))


def resized_output_size(height: int, width: int, size: int,
                        max_size: Optional[int] = None) -> Tuple[int, int]:
    """``(new_height, new_width)`` of ``Resize(size, max_size=max_size)`` for an int ``size``:
    torchvision's ``_compute_resized_output_size`` (torchvision/transforms/functional.py): the
    shorter side becomes ``size``, the longer ``int(size * long / short)`` (truncated, in float64);
    then, when that exceeds ``max_size``, the longer side becomes ``max_size`` and the shorter
    ``int(max_size * size / new_long)``.

    Args:
        height, width (int): the image's size in pixels.
        size (int): the shorter side after the resize.
        max_size (int, optional): the most the longer side may be.

    Returns:
        tuple[int, int]: ``(new_height, new_width)`` in pixels.
    """
    height, width = int(height), int(width)
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = size, int(size * long / short)
    if max_size is not None and new_long > max_size:
        new_short, new_long = int(max_size * new_short / new_long), max_size
    return (new_long, new_short) if width <= height else (new_short, new_long)


def _nearest_span(start, end, extent):
    """The whole-pixel span ``[a, b)`` nearest the continuous ``[start, end)``: each edge rounded
    (half to even), at least one pixel, inside ``[0, extent)``."""
    a = min(max(int(round(start)), 0), extent - 1)
    b = min(max(int(round(end)), a + 1), extent)
    return a, b - a


def center_boxes(heights: Union[torch.Tensor, Sequence[int]],
                 widths: Union[torch.Tensor, Sequence[int]], size: Union[int, Tuple[int, int]],
                 resize: Optional[int] = None, max_size: Optional[int] = None) -> torch.Tensor:
    """The window of each image that ``Resize(resize, max_size=max_size)`` then
    ``CenterCrop(size)`` keep, in the original image's pixels, as int64 ``[N, 4]`` rows
    (top, left, height, width).

    torchvision resizes the whole image to :func:`resized_output_size` (whole pixels) and crops
    ``size`` whole pixels of that at :func:`center_anchor`: the region kept is the continuous
    window ``[top * H / new_H, (top + h) * H / new_H)`` of the original (and likewise across),
    which ``resized_crop`` resamples in one pass. A box is whole pixels of the original, so each
    of its edges is that window's edge rounded to the nearest pixel: within 0.5 original pixels of
    torchvision's window, i.e. within ``0.5 * new_H / H`` output pixels (0.5 or less when the image
    is downscaled; ``0.5 * resize / short side`` when it is upscaled). When the resize keeps the
    image's size (torchvision then does not resample) the box is torchvision's crop exactly.

    ``resize=None``: the largest window of ``size``'s aspect ratio, centred as ``CenterCrop``
    centres (a resize straight to ``size`` without distortion).

    Args:
        heights, widths (Tensor[N] or sequence of int): the images' sizes in pixels.
        size (int or tuple[int, int]): ``CenterCrop``'s output ``(h, w)`` (an int: square).
        resize (int, optional): ``Resize``'s shorter side, >= the crop.
        max_size (int, optional): ``Resize``'s ``max_size``, > ``resize``.

    Returns:
        Tensor[N, 4], int64: top, left, height, width of each window in its image's pixels.

    Raises:
        ValueError: an image's resized size (with ``max_size``) is smaller than ``size``
            (torchvision would pad it, which a window of the original cannot hold); sizes that
            are not whole numbers >= 1; a non-positive ``size``; ``resize`` below the crop or
            not whole; ``max_size`` without ``resize`` or not above it.
    """
    h, w = _sizes(heights, widths)
    if isinstance(size, numbers.Integral):
        size = (size, size)
    oh, ow = (int(s) for s in size)
    if oh < 1 or ow < 1:
        raise ValueError("prefetch: size must be positive, got %r" % (size,))
    if resize is not None:
        whole_resize = _whole_or_none(resize)
        if whole_resize is None or whole_resize < max(oh, ow):
            raise ValueError("prefetch: resize (the shorter side after Resize, a whole number) must "
                             "be >= the crop %r, got %r" % (size, resize))
        resize = whole_resize
    if max_size is not None:
        whole_max = _whole_or_none(max_size)
        if resize is None or whole_max is None or whole_max <= resize:
            raise ValueError("prefetch: max_size must be a whole number > resize (torchvision's "
                             "Resize), with a resize, got max_size=%r, resize=%r" % (max_size, resize))
        max_size = whole_max
    rows = []
    for k, (H, W) in enumerate(zip(h.tolist(), w.tolist())):
        if resize is None:
            step = min(H / oh, W / ow)
            bh = min(max(int(round(step * oh)), 1), H)
            bw = min(max(int(round(step * ow)), 1), W)
            rows.append((center_anchor(H, bh), center_anchor(W, bw), bh, bw))
            continue
        nh, nw = resized_output_size(H, W, resize, max_size)
        if oh > nh or ow > nw:
            raise ValueError(
                "prefetch: image %d (%dx%d) is %dx%d after Resize(%r, max_size=%r), smaller than "
                "CenterCrop(%r): torchvision would pad it, which prefetch's one-resample window "
                "cannot; raise max_size or crop less" % (k, H, W, nh, nw, resize, max_size, size))
        top, left = center_anchor(nh, oh), center_anchor(nw, ow)
        t, bh = _nearest_span(top * H / nh, (top + oh) * H / nh, H)
        l, bw = _nearest_span(left * W / nw, (left + ow) * W / nw, W)
        rows.append((t, l, bh, bw))
    return torch.tensor(rows, dtype=torch.int64).reshape(-1, 4)
