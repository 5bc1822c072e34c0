"""Crop boxes for images of their own sizes: the windows ``prefetch.ops.resized_crop`` reads.

- :func:`random_resized_boxes`: torchvision's ``RandomResizedCrop.get_params`` algorithm, for a
  whole batch at once: per image, up to 10 attempts at a window of ``scale`` of the image's
  area and an aspect ratio drawn log-uniformly from ``ratio``, placed uniformly; if none fits,
  the centred fallback (the whole image, narrowed to the nearest allowed ratio).
- :func:`center_boxes`: validation's ``Resize(resize) + CenterCrop(size)`` as one window of
  the original image: the centred window that covers ``size / resize`` of the shorter side (the
  region the two steps keep), which ``resized_crop`` then resamples to ``size`` in one pass.

Boxes are int64 ``[N, 4]`` rows ``(top, left, height, width)``; draws come from a
``torch.Generator``, so they are as reproducible as its seed.
"""
import math
import numbers

import torch

__all__ = ["random_resized_boxes", "center_boxes"]

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


def _pair(value, name, positive=True):
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError("prefetch: %s must be a pair (lo, hi) of numbers, got %r" % (name, value)) from None
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi or (positive and lo <= 0):
        raise ValueError("prefetch: %s must be finite with 0 < lo <= hi, got %r" % (name, value))
    return lo, hi


def random_resized_boxes(heights, widths, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), *,
                         generator=None):
    """Boxes ``[N, 4]`` (top, left, height, width) drawn as torchvision's RandomResizedCrop draws
    them, for images of ``heights[i] x widths[i]``. Every image consumes the same random numbers
    whatever happens (``ATTEMPTS`` area and ratio draws and two placement draws), so the boxes of
    one image do not depend on the others'."""
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


def center_boxes(heights, widths, size, resize=None):
    """The centred window of each image that ``Resize(resize)`` (the shorter side to
    ``resize``) then ``CenterCrop(size)`` keep, in the original image's pixels: ``size / resize``
    of the shorter side, in ``size``'s aspect ratio. ``resize=None``: the largest centred window of
    ``size``'s aspect ratio (a resize straight to ``size`` without distortion)."""
    h, w = _sizes(heights, widths)
    if isinstance(size, numbers.Integral):
        size = (size, size)
    oh, ow = (int(s) for s in size)
    if oh < 1 or ow < 1:
        raise ValueError("prefetch: size must be positive, got %r" % (size,))
    if resize is not None and not (isinstance(resize, numbers.Real) and resize >= max(oh, ow)):
        raise ValueError("prefetch: resize (the shorter side after Resize) must be >= the crop "
                         "%r, got %r" % (size, resize))
    short = torch.minimum(h, w).double()
    # Pixels of the original per output pixel: the shorter side maps onto `resize` (or, without
    # a resize, the largest window of the output's ratio fits).
    if resize is not None:
        step = short / float(resize)
    else:
        step = torch.minimum(h.double() / oh, w.double() / ow)
    bh = torch.round(step * oh).long().clamp(1, None)
    bw = torch.round(step * ow).long().clamp(1, None)
    bh, bw = torch.minimum(bh, h), torch.minimum(bw, w)
    return torch.stack([(h - bh) // 2, (w - bw) // 2, bh, bw], dim=1)
