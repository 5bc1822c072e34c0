"""The fused augment ops' Python wrappers (``torch.ops.prefetch.normalize_flip``, ``flip_crop``,
``resized_crop``, ``affine_warp``, ``sharpness``, ``lookup``, ``color_jitter``, ``histograms``; CPU and
CUDA), re-exported by
:mod:`prefetch.ops`.

``normalize_flip`` reads each uint8 input byte once and writes each output element once: crop
(with fill outside the image), vertical/horizontal flip per sample, ``(x / 255 - mean) / std``,
cast to float32/float16/bfloat16 (or rounded to uint8) and NCHW or channels_last output, in one pass.
``flip_crop`` applies the same geometry to integer masks. ``resized_crop`` crops each image of a
ragged batch (a :class:`prefetch.Ragged` of HWC images of their own sizes) to its box, resizes it
bilinearly to one size (``F.interpolate``'s values, with or without antialias), flips, normalizes
and casts, in one pass. ``affine_warp`` resamples each uint8 image through its own affine map
(the augmentation policies' rotate, shear and translate); ``sharpness`` blends each with its 3x3
smoothing by its own factor (their Sharpness); ``lookup`` replaces each value by its image's
table entry (the policy ops that map a value alone); ``color_jitter`` runs each image's own chain
of brightness, contrast, saturation and hue steps (ColorJitter, the policies' colour ops) in one
pass over its pixels; ``histograms`` counts each channel's values (Equalize's histograms). Their
fake kernels are in
:mod:`prefetch.ops.fakes`.
"""
import torch

from .._core.checks import whole
from .._core.extension import C as _C  # noqa: F401  (loading the extension registers the ops)

__all__ = ["normalize_flip", "flip_crop", "resized_crop", "affine_warp", "sharpness", "lookup",
           "color_jitter", "COLOR_STEPS", "histograms"]



def _crop_list(crop):
    if crop is None:
        return None
    if isinstance(crop, (list, tuple)):
        return [whole(c, "crop") for c in crop]
    c = whole(crop, "crop")
    return [c, c]


def _flips(flip, name, device):
    """A flip argument as the ops take it: a bool tensor, made from a list, tuple or ndarray of
    booleans (on ``device``); a tensor, or None, as it is (the op checks it)."""
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


def normalize_flip(images, mean, std, *, hflip=None, vflip=None, crop=None, offsets=None, fill=0,
                   dtype=torch.float32, layout="NHWC", channels_last=False, indices=None):
    """uint8 images -> normalized, flipped, cropped ``[N, C, h, w]`` tensor of ``dtype``.

    Args:
        images: uint8 ``[N, H, W, C]`` (``layout="NHWC"``) or ``[N, C, H, W]`` (``"NCHW"``).
        mean, std: per-channel values in torchvision's convention (fractions of 1); finite,
            std > 0.
        hflip, vflip: bool ``[N]`` tensors on the images' device (or lists of booleans), or None.
        crop: output ``(h, w)`` (an int means square); None keeps the input size.
        offsets: integer ``[N, 2]`` (top, left) of each window in input coordinates, may lie
            partly or wholly outside the image (any int64; uint64 is refused); None centres the
            window where torchvision's ``CenterCrop`` does: at ``int(round((H - h) / 2))`` (half
            to even), or ``(h - H) // 2`` fill rows before the image when ``h > H`` (likewise
            across).
        fill: uint8 value of pixels outside the image, a whole number in [0, 255] (a
            fractional one raises TypeError rather than being truncated; crop likewise).
        dtype: float32, float16, bfloat16, or uint8: the normalized values rounded half to
            even and saturated to [0, 255] (``mean=0, std=1/255`` gives the pixel values).
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
    device = images.device if isinstance(images, torch.Tensor) else None
    hflip, vflip = _flips(hflip, "hflip", device), _flips(vflip, "vflip", device)
    return torch.ops.prefetch.normalize_flip.default(
        images, [float(m) for m in mean], [float(s) for s in std], hflip, vflip, _crop_list(crop),
        offsets, whole(fill, "fill"), dtype, layout, bool(channels_last), indices)


def flip_crop(masks, *, hflip=None, vflip=None, crop=None, offsets=None, fill=0, indices=None):
    """The geometry of :func:`normalize_flip` for integer masks ``[N, H, W]`` (uint8, int16,
    int32 or int64, preserved), so a segmentation mask gets exactly its image's flips and crop;
    ``indices`` gathers as in :func:`normalize_flip`. ``fill`` must be a value of the mask dtype
    (0..255 for uint8, and so on): anything else raises RuntimeError instead of wrapping."""
    device = masks.device if isinstance(masks, torch.Tensor) else None
    hflip, vflip = _flips(hflip, "hflip", device), _flips(vflip, "vflip", device)
    return torch.ops.prefetch.flip_crop.default(masks, hflip, vflip, _crop_list(crop), offsets,
                                                whole(fill, "fill"), indices)


def _size_list(size):
    if isinstance(size, (list, tuple)):
        return [whole(s, "size") for s in size]
    s = whole(size, "size")
    return [s, s]


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


def resized_crop(images, boxes, size, mean, std, *, hflip=None, vflip=None, dtype=torch.float32,
                 channels_last=False, antialias=True):
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
        dtype: float32, float16, bfloat16, or uint8: the normalized values rounded half to
            even and saturated to [0, 255] (``mean=0, std=1/255`` gives the pixel values).
        channels_last: return a channels_last tensor instead of a contiguous one.
        antialias: as ``F.interpolate(..., mode="bilinear", align_corners=False,
            antialias=antialias)`` on the float crop: a downscale averages every input pixel it
            covers (True, the default, as torchvision's v2 transforms and FusedAugment) instead
            of sampling four (False).

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
        [float(s) for s in std], _flips(hflip, "hflip", "cpu"), _flips(vflip, "vflip", "cpu"), dtype,
        bool(channels_last), bool(antialias))


def affine_warp(images, matrices, *, interpolation="nearest", fill=None):
    """Each uint8 image ``[N, C, H, W]`` resampled through its own affine map: output pixel
    ``(x, y)`` (pixel centres at whole numbers) reads the source point
    ``(m0 x + m1 y + m2, m3 x + m4 y + m5)`` of its row of ``matrices`` (float32 ``[N, 6]`` on
    the images' device), as ``grid_sample`` samples (``align_corners=False``, nearest ties to
    even, zeros outside), with torchvision's fill (a number or one per channel in [0, 255]:
    nearest takes it where the source pixel is outside the image, bilinear blends it in by the
    weight of the outside taps), rounded half to even back to uint8. The arithmetic is float32 with
    every product and sum rounded on its own, so the CPU and CUDA kernels write the same bytes.
    ``interpolation``: ``"nearest"`` or ``"bilinear"``. Returns a contiguous uint8 tensor."""
    if interpolation not in ("nearest", "bilinear"):
        raise ValueError("prefetch: interpolation must be 'nearest' or 'bilinear', got %r"
                         % (interpolation,))
    if fill is not None:
        fill = [float(v) for v in fill] if isinstance(fill, (list, tuple)) else [float(fill)]
    return torch.ops.prefetch.affine_warp.default(images, matrices, interpolation == "bilinear",
                                                  fill)


def sharpness(images, factors):
    """torchvision's ``adjust_sharpness`` with each uint8 image ``[N, C, H, W]`` its own factor:
    the image blended with its 3x3 smoothing (1s around a 5, over 13, rounded to whole values) as
    ``v + (smooth - v) * (1 - factor)`` in float32 with one rounding (torchvision's fused
    multiply-add), clamped and truncated to uint8; the one-pixel border kept, images of 2 pixels
    or fewer a side unchanged. ``factors``: a number, or one per image (a float64 tensor on the
    images' device, or a sequence). Equal to torchvision's output; the CPU and CUDA kernels write
    the same bytes. Returns a contiguous uint8 tensor."""
    if not isinstance(factors, torch.Tensor) or factors.dim() == 0:
        n = images.shape[0] if isinstance(images, torch.Tensor) and images.dim() > 0 else 0
        t = torch.as_tensor(factors, dtype=torch.float64)
        factors = (t.expand(n) if t.dim() == 0 else t).to(
            images.device if isinstance(images, torch.Tensor) else "cpu")
    return torch.ops.prefetch.sharpness.default(images, factors)


def lookup(images, tables):
    """Each value of uint8 images ``[N, C, H, W]`` replaced by its image's table entry:
    ``out[n, c, y, x] = tables[n, c or 0, images[n, c, y, x]]``, with ``tables`` uint8
    ``[N, 1, 256]`` (one table per image) or ``[N, C, 256]`` (one per channel) on the images'
    device. One read and one write per value: every photometric op that maps a value alone
    (brightness, contrast against a known mean, posterize, solarize, autocontrast, equalize) is
    one table per image. Returns a contiguous uint8 tensor."""
    return torch.ops.prefetch.lookup.default(images, tables)


def histograms(images):
    """The 256-bin histogram of each channel of uint8 images ``[N, C, H, W]`` (any strides):
    int32 ``[N, C, 256]``, ``out[n, c, v]`` the number of values ``v`` in channel ``c`` of image
    ``n`` (an image's ``H * W`` must be below 2^31). One read per value, counted in C++ threads
    (on CUDA in shared memory, a block per rows of a plane); torch's ``scatter_add_`` over an
    int64 copy of the values cost ~25x more on the CPU."""
    return torch.ops.prefetch.histograms.default(images)


# color_jitter's step codes, in order (csrc/kernels/color_jitter/color_jitter.h's ColorStep).
COLOR_STEPS = ("identity", "brightness", "contrast", "saturation", "hue")


def color_jitter(images, steps, factors):
    """Each uint8 image ``[N, C, H, W]`` (C 1 or 3) through its own chain of colour steps, in its
    own order: torchvision v2's ``adjust_brightness``, ``adjust_contrast``, ``adjust_saturation``
    and ``adjust_hue`` on uint8 tensors, each step's result truncated to uint8 before the next (as
    ColorJitter, with its random order per image, applies them). ``steps``: int64 ``[N, K]``
    codes (the indices of :data:`COLOR_STEPS`; ``"identity"`` does nothing) or, for every image,
    a sequence of step names; ``factors``: float64 ``[N, K]`` (or nested sequences), each step's
    factor — brightness, contrast and saturation at least 0, hue in [-0.5, 0.5]. Saturation and
    hue leave 1-channel images as they are. One pass over the pixels, plus one per Contrast step
    before it (a contrast blends with its image's mean grey where it stands in the chain).

    Equal to torchvision's values (its float32 arithmetic operation for operation, its fused
    multiply-adds fused, every other product and sum rounded alone), with one rare exception:
    above 65,793 pixels an image's grey sum can pass 2^24, where torchvision's float32 mean may
    round differently and a Contrast's value next to a whole number may differ by 1. The CPU and
    CUDA kernels write the same bytes. Steps and factors given on the host are checked there
    (ValueError naming the image and step): by the CPU op itself in C++ for CPU images (also
    through ``torch.ops.prefetch.color_jitter`` and inside ``torch.compile``), by this wrapper
    before the copy for a device's images (not inside ``torch.compile``, whose graph cannot
    branch on values). Given as tensors on a device they are used unread (the producer thread
    must not synchronise), and a code outside :data:`COLOR_STEPS` is then a step that does
    nothing. A chain of no step (``K = 0``) returns a copy of the images. Compiles with
    ``torch.compile(fullgraph=True)``. Returns a contiguous uint8 tensor."""
    device = images.device if isinstance(images, torch.Tensor) else torch.device("cpu")
    n = images.shape[0] if isinstance(images, torch.Tensor) and images.dim() > 0 else 0
    if not isinstance(steps, torch.Tensor):
        steps = _table([[_color_code(s) for s in chain] for chain in steps], torch.int64)
    if not isinstance(factors, torch.Tensor):
        factors = _table(factors, torch.float64)
    host = steps.device.type == "cpu" and factors.device.type == "cpu"
    if host and device.type not in ("cpu", "meta"):
        # Host steps for a device's images: checked here, before they leave the host (the CPU op
        # checks its own host steps in C++, so CPU images need no check here). Not inside
        # torch.compile, whose graph must not branch on tensor values: there such steps are used
        # as device steps are, unread.
        if not torch.compiler.is_compiling():
            _check_color_steps(steps, factors, n)
        steps = steps.to(device, non_blocking=True)
        factors = factors.to(device, non_blocking=True)
    return torch.ops.prefetch.color_jitter.default(images, steps, factors)


def _table(rows, dtype):
    """Nested sequences ``[N][K]`` as a ``[N, K]`` tensor (``K`` 0 and ``N`` 0 included)."""
    rows = [list(r) for r in rows]
    return torch.tensor(rows, dtype=dtype).reshape(len(rows), len(rows[0]) if rows else 0)


def _color_code(step):
    if isinstance(step, str):
        if step not in COLOR_STEPS:
            raise ValueError("prefetch: color_jitter's steps are %s, got %r" % (COLOR_STEPS, step))
        return COLOR_STEPS.index(step)
    return int(step)


def _check_color_steps(steps, factors, n):
    """The host-side checks of color_jitter's steps and factors (shapes are the op's)."""
    if steps.dtype != torch.int64 or factors.dtype != torch.float64 or steps.shape != factors.shape \
            or steps.dim() != 2 or steps.shape[0] != n:
        return  # the op names what is wrong with their dtypes or shapes
    bad = (steps < 0) | (steps >= len(COLOR_STEPS))
    if bool(bad.any()):
        i, k = bad.nonzero()[0].tolist()
        raise ValueError("prefetch: color_jitter's step codes are 0 to %d (%s); image %d, step %d "
                         "is %d" % (len(COLOR_STEPS) - 1, ", ".join(COLOR_STEPS), i, k,
                                    int(steps[i, k])))
    hue = steps == COLOR_STEPS.index("hue")
    wrong = ~torch.isfinite(factors) | (~hue & (factors < 0)) | (hue & (factors.abs() > 0.5))
    wrong &= steps != 0
    if bool(wrong.any()):
        i, k = wrong.nonzero()[0].tolist()
        raise ValueError("prefetch: color_jitter's %s factor of image %d (step %d) is %r; "
                         "brightness, contrast and saturation factors must be finite and at least "
                         "0, hue factors in [-0.5, 0.5]"
                         % (COLOR_STEPS[int(steps[i, k])], i, k, float(factors[i, k])))
