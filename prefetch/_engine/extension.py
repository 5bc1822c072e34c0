"""Loads the compiled extension, or says exactly how to build it. Never falls back silently."""
import torch  # noqa: F401  (loads libtorch before the extension that links against it)

try:
    from .. import _C  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised by a subprocess test
    raise ImportError(
        "prefetch's C++ extension (prefetch._C) is not built or cannot be loaded: %s\n"
        "Build it in the source checkout, against the torch you have installed:\n"
        "    pip install --no-build-isolation -e .\n"
        "(install torch first; PREFETCH_FORCE_CPU=1 builds without CUDA)." % exc
    ) from exc
