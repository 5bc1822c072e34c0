"""The fused augment ops' Python wrappers (``torch.ops.prefetch.normalize_flip``, ``flip_crop``,
``resized_crop``; CPU and CUDA), re-exported by :mod:`prefetch.ops`.

``normalize_flip`` reads each uint8 input byte once and writes each output element once: crop
(with fill outside the image), vertical/horizontal flip per sample, ``(x / 255 - mean) / std``,
cast to float32/float16/bfloat16 and NCHW or channels_last output, in one pass.
``flip_crop`` applies the same geometry to integer masks. ``resized_crop`` crops each image of a
ragged batch (a :class:`prefetch.Ragged` of HWC images of their own sizes) to its box, resizes it
bilinearly to one size (``F.interpolate``'s values, with or without antialias), flips, normalizes
and casts, in one pass. Their fake kernels are in :mod:`prefetch.ops.fakes`.
"""
import torch

from .._engine.checks import whole
from .._engine.extension import _C  # noqa: F401  (loading the extension registers the ops)

__all__ = ["normalize_flip", "flip_crop", "resized_crop"]



def _crop_list(crop):
    if crop is None:
        return None
    if isinstance(crop, (list, tuple)):
        return [whole(c, "crop") for c in crop]
    c = whole(crop, "crop")
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
        offsets, whole(fill, "fill"), dtype, layout, bool(channels_last), indices)


def flip_crop(masks, *, hflip=None, vflip=None, crop=None, offsets=None, fill=0, indices=None):
    """The geometry of :func:`normalize_flip` for integer masks ``[N, H, W]`` (uint8, int16,
    int32 or int64, preserved), so a segmentation mask gets exactly its image's flips and crop;
    ``indices`` gathers as in :func:`normalize_flip`. ``fill`` must be a value of the mask dtype
    (0..255 for uint8, and so on): anything else raises RuntimeError instead of wrapping."""
    return torch.ops.prefetch.flip_crop.default(masks, hflip, vflip, _crop_list(crop), offsets,
                                                whole(fill, "fill"), indices)


def _size_list(size):
    if isinstance(size, (list, tuple)):
        return [whole(s, "size") for s in size]
    s = whole(size, "size")
    return [s, s]


def _ragged(images):
    from ..ragged import Ragged

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
