"""GPU JPEG decoders behind one small interface, the choice among them, and how their streams are
made safe (used by :func:`prefetch.ops.decode_jpeg` with a CUDA ``device``; :mod:`prefetch.ops.decode`
is the public face).

The interface
-------------
A backend (:class:`GpuJpegBackend`) has a ``name``; :meth:`~GpuJpegBackend.available` says whether
it can be used here (it imports its library; any failure means "no", with the reason kept in
``why``); :meth:`~GpuJpegBackend.refuses` reads what :func:`jpeg_layout` found in an image's headers
and names the layouts it cannot decode, so that those go to the CPU decoder without a failed call;
:meth:`~GpuJpegBackend.decode_batch` decodes a list of encoded images (1-D uint8 CPU tensors) to HWC
uint8 RGB tensors (views are fine) on a CUDA device, raising when any image fails, as nvJPEG's
batched calls do. :func:`decode_on_device` turns that into an answer per image: one batched call, and
only when it raises, one call per image; whatever a backend refuses or fails on is left to the CPU
decoder (prefetch's libjpeg-turbo decoder), image by image, by :mod:`prefetch.ops.decode`.

Backends, in order of preference (:data:`BACKENDS`): ``torchcodec`` (TorchCodec >= 0.16,
``torchcodec.decoders.decode_jpeg(list, mode="RGB", device=...)``), ``torchvision``
(torchvision >= 0.20, ``torchvision.io.decode_jpeg(list, mode=ImageReadMode.RGB, device=...)``;
deprecated since 0.29 in favour of TorchCodec) and ``cpu`` (refuses everything: the CPU decoder
decodes each box and the boxes are copied to the device). :func:`select_gpu_decoder` picks the first
available one, or the one named by its argument or by ``PREFETCH_GPU_JPEG_DECODER``
(``auto``/``torchcodec``/``torchvision``/``cpu``); the choice is cached. :func:`describe` names the
backend for ``python -m prefetch.info`` without importing either library or initialising CUDA.

Streams: what the backends do, and what this module does about it
------------------------------------------------------------------
- torchvision (torchvision/csrc/io/image/cuda/decode_jpegs_cuda.cpp on its main branch; the
  batched decoder since 0.20, pytorch/vision PR 8496): the outputs are allocated with
  ``torch::empty`` while the caller's stream is current, and nvJPEG writes them on a private stream
  from torch's pool that never waits for the caller's stream. Before returning it host-synchronises
  that private stream and makes the caller's stream wait on an event recorded there, so the pixels
  are final when it returns; the danger is before: the caching allocator hands out a block as soon
  as it is freed on the caller's stream, so nvJPEG can overwrite memory that kernels queued on the
  caller's stream have not read yet (pytorch/vision PR 9606, which reproduces it with torchvision
  0.28 on nvJPEG's hardware and software paths alike). That PR was closed without being merged
  and torchvision's decoders are deprecated since 0.29, so no torchvision release is exempt.
- TorchCodec (src/torchcodec/_core/DecodeJpegCuda.cpp on its main branch, the decoder of
  meta-pytorch/torchcodec PR 1547, released in 0.16): decodes on the caller's current stream and
  host-synchronises that stream before returning (so a call made while a training step is queued
  on that stream waits for the step). It applies the EXIF orientation, which prefetch's decoders
  (like Pillow's ``Image.open``) do not: images with an orientation other than 1 are refused here
  and decoded on the CPU. nvJPEG's hardware engine (seen on H100s, not on A100s) writes its outputs
  before earlier work queued on the same stream has run (meta-pytorch/torchcodec PR 1634, merged
  after 0.16.0 was released): the same hazard as torchvision's.

So a backend is called with a private decode stream of prefetch's current (one per device, taken
once from torch's stream pool and never destroyed) on which nothing is pending:
``side.synchronize()`` before the call waits only for earlier decodes. The outputs are then
allocated from that stream's pool, whose blocks are only ever freed by prefetch after the reads
recorded below, so no queued kernel can still be reading them; and TorchCodec's host
synchronisation waits for its own decode only. ``side.synchronize()`` after the call costs nothing
more today (both backends have waited already) and keeps the pixels final even for a backend that
only orders its work on the current stream. The caller's stream then reads the outputs (cutting
the boxes, packing the batch), and ``record_stream(caller)`` keeps their blocks from being handed to
the next decode before those reads have run. ``torch.cuda.synchronize(device)`` would also be
correct, but it waits for every stream of the device, the training step included. The cost: the
decode stream's pool keeps about one batch of whole decoded images cached.
"""
import importlib.metadata
import importlib.util
import inspect
import os
import re
import threading
import warnings
from typing import NamedTuple, Optional

import torch

__all__ = ["GpuJpegBackend", "TorchCodecBackend", "TorchvisionBackend", "CpuBackend", "BACKENDS",
           "ENV_VAR", "select_gpu_decoder", "describe", "decode_on_device", "jpeg_layout",
           "JpegLayout", "fits"]

ENV_VAR = "PREFETCH_GPU_JPEG_DECODER"


# --- what an image's headers say ------------------------------------------------------------------

class JpegLayout(NamedTuple):
    """What :func:`jpeg_layout` read from the markers before the first scan (None: not found)."""
    sof: Optional[int] = None          # the frame marker: 0xC0 baseline, 0xC1 extended, 0xC2 progressive
    precision: Optional[int] = None    # bits per sample
    height: Optional[int] = None
    width: Optional[int] = None
    components: Optional[int] = None
    component_ids: tuple = ()
    jfif: bool = False                 # an APP0 JFIF marker
    adobe_transform: Optional[int] = None  # APP14 Adobe's colour transform
    orientation: Optional[int] = None  # the EXIF orientation (1 = as stored)

    @property
    def rgb_coded(self):
        """Three components stored as R, G, B (not YCbCr), as libjpeg decides it."""
        if self.components != 3 or self.jfif:
            return False
        if self.adobe_transform is not None:
            return self.adobe_transform == 0
        return self.component_ids == (82, 71, 66)  # "R", "G", "B"


_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # DHT, JPG and DAC share the range


def jpeg_layout(buf, start=0, length=None):
    """The :class:`JpegLayout` of the JPEG at ``buf[start:start + length]`` (``buf``: anything whose
    items are byte values, e.g. a memoryview of a numpy array). Reads the segments before the first
    scan, as TorchCodec looks for the EXIF orientation; a stream it cannot follow gives what was
    read so far."""
    end = len(buf) if length is None else min(len(buf), start + length)
    found = {}
    if end - start < 4 or buf[start] != 0xFF or buf[start + 1] != 0xD8:
        return JpegLayout()
    pos = start + 2
    while pos + 4 <= end:
        if buf[pos] != 0xFF:
            break
        marker = buf[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:  # no length
            pos += 2
            continue
        if marker in (0xDA, 0xD9):  # start of scan, end of image: no more headers
            break
        size = (buf[pos + 2] << 8) | buf[pos + 3]
        if size < 2 or pos + 2 + size > end:
            break
        p, n = pos + 4, size - 2
        if marker in _SOF_MARKERS and n >= 6 and "sof" not in found:
            count = buf[p + 5]
            found.update(sof=marker, precision=buf[p], height=(buf[p + 1] << 8) | buf[p + 2],
                         width=(buf[p + 3] << 8) | buf[p + 4], components=count,
                         component_ids=tuple(buf[p + 6 + 3 * i] for i in range(count) if 6 + 3 * i < n))
        elif marker == 0xE0 and n >= 5 and bytes(buf[p:p + 5]) == b"JFIF\0":
            found["jfif"] = True
        elif marker == 0xE1 and n >= 6 and bytes(buf[p:p + 6]) == b"Exif\0\0" and "exif" not in found:
            found["exif"] = True  # the first EXIF segment counts, as in TorchCodec
            found["orientation"] = _exif_orientation(buf, p + 6, n - 6)
        elif marker == 0xEE and n >= 12 and bytes(buf[p:p + 5]) == b"Adobe":
            found["adobe_transform"] = buf[p + 11]
        pos += 2 + size
    found.pop("exif", None)
    return JpegLayout(**found)


def _exif_orientation(buf, p, n):
    """Tag 0x0112 of IFD0 of the TIFF structure at buf[p:p + n], or None."""
    if n < 8:
        return None
    order = bytes(buf[p:p + 2])
    if order not in (b"II", b"MM"):
        return None
    big = order == b"MM"

    def u16(i):
        return (buf[i] << 8 | buf[i + 1]) if big else (buf[i] | buf[i + 1] << 8)

    def u32(i):
        return (u16(i) << 16 | u16(i + 2)) if big else (u16(i) | u16(i + 2) << 16)

    if u16(p + 2) != 42:
        return None
    ifd = u32(p + 4)
    if ifd + 2 > n:
        return None
    for k in range(u16(p + ifd)):
        entry = ifd + 2 + 12 * k
        if entry + 12 > n:
            break
        if u16(p + entry) == 0x0112:
            return u16(p + entry + 8) if u16(p + entry + 2) == 3 else None  # type 3: SHORT
    return None


def fits(image, height, width, device):
    """Whether a backend's output is what the header promised: (H, W, 3) uint8 on ``device``."""
    return (isinstance(image, torch.Tensor) and image.dtype == torch.uint8 and image.device == device
            and tuple(image.shape) == (height, width, 3))


# --- the backends --------------------------------------------------------------------------------

def _version_tuple(text):
    """(major, minor, patch) of a version string such as "0.26.0+cu130"; () when it has none."""
    match = re.match(r"\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?", str(text))
    return tuple(int(g) for g in match.groups() if g is not None) if match else ()


def _installed_version(package):
    """The package's version if it is installed (no import), else None."""
    try:
        if importlib.util.find_spec(package) is None:
            return None
    except (ImportError, ValueError):
        return None
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class GpuJpegBackend:
    """One GPU JPEG decoder. Subclasses set ``name``, ``package`` and ``min_version`` and implement
    :meth:`_load` (import and return what :meth:`decode_batch` calls) and :meth:`decode_batch`."""

    name = "?"
    package = None          # the distribution whose presence and version describe() reports
    min_version = ()        # the first version with what decode_batch calls
    library = "nvJPEG"

    def __init__(self):
        self._lock = threading.Lock()
        self._checked = False
        self._ok = False
        self.why = None     # why it is not available, once available() has said no
        self._api = None

    def available(self):
        """Whether this backend can decode here: its library imports and has the API (any failure
        while importing means no; ``why`` then says what failed). Checked once."""
        with self._lock:
            if not self._checked:
                try:
                    self._api = self._load()
                    self._ok = True
                except Exception as exc:  # noqa: BLE001 - any import failure means "not usable here"
                    self._ok, self.why = False, "%s: %s" % (type(exc).__name__, exc)
                self._checked = True
            return self._ok

    def _load(self):
        raise NotImplementedError

    def _loaded(self):
        if not self.available():
            raise RuntimeError("the GPU JPEG decoder %s cannot be used here: %s" % (self.name, self.why))
        return self._api

    def installed(self):
        """(usable as far as the installed version says, version, why not) without importing."""
        version = _installed_version(self.package)
        if version is None:
            return False, None, "%s is not installed" % self.package
        if version != "unknown" and _version_tuple(version) < self.min_version:
            return False, version, "%s %s is older than %s" % (
                self.package, version, ".".join(map(str, self.min_version)))
        return True, version, None

    def refuses(self, layout):
        """Why this backend cannot decode an image of this :class:`JpegLayout` (sent to the CPU
        decoder without trying), or None. nvJPEG decodes 8-bit Huffman-coded baseline, extended and
        progressive YCbCr or grayscale images; torchvision's tests mark CMYK as failing on CUDA."""
        if layout.sof is None:
            return "no frame header before the scan"
        if layout.sof not in (0xC0, 0xC1, 0xC2):
            return "coding process SOF%d (arithmetic, lossless or hierarchical)" % (layout.sof - 0xC0)
        if layout.precision != 8:
            return "%s-bit samples" % layout.precision
        if layout.components not in (1, 3):
            return ("CMYK or YCCK (4 components)" if layout.components == 4
                    else "%s components" % layout.components)
        if layout.rgb_coded:
            return "colour stored as RGB, not YCbCr"
        return None

    def decode_batch(self, images, device):
        """HWC uint8 RGB tensors on ``device``, one per encoded image (1-D uint8 CPU tensors), in
        order; raises when any image cannot be decoded. Returns once the input bytes are no longer
        read; the outputs are final on return, or ordered on the current stream."""
        raise NotImplementedError

    def __repr__(self):
        return "<GPU JPEG decoder %s>" % self.name


class TorchCodecBackend(GpuJpegBackend):
    name = "torchcodec"
    package = "torchcodec"
    min_version = (0, 16)

    def _load(self):
        from torchcodec.decoders import decode_jpeg  # FFmpeg's libraries load here, or fail

        if "device" not in inspect.signature(decode_jpeg).parameters:
            raise ImportError("torchcodec.decoders.decode_jpeg has no device argument (TorchCodec "
                              "decodes JPEGs on CUDA from 0.16)")
        return decode_jpeg

    def refuses(self, layout):
        why = super().refuses(layout)
        if why is None and layout.orientation not in (None, 1):
            why = ("EXIF orientation %d (TorchCodec applies it; prefetch's decoders, like "
                   "Pillow's Image.open, keep the stored orientation)" % layout.orientation)
        return why

    def decode_batch(self, images, device):
        decode = self._loaded()
        return [im.permute(1, 2, 0) for im in decode(list(images), mode="RGB", device=device)]


class TorchvisionBackend(GpuJpegBackend):
    name = "torchvision"
    package = "torchvision"
    min_version = (0, 20)  # batched CUDA decode_jpeg (pytorch/vision PR 8496)

    def _load(self):
        import torchvision
        from torchvision.io import ImageReadMode, decode_jpeg

        if _version_tuple(torchvision.__version__) < self.min_version:
            raise ImportError("torchvision %s decodes one JPEG per call on CUDA; prefetch needs "
                              "the batched decode_jpeg of torchvision >= 0.20" % torchvision.__version__)
        return decode_jpeg, ImageReadMode.RGB

    def decode_batch(self, images, device):
        decode, rgb = self._loaded()
        return [im.permute(1, 2, 0) for im in decode(list(images), mode=rgb, device=device)]


class CpuBackend(GpuJpegBackend):
    """prefetch's own CPU decoder: every image is decoded (only its box) on the CPU and copied to
    the device. It refuses every image, which leaves each to the CPU decoder."""

    name = "cpu"
    library = "prefetch's libjpeg-turbo decoder, then a copy to the device"

    def _load(self):
        return None

    def installed(self):
        return True, None, None

    def refuses(self, layout):
        return "the CPU decoder was chosen"

    def decode_batch(self, images, device):
        raise RuntimeError("the cpu backend decodes nothing on the GPU")


#: The backends in order of preference (tests replace this list).
BACKENDS = [TorchCodecBackend(), TorchvisionBackend(), CpuBackend()]
_FALLBACK = CpuBackend()

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


def select_gpu_decoder(name=None):
    """The backend that decodes JPEGs for a CUDA device: ``name`` (``"auto"``, ``"torchcodec"``,
    ``"torchvision"`` or ``"cpu"``) or else ``$PREFETCH_GPU_JPEG_DECODER``, else ``"auto"``: the
    first of :data:`BACKENDS` that is available. A named backend that is not available raises
    RuntimeError saying why; an unknown name raises ValueError. One that failed on every image of
    a batch (warned once) is replaced by the CPU decoder. Cached per request."""
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


def clear_cache():
    """Forgets the cached choice and the disabled backends (tests; a changed environment)."""
    with _cache_lock:
        _cache.clear()
        _disabled.clear()


def disable(backend, error, count):
    """A backend that failed on every one of ``count`` >= 2 images that the CPU decoder then
    decoded is broken here (a TorchCodec without nvJPEG, a driver it does not support): stop
    calling it in this process, saying so once."""
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


def describe(name=None):
    """The backend :func:`select_gpu_decoder` would choose, as a line for ``prefetch.info``, e.g.
    ``torchvision 0.26.0 (nvJPEG)`` or ``cpu (torchcodec is not installed; torchvision is not
    installed)``: from what is installed (``importlib.util.find_spec`` and the packages' versions),
    without importing TorchCodec or torchvision and without initialising CUDA. A library that
    failed to import in this process, or a backend disabled after failing, is named as such."""
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
    if backend.name == "cpu":
        return "cpu (%s)" % what
    return "%s %s (%s)" % (backend.name, version, what)


# --- decoding, image by image where needed, on a stream that cannot race -------------------------

class _CudaStreams:
    """The stream operations decode_on_device makes (tests replace it with a recorder)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._side = {}

    def current(self, device):
        return torch.cuda.current_stream(device)

    def side(self, device):
        # One per device for the life of the process, from torch's pool: a stream made per call
        # (or destroyed) strands allocator blocks tied to it.
        with self._lock:
            stream = self._side.get(device.index)
            if stream is None:
                stream = self._side[device.index] = torch.cuda.Stream(device=device)
            return stream

    def use(self, stream):
        return torch.cuda.stream(stream)

    def synchronize(self, stream):
        stream.synchronize()

    def protect(self, tensor, stream):
        tensor.record_stream(stream)


_streams = _CudaStreams()


def decode_on_device(backend, images, device):
    """``backend``'s decode of ``images`` on ``device``, one answer per image: ``(outputs, errors)``
    where ``outputs[i]`` is an HWC uint8 tensor, or None with ``errors[i]`` the exception that the
    backend raised for image ``i`` alone. One batched call; only if it raises, one call per image
    (a batch with one image nvJPEG rejects costs one failed call, not one per image). On a CUDA
    device the calls run as the module docstring says; the outputs may be read on the caller's
    current stream."""
    images = list(images)
    if not images:
        return [], []
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if device.type != "cuda":  # the CPU tests' fake backends
        return _decode_each(backend, images, device)
    caller, side = _streams.current(device), _streams.side(device)
    _streams.synchronize(side)
    try:
        with _streams.use(side):
            outputs, errors = _decode_each(backend, images, device)
    finally:
        _streams.synchronize(side)
    for image in outputs:
        if image is not None:
            _streams.protect(image, caller)
    return outputs, errors


def _decode_each(backend, images, device):
    try:
        return _checked(backend.decode_batch(images, device), len(images), backend), [None] * len(images)
    except Exception:  # noqa: BLE001 - nvJPEG's batched call fails the whole list: try them one by one
        pass
    outputs, errors = [], []
    for image in images:
        try:
            outputs.append(_checked(backend.decode_batch([image], device), 1, backend)[0])
            errors.append(None)
        except Exception as exc:  # noqa: BLE001 - anything it cannot do goes to the CPU decoder
            outputs.append(None)
            errors.append(exc)
    return outputs, errors


def _checked(outputs, count, backend):
    outputs = list(outputs)
    if len(outputs) != count:
        raise RuntimeError("prefetch: the GPU JPEG decoder %s returned %d images for %d"
                           % (backend.name, len(outputs), count))
    return outputs
