"""The colour ops on uint8 ``[N, C, H, W]`` images (CPU and CUDA), each its Python wrapper and its
fake kernel: ``color_jitter`` (each image's own chain of brightness, contrast, saturation and hue:
ColorJitter and the policies' colour ops in one pass; and Pillow's Color, timm's), ``sharpness``
(torchvision's adjust_sharpness, a factor per image), ``lookup`` (a 256-entry table per image or
channel: the policies' other value-wise ops) and ``histograms`` (each channel's 256-bin
histogram: what Equalize's tables are built from).
"""
from typing import Sequence

import torch

from .._core.extension import C as _C  # noqa: F401  (loading the extension registers the ops)
from .arguments import DTYPE_NAMES, check_output_size, check_uint8_images

__all__ = ["color_jitter", "COLOR_STEPS", "sharpness", "lookup", "histograms"]


# --- color_jitter ---------------------------------------------------------------------------------

# color_jitter's step codes, in order (csrc/kernels/color_jitter/color_jitter.h's ColorStep).
COLOR_STEPS = ("identity", "brightness", "contrast", "saturation", "hue", "pillow_color")


def color_jitter(images: torch.Tensor, steps: torch.Tensor | Sequence[Sequence[int | str]],
                 factors: torch.Tensor | Sequence[Sequence[float]]) -> torch.Tensor:
    """Each uint8 image through its own chain of colour steps, in its own order: torchvision v2's
    ``adjust_brightness``, ``adjust_contrast``, ``adjust_saturation`` and ``adjust_hue`` on uint8
    tensors, each step's result truncated to uint8 before the next (as ColorJitter, with its
    random order per image, applies them). ``"pillow_color"`` is Pillow's
    ``ImageEnhance.Color(image).enhance(factor)`` instead (what timm's RandAugment and AugMix Color
    call): each value blended with its pixel's ``convert("L")`` grey, ``(19595 R + 38470 G + 7471 B
    + 0x8000) >> 16`` (Convert.c), as Blend.c computes ``grey + factor (v - grey)``: the factor a C
    float, the product and the sum each rounded to float32, clipped to [0, 255] and truncated;
    a 1-channel image is blended with itself (itself, for a finite factor). Equal to Pillow's
    bytes.

    Saturation and hue leave 1-channel images as they are. One pass over the pixels, plus one
    per Contrast step before it (a contrast blends with its image's mean grey where it stands in
    the chain). Equal to torchvision's values (its float32 arithmetic operation for operation,
    its fused multiply-adds fused, every other product and sum rounded alone), with two rare
    exceptions: above 65,793 pixels an image's grey sum can pass 2^24, where torchvision's float32
    mean may round differently and a Contrast's value next to a whole number may differ by 1; and
    torch computes the last few values of a tensor (its loop's scalar remainder) with the blend's
    multiply-add rounded twice, where this op fuses it as torch's vectorised loop does everywhere
    else, so a value next to a whole number there may differ by 1.
    The CPU and CUDA kernels write the same bytes. Compiles with
    ``torch.compile(fullgraph=True)``.

    Steps and factors given on the host are checked there: by the CPU op itself in C++ for CPU
    images (also through ``torch.ops.prefetch.color_jitter`` and inside ``torch.compile``), by
    this wrapper before the copy for a device's images (not inside ``torch.compile``, whose graph
    cannot branch on values). Given as tensors on a device they are used unread (the producer
    thread must not synchronise), and a code outside :data:`COLOR_STEPS` is then a step that does
    nothing.

    Args:
        images (Tensor[N, C, H, W]): uint8, C 1 or 3, fewer than 2^31 rows.
        steps (Tensor[N, K] or nested sequences): int64 codes (the indices of
            :data:`COLOR_STEPS`; ``"identity"`` does nothing) or, for every image, a sequence of
            step names or codes.
        factors (Tensor[N, K] or nested sequences): float64, each step's factor: brightness,
            contrast and saturation finite and at least 0, hue in [-0.5, 0.5], pillow_color any
            (Pillow's enhance takes any: below 0 and above 1 extrapolate).

    Returns:
        Tensor[N, C, H, W]: uint8, contiguous; a chain of no step (``K = 0``) returns a copy.

    Raises:
        ValueError: a step name not in :data:`COLOR_STEPS`, or host steps or factors out of
            range (naming the image and step).
        RuntimeError: a wrong dtype, shape or device of an argument, each named.
    """
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
    wrong &= (steps != 0) & (steps != COLOR_STEPS.index("pillow_color"))  # any factor there
    if bool(wrong.any()):
        i, k = wrong.nonzero()[0].tolist()
        raise ValueError("prefetch: color_jitter's %s factor of image %d (step %d) is %r; "
                         "brightness, contrast and saturation factors must be finite and at least "
                         "0, hue factors in [-0.5, 0.5]"
                         % (COLOR_STEPS[int(steps[i, k])], i, k, float(factors[i, k])))


@torch.library.register_fake("prefetch::color_jitter")
def _color_jitter_fake(images, steps, factors):
    n, c, h, w = check_uint8_images("color_jitter", images, steps, "steps")
    check_uint8_images("color_jitter", images, factors, "factors")
    torch._check(c in (1, 3), lambda: (
        "color_jitter: images must have 1 or 3 channels, got C = %s" % c))
    torch._check(steps.dtype == torch.int64 and steps.dim() == 2 and steps.shape[0] == n, lambda: (
        "color_jitter: steps must be int64 [N, K] = [%s, K] (each image's chain), got %s of shape "
        "%s" % (n, DTYPE_NAMES.get(steps.dtype, steps.dtype), list(steps.shape))))
    k = steps.shape[1]
    torch._check(factors.dtype == torch.float64 and factors.dim() == 2 and factors.shape[0] == n
                 and factors.shape[1] == k, lambda: (
        "color_jitter: factors must be float64 [N, K] = [%s, %s] (one per step), got %s of shape "
        "%s" % (n, k, DTYPE_NAMES.get(factors.dtype, factors.dtype), list(factors.shape))))
    torch._check(h < 2**31 - 1, lambda: (
        "color_jitter: images must be below 2^31 rows, got H = %s" % h))
    check_output_size("color_jitter", (n, c, h, w), torch.uint8)
    return images.new_empty((n, c, h, w))


# --- sharpness ------------------------------------------------------------------------------------

def sharpness(images: torch.Tensor, factors: float | Sequence[float] | torch.Tensor, *,
              pillow: bool = False) -> torch.Tensor:
    """torchvision's ``adjust_sharpness`` with each image its own factor: the image blended with
    its 3x3 smoothing (1s around a 5, over 13, rounded to whole values) as
    ``v + (smooth - v) * (1 - factor)`` in float32 with one rounding (torchvision's fused
    multiply-add), clamped and truncated to uint8; the one-pixel border kept, images of 2 pixels
    or fewer a side unchanged. Equal to torchvision's output; the CPU and CUDA kernels write the
    same bytes.

    With ``pillow=True``, Pillow's ``ImageEnhance.Sharpness(img).enhance(factor)`` instead (what
    timm's RandAugment runs on PIL images): ``ImageFilter.SMOOTH`` in float32 as Pillow's
    ``Filter.c`` computes it (each weight a float32 quotient by 13; per row ``(a w + b w_c) + c w``;
    the rows added onto 0.5, the row below first), clipped and truncated (which is torchvision's
    whole-value smoothing for every input: the kernel computes that), then ``Blend.c``'s
    ``smooth + factor * (v - smooth)`` in float32 (the factor a C float; the product and the sum
    rounded each), clipped and truncated, over every value (the border's smoothing is itself, so
    the border is kept for any finite factor). Equal to Pillow's output byte for byte.

    Args:
        images (Tensor[N, C, H, W]): uint8, C * H below 2^31.
        factors (float, sequence of N floats, or Tensor[N]): a number for every image, or one per
            image (a float64 tensor on the images' device, or a sequence).
        pillow (bool): Pillow's arithmetic instead of torchvision's.

    Returns:
        Tensor[N, C, H, W]: uint8, contiguous.

    Raises:
        RuntimeError: a wrong dtype, shape or device of an argument, each named.
    """
    if not isinstance(factors, torch.Tensor) or factors.dim() == 0:
        n = images.shape[0] if isinstance(images, torch.Tensor) and images.dim() > 0 else 0
        t = torch.as_tensor(factors, dtype=torch.float64)
        factors = (t.expand(n) if t.dim() == 0 else t).to(
            images.device if isinstance(images, torch.Tensor) else "cpu")
    return torch.ops.prefetch.sharpness.default(images, factors, bool(pillow))


@torch.library.register_fake("prefetch::sharpness")
def _sharpness_fake(images, factors, pillow=False):
    n, c, h, w = check_uint8_images("sharpness", images, factors, "factors")
    torch._check(factors.dtype == torch.float64 and factors.dim() == 1 and factors.shape[0] == n,
                 lambda: "sharpness: factors must be float64 [N] = [%s] (one per image), got %s of "
                 "shape %s" % (n, DTYPE_NAMES.get(factors.dtype, factors.dtype),
                               list(factors.shape)))
    torch._check(c * h < 2**31 - 1, lambda: (
        "sharpness: an image's C * H must be below 2^31, got C = %s, H = %s" % (c, h)))
    check_output_size("sharpness", (n, c, h, w), torch.uint8)
    return images.new_empty((n, c, h, w))


# --- lookup ---------------------------------------------------------------------------------------

def lookup(images: torch.Tensor, tables: torch.Tensor) -> torch.Tensor:
    """Each value replaced by its image's table entry:
    ``out[n, c, y, x] = tables[n, c or 0, images[n, c, y, x]]``. One read and one write per
    value: every photometric op that maps a value alone (brightness, contrast against a known
    mean, posterize, solarize, autocontrast, equalize) is one table per image.

    Args:
        images (Tensor[N, C, H, W]): uint8, C * H below 2^31.
        tables (Tensor[N, 1, 256] or Tensor[N, C, 256]): uint8, one table per image or one per
            image and channel, on the images' device.

    Returns:
        Tensor[N, C, H, W]: uint8, contiguous.

    Raises:
        RuntimeError: a wrong dtype, shape or device of an argument, each named.
    """
    return torch.ops.prefetch.lookup.default(images, tables)


@torch.library.register_fake("prefetch::lookup")
def _lookup_fake(images, tables):
    n, c, h, w = check_uint8_images("lookup", images, tables, "tables")
    torch._check(tables.dtype == torch.uint8 and tables.dim() == 3 and tables.shape[0] == n
                 and tables.shape[1] in (1, c) and tables.shape[2] == 256, lambda: (
        "lookup: tables must be uint8 [N, 1 or C, 256] = [%s, 1 or %s, 256] (one table per "
        "image, or per image and channel), got %s of shape %s"
        % (n, c, DTYPE_NAMES.get(tables.dtype, tables.dtype), list(tables.shape))))
    torch._check(c * h < 2**31 - 1, lambda: (
        "lookup: an image's C * H must be below 2^31, got C = %s, H = %s" % (c, h)))
    check_output_size("lookup", (n, c, h, w), torch.uint8)
    return images.new_empty((n, c, h, w))


# --- histograms -----------------------------------------------------------------------------------

def histograms(images: torch.Tensor) -> torch.Tensor:
    """The 256-bin histogram of each channel, counted in C++ threads with one read per value (on
    CUDA in shared memory, a block per rows of a plane).

    Args:
        images (Tensor[N, C, H, W]): uint8, any strides, each image's ``H * W`` below 2^31.

    Returns:
        Tensor[N, C, 256]: int32, ``out[n, c, v]`` the number of values ``v`` in channel ``c`` of
        image ``n``.

    Raises:
        RuntimeError: images that are not uint8 ``[N, C, H, W]``, or too large for int32 counts.
    """
    return torch.ops.prefetch.histograms.default(images)


@torch.library.register_fake("prefetch::histograms")
def _histograms_fake(images):
    torch._check(images.dtype == torch.uint8 and images.dim() == 4, lambda: (
        "histograms: images must be uint8 [N, C, H, W], got %s of shape %s"
        % (DTYPE_NAMES.get(images.dtype, images.dtype), list(images.shape))))
    n, c, h, w = images.shape
    torch._check(h * w < 2**31 - 1, lambda: (
        "histograms: an image's H * W must be below 2^31 (int32 counts), got H = %s, W = %s" % (h, w)))
    return images.new_empty((n, c, 256), dtype=torch.int32)
