"""Which instruction-set build the CPU kernels run: ``"avx512"`` (``lookup`` and ``color_jitter``
have one: Intel from Ice Lake, AMD from Zen 4), ``"avx2"`` (AVX2 + FMA + F16C: every kernel has
one) or ``"baseline"`` (x86-64's SSE2, or any other CPU). Each kernel runs the highest build it has
that the CPU supports, up to the limit set here; every build writes the same bytes (the C++ tests
compare them on each CPU that runs them).

The limit starts from the ``PREFETCH_CPU_CAPABILITY`` environment variable when it is set (as
torch's ``ATEN_CPU_CAPABILITY``): to rule a build out when a result looks wrong, or to compare
builds. ``python -m prefetch.info`` reports the build in use.
"""
import os

import torch

from .._core.extension import C as _C  # noqa: F401  (loading the extension registers the ops)

BUILDS = ("avx512", "avx2", "baseline")
ENV_VAR = "PREFETCH_CPU_CAPABILITY"

__all__ = ["cpu_kernel_build", "set_cpu_kernel_build", "BUILDS"]


def cpu_kernel_build() -> str:
    """The highest build the CPU kernels run now (the CPU's best, up to the limit).

    Returns:
        str: ``"avx512"``, ``"avx2"`` or ``"baseline"``.
    """
    return str(torch.ops.prefetch._cpu_kernel_build())


def set_cpu_kernel_build(highest: str) -> str:
    """Limits the CPU kernels to builds up to ``highest`` (one of :data:`BUILDS`; a build the CPU
    lacks falls back to the best it has) and returns the build that ran before, so that
    ``set_cpu_kernel_build(previous)`` restores it.

    Args:
        highest (str): ``"avx512"``, ``"avx2"`` or ``"baseline"`` (lower case).

    Returns:
        str: the build the kernels ran before this call.

    Raises:
        ValueError: ``highest`` not one of :data:`BUILDS`.
    """
    if highest not in BUILDS:
        raise ValueError("prefetch: the CPU kernels' builds are %s, got %r" % (", ".join(BUILDS), highest))
    return str(torch.ops.prefetch._set_cpu_kernel_build(highest))


def _apply_environment():
    value = os.environ.get(ENV_VAR)
    if value is None or value == "":
        return
    if value.lower() not in BUILDS:
        raise ValueError("prefetch: %s=%r: the CPU kernels' builds are %s"
                         % (ENV_VAR, value, ", ".join(BUILDS)))
    set_cpu_kernel_build(value.lower())


_apply_environment()
