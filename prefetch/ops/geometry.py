"""The geometric ops (CPU and CUDA), each its Python wrapper and its fake kernel:
``flip_crop`` (the flips and crop of :func:`prefetch.ops.normalize_flip` for integer masks),
``resized_crop`` (each image of a ragged batch cropped to its box, resized bilinearly, flipped,
normalized and cast, in one pass) and ``affine_warp`` (each uint8 image through its own affine
map: the augmentation policies' rotate, shear and translate).
"""
import math
from typing import TYPE_CHECKING, Sequence

import torch

from .._core.checks import whole
from .._core.extension import C as _C  # noqa: F401  (loading the extension registers the ops)
from .arguments import (DTYPE_NAMES, MAX_CROP, OUT_DTYPES, OUT_DTYPES_MESSAGE, bicubic_table,
                        check_devices, check_flips, check_geometry, check_normalization, check_output_size,
                        check_uint8_images, crop_list, flips, integer, size_list)

__all__ = ["flip_crop", "resized_crop", "affine_warp"]

if TYPE_CHECKING:  # for the annotation only: _ragged() imports it where it is used
    from .._core.ragged import Ragged

Flips = torch.Tensor | Sequence[bool] | None


# --- flip_crop ------------------------------------------------------------------------------------

def flip_crop(masks: torch.Tensor, *, hflip: Flips = None, vflip: Flips = None,
              crop: int | Sequence[int] | None = None, offsets: torch.Tensor | None = None,
              fill: int = 0, indices: torch.Tensor | None = None) -> torch.Tensor:
    """The geometry of :func:`prefetch.ops.normalize_flip` for integer masks, so that a
    segmentation mask gets exactly its image's flips and crop.

    Args:
        masks (Tensor[N, H, W]): uint8, int16, int32 or int64 (the dtype is preserved).
        hflip, vflip, crop, offsets, indices: as in :func:`prefetch.ops.normalize_flip`.
        fill (int): the value of pixels outside the mask, a value of the mask dtype (0..255 for
            uint8, and so on).

    Returns:
        Tensor[N, h, w] (``n`` samples with ``indices``) of the masks' dtype, contiguous.

    Raises:
        TypeError: a fractional ``crop`` or ``fill``, or flips that are not booleans.
        RuntimeError: ``fill`` outside the mask dtype's range (instead of wrapping), a tensor
            argument on another device, a wrong dtype or shape, each named.
        IndexError: an index out of range, on the CPU (a device-side error on CUDA).
    """
    device = masks.device if isinstance(masks, torch.Tensor) else None
    hflip, vflip = flips(hflip, "hflip", device), flips(vflip, "vflip", device)
    return torch.ops.prefetch.flip_crop.default(masks, hflip, vflip, crop_list(crop), offsets,
                                                whole(fill, "fill"), indices)


_MASK_FILL = {torch.uint8: ("a uint8", "uint8", 0, 2**8 - 1),
              torch.int16: ("an int16", "int16", -2**15, 2**15 - 1),
              torch.int32: ("an int32", "int32", -2**31, 2**31 - 1),
              torch.int64: ("an int64", "int64", -2**63, 2**63 - 1)}


@torch.library.register_fake("prefetch::flip_crop")
def _flip_crop_fake(masks, hflip=None, vflip=None, crop=None, offsets=None, fill=0, indices=None):
    check_devices("flip_crop", masks, "masks", (hflip, vflip, offsets, indices))
    torch._check(masks.dtype in _MASK_FILL,
                 lambda: "masks must be uint8, int16, int32 or int64, got %s" % masks.dtype)
    article, name, lo, hi = _MASK_FILL[masks.dtype]
    torch._check(lo <= fill <= hi, lambda: "fill must be %s value in [%d, %d] for %s masks, got %d"
                 % (article, lo, hi, name, fill))
    torch._check(masks.dim() == 3, lambda: "masks must be 3-D [N, H, W], got %d-D" % masks.dim())
    n, h, w = masks.shape
    n, h, w = check_geometry(n, h, w, hflip, vflip, crop, offsets, indices)
    check_output_size("flip_crop", (n, h, w), masks.dtype)
    return masks.new_empty((n, h, w))


# --- resized_crop ---------------------------------------------------------------------------------

def _ragged(images):
    from .._core.ragged import Ragged

    if isinstance(images, (list, tuple)):
        if not images:  # no sample to take a dtype, a device or C from: an empty batch
            return Ragged(torch.empty(0, dtype=torch.uint8), torch.empty(0, dtype=torch.int64),
                          torch.empty(0, 3, dtype=torch.int64))
        for n, image in enumerate(images):
            if isinstance(image, torch.Tensor) and image.dim() != 3:
                raise ValueError("prefetch: resized_crop takes HWC images (3-D): image %d has shape "
                                 "%s%s" % (n, list(image.shape), "; add a channel dimension "
                                           "(image[..., None])" if image.dim() == 2 else ""))
        images = _pack(images) if torch.compiler.is_compiling() else Ragged.from_tensors(images)
    if not isinstance(images, Ragged):
        raise TypeError("prefetch: resized_crop takes a prefetch.Ragged or a list of HWC uint8 "
                        "tensors, got %s" % type(images).__name__)
    if images.rank != 3:
        raise ValueError("prefetch: resized_crop takes HWC images: a Ragged of rank 3, got rank %d%s"
                         % (images.rank, "; add a channel dimension to each image (x[..., None])"
                            if images.rank == 2 else ""))
    return images


def _pack(images):
    """``Ragged.from_tensors(images)`` inside ``torch.compile``: the same packing, without reading
    back the tables it makes from the images' shapes to check them (a graph cannot branch on
    tensor values, and tables made from shapes cannot be wrong). The samples are checked as
    ``from_tensors`` checks them, by dtype, rank and device."""
    from .._core.ragged import Ragged, check_samples

    check_samples(images, "images")
    shapes = [tuple(t.shape) for t in images]
    counts = [t.numel() for t in images]
    offsets = torch.tensor([sum(counts[:k]) for k in range(len(counts))], dtype=torch.int64)
    sizes = torch.tensor(shapes, dtype=torch.int64).reshape(len(images), images[0].dim())
    values = torch.cat([t.reshape(-1) for t in images])
    device = images[0].device
    return Ragged(values, offsets.to(device), sizes.to(device), shapes=shapes, dense=True,
                  check=False)


def resized_crop(images: "Ragged | Sequence[torch.Tensor]", boxes: torch.Tensor | Sequence[Sequence[int]], size: int | Sequence[int],
                 mean: Sequence[float], std: Sequence[float], *, hflip: Flips = None,
                 vflip: Flips = None, dtype: torch.dtype = torch.float32,
                 channels_last: bool = False, antialias: bool = True,
                 interpolation: str | Flips = "bilinear") -> torch.Tensor:
    """Crops each image to its box, resizes the crop to ``size``, flips, normalizes and casts,
    each element computed once, in float32.

    Every element is ``(interpolate(crop)[c, y, x] / 255 - mean[c]) / std[c]`` after the flips
    (a bicubic ``interpolate(crop)`` first clamped to [0, 255], as torchvision's uint8 result).
    ``boxes``, ``hflip``, ``vflip`` and the Ragged's ``offsets`` and ``sizes`` may be on the CPU
    or on the images' device. The boxes are checked on the host before the kernel reads any
    pixel: keep them on the CPU, and a Ragged that knows its layout on the host (the
    Prefetcher's, ``Ragged.from_tensors``') gives its tables from there (``host_tables()``), so
    the call does not synchronise with the device. Otherwise (boxes on the device, a Ragged
    built from device tables, or inside ``torch.compile``) the op reads the tables on the host
    once per call: one copy of a small table, a host synchronisation.

    Args:
        images (prefetch.Ragged or list of Tensor[H_i, W_i, C]): ``N`` uint8 HWC images of their
            own sizes and the same C: a :class:`prefetch.Ragged` (read in place, never padded or
            copied), or a list of tensors (packed with ``Ragged.from_tensors``, one copy).
        boxes (Tensor[N, 4]): integer (top, left, height, width) per sample in pixels, each inside
            its image (height, width >= 1; top + height <= H; left + width <= W); a nested
            sequence is made a CPU int64 tensor.
        size (int or (int, int)): the output ``(h, w)`` in pixels (an int means square), 1 to
            65535 each.
        mean, std (sequences of C floats): torchvision's convention (fractions of 1); finite,
            std > 0.
        hflip, vflip (Tensor[N] bool, a list of booleans, or None): a flip mirrors the resized
            output.
        dtype (torch.dtype): float32, float16, bfloat16, or uint8: the normalized values rounded
            half to even and saturated to [0, 255] (``mean=0, std=1/255`` gives the pixel values).
        channels_last (bool): return a channels_last tensor instead of a contiguous one.
        antialias (bool): as ``F.interpolate(..., align_corners=False, antialias=antialias)`` on
            the float crop: a downscale averages every input pixel it covers (True, the default,
            as torchvision's v2 transforms and FusedAugment) instead of sampling 2 x 2 (4 x 4
            bicubic).
        interpolation (str, or Tensor[N] bool / list of booleans): ``"bilinear"`` (the default)
            or ``"bicubic"`` (any case, or torchvision's InterpolationMode), ``F.interpolate``'s
            mode; or one boolean per sample, True where that sample is bicubic (timm's
            ``"random"`` interpolation). Bicubic is Keys' cubic convolution, a = -0.75 without
            antialias (torch's ``upsample_bicubic2d``) and a = -0.5 with it (torch's
            ``_upsample_bicubic2d_aa``, PIL's), computed in float32 from the uint8 pixels as
            torchvision's float path; torchvision's CPU uint8 path rounds to uint8 between its two
            passes, so where the first pass overshoots (edges) it differs by more than 1
            (docs/ops.md gives the measured figures).

    Returns:
        Tensor[N, C, h, w] of ``dtype`` on the images' device.

    Raises:
        TypeError: ``images`` neither a Ragged nor a list of tensors, a fractional ``size``, or
            flips (or a per-sample ``interpolation``) that are not booleans.
        ValueError: images that are not HWC (3-D; a hint for 2-D ones), an ``interpolation``
            other than bilinear and bicubic.
        RuntimeError: a box outside its image (naming the sample, its box and its image's
            size), a wrong dtype, shape or device of an argument, a std that is not finite and
            positive.
    """
    r = _ragged(images)
    offsets, sizes = r.offsets, r.sizes
    if r.values.device.type != "cpu" and not torch.compiler.is_compiling():
        # A Ragged that knows its layout on the host (the Prefetcher's, from_tensors') gives its
        # tables without reading the device, so the op checks the boxes with no synchronisation.
        # Not while compiling: tables made from Python values would recompile for every batch.
        offsets, sizes = r.host_tables()
    if not isinstance(boxes, torch.Tensor):
        boxes = torch.tensor(boxes, dtype=torch.int64).reshape(-1, 4)
    return torch.ops.prefetch.resized_crop.default(
        r.values, offsets, sizes, boxes, size_list(size), [float(m) for m in mean],
        [float(s) for s in std], flips(hflip, "hflip", "cpu"), flips(vflip, "vflip", "cpu"), dtype,
        bool(channels_last), bool(antialias), bicubic_table(interpolation, len(r), "resized_crop"))


def _check_table_device(x, name, t):
    torch._check(t.device == x.device or t.device.type == "cpu", lambda: (
        "resized_crop: %s is on %s but the values are on %s; each table argument must be on the "
        "values' device or on the CPU" % (name, t.device, x.device)))


@torch.library.register_fake("prefetch::resized_crop")
def _resized_crop_fake(values, offsets, sizes, boxes, size, mean, std, hflip=None, vflip=None,
                       dtype=torch.float32, channels_last=False, antialias=False, bicubic=None):
    # Mirrors resized_crop_plan.cpp's plan_resized_crop, except what needs the tables' values
    # (the boxes, the samples' channels and extents): the real kernel checks those when it runs.
    for name, t in (("offsets", offsets), ("sizes", sizes), ("boxes", boxes), ("hflip", hflip),
                    ("vflip", vflip), ("bicubic", bicubic)):
        if t is not None:
            _check_table_device(values, name, t)
    torch._check(values.dtype == torch.uint8, lambda: "resized_crop: values must be uint8, got %s" % values.dtype)
    torch._check(values.dim() == 1, lambda: (
        "resized_crop: values must be 1-D (a Ragged's packed samples), got shape %s" % list(values.shape)))
    torch._check(offsets.dtype == torch.int64 and offsets.dim() == 1, lambda: (
        "resized_crop: offsets must be a 1-D int64 tensor [N], got dtype %s and shape %s"
        % (offsets.dtype, list(offsets.shape))))
    torch._check(sizes.dtype == torch.int64 and sizes.dim() == 2 and sizes.shape[1] == 3, lambda: (
        "resized_crop: sizes must be an int64 tensor [N, 3] of (H, W, C) per HWC sample, got dtype "
        "%s and shape %s" % (sizes.dtype, list(sizes.shape))))
    n = sizes.shape[0]
    torch._check(offsets.shape[0] == n, lambda: (
        "resized_crop: offsets has %s samples but sizes has %s" % (offsets.shape[0], n)))
    torch._check(integer(boxes.dtype), lambda: (
        "resized_crop: boxes must be an integer tensor [N, 4] of (top, left, height, width) (not "
        "uint64, whose values from 2^63 would wrap), got dtype %s"
        % DTYPE_NAMES.get(boxes.dtype, boxes.dtype)))
    torch._check(boxes.dim() == 2 and boxes.shape[0] == n and boxes.shape[1] == 4, lambda: (
        "resized_crop: boxes must have shape [N, 4] = [%s, 4], got %s" % (n, list(boxes.shape))))
    torch._check(len(size) == 2, lambda: "resized_crop: size must be (h, w), got %d values: %s" % (len(size), list(size)))
    torch._check(all(1 <= s <= MAX_CROP for s in size), lambda: (
        "resized_crop: size must be (h, w) with 1 <= h, w <= %d, got %s" % (MAX_CROP, list(size))))
    torch._check(dtype in OUT_DTYPES, lambda: "resized_crop: " + OUT_DTYPES_MESSAGE % dtype)
    torch._check(len(mean) == len(std), lambda: (
        "resized_crop: mean has %d values but std has %d" % (len(mean), len(std))))
    torch._check(len(mean) > 0, lambda: "resized_crop: mean and std need one value per channel, got none")
    check_flips(hflip, vflip, n, bicubic)
    check_normalization(mean, std)
    h, w = size
    c = len(mean)
    check_output_size("resized_crop", (n, c, h, w), dtype)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    return values.new_empty((n, c, h, w), dtype=dtype).contiguous(memory_format=fmt)


# --- affine_warp ----------------------------------------------------------------------------------

def affine_warp(images: torch.Tensor, matrices: torch.Tensor, *, interpolation: str = "nearest",
                fill: float | Sequence[float] | None = None) -> torch.Tensor:
    """Each uint8 image resampled through its own affine map.

    Output pixel ``(x, y)`` (pixel centres at whole numbers) reads the source point
    ``(m0 x + m1 y + m2, m3 x + m4 y + m5)`` of its row of ``matrices``, as ``grid_sample``
    samples (``align_corners=False``, nearest ties to even, zeros outside), with torchvision's
    fill, rounded half to even back to uint8. The arithmetic is float32 with every product and
    sum rounded on its own, so the CPU and CUDA kernels write the same bytes.

    Args:
        images (Tensor[N, C, H, W]): uint8, 1 to 16 channels, at most 2^21 pixels a side.
        matrices (Tensor[N, 6]): float32, one map per image (output pixel -> source point, in
            pixels), on the images' device.
        interpolation (str): ``"nearest"`` or ``"bilinear"``.
        fill (float, sequence of C floats, or None): torchvision's fill, in [0, 255]: nearest
            takes it where the source pixel is outside the image, bilinear blends it in by the
            weight of the outside taps; None: zeros.

    Returns:
        Tensor[N, C, H, W]: uint8, contiguous, on the images' device.

    Raises:
        ValueError: ``interpolation`` neither ``"nearest"`` nor ``"bilinear"``.
        RuntimeError: a wrong dtype, shape or device of an argument, or a ``fill`` outside
            [0, 255] or of neither 1 nor C values, each named.
    """
    if interpolation not in ("nearest", "bilinear"):
        raise ValueError("prefetch: interpolation must be 'nearest' or 'bilinear', got %r"
                         % (interpolation,))
    if fill is not None:
        fill = [float(v) for v in fill] if isinstance(fill, (list, tuple)) else [float(fill)]
    return torch.ops.prefetch.affine_warp.default(images, matrices, interpolation == "bilinear",
                                                  fill)


# csrc/kernels/affine_warp/affine_warp.h: kWarpMaxChannels, kWarpMaxSide
_WARP_MAX_CHANNELS = 16
_WARP_MAX_SIDE = 2**21


@torch.library.register_fake("prefetch::affine_warp")
def _affine_warp_fake(images, matrices, bilinear=False, fill=None):
    n, c, h, w = check_uint8_images("affine_warp", images, matrices, "matrices")
    torch._check(1 <= c <= _WARP_MAX_CHANNELS, lambda: (
        "affine_warp: images must have 1 to %d channels, got C = %s" % (_WARP_MAX_CHANNELS, c)))
    torch._check(h <= _WARP_MAX_SIDE and w <= _WARP_MAX_SIDE, lambda: (
        "affine_warp: images must be at most %d pixels a side, got H = %s, W = %s"
        % (_WARP_MAX_SIDE, h, w)))
    torch._check(matrices.dtype == torch.float32 and matrices.dim() == 2
                 and matrices.shape[0] == n and matrices.shape[1] == 6, lambda: (
        "affine_warp: matrices must be float32 [N, 6] = [%s, 6] (one map per image), got %s of "
        "shape %s" % (n, DTYPE_NAMES.get(matrices.dtype, matrices.dtype), list(matrices.shape))))
    if fill is not None:
        torch._check(len(fill) in (1, c), lambda: (
            "affine_warp: fill must have 1 value or one per channel (%s), got %d" % (c, len(fill))))
        for i, v in enumerate(fill):
            torch._check(math.isfinite(v) and 0 <= v <= 255, lambda i=i, v=v: (
                "affine_warp: fill[%d] must lie in [0, 255] for uint8 images, got %s" % (i, v)))
    check_output_size("affine_warp", (n, c, h, w), torch.uint8)
    return images.new_empty((n, c, h, w))
