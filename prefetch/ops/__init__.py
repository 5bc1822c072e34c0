"""prefetch's ops, registered as ``torch.ops.prefetch.*`` (CPU and CUDA), and their Python faces.

One module per op family holds each op's Python wrapper and its fake (meta) kernel, registered
when the module is imported (importing :mod:`prefetch.ops` imports every family, so each fake is
registered once, whichever module a caller names):

- normalize (:mod:`prefetch.ops.normalize`): ``normalize_flip`` (crop with fill, per-sample flips,
  ``(x / 255 - mean) / std``, cast and layout, in one pass);
- geometry (:mod:`prefetch.ops.geometry`): ``flip_crop`` (the same geometry for integer masks),
  ``resized_crop`` (each image of a ragged batch cropped to its box and resized bilinearly,
  flipped, normalized, cast), ``affine_warp`` (each uint8 image through its own affine map,
  nearest or bilinear, with a fill: the policies' geometric ops);
- Pillow's geometry (:mod:`prefetch.ops.pil_geometry`): ``pil_affine`` (each uint8 image through
  its own affine map as ``PIL.Image.transform`` computes it, bilinear or bicubic: timm's
  RandAugment's geometric ops);
- color (:mod:`prefetch.ops.color`): ``color_jitter`` (each image's own chain of brightness,
  contrast, saturation and hue: ColorJitter in one pass; and Pillow's Color, timm's), ``sharpness`` (torchvision's
  adjust_sharpness, a factor per image), ``lookup`` (a 256-entry table per image or channel: the
  policies' other value-wise ops), ``histograms`` (each channel's 256-bin histogram: what
  Equalize's tables are built from);
- filters (:mod:`prefetch.ops.filters`): ``gaussian_blur`` (torchvision's gaussian_blur, a sigma
  per image: separable, reflect padding);
- decode (:mod:`prefetch.ops.decode`): ``decode_jpeg``, ``jpeg_sizes``, ``decode_resized_crop``
  (only the boxes' regions decoded), ``gpu_jpeg_decoder`` (what decodes for a CUDA device,
  :mod:`prefetch.ops.gpu_decoders`).

What several families share (argument conversions, the checks of csrc/torch/ops/plan_common.cpp
and geometry_inputs.cpp) is :mod:`prefetch.ops.arguments`. Besides the ops:

- the CPU output pool (:mod:`prefetch.ops.output_pool`): CPU outputs of 1 MiB or more come from a
  small process-wide pool of pre-faulted buffers; ``output_pool_stats``, ``release_output_pool``
  and ``set_output_pool_limit`` show, empty and bound it (docs/custom_ops.md);
- the CPU kernels' instruction-set build (:mod:`prefetch.ops.cpu_builds`): ``cpu_kernel_build``
  and ``set_cpu_kernel_build`` (AVX-512, AVX2 or baseline; ``PREFETCH_CPU_CAPABILITY``).

A new op: its family's module (or a new one, imported here), its tests, and its names in the
imports and ``__all__`` below (docs/custom_ops.md).
"""
from .color import COLOR_STEPS, color_jitter, histograms, lookup, sharpness
from .filters import gaussian_blur
from .geometry import affine_warp, flip_crop, resized_crop
from .normalize import normalize_flip
from .pil_geometry import pil_affine
from .decode import (DecompressionBombWarning, decode_jpeg, decode_resized_crop, gpu_jpeg_decoder,
                     jpeg_sizes, max_image_pixels, set_max_image_pixels)
from .cpu_builds import cpu_kernel_build, set_cpu_kernel_build
from .output_pool import output_pool_stats, release_output_pool, set_output_pool_limit

__all__ = ["normalize_flip", "flip_crop", "resized_crop", "affine_warp", "pil_affine", "sharpness", "lookup",
           "color_jitter", "gaussian_blur", "COLOR_STEPS", "histograms",
           "decode_jpeg", "jpeg_sizes",
           "decode_resized_crop", "gpu_jpeg_decoder", "max_image_pixels", "set_max_image_pixels",
           "DecompressionBombWarning",
           "output_pool_stats", "release_output_pool",
           "set_output_pool_limit", "cpu_kernel_build", "set_cpu_kernel_build"]
