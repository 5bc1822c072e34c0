"""Pillow's geometric transform as a batched op (CPU and CUDA): ``pil_affine``, each uint8 image
through its own affine map as ``PIL.Image.transform(size, Image.AFFINE, data, resample,
fillcolor=fill)`` computes it, bilinear or bicubic, byte for byte. timm's RandAugment and
AutoAugment call that transform for Rotate, ShearX/Y and TranslateX/Y (``timm/data/
auto_augment.py``), so their recipes need Pillow's conventions rather than grid_sample's
(:func:`prefetch.ops.affine_warp`): the pixel centres at +0.5, the fill taken whole where the
source point leaves the image, the taps clamped to the edge, bicubic's a = -1 and truncation to
uint8.
"""
import operator
from typing import Sequence, Union

import torch

from .._core.extension import C as _C  # noqa: F401  (loading the extension registers the ops)
from .arguments import DTYPE_NAMES, check_output_size, check_uint8_images

__all__ = ["pil_affine"]

# csrc/kernels/pil_affine/pil_affine.h: kPilAffineMaxChannels, kPilAffineMaxSide
_MAX_CHANNELS = 16
_MAX_SIDE = 2**24


def pil_affine(images: torch.Tensor, matrices: torch.Tensor, *, interpolation: str = "bicubic",
               fill: Union[int, Sequence[int]] = 0) -> torch.Tensor:
    """Each uint8 image through its own affine map, as Pillow's ``Image.transform(size,
    Image.AFFINE, data, resample, fillcolor=fill)`` (Pillow's ``src/libImaging/Geometry.c``).

    Output pixel ``(x, y)`` reads the source point ``xin = m0 (x + 0.5) + m1 (y + 0.5) + m2``,
    ``yin = m3 (x + 0.5) + m4 (y + 0.5) + m5`` of its row of ``matrices`` (Pillow's ``data``: the
    output-to-input map, pixel centres at +0.5). A point outside ``[0, W) x [0, H)`` takes
    ``fill``; inside, the taps around ``(xin - 0.5, yin - 0.5)`` are clamped to the edge,
    weighted linearly (bilinear) or by the cubic convolution with a = -1 (Pillow's bicubic), and
    the value truncated to uint8 (bicubic clipped to [0, 255] first). The arithmetic is Pillow's,
    float64, operation for operation, so the result equals Pillow's on the CPU and on CUDA.

    Args:
        images (Tensor[N, C, H, W]): uint8, 1 to 16 channels, any strides.
        matrices (Tensor[N, 6]): float64, one map per image, on the images' device.
        interpolation (str): ``"bilinear"`` or ``"bicubic"`` (Pillow's ``BILINEAR``,
            ``BICUBIC``).
        fill (int or sequence of int): the value outside, Pillow's ``fillcolor`` given per
            channel: one per channel, or one value for every channel, each in [0, 255]. (Pillow
            reads a single int on an RGB image as red only; timm always passes one per channel.)

    Returns:
        Tensor[N, C, H, W]: uint8, contiguous, on the images' device.

    Raises:
        ValueError: ``interpolation`` neither ``"bilinear"`` nor ``"bicubic"``.
        TypeError: a ``fill`` value that is not a whole number.
        RuntimeError: a wrong dtype, shape or device of an argument, or a ``fill`` outside
            [0, 255] or of neither 1 nor C values, each named.
    """
    if interpolation not in ("bilinear", "bicubic"):
        raise ValueError("prefetch: pil_affine's interpolation must be 'bilinear' or 'bicubic', "
                         "got %r" % (interpolation,))
    values = list(fill) if isinstance(fill, (list, tuple)) else [fill]
    for i, v in enumerate(values):
        try:
            values[i] = operator.index(v)  # (a NumPy integer too)
        except TypeError:
            values[i] = None
        if isinstance(v, bool) or values[i] is None:
            raise TypeError("prefetch: pil_affine's fill[%d] must be a whole number in [0, 255] "
                            "(Pillow's fillcolor), got %r" % (i, v))
    return torch.ops.prefetch.pil_affine.default(images, matrices, interpolation == "bicubic",
                                                 values)


@torch.library.register_fake("prefetch::pil_affine")
def _pil_affine_fake(images, matrices, bicubic, fill):
    n, c, h, w = check_uint8_images("pil_affine", images, matrices, "matrices")
    torch._check(1 <= c <= _MAX_CHANNELS, lambda: (
        "pil_affine: images must have 1 to %d channels, got C = %s" % (_MAX_CHANNELS, c)))
    torch._check(h <= _MAX_SIDE and w <= _MAX_SIDE, lambda: (
        "pil_affine: images must be at most %d pixels a side, got H = %s, W = %s"
        % (_MAX_SIDE, h, w)))
    torch._check(matrices.dtype == torch.float64 and matrices.dim() == 2
                 and matrices.shape[0] == n and matrices.shape[1] == 6, lambda: (
        "pil_affine: matrices must be float64 [N, 6] = [%s, 6] (Pillow's coefficients, one map "
        "per image), got %s of shape %s" % (n, DTYPE_NAMES.get(matrices.dtype, matrices.dtype),
                                            list(matrices.shape))))
    torch._check(len(fill) in (1, c), lambda: (
        "pil_affine: fill must have 1 value or one per channel (%s), got %d" % (c, len(fill))))
    for i, v in enumerate(fill):
        torch._check(0 <= v <= 255, lambda i=i, v=v: (
            "pil_affine: fill[%d] must lie in [0, 255] for uint8 images, got %s" % (i, v)))
    check_output_size("pil_affine", (n, c, h, w), torch.uint8)
    return images.new_empty((n, c, h, w))
