"""Which GPU JPEG decoder decodes for a CUDA device (used by :func:`prefetch.ops.decode_jpeg` with a
CUDA ``device``; :mod:`prefetch.ops.decode` is the public face): the backends in order of
preference (:data:`BACKENDS`), the choice among them (:func:`select_gpu_decoder`, from its argument
or ``PREFETCH_GPU_JPEG_DECODER``: ``auto``/``torchcodec``/``torchvision``/``cpu``; cached), a
backend disabled after failing on a whole batch (:func:`disable`), and the line ``python -m
prefetch.info`` prints (:func:`describe`, without importing either library or initialising CUDA).

The backends themselves (the interface, TorchCodec's, torchvision's, the CPU decoder's and the
CPU tests' :class:`FakeGpuBackend`, registered with :func:`registered`) are
:mod:`prefetch.ops.gpu_backends`, re-exported here; what an image's headers say,
:mod:`prefetch.ops.jpeg_headers`; how a backend is called on a stream that cannot race the
caller's, :mod:`prefetch.ops.gpu_streams`.
"""
import contextlib
import os
import threading
import warnings
from typing import Iterator

import torch

from .gpu_backends import (CpuBackend, FakeGpuBackend, GpuJpegBackend, TorchCodecBackend,
                           TorchvisionBackend)

__all__ = ["GpuJpegBackend", "TorchCodecBackend", "TorchvisionBackend", "CpuBackend",
           "FakeGpuBackend", "BACKENDS", "ENV_VAR", "select_gpu_decoder", "describe", "registered",
           "may_serve", "clear_cache", "disable"]

ENV_VAR = "PREFETCH_GPU_JPEG_DECODER"


#: The backends in order of preference (tests replace this list).
BACKENDS = [TorchCodecBackend(), TorchvisionBackend(), CpuBackend()]
_FALLBACK = CpuBackend()


def may_serve(device: torch.device | str) -> bool:
    """Whether a GPU decoder may decode for ``device``. Imports nothing: a CPU loader without a
    fake backend registered pays no import to learn it does not need one.

    Args:
        device: a torch device or its name.

    Returns:
        True for a CUDA device, or a device type a registered backend names in its ``devices``
        (:class:`FakeGpuBackend`'s CPU and meta).
    """
    device = torch.device(device)
    return device.type == "cuda" or any(device.type in b.devices and b.name != "cpu" for b in BACKENDS)


@contextlib.contextmanager
def registered(backend: GpuJpegBackend) -> Iterator[GpuJpegBackend]:
    """Makes ``backend`` the first of :data:`BACKENDS` (the one ``auto`` chooses when it is
    available) while the ``with`` block runs, then restores the list; the cached choice is
    cleared on entry and exit. For tests and the bench: ``with registered(FakeGpuBackend()):``.

    Args:
        backend: the backend to put first.

    Returns:
        A context manager whose ``with`` block gets ``backend``.
    """
    global BACKENDS
    before = BACKENDS
    BACKENDS = [backend] + [b for b in before if b is not backend]
    clear_cache()
    try:
        yield backend
    finally:
        BACKENDS = before
        clear_cache()


_cache_lock = threading.Lock()
_cache = {}
_disabled = {}  # backend name -> why, for backends that failed on every image of a batch


def _request(name):
    if name is not None:
        return str(name).strip().lower(), "gpu_decoder=%r" % name
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        return env.lower(), "%s=%s" % (ENV_VAR, env)
    return "auto", None


def select_gpu_decoder(name: str | None = None) -> GpuJpegBackend:
    """The backend that decodes JPEGs for a CUDA device. Cached per request.

    Args:
        name: ``"auto"``, ``"torchcodec"``, ``"torchvision"`` or ``"cpu"`` (any case); None:
            ``$PREFETCH_GPU_JPEG_DECODER``, else ``"auto"``, the first of :data:`BACKENDS` that is
            available.

    Returns:
        The chosen backend; one that failed on every image of a batch (:func:`disable`, warned
        once) is replaced by the CPU decoder.

    Raises:
        ValueError: a name that names no backend.
        RuntimeError: a named backend that cannot be used here, saying why.
    """
    request, source = _request(name)
    backends = tuple(BACKENDS)
    key = (request, backends, tuple(sorted(_disabled)))
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    names = [b.name for b in backends]
    if request == "auto":
        chosen = next((b for b in backends if b.name not in _disabled and b.available()), None)
        chosen = chosen or next((b for b in backends if b.name == "cpu"), _FALLBACK)
    else:
        matches = [b for b in backends if b.name == request]
        if not matches:
            raise ValueError("prefetch: %s names no GPU JPEG decoder; choose one of auto, %s"
                             % (source, ", ".join(names)))
        chosen = matches[0]
        if not chosen.available():
            raise RuntimeError("prefetch: %s, but %s cannot be used here (%s); unset it or choose "
                               "one of auto, %s" % (source, chosen.name, chosen.why, ", ".join(names)))
        if chosen.name in _disabled:
            chosen = next((b for b in backends if b.name == "cpu"), _FALLBACK)
    with _cache_lock:
        _cache[key] = chosen
    return chosen


def clear_cache() -> None:
    """Forgets the cached choice and the disabled backends (tests; a changed environment)."""
    with _cache_lock:
        _cache.clear()
        _disabled.clear()


def disable(backend: GpuJpegBackend, error: BaseException, count: int) -> None:
    """A backend that failed on every one of ``count`` >= 2 images that the CPU decoder then
    decoded is broken here (a TorchCodec without nvJPEG, a driver it does not support): stop
    calling it in this process, saying so once (a RuntimeWarning naming ``error``).

    Args:
        backend: the backend that failed.
        error: the exception it raised on the first image.
        count: how many images it failed on, each alone too.
    """
    with _cache_lock:
        if backend.name in _disabled:
            return
        _disabled[backend.name] = str(error)
        _cache.clear()
    warnings.warn("prefetch: the GPU JPEG decoder %s failed on all %d images of a batch, each alone "
                  "too, which the CPU decoder then decoded (%s: %s); JPEGs for CUDA devices are "
                  "decoded on the CPU from now on in this process (%s chooses another decoder)"
                  % (backend.name, count, type(error).__name__, error, ENV_VAR),
                  RuntimeWarning, stacklevel=3)


def describe(name: str | None = None) -> str:
    """The backend :func:`select_gpu_decoder` would choose, as a line for ``prefetch.info``: from
    what is installed (``importlib.util.find_spec`` and the packages' versions), without importing
    TorchCodec or torchvision and without initialising CUDA.

    Args:
        name: as :func:`select_gpu_decoder`'s.

    Returns:
        e.g. ``torchvision 0.26.0 (nvJPEG)`` or ``cpu (torchcodec is not installed; torchvision
        is not installed)``; a library that failed to import in this process, a backend disabled
        after failing, or an unknown name is named as such (never raises for them).
    """
    request, source = _request(name)
    by_name = {b.name: b for b in BACKENDS}
    if request != "auto":
        backend = by_name.get(request)
        if backend is None:
            return "%s names no GPU JPEG decoder (choose one of auto, %s)" % (source, ", ".join(by_name))
        ok, version, why = _usable(backend)
        note = "chosen by " + source
        return _line(backend, version, note) if ok else "%s cannot be used (%s; %s)" % (
            backend.name, why, note)
    reasons = []
    for backend in BACKENDS:
        ok, version, why = _usable(backend)
        if ok and backend.name == "cpu":
            return "cpu (%s)" % "; ".join(reasons) if reasons else _line(backend, version)
        if ok:
            return _line(backend, version)
        reasons.append(why)
    return "cpu (%s)" % "; ".join(reasons)


def _usable(backend):
    if backend.name in _disabled:
        return False, None, "%s disabled after failing on a whole batch: %s" % (
            backend.name, _disabled[backend.name])
    ok, version, why = backend.installed()
    if ok and backend._checked and not backend._ok:
        return False, version, "%s %s fails to import: %s" % (backend.name, version, backend.why)
    return ok, version, why


def _line(backend, version, note=None):
    what = backend.library + ("; " + note if note else "")
    if backend.name == "cpu" or version is None:
        return "%s (%s)" % (backend.name, what)
    return "%s %s (%s)" % (backend.name, version, what)

