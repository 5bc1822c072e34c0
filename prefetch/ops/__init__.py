"""prefetch's ops, registered as ``torch.ops.prefetch.*`` (CPU and CUDA), and their Python faces.

- augment (:mod:`prefetch.ops.augment`): ``normalize_flip`` (crop with fill, per-sample flips,
  ``(x / 255 - mean) / std``, cast and layout, in one pass), ``flip_crop`` (the same geometry for
  integer masks), ``resized_crop`` (each image of a ragged batch cropped to its box and resized
  bilinearly, flipped, normalized, cast), ``affine_warp`` (each uint8 image through its own
  affine map, nearest or bilinear, with a fill: the policies' geometric ops), ``sharpness``
  (torchvision's adjust_sharpness, a factor per image), ``lookup`` (a 256-entry table per image
  or channel: the policies' other value-wise ops), ``color_jitter`` (each image's own chain of
  brightness, contrast, saturation and hue: ColorJitter in one pass), ``histograms`` (each
  channel's 256-bin histogram: what Equalize's tables are built from);
- decode (:mod:`prefetch.ops.decode`): ``decode_jpeg``, ``jpeg_sizes``, ``decode_resized_crop``
  (only the boxes' regions decoded), ``gpu_jpeg_decoder`` (what decodes for a CUDA device,
  :mod:`prefetch.ops.gpu_decoders`);
- the CPU output pool (:mod:`prefetch.ops.output_pool`): CPU outputs of 1 MiB or more come from a
  small process-wide pool of pre-faulted buffers; ``output_pool_stats``, ``release_output_pool``
  and ``set_output_pool_limit`` show, empty and bound it (docs/custom_ops.md);
- the CPU kernels' instruction-set build (:mod:`prefetch.ops.cpu_builds`): ``cpu_kernel_build``
  and ``set_cpu_kernel_build`` (AVX-512, AVX2 or baseline; ``PREFETCH_CPU_CAPABILITY``).

Every op's fake (meta) kernel is in :mod:`prefetch.ops.fakes`. A new op: docs/custom_ops.md.
"""
from . import fakes  # noqa: F401  (registers the fake kernels)
from .augment import (COLOR_STEPS, affine_warp, color_jitter, flip_crop, histograms, lookup,
                      normalize_flip, resized_crop, sharpness)
from .decode import (DecompressionBombWarning, decode_jpeg, decode_resized_crop, gpu_jpeg_decoder,
                     jpeg_sizes, max_image_pixels, set_max_image_pixels)
from .cpu_builds import cpu_kernel_build, set_cpu_kernel_build
from .output_pool import output_pool_stats, release_output_pool, set_output_pool_limit

__all__ = ["normalize_flip", "flip_crop", "resized_crop", "affine_warp", "sharpness", "lookup",
           "color_jitter", "COLOR_STEPS", "histograms",
           "decode_jpeg", "jpeg_sizes",
           "decode_resized_crop", "gpu_jpeg_decoder", "max_image_pixels", "set_max_image_pixels",
           "DecompressionBombWarning",
           "output_pool_stats", "release_output_pool",
           "set_output_pool_limit", "cpu_kernel_build", "set_cpu_kernel_build"]
