"""Loads the compiled extension, or says exactly how to build it. Never falls back silently.

``C`` is the extension module (``prefetch._C``): the one name every other layer reaches it by,
so that nothing outside this package imports a private name.
"""
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

#: The compiled extension module ``prefetch._C`` (its ops are registered once it is loaded).
C = _C

__all__ = ["C", "built_with_cuda", "built_with_jpeg"]


def built_with_cuda() -> bool:
    """Whether the extension was compiled with its CUDA backend (re-exported as
    ``prefetch.built_with_cuda``).

    Returns:
        bool: True when the CUDA kernels and the CUDA engine backend were built.
    """
    return bool(_C.built_with_cuda())


def built_with_jpeg() -> bool:
    """Whether the extension was compiled with libjpeg-turbo, so that
    :func:`prefetch.ops.decode_jpeg` and ``FusedAugment(decode=True)`` decode on the CPU
    (re-exported as ``prefetch.built_with_jpeg``).

    Returns:
        bool: True when the CPU JPEG decoder was built.
    """
    return bool(torch.ops.prefetch._jpeg_decoder_built())
