"""``normalize_flip`` (``torch.ops.prefetch.normalize_flip``, CPU and CUDA): its Python wrapper and
its fake kernel.

It reads each uint8 input byte once and writes each output element once: crop (with fill outside
the image), vertical/horizontal flip per sample, ``(x / 255 - mean) / std``, cast to
float32/float16/bfloat16 (or rounded to uint8) and NCHW or channels_last output, in one pass. Its
geometry for integer masks is :func:`prefetch.ops.flip_crop` (:mod:`prefetch.ops.geometry`).
"""
from typing import Sequence

import torch

from .._core.checks import whole
from .._core.extension import C as _C  # noqa: F401  (loading the extension registers the ops)
from .arguments import (OUT_DTYPES, OUT_DTYPES_MESSAGE, check_devices, check_geometry,
                        check_normalization, check_output_size, crop_list, flips)

__all__ = ["normalize_flip"]


def normalize_flip(images: torch.Tensor, mean: Sequence[float], std: Sequence[float], *,
                   hflip: torch.Tensor | Sequence[bool] | None = None,
                   vflip: torch.Tensor | Sequence[bool] | None = None,
                   crop: int | Sequence[int] | None = None, offsets: torch.Tensor | None = None,
                   fill: int = 0, dtype: torch.dtype = torch.float32, layout: str = "NHWC",
                   channels_last: bool = False,
                   indices: torch.Tensor | None = None) -> torch.Tensor:
    """uint8 images -> normalized, flipped, cropped ``[N, C, h, w]`` tensor of ``dtype``.

    Args:
        images (Tensor[N, H, W, C] or Tensor[N, C, H, W]): uint8, ``[N, H, W, C]`` for
            ``layout="NHWC"``, ``[N, C, H, W]`` for ``"NCHW"``; any strides.
        mean, std (sequences of C floats): per-channel values in torchvision's convention
            (fractions of 1); finite, std > 0.
        hflip, vflip (Tensor[N] bool, a list of booleans, or None): per-sample flips, on the
            images' device.
        crop (int or (int, int), optional): output ``(h, w)`` in pixels (an int means square),
            1 to 65535 each; None keeps the input size.
        offsets (Tensor[N, 2], optional): integer (top, left) of each window in input
            coordinates, may lie partly or wholly outside the image (any int64; uint64 is
            refused); None centres the window where torchvision's ``CenterCrop`` does: at
            ``int(round((H - h) / 2))`` (half to even), or ``(h - H) // 2`` fill rows before the
            image when ``h > H`` (likewise across).
        fill (int): uint8 value of pixels outside the image, a whole number in [0, 255].
        dtype (torch.dtype): float32, float16, bfloat16, or uint8: the normalized values rounded
            half to even and saturated to [0, 255] (``mean=0, std=1/255`` gives the pixel values).
        layout (str): ``"NHWC"`` or ``"NCHW"``, the input's layout.
        channels_last (bool): return a channels_last tensor instead of a contiguous one.
        indices (Tensor[n], optional): integer, on the images' device. Gathers in the same pass:
            output sample ``k`` is made from input sample ``indices[k]`` (and ``hflip``,
            ``vflip``, ``offsets`` have ``n`` rows), so a batch is cut straight out of a whole
            resident dataset.

    Returns:
        Tensor[N, C, h, w] (``n`` samples with ``indices``) of ``dtype`` on the images' device:
        ``(x / 255 - mean[c]) / std[c]`` of each pixel of the flipped window. All-meta inputs
        give a meta output of the right shape.

    Raises:
        TypeError: a fractional ``crop`` or ``fill`` (rather than truncating it), or flips that
            are not booleans.
        RuntimeError: a tensor argument on another device than the images (meta included, as
            ``torch.where`` refuses it), a wrong dtype or shape, ``fill`` outside [0, 255], a
            std that is not finite and positive, or an output whose byte size would overflow
            int64 (stride-0 expanded inputs can ask for one), each named.
        IndexError: an index out of range, on the CPU; on CUDA the kernel stops with a
            device-side error instead (checking it on the host would synchronise).
    """
    device = images.device if isinstance(images, torch.Tensor) else None
    hflip, vflip = flips(hflip, "hflip", device), flips(vflip, "vflip", device)
    return torch.ops.prefetch.normalize_flip.default(
        images, [float(m) for m in mean], [float(s) for s in std], hflip, vflip, crop_list(crop),
        offsets, whole(fill, "fill"), dtype, layout, bool(channels_last), indices)


@torch.library.register_fake("prefetch::normalize_flip")
def _normalize_flip_fake(images, mean, std, hflip=None, vflip=None, crop=None, offsets=None,
                         fill=0, dtype=torch.float32, layout="NHWC", channels_last=False,
                         indices=None):
    # Refuses what the real kernel refuses, with the same messages: a meta argument next to CPU
    # images dispatches here, and must raise rather than return an uninitialised CPU tensor.
    check_devices("normalize_flip", images, "images", (hflip, vflip, offsets, indices))
    torch._check(layout in ("NHWC", "NCHW"), lambda: "layout must be 'NHWC' or 'NCHW', got %r" % layout)
    torch._check(images.dtype == torch.uint8, lambda: "images must be uint8, got %s" % images.dtype)
    torch._check(images.dim() == 4, lambda: "images must be 4-D, got %d-D" % images.dim())
    torch._check(dtype in OUT_DTYPES, lambda: "normalize_flip: " + OUT_DTYPES_MESSAGE % dtype)
    torch._check(0 <= fill <= 255, lambda: "fill must be a uint8 value in [0, 255], got %d" % fill)
    if layout == "NHWC":
        n, h, w, c = images.shape
    else:
        n, c, h, w = images.shape
    torch._check(len(mean) == c and len(std) == c, lambda: (
        "mean and std have %d and %d values but the images have C = %s channels" % (len(mean), len(std), c)))
    check_normalization(mean, std)
    n, h, w = check_geometry(n, h, w, hflip, vflip, crop, offsets, indices)
    check_output_size("normalize_flip", (n, c, h, w), dtype)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    return images.new_empty((n, c, h, w), dtype=dtype).contiguous(memory_format=fmt)
