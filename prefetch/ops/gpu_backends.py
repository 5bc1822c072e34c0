"""The GPU JPEG decoders behind one small interface (used through :mod:`prefetch.ops.gpu_decoders`,
which chooses among them, and :mod:`prefetch.ops.gpu_streams`, which calls them safely).

A backend (:class:`GpuJpegBackend`) has a ``name``; :meth:`~GpuJpegBackend.available` says whether
it can be used here (it imports its library; any failure means "no", with the reason kept in
``why``); :meth:`~GpuJpegBackend.refused` reads a whole batch's
:func:`~prefetch.ops.jpeg_headers.jpeg_layouts` table (what the markers before each image's first
scan say, read in C++) and marks, with a few tensor operations, the images it cannot decode, so
that those go to the CPU decoder without a failed call (:meth:`~GpuJpegBackend.refuses` says why
for one :class:`~prefetch.ops.jpeg_headers.JpegLayout`); :meth:`~GpuJpegBackend.decode_batch`
decodes a list of encoded images (1-D uint8 CPU tensors) to uint8 RGB tensors in the backend's
``layout`` (``"CHW"`` as nvJPEG's backends return them, or ``"HWC"``; views are fine) on a device,
raising when any image fails, as nvJPEG's batched calls do.
:func:`prefetch.ops.gpu_streams.decode_on_device` turns that into an answer per image: one batched
call, and only when it raises, one call per image; whatever a backend refuses or fails on is left
to the CPU decoder (prefetch's libjpeg-turbo decoder) by :mod:`prefetch.ops.decode`. No step of a
batch that the GPU decodes runs Python per image: the headers, the screen, the views of the
encoded bytes and the windows' copies into the packed output are one C++ call a batch each
(``csrc/torch/ops/jpeg_host_ops.cpp``).

Backends, in order of preference (:data:`prefetch.ops.gpu_decoders.BACKENDS`): ``torchcodec``
(TorchCodec >= 0.16, ``torchcodec.decoders.decode_jpeg(list, mode="RGB", device=...)``),
``torchvision`` (torchvision >= 0.20, ``torchvision.io.decode_jpeg(list, mode=ImageReadMode.RGB,
device=...)``; deprecated since 0.29 in favour of TorchCodec) and ``cpu`` (refuses everything: the
CPU decoder decodes each box and the boxes are copied to the device).

:class:`FakeGpuBackend` stands in for a GPU decoder where there is none (the CPU tests, the bench's
``decode_host`` section): registered with :func:`prefetch.ops.gpu_decoders.registered`, it serves
CPU and meta devices too, takes whole batches and returns whole CHW images as nvJPEG's backends
do, so that everything the GPU path does around the decoder runs, and can be counted, on a CPU.
"""
import importlib.metadata
import importlib.util
import inspect
import re
import threading
from typing import Callable, Sequence

import torch

from .._core.extension import C as _C  # noqa: F401  (loading the extension registers the ops)
from .jpeg_headers import COLUMNS, JpegLayout, jpeg_layouts, layout_of_row

__all__ = ["GpuJpegBackend", "TorchCodecBackend", "TorchvisionBackend", "CpuBackend",
           "FakeGpuBackend", "fits"]


def fits(image: object, height: int, width: int, device: torch.device, layout: str = "HWC") -> bool:
    """Whether a backend's output is what the header promised (``_pack_windows`` checks the same
    for a whole batch in C++).

    Args:
        image: one image a backend returned (anything: a wrong type is a misfit).
        height, width: the header's size in pixels.
        device: the device it must be on.
        layout: ``"HWC"`` or ``"CHW"``, the backend's layout.

    Returns:
        True for a uint8 tensor of shape (H, W, 3), or (3, H, W) for ``"CHW"``, on ``device``.
    """
    shape = (3, height, width) if layout == "CHW" else (height, width, 3)
    return (isinstance(image, torch.Tensor) and image.dtype == torch.uint8 and image.device == device
            and tuple(image.shape) == shape)



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

    def available(self) -> bool:
        """Whether this backend can decode here: its library imports and has the API. Checked
        once; thread-safe.

        Returns:
            True, or False for any failure while importing (``why`` then says what failed; the
            exception is not raised).
        """
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

    def installed(self) -> tuple[bool, str | None, str | None]:
        """What the installed distribution says, without importing it.

        Returns:
            ``(usable as far as the installed version says, the version or None, why not or
            None)``; the version is ``"unknown"`` for a package found without metadata.
        """
        version = _installed_version(self.package)
        if version is None:
            return False, None, "%s is not installed" % self.package
        if version != "unknown" and _version_tuple(version) < self.min_version:
            return False, version, "%s %s is older than %s" % (
                self.package, version, ".".join(map(str, self.min_version)))
        return True, version, None

    def refuses(self, layout: JpegLayout) -> str | None:
        """Why this backend cannot decode an image (sent to the CPU decoder without trying). nvJPEG
        decodes 8-bit Huffman-coded baseline, extended and progressive YCbCr or grayscale images;
        torchvision's tests mark CMYK as failing on CUDA.

        Args:
            layout: the image's :class:`~prefetch.ops.jpeg_headers.JpegLayout`.

        Returns:
            The reason, or None when it decodes the image.
        """
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

    def refused(self, table: torch.Tensor,
                layout_of: Callable[[int], JpegLayout] | None = None) -> torch.Tensor:
        """The images of a batch this backend refuses, as :meth:`refuses` decides for each,
        computed on the table's columns: a few tensor operations for the batch, none per image. A
        subclass that changes :meth:`refuses` and not this (the first class of its MRO defining
        either defines ``refuses`` alone) is asked image by image; one that changes both keeps
        them in step.

        Args:
            table (Tensor[N, len(LAYOUT_FIELDS)]): int64, the batch's
                :func:`~prefetch.ops.jpeg_headers.jpeg_layouts`.
            layout_of: image n's :class:`~prefetch.ops.jpeg_headers.JpegLayout`, for a subclass
                asked image by image; None: from its row of ``table``.

        Returns:
            Tensor[N]: bool, True where :meth:`refuses` would name a reason.
        """
        if _refuses_is_newer(type(self)):
            rows = table.tolist()
            of = layout_of or (lambda n: layout_of_row(rows[n]))
            return torch.tensor([self.refuses(of(n)) is not None for n in range(len(rows))],
                                dtype=torch.bool)
        return self._screen(table)

    @staticmethod
    def _screen(table):
        """nvJPEG's screen of :meth:`refuses` on a ``jpeg_layouts`` table: 8-bit baseline,
        extended or progressive Huffman frames of 1 or 3 components not stored as RGB pass."""
        col = lambda name: table[:, COLUMNS[name]]  # noqa: E731
        sof, components = col("sof"), col("components")
        decodable = (((sof == 0xC0) | (sof == 0xC1) | (sof == 0xC2)) & (col("precision") == 8)
                     & ((components == 1) | (components == 3)) & (col("rgb_coded") == 0))
        return ~decodable

    def decode_batch(self, images: Sequence[torch.Tensor], device: torch.device) -> list:
        """Decodes a batch, as nvJPEG's batched calls do: all or nothing.

        Args:
            images (list of Tensor[L_i]): the encoded images, 1-D uint8 CPU tensors.
            device: where to decode.

        Returns:
            One uint8 RGB tensor per image, in order, on ``device`` in :attr:`layout`
            (``(H, W, 3)`` or ``(3, H, W)``), once the input bytes are no longer read; final on
            return, or ordered on the current stream.

        Raises:
            Exception: whatever the library raises when any image cannot be decoded;
                RuntimeError when the backend cannot be used here.
        """
        raise NotImplementedError

    def serves(self, device: torch.device) -> bool:
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
        orientation = table[:, COLUMNS["orientation"]]
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
        lengths = table[:, COLUMNS["bytes"]]
        if self.pixels:
            values = torch.cat(images)
            starts = torch.cumsum(lengths, 0) - lengths
            pixels, offsets, sizes = torch.ops.prefetch.decode_jpeg(values, starts, lengths.view(-1, 1))
            pixels = pixels.to(device)
        else:
            hw = table[:, [COLUMNS["height"], COLUMNS["width"]]]
            if bool((hw <= 0).any()):
                raise RuntimeError("fake GPU decoder: an image has no frame header")
            counts = hw[:, 0] * hw[:, 1] * 3
            offsets = torch.cumsum(counts, 0) - counts
            sizes = torch.cat([hw, torch.full_like(hw[:, :1], 3)], 1)
            pixels = torch.empty(int(counts.sum()), dtype=torch.uint8, device=device)
        return torch.ops.prefetch._ragged_views(pixels, offsets, sizes, True)

