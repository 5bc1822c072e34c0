"""What a JPEG's headers say, read without decoding: the markers before the first scan of one image
(:func:`jpeg_layout`, in Python) or of a whole batch in one C++ call (:func:`jpeg_layouts`, over
csrc/decode/jpeg_layout.cpp), so that a GPU decoder's screen (:mod:`prefetch.ops.gpu_backends`)
sends what it cannot decode to the CPU decoder without a failed call.
"""
from typing import NamedTuple, Optional, Sequence

import torch

from .._core.extension import C as _C  # noqa: F401  (loading the extension registers the ops)

__all__ = ["JpegLayout", "jpeg_layout", "jpeg_layouts", "layout_of_row", "LAYOUT_FIELDS", "COLUMNS"]


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


def jpeg_layout(buf: Sequence[int], start: int = 0, length: Optional[int] = None) -> JpegLayout:
    """What the segments before the first scan of one JPEG say, read as TorchCodec looks for the
    EXIF orientation.

    Args:
        buf: anything whose items are byte values (e.g. a memoryview of a numpy array).
        start: the offset of the JPEG in ``buf``, in bytes.
        length: its length in bytes; None: to the end of ``buf``.

    Returns:
        The :class:`JpegLayout` of ``buf[start:start + length]``: a stream it cannot follow (not a
        JPEG, cut short) gives what was read so far, never an error.
    """
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
COLUMNS = {name: k for k, name in enumerate(LAYOUT_FIELDS)}


def jpeg_layouts(images: Sequence[torch.Tensor]) -> torch.Tensor:
    """What :func:`jpeg_layout` reads, for every image of a batch in one C++ call (no Python per
    image; csrc/decode/jpeg_layout.cpp reads the markers as :func:`jpeg_layout` does).

    Args:
        images (list of Tensor[L_i]): the bytes of each file, 1-D uint8 CPU tensors with stride 1.

    Returns:
        Tensor[N, len(LAYOUT_FIELDS)]: int64 on the CPU, one row per image, its columns
        :data:`LAYOUT_FIELDS`: -1 where :class:`JpegLayout` has None, 0 or 1 for ``jfif`` and
        ``rgb_coded``, ``bytes`` the image's length in bytes.

    Raises:
        RuntimeError: an image that is not such a tensor, named.
    """
    return torch.ops.prefetch._jpeg_layouts(list(images))


def layout_of_row(row: Sequence[int]) -> JpegLayout:
    """One row of :func:`jpeg_layouts` as a :class:`JpegLayout`, for
    :meth:`prefetch.ops.gpu_backends.GpuJpegBackend.refuses`.

    Args:
        row: the row's ints, in the order of :data:`LAYOUT_FIELDS`.

    Returns:
        Its :class:`JpegLayout`. ``component_ids`` is not in the table: it is ``("R", "G", "B")``'s
        ids when the row says RGB-coded by them, else empty — what ``rgb_coded`` reads.
    """
    get = {name: (None if row[k] == -1 else int(row[k])) for name, k in COLUMNS.items()}
    jfif, rgb = bool(get["jfif"]), bool(get["rgb_coded"])
    ids = (82, 71, 66) if rgb and get["adobe_transform"] is None else ()
    return JpegLayout(sof=get["sof"], precision=get["precision"], height=get["height"],
                      width=get["width"], components=get["components"], component_ids=ids, jfif=jfif,
                      adobe_transform=get["adobe_transform"], orientation=get["orientation"])

