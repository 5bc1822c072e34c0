"""Every fake (meta) kernel of prefetch's ops, in one place: shape inference for torch.compile,
FakeTensor and the meta device. They refuse what the real kernels refuse, with the same messages
(csrc/torch/ops/: the <op>_plan.cpp files, decode_ops.cpp)."""
import math

import torch

from .._core.extension import C as _C  # noqa: F401  (the ops must exist before their fakes)

_OUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.uint8)
_OUT_DTYPES_MESSAGE = ("dtype must be torch.float32, torch.float16, torch.bfloat16 or torch.uint8 (the "
                       "normalized values rounded and saturated), got %s")

# They refuse what the real kernels refuse (devices, fill, crop, argument shapes, an output
# whose size overflows), with the same messages: a meta argument next to CPU images dispatches
# here, and must raise rather than return an uninitialised CPU tensor.

_ARGS = ("hflip", "vflip", "offsets", "indices")
_MASK_FILL = {torch.uint8: ("a uint8", "uint8", 0, 2**8 - 1),
              torch.int16: ("an int16", "int16", -2**15, 2**15 - 1),
              torch.int32: ("an int32", "int32", -2**31, 2**31 - 1),
              torch.int64: ("an int64", "int64", -2**63, 2**63 - 1)}
_MAX_CROP = 65535
_MAX_SIDE = 2**62


# The C++ spelling of the dtypes the messages name, so both kernels print the same.
_DTYPE_NAMES = {torch.uint64: "UInt64", torch.float32: "Float", torch.bool: "Bool",
                torch.int64: "Long", torch.float64: "Double"}


def _integer(dtype):
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool
                or dtype == torch.uint64)


def _check_devices(op, x, what, args):
    for name, t in zip(_ARGS, args):
        if t is not None:
            torch._check(t.device == x.device, lambda name=name, t=t: (
                "%s: %s is on %s but the %s are on %s; every tensor argument must be on the %s' "
                "device" % (op, name, t.device, what, x.device, what)))


def _check_geometry(n, H, W, hflip, vflip, crop, offsets, indices):
    """Mirrors csrc/torch/ops/geometry_inputs.cpp; returns (n, h, w) of the output."""
    torch._check(H < _MAX_SIDE and W < _MAX_SIDE, lambda: (
        "the input's height and width must be below 2^62, got H = %s, W = %s" % (H, W)))
    if indices is not None:
        torch._check(_integer(indices.dtype), lambda: (
            "indices must be an integer tensor of shape [n] (not uint64, whose values from 2^63 "
            "would wrap), got dtype %s" % _DTYPE_NAMES.get(indices.dtype, indices.dtype)))
        torch._check(indices.dim() == 1, lambda: "indices must be 1-D [n], got shape %s" % list(indices.shape))
        n = indices.shape[0]
    h, w = H, W
    if crop is not None:
        torch._check(len(crop) == 2, lambda: "crop must be (h, w), got %d values: %s" % (len(crop), list(crop)))
        torch._check(all(1 <= c <= _MAX_CROP for c in crop), lambda: (
            "crop must be (h, w) with 1 <= h, w <= %d, got %s" % (_MAX_CROP, list(crop))))
        h, w = crop
    _check_flips(hflip, vflip, n)
    if offsets is not None:
        torch._check(_integer(offsets.dtype), lambda: (
            "offsets must be an integer tensor of shape [N, 2] = [%s, 2] (not uint64, whose values "
            "from 2^63 would wrap), got dtype %s" % (n, _DTYPE_NAMES.get(offsets.dtype, offsets.dtype))))
        torch._check(offsets.dim() == 2 and offsets.shape[0] == n and offsets.shape[1] == 2,
                     lambda: "offsets must have shape [N, 2] = [%s, 2], got %s" % (n, list(offsets.shape)))
    return n, h, w


def _check_flips(hflip, vflip, n):
    for name, f in (("hflip", hflip), ("vflip", vflip)):
        if f is not None:
            torch._check(f.dtype == torch.bool, lambda name=name, f=f: (
                "%s must be a bool tensor of shape [N] = [%s], got dtype %s" % (name, n, f.dtype)))
            torch._check(f.dim() == 1 and f.shape[0] == n, lambda name=name, f=f: (
                "%s must have shape [N] = [%s], got %s" % (name, n, list(f.shape))))


def _check_output_size(op, sizes, dtype):
    if not all(isinstance(s, int) for s in sizes):
        return  # symbolic sizes: the real kernel checks when it runs
    numel = 1
    for s in sizes:
        numel *= s
    torch._check(numel * dtype.itemsize <= 2**63 - 1, lambda: (
        "%s: the output %s of %s has a size in bytes that overflows int64; reduce the batch "
        "(N = %d), the crop or the channels" % (op, list(sizes), dtype, sizes[0])))


@torch.library.register_fake("prefetch::normalize_flip")
def _normalize_flip_fake(images, mean, std, hflip=None, vflip=None, crop=None, offsets=None,
                         fill=0, dtype=torch.float32, layout="NHWC", channels_last=False,
                         indices=None):
    _check_devices("normalize_flip", images, "images", (hflip, vflip, offsets, indices))
    torch._check(layout in ("NHWC", "NCHW"), lambda: "layout must be 'NHWC' or 'NCHW', got %r" % layout)
    torch._check(images.dtype == torch.uint8, lambda: "images must be uint8, got %s" % images.dtype)
    torch._check(images.dim() == 4, lambda: "images must be 4-D, got %d-D" % images.dim())
    torch._check(dtype in _OUT_DTYPES, lambda: "normalize_flip: " + _OUT_DTYPES_MESSAGE % dtype)
    torch._check(0 <= fill <= 255, lambda: "fill must be a uint8 value in [0, 255], got %d" % fill)
    if layout == "NHWC":
        n, h, w, c = images.shape
    else:
        n, c, h, w = images.shape
    torch._check(len(mean) == c and len(std) == c, lambda: (
        "mean and std have %d and %d values but the images have C = %s channels" % (len(mean), len(std), c)))
    for i, (m, s) in enumerate(zip(mean, std)):
        torch._check(s > 0, lambda i=i, s=s: "std[%d] must be > 0, got %s" % (i, s))
        torch._check(math.isfinite(s), lambda i=i, s=s: "std[%d] must be finite, got %s" % (i, s))
        torch._check(math.isfinite(m), lambda i=i, m=m: "mean[%d] must be finite, got %s" % (i, m))
    n, h, w = _check_geometry(n, h, w, hflip, vflip, crop, offsets, indices)
    _check_output_size("normalize_flip", (n, c, h, w), dtype)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    return images.new_empty((n, c, h, w), dtype=dtype).contiguous(memory_format=fmt)


@torch.library.register_fake("prefetch::flip_crop")
def _flip_crop_fake(masks, hflip=None, vflip=None, crop=None, offsets=None, fill=0, indices=None):
    _check_devices("flip_crop", masks, "masks", (hflip, vflip, offsets, indices))
    torch._check(masks.dtype in _MASK_FILL,
                 lambda: "masks must be uint8, int16, int32 or int64, got %s" % masks.dtype)
    article, name, lo, hi = _MASK_FILL[masks.dtype]
    torch._check(lo <= fill <= hi, lambda: "fill must be %s value in [%d, %d] for %s masks, got %d"
                 % (article, lo, hi, name, fill))
    torch._check(masks.dim() == 3, lambda: "masks must be 3-D [N, H, W], got %d-D" % masks.dim())
    n, h, w = masks.shape
    n, h, w = _check_geometry(n, h, w, hflip, vflip, crop, offsets, indices)
    _check_output_size("flip_crop", (n, h, w), masks.dtype)
    return masks.new_empty((n, h, w))


def _check_uint8_images(op, images, other, name):
    """Mirrors plan_common.cpp's check_uint8_images (affine_warp, sharpness, lookup); returns
    the images' (N, C, H, W)."""
    torch._check(other.device == images.device, lambda: (
        "%s: %s is on %s but the images are on %s; every tensor argument must be on the images' "
        "device" % (op, name, other.device, images.device)))
    torch._check(images.dtype == torch.uint8 and images.dim() == 4, lambda: (
        "%s: images must be uint8 [N, C, H, W], got %s of shape %s"
        % (op, _DTYPE_NAMES.get(images.dtype, images.dtype), list(images.shape))))
    return images.shape


@torch.library.register_fake("prefetch::affine_warp")
def _affine_warp_fake(images, matrices, bilinear=False, fill=None):
    n, c, h, w = _check_uint8_images("affine_warp", images, matrices, "matrices")
    torch._check(1 <= c <= _WARP_MAX_CHANNELS, lambda: (
        "affine_warp: images must have 1 to %d channels, got C = %s" % (_WARP_MAX_CHANNELS, c)))
    torch._check(h <= _WARP_MAX_SIDE and w <= _WARP_MAX_SIDE, lambda: (
        "affine_warp: images must be at most %d pixels a side, got H = %s, W = %s"
        % (_WARP_MAX_SIDE, h, w)))
    torch._check(matrices.dtype == torch.float32 and matrices.dim() == 2
                 and matrices.shape[0] == n and matrices.shape[1] == 6, lambda: (
        "affine_warp: matrices must be float32 [N, 6] = [%s, 6] (one map per image), got %s of "
        "shape %s" % (n, _DTYPE_NAMES.get(matrices.dtype, matrices.dtype), list(matrices.shape))))
    if fill is not None:
        torch._check(len(fill) in (1, c), lambda: (
            "affine_warp: fill must have 1 value or one per channel (%s), got %d" % (c, len(fill))))
        for i, v in enumerate(fill):
            torch._check(math.isfinite(v) and 0 <= v <= 255, lambda i=i, v=v: (
                "affine_warp: fill[%d] must lie in [0, 255] for uint8 images, got %s" % (i, v)))
    _check_output_size("affine_warp", (n, c, h, w), torch.uint8)
    return images.new_empty((n, c, h, w))


@torch.library.register_fake("prefetch::sharpness")
def _sharpness_fake(images, factors):
    n, c, h, w = _check_uint8_images("sharpness", images, factors, "factors")
    torch._check(factors.dtype == torch.float64 and factors.dim() == 1 and factors.shape[0] == n,
                 lambda: "sharpness: factors must be float64 [N] = [%s] (one per image), got %s of "
                 "shape %s" % (n, _DTYPE_NAMES.get(factors.dtype, factors.dtype),
                               list(factors.shape)))
    torch._check(c * h < 2**31 - 1, lambda: (
        "sharpness: an image's C * H must be below 2^31, got C = %s, H = %s" % (c, h)))
    _check_output_size("sharpness", (n, c, h, w), torch.uint8)
    return images.new_empty((n, c, h, w))


@torch.library.register_fake("prefetch::lookup")
def _lookup_fake(images, tables):
    n, c, h, w = _check_uint8_images("lookup", images, tables, "tables")
    torch._check(tables.dtype == torch.uint8 and tables.dim() == 3 and tables.shape[0] == n
                 and tables.shape[1] in (1, c) and tables.shape[2] == 256, lambda: (
        "lookup: tables must be uint8 [N, 1 or C, 256] = [%s, 1 or %s, 256] (one table per "
        "image, or per image and channel), got %s of shape %s"
        % (n, c, _DTYPE_NAMES.get(tables.dtype, tables.dtype), list(tables.shape))))
    torch._check(c * h < 2**31 - 1, lambda: (
        "lookup: an image's C * H must be below 2^31, got C = %s, H = %s" % (c, h)))
    _check_output_size("lookup", (n, c, h, w), torch.uint8)
    return images.new_empty((n, c, h, w))


@torch.library.register_fake("prefetch::histograms")
def _histograms_fake(images):
    torch._check(images.dtype == torch.uint8 and images.dim() == 4, lambda: (
        "histograms: images must be uint8 [N, C, H, W], got %s of shape %s"
        % (_DTYPE_NAMES.get(images.dtype, images.dtype), list(images.shape))))
    n, c, h, w = images.shape
    torch._check(h * w < 2**31 - 1, lambda: (
        "histograms: an image's H * W must be below 2^31 (int32 counts), got H = %s, W = %s" % (h, w)))
    return images.new_empty((n, c, 256), dtype=torch.int32)


# csrc/kernels/affine_warp/affine_warp.h: kWarpMaxChannels, kWarpMaxSide
_WARP_MAX_CHANNELS = 16
_WARP_MAX_SIDE = 2**21


def _check_table_device(x, name, t):
    torch._check(t.device == x.device or t.device.type == "cpu", lambda: (
        "resized_crop: %s is on %s but the values are on %s; each table argument must be on the "
        "values' device or on the CPU" % (name, t.device, x.device)))


@torch.library.register_fake("prefetch::resized_crop")
def _resized_crop_fake(values, offsets, sizes, boxes, size, mean, std, hflip=None, vflip=None,
                       dtype=torch.float32, channels_last=False, antialias=False):
    # Mirrors resized_crop_plan.cpp's plan_resized_crop, except what needs the tables' values
    # (the boxes, the samples' channels and extents): the real kernel checks those when it runs.
    for name, t in (("offsets", offsets), ("sizes", sizes), ("boxes", boxes), ("hflip", hflip),
                    ("vflip", vflip)):
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
    torch._check(_integer(boxes.dtype), lambda: (
        "resized_crop: boxes must be an integer tensor [N, 4] of (top, left, height, width) (not "
        "uint64, whose values from 2^63 would wrap), got dtype %s"
        % _DTYPE_NAMES.get(boxes.dtype, boxes.dtype)))
    torch._check(boxes.dim() == 2 and boxes.shape[0] == n and boxes.shape[1] == 4, lambda: (
        "resized_crop: boxes must have shape [N, 4] = [%s, 4], got %s" % (n, list(boxes.shape))))
    torch._check(len(size) == 2, lambda: "resized_crop: size must be (h, w), got %d values: %s" % (len(size), list(size)))
    torch._check(all(1 <= s <= _MAX_CROP for s in size), lambda: (
        "resized_crop: size must be (h, w) with 1 <= h, w <= %d, got %s" % (_MAX_CROP, list(size))))
    torch._check(dtype in _OUT_DTYPES, lambda: "resized_crop: " + _OUT_DTYPES_MESSAGE % dtype)
    torch._check(len(mean) == len(std), lambda: (
        "resized_crop: mean has %d values but std has %d" % (len(mean), len(std))))
    torch._check(len(mean) > 0, lambda: "resized_crop: mean and std need one value per channel, got none")
    _check_flips(hflip, vflip, n)
    for i, (m, s) in enumerate(zip(mean, std)):
        torch._check(s > 0, lambda i=i, s=s: "std[%d] must be > 0, got %s" % (i, s))
        torch._check(math.isfinite(s), lambda i=i, s=s: "std[%d] must be finite, got %s" % (i, s))
        torch._check(math.isfinite(m), lambda i=i, m=m: "mean[%d] must be finite, got %s" % (i, m))
    h, w = size
    c = len(mean)
    _check_output_size("resized_crop", (n, c, h, w), dtype)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    return values.new_empty((n, c, h, w), dtype=dtype).contiguous(memory_format=fmt)


@torch.library.register_fake("prefetch::jpeg_sizes")
def _jpeg_sizes_fake(values, offsets, sizes):
    return offsets.new_empty((offsets.shape[0], 3))


@torch.library.register_fake("prefetch::decode_resized_crop")
def _decode_resized_crop_fake(values, offsets, sizes, boxes, size, mean, std, hflip=None, vflip=None,
                              dtype=torch.float32, channels_last=False, antialias=False):
    # The shape only: the boxes are checked against the headers when the real kernel runs.
    torch._check(len(mean) == 3, lambda: "decode_resized_crop: the decoded images are RGB: mean "
                 "and std need 3 values, got %d" % len(mean))
    torch._check(len(size) == 2, lambda: "resized_crop: size must be (h, w)")
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    return values.new_empty((offsets.shape[0], 3, size[0], size[1]), dtype=dtype).contiguous(
        memory_format=fmt)


@torch.library.register_fake("prefetch::color_jitter")
def _color_jitter_fake(images, steps, factors):
    n, c, h, w = _check_uint8_images("color_jitter", images, steps, "steps")
    _check_uint8_images("color_jitter", images, factors, "factors")
    torch._check(c in (1, 3), lambda: (
        "color_jitter: images must have 1 or 3 channels, got C = %s" % c))
    torch._check(steps.dtype == torch.int64 and steps.dim() == 2 and steps.shape[0] == n, lambda: (
        "color_jitter: steps must be int64 [N, K] = [%s, K] (each image's chain), got %s of shape "
        "%s" % (n, _DTYPE_NAMES.get(steps.dtype, steps.dtype), list(steps.shape))))
    k = steps.shape[1]
    torch._check(factors.dtype == torch.float64 and factors.dim() == 2 and factors.shape[0] == n
                 and factors.shape[1] == k, lambda: (
        "color_jitter: factors must be float64 [N, K] = [%s, %s] (one per step), got %s of shape "
        "%s" % (n, k, _DTYPE_NAMES.get(factors.dtype, factors.dtype), list(factors.shape))))
    torch._check(h < 2**31 - 1, lambda: (
        "color_jitter: images must be below 2^31 rows, got H = %s" % h))
    _check_output_size("color_jitter", (n, c, h, w), torch.uint8)
    return images.new_empty((n, c, h, w))
