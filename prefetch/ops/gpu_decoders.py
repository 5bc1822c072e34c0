"""GPU JPEG decoders behind one small interface, the choice among them, and how their streams are
made safe (used by :func:`prefetch.ops.decode_jpeg` with a CUDA ``device``; :mod:`prefetch.ops.decode`
is the public face).

The interface
-------------
A backend (:class:`GpuJpegBackend`) has a ``name``; :meth:`~GpuJpegBackend.available` says whether
it can be used here (it imports its library; any failure means "no", with the reason kept in
``why``); :meth:`~GpuJpegBackend.refused` reads a whole batch's :func:`jpeg_layouts` table (what the
markers before each image's first scan say, read in C++) and marks, with a few tensor operations,
the images it cannot decode, so that those go to the CPU decoder without a failed call
(:meth:`~GpuJpegBackend.refuses` says why for one :class:`JpegLayout`);
:meth:`~GpuJpegBackend.decode_batch` decodes a list of encoded images (1-D uint8 CPU tensors) to
uint8 RGB tensors in the backend's ``layout`` (``"CHW"`` as nvJPEG's backends return them, or
``"HWC"``; views are fine) on a device, raising when any image fails, as nvJPEG's batched calls do.
:func:`decode_on_device` turns that into an answer per image: one batched call, and only when it
raises, one call per image; whatever a backend refuses or fails on is left to the CPU decoder
(prefetch's libjpeg-turbo decoder) by :mod:`prefetch.ops.decode`. No step of a batch that the GPU
decodes runs Python per image: the headers, the screen, the views of the encoded bytes and the
windows' copies into the packed output are one C++ call a batch each
(``csrc/torch/ops/jpeg_host_ops.cpp``).

Backends, in order of preference (:data:`BACKENDS`): ``torchcodec`` (TorchCodec >= 0.16,
``torchcodec.decoders.decode_jpeg(list, mode="RGB", device=...)``), ``torchvision``
(torchvision >= 0.20, ``torchvision.io.decode_jpeg(list, mode=ImageReadMode.RGB, device=...)``;
deprecated since 0.29 in favour of TorchCodec) and ``cpu`` (refuses everything: the CPU decoder
decodes each box and the boxes are copied to the device). :func:`select_gpu_decoder` picks the first
available one, or the one named by its argument or by ``PREFETCH_GPU_JPEG_DECODER``
(``auto``/``torchcodec``/``torchvision``/``cpu``); the choice is cached. :func:`describe` names the
backend for ``python -m prefetch.info`` without importing either library or initialising CUDA.

:class:`FakeGpuBackend` stands in for a GPU decoder where there is none (the CPU tests, the bench's
``decode_host`` section): registered with :func:`registered`, it serves CPU and meta devices too,
takes whole batches and returns whole CHW images as nvJPEG's backends do, so that everything the
GPU path does around the decoder runs, and can be counted, on a CPU.

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
queued below, so no queued kernel can still be reading them; and TorchCodec's host
synchronisation waits for its own decode only. ``side.synchronize()`` after the call costs nothing
more today (both backends have waited already) and keeps the pixels final even for a backend that
only orders its work on the current stream. The outputs are then read on the decode stream itself
(the windows cut and packed into one output, allocated there): the next decode's blocks come from
that stream's pool after those reads, in stream order, with no ``record_stream`` per image. The
caller's stream waits for the decode stream (an event, no host synchronisation), and the one
packed output is protected for the caller's stream (``record_stream``). ``torch.cuda.synchronize``
would also be correct, but it waits for every stream of the device, the training step included.
The cost: the decode stream's pool keeps about one batch of whole decoded images cached.
"""
import contextlib
import importlib.metadata
import importlib.util
import inspect
import os
import re
import threading
import warnings
from typing import NamedTuple, Optional

import torch

from .._core.extension import C as _C  # noqa: F401  (loading the extension registers the ops)

__all__ = ["GpuJpegBackend", "TorchCodecBackend", "TorchvisionBackend", "CpuBackend",
           "FakeGpuBackend", "BACKENDS", "ENV_VAR", "select_gpu_decoder", "describe",
           "decode_on_device", "jpeg_layout", "jpeg_layouts", "LAYOUT_FIELDS", "JpegLayout", "fits",
           "registered", "may_serve"]

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


#: The columns of :func:`jpeg_layouts`' table, in order (``_jpeg_layout_fields`` of the C++ op).
LAYOUT_FIELDS = ("sof", "precision", "height", "width", "components", "jfif", "adobe_transform",
                 "orientation", "rgb_coded", "bytes")
_COL = {name: k for k, name in enumerate(LAYOUT_FIELDS)}


def jpeg_layouts(images):
    """What :func:`jpeg_layout` reads, for every image of a batch in one C++ call (no Python per
    image; csrc/decode/jpeg_layout.cpp reads the markers as :func:`jpeg_layout` does): an int64
    ``[N, len(LAYOUT_FIELDS)]`` CPU table, one row per image of ``images`` (a list of 1-D uint8 CPU
    tensors with stride 1, the bytes of each file), its columns :data:`LAYOUT_FIELDS`: -1 where
    :class:`JpegLayout` has None, 0 or 1 for ``jfif`` and ``rgb_coded``, ``bytes`` the image's
    length. RuntimeError names an image that is not such a tensor."""
    return torch.ops.prefetch._jpeg_layouts(list(images))


def layout_of_row(row):
    """The :class:`JpegLayout` of one row of :func:`jpeg_layouts` (a sequence of ints), for
    :meth:`GpuJpegBackend.refuses`. ``component_ids`` is not in the table: it is ``("R", "G",
    "B")``'s ids when the row says RGB-coded by them, else empty — what ``rgb_coded`` reads."""
    get = {name: (None if row[k] == -1 else int(row[k])) for name, k in _COL.items()}
    jfif, rgb = bool(get["jfif"]), bool(get["rgb_coded"])
    ids = (82, 71, 66) if rgb and get["adobe_transform"] is None else ()
    return JpegLayout(sof=get["sof"], precision=get["precision"], height=get["height"],
                      width=get["width"], components=get["components"], component_ids=ids, jfif=jfif,
                      adobe_transform=get["adobe_transform"], orientation=get["orientation"])


def fits(image, height, width, device, layout="HWC"):
    """Whether a backend's output is what the header promised: (H, W, 3) uint8 on ``device`` — or
    (3, H, W) for ``layout="CHW"`` (``_pack_windows`` checks the same for a whole batch in C++)."""
    shape = (3, height, width) if layout == "CHW" else (height, width, 3)
    return (isinstance(image, torch.Tensor) and image.dtype == torch.uint8 and image.device == device
            and tuple(image.shape) == shape)


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
    layout = "HWC"          # what decode_batch returns: "HWC" or "CHW" images
    devices = ("cuda",)     # the device types it decodes for

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

    def refused(self, table, layout_of=None):
        """bool ``[N]``: the images of a :func:`jpeg_layouts` table this backend refuses, as
        :meth:`refuses` decides for each (True where it would name a reason), computed on the table's
        columns — a few tensor operations for the batch, none per image. A subclass that changes
        :meth:`refuses` and not this (the first class of its MRO defining either defines
        ``refuses`` alone) is asked image by image (``layout_of(n)``: image n's
        :class:`JpegLayout`, default: from its row); one that changes both keeps them in step."""
        if _refuses_is_newer(type(self)):
            rows = table.tolist()
            of = layout_of or (lambda n: layout_of_row(rows[n]))
            return torch.tensor([self.refuses(of(n)) is not None for n in range(len(rows))],
                                dtype=torch.bool)
        return self._screen(table)

    @staticmethod
    def _screen(table):
        """nvJPEG's screen of :meth:`refuses` on a :func:`jpeg_layouts` table: 8-bit baseline,
        extended or progressive Huffman frames of 1 or 3 components not stored as RGB pass."""
        col = lambda name: table[:, _COL[name]]  # noqa: E731
        sof, components = col("sof"), col("components")
        decodable = (((sof == 0xC0) | (sof == 0xC1) | (sof == 0xC2)) & (col("precision") == 8)
                     & ((components == 1) | (components == 3)) & (col("rgb_coded") == 0))
        return ~decodable

    def decode_batch(self, images, device):
        """uint8 RGB tensors on ``device`` in :attr:`layout` (``(H, W, 3)`` or ``(3, H, W)``), one per
        encoded image (1-D uint8 CPU tensors), in order; raises when any image cannot be decoded.
        Returns once the input bytes are no longer read; the outputs are final on return, or
        ordered on the current stream."""
        raise NotImplementedError

    def serves(self, device):
        """Whether :mod:`prefetch.ops.decode` decodes for ``device`` with this backend (the ``cpu``
        backend never: it leaves every image to the CPU decoder)."""
        return self.name != "cpu" and device.type in self.devices

    def __repr__(self):
        return "<GPU JPEG decoder %s>" % self.name


def _refuses_is_newer(cls):
    """Whether ``cls`` (or a base below the one defining ``refused``) changes ``refuses``: the first
    class of its MRO that defines either one defines ``refuses`` alone."""
    for klass in cls.__mro__:
        if "refused" in vars(klass):
            return False
        if "refuses" in vars(klass):
            return True
    return False


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

    layout = "CHW"

    def refuses(self, layout):
        why = super().refuses(layout)
        if why is None and layout.orientation not in (None, 1):
            why = ("EXIF orientation %d (TorchCodec applies it; prefetch's decoders, like "
                   "Pillow's Image.open, keep the stored orientation)" % layout.orientation)
        return why

    def refused(self, table, layout_of=None):
        orientation = table[:, _COL["orientation"]]
        return self._screen(table) | ((orientation != -1) & (orientation != 1))

    def decode_batch(self, images, device):
        decode = self._loaded()
        return decode(list(images), mode="RGB", device=device)  # CHW, cut and packed in C++


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

    layout = "CHW"

    def decode_batch(self, images, device):
        decode, rgb = self._loaded()
        return decode(list(images), mode=rgb, device=device)  # CHW, cut and packed in C++


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

    def refused(self, table, layout_of=None):
        if _refuses_is_newer(type(self)):  # a subclass that decodes (a test's)
            return super().refused(table, layout_of)
        return torch.ones(table.shape[0], dtype=torch.bool)

    def decode_batch(self, images, device):
        raise RuntimeError("the cpu backend decodes nothing on the GPU")


class FakeGpuBackend(GpuJpegBackend):
    """A GPU decoder's stand-in for machines without one (the CPU tests, the bench's
    ``decode_host`` section): registered (:func:`registered`), it is chosen as a GPU decoder is,
    for CUDA devices and also for CPU and meta ones, so that the whole GPU path — the headers'
    screen, the views of the encoded bytes, one batched call, the windows cut and packed, the CPU
    decoder taking what it refuses or fails on — runs on a CPU.

    It screens as nvJPEG does (:meth:`GpuJpegBackend.refuses`) and returns what nvJPEG's backends
    return: for a list of encoded images, whole ``(3, H, W)`` uint8 images on the device (CHW views
    of HWC pixels), raising when any image fails. ``pixels=True``: the pixels of prefetch's CPU
    decoder (libjpeg-turbo), so that results can be compared exactly; ``pixels=False``: no pixel is
    decoded (uninitialised memory of the headers' sizes, on the meta device none at all), which is
    what a GPU decoder's call costs the host without its device work — the bench times the path
    around it so. Every step is one C++ call a batch, none an image. ``calls`` and ``images``
    count the batched calls and the images they were given."""

    name = "fake"
    layout = "CHW"
    devices = ("cuda", "cpu", "meta")
    library = "prefetch's CPU decoder standing in for a GPU decoder"

    def __init__(self, pixels=True):
        super().__init__()
        self.pixels = bool(pixels)
        self.calls = 0
        self.images = 0

    def _load(self):
        return None

    def installed(self):
        return True, None, None

    def decode_batch(self, images, device):
        images = list(images)
        self.calls += 1
        self.images += len(images)
        if not images:
            return []
        table = jpeg_layouts(images)
        lengths = table[:, _COL["bytes"]]
        if self.pixels:
            values = torch.cat(images)
            starts = torch.cumsum(lengths, 0) - lengths
            pixels, offsets, sizes = torch.ops.prefetch.decode_jpeg(values, starts, lengths.view(-1, 1))
            pixels = pixels.to(device)
        else:
            hw = table[:, [_COL["height"], _COL["width"]]]
            if bool((hw <= 0).any()):
                raise RuntimeError("fake GPU decoder: an image has no frame header")
            counts = hw[:, 0] * hw[:, 1] * 3
            offsets = torch.cumsum(counts, 0) - counts
            sizes = torch.cat([hw, torch.full_like(hw[:, :1], 3)], 1)
            pixels = torch.empty(int(counts.sum()), dtype=torch.uint8, device=device)
        return torch.ops.prefetch._ragged_views(pixels, offsets, sizes, True)


#: The backends in order of preference (tests replace this list).
BACKENDS = [TorchCodecBackend(), TorchvisionBackend(), CpuBackend()]
_FALLBACK = CpuBackend()


def may_serve(device):
    """Whether a GPU decoder may decode for ``device``: a CUDA device, or a device type a
    registered backend names in its ``devices`` (:class:`FakeGpuBackend`'s CPU and meta). Imports
    nothing: a CPU loader without a fake backend registered pays no import to learn it does not
    need one."""
    device = torch.device(device)
    return device.type == "cuda" or any(device.type in b.devices and b.name != "cpu" for b in BACKENDS)


@contextlib.contextmanager
def registered(backend):
    """Makes ``backend`` the first of :data:`BACKENDS` (the one ``auto`` chooses when it is
    available) while the ``with`` block runs, then restores the list; the cached choice is
    cleared on entry and exit. For tests and the bench: ``with registered(FakeGpuBackend()):``."""
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
    if backend.name == "cpu" or version is None:
        return "%s (%s)" % (backend.name, what)
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

    def wait(self, stream, other):
        stream.wait_stream(other)


_streams = _CudaStreams()


def decode_on_device(backend, images, device, read):
    """``backend``'s decode of ``images`` on ``device``, read by ``read(outputs, errors)``: ``outputs[i]``
    is the backend's image (in its ``layout``), or None with ``errors[i]`` the exception that the
    backend raised for image ``i`` alone. One batched call; only if it raises, one call per image
    (a batch with one image nvJPEG rejects costs one failed call, not one per image). Returns
    ``(read's result, errors)``.

    On a CUDA device the calls and ``read`` run on the decode stream (the module docstring says
    why): ``read`` cuts what it needs out of the outputs there, into a tensor it allocates there
    and returns; the caller's stream then waits for the decode stream, and that one tensor is
    protected for the caller's stream (the outputs are dropped once ``read`` has queued its reads:
    their blocks go back to the decode stream's pool in stream order). Elsewhere (the CPU tests'
    and the bench's fake backend) it is the same without streams."""
    images = list(images)
    if not images:
        return read([], []), []
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if device.type != "cuda":
        outputs, errors = _decode_each(backend, images, device)
        return read(outputs, errors), errors
    caller, side = _streams.current(device), _streams.side(device)
    _streams.synchronize(side)
    done = False
    try:
        with _streams.use(side):
            outputs, errors = _decode_each(backend, images, device)
            _streams.synchronize(side)  # the pixels are final, whatever the backend ordered where
            result = read(outputs, errors)
            outputs = None
        done = True
    finally:
        if not done:  # leave the decode stream idle for the next call
            _streams.synchronize(side)
    _streams.wait(caller, side)
    if isinstance(result, torch.Tensor):
        _streams.protect(result, caller)
    return result, errors


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
