"""What several ops' wrappers and fake kernels share: the conversion of Python arguments (flips,
crop and output sizes) into what the schemas take, and the checks several fakes make as the C++
plans make them (csrc/torch/ops/: ``plan_common.cpp``'s ``check_uint8_images``,
``geometry_inputs.cpp``'s crop, offsets, flips and gather), with the same messages, so that a
meta or fake call refuses what the real kernel refuses. An op family's module
(:mod:`~prefetch.ops.normalize`, :mod:`~prefetch.ops.geometry`, :mod:`~prefetch.ops.color`,
:mod:`~prefetch.ops.decode`) imports what it needs from here; a check one op alone makes stays in
its own module."""
import math

import torch

from .._core.checks import whole

# The output dtypes of normalize_flip and resized_crop (and their message).
OUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.uint8)
OUT_DTYPES_MESSAGE = ("dtype must be torch.float32, torch.float16, torch.bfloat16 or torch.uint8 (the "
                      "normalized values rounded and saturated), got %s")

# csrc/torch/ops/geometry_inputs.cpp's bounds: an output side (crop, size) fits 16 bits; an input
# side stays below 2^62 so that index products cannot overflow int64.
MAX_CROP = 65535
MAX_SIDE = 2**62

# The C++ spelling of the dtypes the messages name, so both kernels print the same.
DTYPE_NAMES = {torch.uint64: "UInt64", torch.float32: "Float", torch.bool: "Bool",
               torch.int64: "Long", torch.float64: "Double", torch.float16: "Half",
               torch.bfloat16: "BFloat16", torch.uint8: "Byte", torch.int8: "Char",
               torch.int16: "Short", torch.int32: "Int"}

_GEOMETRY_ARGS = ("hflip", "vflip", "offsets", "indices")


# --- the wrappers' conversions --------------------------------------------------------------------

def crop_list(crop):
    """``crop`` as the schemas take it: None, or ``[h, w]`` of whole numbers (an int: square).
    TypeError (from :func:`prefetch._core.checks.whole`) for a fractional value."""
    if crop is None:
        return None
    if isinstance(crop, (list, tuple)):
        return [whole(c, "crop") for c in crop]
    c = whole(crop, "crop")
    return [c, c]


def size_list(size):
    """An output size as the schemas take it: ``[h, w]`` of whole numbers (an int: square)."""
    if isinstance(size, (list, tuple)):
        return [whole(s, "size") for s in size]
    s = whole(size, "size")
    return [s, s]


def flips(flip, name, device):
    """A flip argument as the ops take it: a bool tensor, made from a list, tuple or ndarray of
    booleans (on ``device``); a tensor, or None, as it is (the op checks it). TypeError for
    values that are not booleans."""
    if flip is None or isinstance(flip, torch.Tensor):
        return flip
    try:
        t = torch.as_tensor(flip)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise TypeError("prefetch: %s must be a bool tensor [N] (or a list of booleans), got %s (%s)"
                        % (name, type(flip).__name__, exc)) from None
    if t.dtype != torch.bool:
        raise TypeError("prefetch: %s must hold booleans, got %s values" % (name, t.dtype))
    return t.to(device)


# The resampling filters of resized_crop and decode_resized_crop.
INTERPOLATIONS = ("bilinear", "bicubic")


def bicubic_table(interpolation, n, op):
    """``interpolation`` as resized_crop's schema takes it: its ``bicubic`` table, None (every
    sample bilinear) or a bool tensor ``[n]`` (True: that sample bicubic).

    ``interpolation`` is ``"bilinear"`` or ``"bicubic"`` (any case, or an enum whose ``value``
    is one, as torchvision's InterpolationMode), or one boolean per sample (a bool tensor on the
    CPU or the images' device, or a list): True where a sample is bicubic, as timm's "random"
    interpolation draws. ValueError for another name, TypeError for another type (naming
    ``op``); the op checks a table's length."""
    if isinstance(interpolation, (torch.Tensor, list, tuple)):
        return flips(interpolation, "interpolation", "cpu")
    name = getattr(interpolation, "value", interpolation)
    if not isinstance(name, str):
        raise TypeError("prefetch.ops.%s: interpolation must be 'bilinear', 'bicubic' or one boolean "
                        "per sample (True: bicubic), got %s" % (op, type(interpolation).__name__))
    if name.lower() not in INTERPOLATIONS:
        raise ValueError("prefetch.ops.%s: interpolation must be 'bilinear' or 'bicubic' (or one "
                         "boolean per sample, True: bicubic), got %r" % (op, interpolation))
    return torch.ones(n, dtype=torch.bool) if name.lower() == "bicubic" else None


# --- the fakes' shared checks ---------------------------------------------------------------------

def integer(dtype):
    """Whether ``dtype`` is an integer dtype the kernels take for indices (uint64 is not: its
    values from 2^63 would wrap)."""
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool
                or dtype == torch.uint64)


def check_devices(op, x, what, args):
    """Every tensor of ``args`` (hflip, vflip, offsets, indices; None skipped) on ``x``'s device."""
    for name, t in zip(_GEOMETRY_ARGS, args):
        if t is not None:
            torch._check(t.device == x.device, lambda name=name, t=t: (
                "%s: %s is on %s but the %s are on %s; every tensor argument must be on the %s' "
                "device" % (op, name, t.device, what, x.device, what)))


def check_geometry(n, H, W, hflip, vflip, crop, offsets, indices):
    """Mirrors csrc/torch/ops/geometry_inputs.cpp; returns (n, h, w) of the output."""
    torch._check(H < MAX_SIDE and W < MAX_SIDE, lambda: (
        "the input's height and width must be below 2^62, got H = %s, W = %s" % (H, W)))
    if indices is not None:
        torch._check(integer(indices.dtype), lambda: (
            "indices must be an integer tensor of shape [n] (not uint64, whose values from 2^63 "
            "would wrap), got dtype %s" % DTYPE_NAMES.get(indices.dtype, indices.dtype)))
        torch._check(indices.dim() == 1, lambda: "indices must be 1-D [n], got shape %s" % list(indices.shape))
        n = indices.shape[0]
    h, w = H, W
    if crop is not None:
        torch._check(len(crop) == 2, lambda: "crop must be (h, w), got %d values: %s" % (len(crop), list(crop)))
        torch._check(all(1 <= c <= MAX_CROP for c in crop), lambda: (
            "crop must be (h, w) with 1 <= h, w <= %d, got %s" % (MAX_CROP, list(crop))))
        h, w = crop
    check_flips(hflip, vflip, n)
    if offsets is not None:
        torch._check(integer(offsets.dtype), lambda: (
            "offsets must be an integer tensor of shape [N, 2] = [%s, 2] (not uint64, whose values "
            "from 2^63 would wrap), got dtype %s" % (n, DTYPE_NAMES.get(offsets.dtype, offsets.dtype))))
        torch._check(offsets.dim() == 2 and offsets.shape[0] == n and offsets.shape[1] == 2,
                     lambda: "offsets must have shape [N, 2] = [%s, 2], got %s" % (n, list(offsets.shape)))
    return n, h, w


def check_flips(hflip, vflip, n, bicubic=None):
    """hflip, vflip and resized_crop's bicubic table (None skipped): bool ``[n]``."""
    for name, f in (("hflip", hflip), ("vflip", vflip), ("bicubic", bicubic)):
        if f is not None:
            torch._check(f.dtype == torch.bool, lambda name=name, f=f: (
                "%s must be a bool tensor of shape [N] = [%s], got dtype %s" % (name, n, f.dtype)))
            torch._check(f.dim() == 1 and f.shape[0] == n, lambda name=name, f=f: (
                "%s must have shape [N] = [%s], got %s" % (name, n, list(f.shape))))


def check_normalization(mean, std):
    """Every std finite and > 0, every mean finite (the caller checks their counts)."""
    for i, (m, s) in enumerate(zip(mean, std)):
        torch._check(s > 0, lambda i=i, s=s: "std[%d] must be > 0, got %s" % (i, s))
        torch._check(math.isfinite(s), lambda i=i, s=s: "std[%d] must be finite, got %s" % (i, s))
        torch._check(math.isfinite(m), lambda i=i, m=m: "mean[%d] must be finite, got %s" % (i, m))


def check_output_size(op, sizes, dtype):
    """An output of ``sizes`` and ``dtype`` whose byte size fits int64 (symbolic sizes pass: the
    real kernel checks them when it runs)."""
    if not all(isinstance(s, int) for s in sizes):
        return
    numel = 1
    for s in sizes:
        numel *= s
    torch._check(numel * dtype.itemsize <= 2**63 - 1, lambda: (
        "%s: the output %s of %s has a size in bytes that overflows int64; reduce the batch "
        "(N = %d), the crop or the channels" % (op, list(sizes), dtype, sizes[0])))


def check_uint8_images(op, images, other, name):
    """Mirrors plan_common.cpp's check_uint8_images (the ``[N, C, H, W]`` uint8 image ops); returns
    the images' (N, C, H, W)."""
    torch._check(other.device == images.device, lambda: (
        "%s: %s is on %s but the images are on %s; every tensor argument must be on the images' "
        "device" % (op, name, other.device, images.device)))
    torch._check(images.dtype == torch.uint8 and images.dim() == 4, lambda: (
        "%s: images must be uint8 [N, C, H, W], got %s of shape %s"
        % (op, DTYPE_NAMES.get(images.dtype, images.dtype), list(images.shape))))
    return images.shape
