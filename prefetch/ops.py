"""Fused augment ops, registered as ``torch.ops.prefetch.*`` (CPU and CUDA).

``normalize_flip`` reads each uint8 input byte once and writes each output element once: crop
(with fill outside the image), vertical/horizontal flip per sample, ``(x / 255 - mean) / std``,
cast to float32/float16/bfloat16 and NCHW or channels_last output, in one pass.
``flip_crop`` applies the same geometry to integer masks.
"""
import torch

from ._extension import _C  # noqa: F401  (loading the extension registers the ops)

__all__ = ["normalize_flip", "flip_crop"]

_OUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _crop_list(crop):
    if crop is None:
        return None
    if isinstance(crop, int):
        return [crop, crop]
    return [int(c) for c in crop]


def normalize_flip(images, mean, std, *, hflip=None, vflip=None, crop=None, offsets=None, fill=0,
                   dtype=torch.float32, layout="NHWC", channels_last=False, indices=None):
    """uint8 images -> normalized, flipped, cropped ``[N, C, h, w]`` tensor of ``dtype``.

    Args:
        images: uint8 ``[N, H, W, C]`` (``layout="NHWC"``) or ``[N, C, H, W]`` (``"NCHW"``).
        mean, std: per-channel values in torchvision's convention (fractions of 1).
        hflip, vflip: bool ``[N]`` tensors on the images' device, or None.
        crop: output ``(h, w)`` (an int means square); None keeps the input size.
        offsets: integer ``[N, 2]`` (top, left) of each window in input coordinates, may lie
            partly outside the image; None centres the window at ``((H-h)//2, (W-w)//2)``.
        fill: uint8 value of pixels outside the image.
        dtype: float32, float16 or bfloat16.
        channels_last: return a channels_last tensor instead of a contiguous one.
        indices: integer ``[n]`` on the images' device, or None. Gathers in the same pass:
            output sample ``k`` is made from input sample ``indices[k]`` (and ``hflip``,
            ``vflip``, ``offsets`` have ``n`` rows), so a batch is cut straight out of a whole
            resident dataset. An index out of range raises IndexError on the CPU and stops the
            kernel with a device-side error on CUDA (checking it on the host would synchronise).
    """
    return torch.ops.prefetch.normalize_flip.default(
        images, [float(m) for m in mean], [float(s) for s in std], hflip, vflip, _crop_list(crop),
        offsets, int(fill), dtype, layout, bool(channels_last), indices)


def flip_crop(masks, *, hflip=None, vflip=None, crop=None, offsets=None, fill=0, indices=None):
    """The geometry of :func:`normalize_flip` for integer masks ``[N, H, W]`` (uint8, int16,
    int32 or int64, preserved), so a segmentation mask gets exactly its image's flips and crop;
    ``indices`` gathers as in :func:`normalize_flip`."""
    return torch.ops.prefetch.flip_crop.default(masks, hflip, vflip, _crop_list(crop), offsets,
                                                int(fill), indices)


@torch.library.register_fake("prefetch::normalize_flip")
def _normalize_flip_fake(images, mean, std, hflip=None, vflip=None, crop=None, offsets=None,
                         fill=0, dtype=torch.float32, layout="NHWC", channels_last=False,
                         indices=None):
    torch._check(images.dtype == torch.uint8, lambda: "images must be uint8, got %s" % images.dtype)
    torch._check(images.dim() == 4, lambda: "images must be 4-D, got %d-D" % images.dim())
    torch._check(layout in ("NHWC", "NCHW"), lambda: "layout must be 'NHWC' or 'NCHW', got %r" % layout)
    torch._check(dtype in _OUT_DTYPES, lambda: "dtype must be float32, float16 or bfloat16")
    if layout == "NHWC":
        n, h, w, c = images.shape
    else:
        n, c, h, w = images.shape
    if indices is not None:
        torch._check(indices.dim() == 1, lambda: "indices must be 1-D, got %d-D" % indices.dim())
        n = indices.shape[0]
    if crop is not None:
        h, w = crop
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    return images.new_empty((n, c, h, w), dtype=dtype).contiguous(memory_format=fmt)


@torch.library.register_fake("prefetch::flip_crop")
def _flip_crop_fake(masks, hflip=None, vflip=None, crop=None, offsets=None, fill=0, indices=None):
    torch._check(masks.dim() == 3, lambda: "masks must be 3-D [N, H, W], got %d-D" % masks.dim())
    n, h, w = masks.shape
    if indices is not None:
        torch._check(indices.dim() == 1, lambda: "indices must be 1-D, got %d-D" % indices.dim())
        n = indices.shape[0]
    if crop is not None:
        h, w = crop
    return masks.new_empty((n, h, w))
