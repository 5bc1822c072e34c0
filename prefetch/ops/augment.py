"""The augment ops' former module, kept only while docs/custom_ops.md ("Adding an op to prefetch
itself") names it and ``tests/test_layout.py`` checks that the files it names exist: the wrappers
and their fakes live in their families' modules, :mod:`prefetch.ops.normalize`,
:mod:`prefetch.ops.geometry` and :mod:`prefetch.ops.color`. Import from :mod:`prefetch.ops`; delete
this file when that doc names the family modules."""
from .color import COLOR_STEPS, color_jitter, histograms, lookup, sharpness
from .geometry import affine_warp, flip_crop, resized_crop
from .normalize import normalize_flip

__all__ = ["normalize_flip", "flip_crop", "resized_crop", "affine_warp", "sharpness", "lookup",
           "color_jitter", "COLOR_STEPS", "histograms"]
