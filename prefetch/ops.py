"""Fused augment ops, registered as ``torch.ops.prefetch.*`` (CPU and CUDA).

``normalize_flip`` reads each uint8 input byte once and writes each output element once: crop
(with fill outside the image), vertical/horizontal flip per sample, ``(x / 255 - mean) / std``,
cast to float32/float16/bfloat16 and NCHW or channels_last output, in one pass.
``flip_crop`` applies the same geometry to integer masks. ``resized_crop`` crops each image of a
ragged batch (a :class:`prefetch.Ragged` of HWC images of their own sizes) to its box, resizes it
bilinearly to one size (``F.interpolate``'s values, with or without antialias), flips, normalizes
and casts, in one pass. ``decode_jpeg``, ``jpeg_sizes`` and ``decode_resized_crop`` decode JPEG
bytes (:mod:`prefetch.decode`), only the boxes' regions when boxes are given.

CPU outputs of 1 MiB or more come from a small process-wide pool of pre-faulted buffers that an
output returns when it dies (torch's allocator would page-fault a fresh block on every call);
:func:`output_pool_stats`, :func:`release_output_pool` and :func:`set_output_pool_limit` show,
empty and bound it (docs/custom_ops.md, "Where CPU outputs come from").
"""
import math
import operator

import torch

from ._extension import _C  # noqa: F401  (loading the extension registers the ops)

__all__ = ["normalize_flip", "flip_crop", "resized_crop", "decode_jpeg", "jpeg_sizes",
           "decode_resized_crop", "gpu_jpeg_decoder", "output_pool_stats", "release_output_pool",
           "set_output_pool_limit"]

_OUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _whole(value, name):
    """An int from an int, a numpy integer, a 0-d integer tensor or a whole float; int() would
    truncate 0.5 to 0 and accept "3"."""
    try:
        return operator.index(value)
    except TypeError:
        pass
    if isinstance(value, torch.Tensor) and value.dim() == 0 and value.is_floating_point():
        value = value.item()
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():  # numpy floats too
        return int(value)
    raise TypeError("prefetch: %s must be a whole number, got %r" % (name, value))


def _crop_list(crop):
    if crop is None:
        return None
    if isinstance(crop, (list, tuple)):
        return [_whole(c, "crop") for c in crop]
    c = _whole(crop, "crop")
    return [c, c]


def normalize_flip(images, mean, std, *, hflip=None, vflip=None, crop=None, offsets=None, fill=0,
                   dtype=torch.float32, layout="NHWC", channels_last=False, indices=None):
    """uint8 images -> normalized, flipped, cropped ``[N, C, h, w]`` tensor of ``dtype``.

    Args:
        images: uint8 ``[N, H, W, C]`` (``layout="NHWC"``) or ``[N, C, H, W]`` (``"NCHW"``).
        mean, std: per-channel values in torchvision's convention (fractions of 1); finite,
            std > 0.
        hflip, vflip: bool ``[N]`` tensors on the images' device, or None.
        crop: output ``(h, w)`` (an int means square); None keeps the input size.
        offsets: integer ``[N, 2]`` (top, left) of each window in input coordinates, may lie
            partly or wholly outside the image (any int64; uint64 is refused); None centres the window at ``((H-h)//2, (W-w)//2)``.
        fill: uint8 value of pixels outside the image, a whole number in [0, 255] (a
            fractional one raises TypeError rather than being truncated; crop likewise).
        dtype: float32, float16 or bfloat16.
        channels_last: return a channels_last tensor instead of a contiguous one.
        indices: integer ``[n]`` on the images' device, or None. Gathers in the same pass:
            output sample ``k`` is made from input sample ``indices[k]`` (and ``hflip``,
            ``vflip``, ``offsets`` have ``n`` rows), so a batch is cut straight out of a whole
            resident dataset. An index out of range raises IndexError on the CPU and stops the
            kernel with a device-side error on CUDA (checking it on the host would synchronise).

    Every tensor argument must be on the images' device: a mismatch (meta included) raises
    RuntimeError naming the argument, as ``torch.where`` does; all-meta inputs give a meta
    output of the right shape. An output whose byte size would overflow int64 (stride-0
    expanded inputs can ask for one) raises RuntimeError naming its sizes.
    """
    return torch.ops.prefetch.normalize_flip.default(
        images, [float(m) for m in mean], [float(s) for s in std], hflip, vflip, _crop_list(crop),
        offsets, _whole(fill, "fill"), dtype, layout, bool(channels_last), indices)


def flip_crop(masks, *, hflip=None, vflip=None, crop=None, offsets=None, fill=0, indices=None):
    """The geometry of :func:`normalize_flip` for integer masks ``[N, H, W]`` (uint8, int16,
    int32 or int64, preserved), so a segmentation mask gets exactly its image's flips and crop;
    ``indices`` gathers as in :func:`normalize_flip`. ``fill`` must be a value of the mask dtype
    (0..255 for uint8, and so on): anything else raises RuntimeError instead of wrapping."""
    return torch.ops.prefetch.flip_crop.default(masks, hflip, vflip, _crop_list(crop), offsets,
                                                _whole(fill, "fill"), indices)


def _size_list(size):
    if isinstance(size, (list, tuple)):
        return [_whole(s, "size") for s in size]
    s = _whole(size, "size")
    return [s, s]


def _ragged(images):
    from .ragged import Ragged

    if isinstance(images, Ragged):
        return images
    if isinstance(images, (list, tuple)):
        if not images:  # no sample to take a dtype, a device or C from: an empty batch
            return Ragged(torch.empty(0, dtype=torch.uint8), torch.empty(0, dtype=torch.int64),
                          torch.empty(0, 3, dtype=torch.int64))
        return Ragged.from_tensors(images)
    raise TypeError("prefetch: resized_crop takes a prefetch.Ragged or a list of HWC uint8 "
                    "tensors, got %s" % type(images).__name__)


def resized_crop(images, boxes, size, mean, std, *, hflip=None, vflip=None, dtype=torch.float32,
                 channels_last=False, antialias=False):
    """Crops each image to its box, resizes the crop to ``size``, flips, normalizes and casts:
    a ``[N, C, h, w]`` tensor of ``dtype``, each element computed once, in float32.

    Args:
        images: a :class:`prefetch.Ragged` of ``N`` uint8 HWC images of their own sizes and the
            same C (read in place, never padded or copied), or a list of such tensors (packed
            with ``Ragged.from_tensors``, one copy).
        boxes: integer ``[N, 4]`` (top, left, height, width) per sample, each inside its image
            (height, width >= 1; top + height <= H; left + width <= W); a box outside raises
            RuntimeError naming the sample, its box and its image's size.
        size: the output ``(h, w)`` (an int means square), 1 to 65535 each.
        mean, std: ``C`` values each, in torchvision's convention (fractions of 1); finite,
            std > 0.
        hflip, vflip: bool ``[N]`` or None; a flip mirrors the resized output.
        dtype: float32, float16 or bfloat16.
        channels_last: return a channels_last tensor instead of a contiguous one.
        antialias: as ``F.interpolate(..., mode="bilinear", align_corners=False,
            antialias=antialias)`` on the float crop (a downscale then averages every input
            pixel it covers instead of sampling four).

    Every element is ``(interpolate(crop)[c, y, x] / 255 - mean[c]) / std[c]`` after the flips.
    ``boxes``, ``hflip``, ``vflip`` and the Ragged's ``offsets`` and ``sizes`` may be on the CPU
    or on the images' device. The boxes are checked on the host before the kernel reads any
    pixel: keep them on the CPU, and a Ragged that knows its layout on the host (the
    Prefetcher's, ``Ragged.from_tensors``') gives its tables from there (``host_tables()``), so
    the call does not synchronise with the device. Otherwise (boxes on the device, a Ragged
    built from device tables, or inside ``torch.compile``) the op reads the tables on the host
    once per call: one copy of a small table, a host synchronisation.
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
        r.values, offsets, sizes, boxes, _size_list(size), [float(m) for m in mean],
        [float(s) for s in std], hflip, vflip, dtype, bool(channels_last), bool(antialias))


# The order in which ops.cpp's output_pool_stats() returns its values.
_POOL_STATS = ("idle_buffers", "idle_bytes", "max_idle_buffers", "max_idle_bytes",
               "in_use_buffers", "in_use_bytes", "allocations", "reuses")


def output_pool_stats():
    """A snapshot of the CPU output pool, as a dict of ints:

    - ``idle_buffers``, ``idle_bytes``: buffers the pool holds for the next outputs;
    - ``max_idle_buffers``, ``max_idle_bytes``: its bounds on them (a returned buffer that would
      break one is freed);
    - ``in_use_buffers``, ``in_use_bytes``: pooled outputs (or views of them) still alive;
    - ``allocations``, ``reuses``: outputs that needed a new buffer / found an idle one, since
      the process started.

    Only CPU outputs of at least 1 MiB and at most ``max_idle_bytes`` are pooled; the others,
    and every CUDA output, come from torch's allocators and are not counted here.
    """
    return dict(zip(_POOL_STATS, torch.ops.prefetch._output_pool_stats()))


def release_output_pool():
    """Frees the pool's idle buffers now and returns how many bytes that gave back. Outputs that
    are still alive are untouched; they return to the pool when they die, as before."""
    return torch.ops.prefetch._release_output_pool()


def set_output_pool_limit(max_idle_bytes):
    """Bounds the bytes the CPU output pool keeps idle (default 512 MiB; idle buffers beyond the
    new bound are freed at once) and returns the previous bound. ``0`` turns the pool off:
    every output then comes from torch's allocator. An output larger than the bound is never
    pooled."""
    return torch.ops.prefetch._set_output_pool_limit(_whole(max_idle_bytes, "max_idle_bytes"))


# The fake (meta) kernels: shape inference for torch.compile / FakeTensor and the meta device.
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
_DTYPE_NAMES = {torch.uint64: "UInt64", torch.float32: "Float", torch.bool: "Bool"}


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
    """Mirrors ops.cpp's geometry_inputs; returns (n, h, w) of the output."""
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
    torch._check(dtype in _OUT_DTYPES, lambda: "dtype must be float32, float16 or bfloat16")
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


def _check_table_device(x, name, t):
    torch._check(t.device == x.device or t.device.type == "cpu", lambda: (
        "resized_crop: %s is on %s but the values are on %s; each table argument must be on the "
        "values' device or on the CPU" % (name, t.device, x.device)))


@torch.library.register_fake("prefetch::resized_crop")
def _resized_crop_fake(values, offsets, sizes, boxes, size, mean, std, hflip=None, vflip=None,
                       dtype=torch.float32, channels_last=False, antialias=False):
    # Mirrors ops.cpp's plan_resized_crop, except what needs the tables' values (the boxes, the
    # samples' channels and extents): the real kernel checks those when it runs.
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
    torch._check(dtype in _OUT_DTYPES, lambda: (
        "resized_crop: dtype must be torch.float32, torch.float16 or torch.bfloat16, got %s" % dtype))
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


# Decoding lives in its own module; its ops are part of this namespace.
from .decode import decode_jpeg, decode_resized_crop, gpu_jpeg_decoder, jpeg_sizes  # noqa: E402
