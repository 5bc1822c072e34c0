"""JPEG decoding for batches of encoded images (re-exported by :mod:`prefetch.ops`).

The encoded images of a batch are a :class:`prefetch.Ragged` of 1-D uint8 samples (what a
``prefetch.Samples`` of byte tensors of different lengths becomes in the Prefetcher) or a list of
``bytes`` / 1-D uint8 tensors. On the CPU they are decoded by libjpeg-turbo in C++ on torch's
intra-op threads (``torch.set_num_threads``), with the GIL released; a box per image decodes only
that region (the columns beside it and the rows below it are never decoded, the rows above it are
entropy-decoded only), with the same pixels as a full decode. The result equals Pillow's
``Image.open(f).convert("RGB")``: grayscale images repeat their channel, CMYK and YCCK images are
converted as Pillow converts them, progressive images decode like baseline ones.

With a CUDA ``device``, :func:`decode_jpeg` decodes with the GPU decoder that
:func:`gpu_jpeg_decoder` names (TorchCodec's or torchvision's nvJPEG, else the CPU decoder and a
copy; :mod:`prefetch.ops.gpu_decoders`): the headers are read and the boxes checked on the CPU first,
so every backend raises the same errors; whole images are decoded on the GPU and the boxes cut
there; whatever the GPU decoder refuses (CMYK, EXIF-rotated for TorchCodec, ...) or fails on is
decoded by the CPU decoder (one call for all of them) and copied. The result is ordered on the
caller's current stream like any torch op's. No step of that path runs Python per image while the
GPU decodes every image: each is one call a batch (``decode_with_backend``), and
``tests/ops/test_decode_host_stage.py`` counts them.
"""
import warnings
from typing import Sequence

import numpy as np
import torch

from . import gpu_decoders, gpu_streams, jpeg_headers
from .arguments import bicubic_table, flips, size_list
from .geometry import Flips, resized_crop
from .._core.checks import describe, whole
from .._core.extension import C as _C  # noqa: F401  (loading the extension registers the ops)
from .._core.ragged import Ragged

__all__ = ["decode_jpeg", "jpeg_sizes", "decode_resized_crop", "gpu_jpeg_decoder", "max_image_pixels",
           "set_max_image_pixels", "check_image_pixels", "DecompressionBombWarning"]


def encoded_batch(data):
    """``data`` as a Ragged of 1-D uint8 samples on the CPU (one copy for a list, none for a CPU
    Ragged or a CPU ``[N, L]`` tensor). Every form a collate makes of the files' bytes is taken: a
    Ragged (lengths differ), an ``[N, L]`` uint8 tensor (``collate.samples`` stacks files of one
    length: a batch of one file, duplicates), a list or tuple of ``bytes``, 1-D uint8 tensors or
    1-D uint8 numpy arrays (a ``Samples`` before collation)."""
    if isinstance(data, Ragged):
        if data.dtype != torch.uint8 or data.rank != 1:
            raise TypeError("prefetch: encoded images must be a Ragged of 1-D uint8 samples (the "
                            "bytes of each file), got a Ragged of rank %d and dtype %s"
                            % (data.rank, data.dtype))
        return data if data.device.type == "cpu" else data.to("cpu")
    if isinstance(data, torch.Tensor):
        if data.dtype != torch.uint8 or data.dim() != 2:
            raise TypeError("prefetch: encoded JPEGs as one tensor must be [N, L] uint8 (N files "
                            "of L bytes each, as collate.samples stacks files of one length), got "
                            "%s%s" % (describe(data), "; a 1-D tensor is one file: pass [data]"
                                      if data.dim() == 1 and data.dtype == torch.uint8 else ""))
        n, length = data.shape
        values = data.cpu().contiguous().view(-1)
        return Ragged(values, torch.arange(n, dtype=torch.int64) * length,
                      torch.full((n, 1), length, dtype=torch.int64), shapes=[(length,)] * n,
                      dense=True)
    if not isinstance(data, (list, tuple)):
        raise TypeError("prefetch: encoded images must be a prefetch.Ragged of 1-D uint8 samples, an "
                        "[N, L] uint8 tensor or a list of bytes or 1-D uint8 tensors, got %s"
                        % type(data).__name__)
    parts = []
    for n, item in enumerate(data):
        if isinstance(item, (bytes, bytearray, memoryview)):
            item = torch.frombuffer(bytearray(item), dtype=torch.uint8) if len(item) else \
                torch.empty(0, dtype=torch.uint8)
        elif isinstance(item, np.ndarray):  # a read-only one (np.frombuffer of bytes) is copied
            item = torch.from_numpy(item if item.flags.writeable else item.copy())
        if not isinstance(item, torch.Tensor) or item.dtype != torch.uint8 or item.dim() != 1:
            raise TypeError("prefetch: encoded image %d must be bytes or a 1-D uint8 tensor, got %s"
                            % (n, describe(item)))
        parts.append(item.cpu())
    if not parts:
        return Ragged(torch.empty(0, dtype=torch.uint8), torch.empty(0, dtype=torch.int64),
                      torch.empty(0, 1, dtype=torch.int64), shapes=[], dense=True)
    return Ragged.from_tensors(parts)


def jpeg_sizes(data: Ragged | torch.Tensor | list | tuple) -> torch.Tensor:
    """Each encoded image's size, from its header alone (no pixel is decoded).

    Args:
        data (prefetch.Ragged, Tensor[N, L] or list): the encoded images, in any form
            :func:`encoded_batch` takes.

    Returns:
        Tensor[N, 3]: int64 ``(H, W, 3)`` per image, in pixels: the ``sizes`` of the Ragged
        :func:`decode_jpeg` returns.

    Raises:
        TypeError: ``data`` in no form :func:`encoded_batch` takes.
        RuntimeError: a stream that is not a JPEG, naming the sample.
    """
    r = encoded_batch(data)
    offsets, sizes = r.host_tables()
    return torch.ops.prefetch.jpeg_sizes(r.values, offsets, sizes)


def decode_jpeg(data: Ragged | torch.Tensor | list | tuple,
                boxes: torch.Tensor | Sequence[Sequence[int]] | None = None, *,
                device: torch.device | str = "cpu", gpu_decoder: str | None = None,
                header_sizes: torch.Tensor | None = None) -> Ragged:
    """Decodes every image (or only the region ``boxes[n]`` = (top, left, height, width) of image
    ``n``, inside it) to HWC uint8 RGB. A stream cut below a box decodes that box (its rows are all
    there). Needs an extension built with libjpeg-turbo (``prefetch.built_with_jpeg()``) for the
    CPU. A header that claims more pixels than :func:`max_image_pixels` warns
    (:class:`DecompressionBombWarning`).

    On a CUDA ``device`` the images are decoded by ``gpu_decoder`` (:func:`gpu_jpeg_decoder`), with
    the CPU decoder taking every image the GPU decoder refuses or fails on. nvJPEG's pixels differ
    from libjpeg's by a few levels (its IDCT and chroma upsampling). ``data`` should then be on the
    CPU (a pinned Ragged is read in place, not copied).

    Args:
        data (prefetch.Ragged, Tensor[N, L] or list): the encoded images, in any form
            :func:`encoded_batch` takes.
        boxes (Tensor[N, 4] or nested lists, optional): integer (top, left, height, width) per
            image in pixels, each inside its image; None decodes whole images.
        device: where the images go.
        gpu_decoder (str, optional): for a CUDA device, ``"torchcodec"``, ``"torchvision"`` or
            ``"cpu"``; None: ``$PREFETCH_GPU_JPEG_DECODER``, else the first available.
        header_sizes (Tensor[N, 3], optional): the images' :func:`jpeg_sizes`, when the caller
            has read them already.

    Returns:
        prefetch.Ragged: ``N`` uint8 ``(h, w, 3)`` images of their own sizes, packed without
        padding, on ``device``.

    Raises:
        TypeError, ValueError: ``data`` or ``boxes`` in a form not taken, saying what they are.
        RuntimeError: a stream that is not a JPEG, is truncated before the end of the rows it must
            decode, or has an unsupported layout (naming the sample and libjpeg's reason); a box
            outside its image, or a header over twice :func:`max_image_pixels`, before any pixel
            is decoded.
    """
    device = torch.device(device)
    r = encoded_batch(data)
    backend = gpu_backend_for(device, gpu_decoder) if len(r) else None
    if backend is not None:
        values, offsets, sizes = decode_with_backend(r, boxes, device, backend, header_sizes)
        return Ragged(values, offsets.to(device), sizes.to(device), shapes=sizes.tolist(), dense=True)
    if header_sizes is not None:
        check_image_pixels([h[:2] for h in torch.as_tensor(header_sizes).tolist()], "decode_jpeg")
    elif boxes is not None:
        check_image_pixels(_header_hw(r), "decode_jpeg")
    out = _decode_on_cpu(r, boxes)
    if boxes is None and header_sizes is None:  # the images decoded are the headers' sizes
        check_image_pixels([s[:2] for s in out.shapes()], "decode_jpeg")
    return out if device.type == "cpu" else out.to(device, non_blocking=True)


def max_image_pixels() -> int | None:
    """The decompression-bomb limit (None: none): a header that claims more pixels than this warns
    (a UserWarning), more than twice it is refused with RuntimeError before any memory is reserved
    for the image. Pillow's default and semantics (``PIL.Image.MAX_IMAGE_PIXELS``: 89,478,485).

    Returns:
        int or None: the limit in pixels (H * W) for this process; None when there is none.
    """
    limit = torch.ops.prefetch._max_image_pixels()
    return limit or None


def check_image_pixels(hw, op):
    """The decompression-bomb limit applied to header sizes ``hw`` ([(H, W), ...]): RuntimeError
    above twice :func:`max_image_pixels` (the CPU ops refuse the same in C++), a UserWarning
    above it."""
    limit = torch.ops.prefetch._max_image_pixels()
    if limit <= 0:
        return
    for n, (h, w) in enumerate(hw):
        pixels = int(h) * int(w)
        if pixels > 2 * limit:
            raise RuntimeError(
                "%s: sample %d's header claims %d x %d = %d pixels, more than twice the limit of %d "
                "pixels: refused as a possible decompression bomb, before any memory is reserved "
                "for it (as Pillow refuses it); prefetch.ops.set_max_image_pixels(n) sets the limit "
                "(None: no limit)" % (op, n, h, w, pixels, limit))
        if pixels > limit:
            warnings.warn(
                "%s: sample %d's header claims %d x %d = %d pixels, more than the limit of %d: it "
                "may be a decompression bomb (Pillow warns too); prefetch.ops.set_max_image_pixels(n) "
                "sets the limit (twice it is an error)" % (op, n, h, w, pixels, limit),
                DecompressionBombWarning, stacklevel=3)


class DecompressionBombWarning(UserWarning):
    """A JPEG's header claims more pixels than :func:`max_image_pixels` (but at most twice it)."""


def set_max_image_pixels(limit: int | None) -> int | None:
    """Sets :func:`max_image_pixels` for this process (``None``: no limit) and returns the previous
    limit. Every JPEG op checks it, on the CPU and with a GPU decoder alike.

    Args:
        limit (int or None): the new limit in pixels (H * W), a whole number >= 1; None: no limit.

    Returns:
        int or None: the limit before this call (None: there was none).

    Raises:
        TypeError: ``limit`` not a whole number (a bool, a fraction, a string).
        ValueError: ``limit`` < 1.
    """
    if limit is not None:
        limit = whole(limit, "limit")
        if limit < 1:
            raise ValueError("prefetch: the pixel limit must be >= 1 (None: no limit), got %d" % limit)
    previous = torch.ops.prefetch._set_max_image_pixels(0 if limit is None else limit)
    return previous or None


def gpu_jpeg_decoder(name: str | None = None) -> str:
    """The name of the decoder :func:`decode_jpeg` uses for a CUDA device: ``"torchcodec"``
    (TorchCodec >= 0.16 installed), else ``"torchvision"`` (>= 0.20), else ``"cpu"`` (the CPU
    decoder, then a copy); ``name`` or ``$PREFETCH_GPU_JPEG_DECODER`` (``auto``, ``torchcodec``,
    ``torchvision``, ``cpu``) chooses, and a chosen decoder that cannot be used raises saying why.
    Imports the library to check it; initialises no CUDA.

    Args:
        name (str, optional): ``"auto"``, ``"torchcodec"``, ``"torchvision"`` or ``"cpu"`` (any
            case); None: ``$PREFETCH_GPU_JPEG_DECODER``, else ``"auto"``.

    Returns:
        str: ``"torchcodec"``, ``"torchvision"`` or ``"cpu"``.

    Raises:
        ValueError: a name (argument or environment variable) that names no decoder.
        RuntimeError: a named decoder that cannot be used here, saying why.
    """
    return gpu_decoders.select_gpu_decoder(name).name


def decode_resized_crop(data: Ragged | torch.Tensor | list | tuple,
                        boxes: torch.Tensor | Sequence[Sequence[int]], size: int | Sequence[int],
                        mean: Sequence[float], std: Sequence[float], *, hflip: Flips = None,
                        vflip: Flips = None, dtype: torch.dtype = torch.float32, channels_last: bool = False,
                        antialias: bool = True, interpolation: str | Flips = "bilinear",
                        device: torch.device | str = "cpu", gpu_decoder: str | None = None,
                        header_sizes: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`prefetch.ops.resized_crop` of the decoded images, decoding only each box: the
    output equals ``resized_crop(decode_jpeg(data), boxes, ...)`` without decoding the pixels
    outside the boxes (on a CUDA device the regions come from :func:`decode_jpeg` with
    ``gpu_decoder``: nvJPEG, or the CPU decoder and a copy of the boxes).

    Args:
        data, boxes, device, gpu_decoder: as :func:`decode_jpeg`'s (boxes required).
        size, mean, std, hflip, vflip, dtype, channels_last, antialias, interpolation: as
            :func:`prefetch.ops.resized_crop`'s; ``mean`` and ``std`` 3 values each (RGB).
        header_sizes (Tensor[N, 3], optional): the images' :func:`jpeg_sizes`, when the caller
            has read them already (the pixel limit is checked on them rather than on the headers
            read again).

    Returns:
        Tensor[N, 3, h, w] of ``dtype`` on ``device``.

    Raises:
        TypeError, ValueError, RuntimeError: as :func:`decode_jpeg` and
            :func:`prefetch.ops.resized_crop` raise them.
    """
    boxes = _boxes(boxes, None)
    device = torch.device(device)
    hflip, vflip = flips(hflip, "hflip", "cpu"), flips(vflip, "vflip", "cpu")
    r = encoded_batch(data)
    bicubic = bicubic_table(interpolation, len(r), "decode_resized_crop")
    if device.type == "cpu":
        if not torch.compiler.is_compiling():
            # Reading the headers back on the host would break a compiled graph; inside one, the
            # C++ op's own refusal of more than twice the limit stands (without the warning
            # between the limit and twice it).
            check_image_pixels(_header_hw(r) if header_sizes is None else
                               [s[:2] for s in torch.as_tensor(header_sizes).tolist()],
                               "decode_resized_crop")
        # One pass per sample: each thread decodes a box and resizes it while it is in cache.
        offsets, sizes = r.host_tables()
        return torch.ops.prefetch.decode_resized_crop(
            r.values, offsets, sizes, boxes, size_list(size), [float(m) for m in mean],
            [float(s) for s in std], hflip, vflip, dtype, bool(channels_last), bool(antialias),
            bicubic)
    # On a GPU: the boxes decoded (nvJPEG, or the CPU and then a copy of the boxes only), then
    # resized there; a GPU decoder's windows come with their tables on the host (no Python per
    # image, and the resize reads no table from the device).
    backend = gpu_backend_for(device, gpu_decoder) if len(r) else None
    if backend is not None:
        values, offsets, sizes = decode_with_backend(r, boxes, device, backend, header_sizes)
        regions = Ragged(values, offsets, sizes, check=False)
    else:
        regions = decode_jpeg(r, boxes, device=device, gpu_decoder=gpu_decoder,
                              header_sizes=header_sizes)
    whole_boxes = torch.zeros_like(boxes, dtype=torch.int64, device="cpu")
    whole_boxes[:, 2:] = boxes[:, 2:].cpu()
    return resized_crop(regions, whole_boxes, size, mean, std, hflip=hflip, vflip=vflip, dtype=dtype,
                        channels_last=channels_last, antialias=antialias,
                        interpolation="bilinear" if bicubic is None else bicubic)


def _boxes(boxes, n):
    """Boxes as a tensor; a list that is not [N, 4] integers is refused, saying what it is."""
    if isinstance(boxes, torch.Tensor):
        return boxes
    try:
        t = torch.as_tensor(boxes, dtype=torch.int64)
    except (TypeError, ValueError, RuntimeError) as e:
        raise TypeError("prefetch: boxes must be an integer [N, 4] tensor or nested list of (top, "
                        "left, height, width), got %s (%s)" % (type(boxes).__name__, e)) from None
    if t.numel() == 0 and (n == 0 or n is None):
        return t.reshape(0, 4)
    if t.dim() != 2 or t.shape[1] != 4:
        raise ValueError("prefetch: boxes must have shape [N, 4] (top, left, height, width), got %s"
                         % list(t.shape))
    return t


def _header_hw(r):
    """[(H, W), ...] of a CPU Ragged of encoded images, from their headers."""
    offsets, sizes = r.host_tables()
    return torch.ops.prefetch.jpeg_sizes(r.values, offsets, sizes)[:, :2].tolist()


def _decode_on_cpu(r, boxes):
    offsets, sizes = r.host_tables()
    if boxes is not None:
        boxes = _boxes(boxes, len(r))
    values, offsets, sizes = torch.ops.prefetch.decode_jpeg(r.values, offsets, sizes, boxes)
    return Ragged(values, offsets, sizes, shapes=sizes.tolist(), dense=True)


def gpu_backend_for(device, gpu_decoder=None):
    """The GPU decoder that decodes for ``device`` (a :class:`torch.device`), or None when the CPU
    decoder does: for a CUDA device the one :func:`gpu_jpeg_decoder` chooses (its errors raised),
    unless that is ``cpu``; for another device only a registered backend that serves it
    (:class:`prefetch.ops.gpu_decoders.FakeGpuBackend`), nothing imported otherwise."""
    if not gpu_decoders.may_serve(device):
        return None
    backend = gpu_decoders.select_gpu_decoder(gpu_decoder)
    return backend if backend.serves(device) else None


def _host_tables(r):
    """(offsets, sizes) of a CPU Ragged as CPU tensors, with no Python per sample (``host_tables``
    rebuilds a dense Ragged's from its shapes, sample by sample)."""
    if r.offsets.device.type == "cpu" and r.sizes.device.type == "cpu":
        return r.offsets, r.sizes
    return r.host_tables()


def decode_with_backend(r, boxes, device, backend, header_sizes=None):
    """decode_jpeg on ``device`` with a GPU ``backend``, the CPU decoder taking what it refuses or
    fails on: ``(values, offsets, sizes)``, the windows (the whole images without ``boxes``) as HWC
    uint8 packed from element 0 in order in ``values`` on ``device``, each one's offset (int64
    ``[N]``) and size (int64 ``[N, 3]``) on the CPU.

    One call a batch for every step, none an image, while the GPU decodes every image: the
    encoded bytes' views, the headers (:func:`jpeg_headers.jpeg_layouts`), the screen
    (``backend.refused``), the checks of the pixel limit and of the boxes (tensor operations), the
    backend's batched call, and the windows cut and packed (``_pack_windows``); Python per image
    runs only for an image the GPU does not decode, or to say what went wrong.

    Every error is the CPU decoder's: a header it cannot read or a box outside its image makes the
    CPU decoder run on the whole batch, which raises before decoding any pixel; a stream that fails
    on both decoders makes it run again on the whole batch to name the sample by its index here."""
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    n_images = len(r)
    offsets, lengths = _host_tables(r)
    lengths = lengths.reshape(-1)
    # Views of the (possibly pinned) values: nothing is copied.
    images = torch.ops.prefetch._ragged_views(r.values, offsets, lengths.view(-1, 1))
    table = jpeg_headers.jpeg_layouts(images)
    with_cpu = _with_cpu_decoder()
    if header_sizes is not None:
        hw = torch.as_tensor(header_sizes).to(torch.int64)[:, :2]
    elif with_cpu:
        try:
            hw = torch.ops.prefetch.jpeg_sizes(r.values, offsets, lengths)[:, :2]
        except RuntimeError:
            _decode_on_cpu(r, boxes)  # raises the CPU decoder's own error, naming the sample
            raise
    else:
        hw = table[:, [jpeg_headers.LAYOUT_FIELDS.index("height"), jpeg_headers.LAYOUT_FIELDS.index("width")]]
        unread = (hw <= 0).any(1)
        if bool(unread.any()):
            n = int(unread.nonzero()[0, 0])
            raise RuntimeError("decode_jpeg: sample %d (%d bytes at offset %d) has no JPEG frame "
                               "header that prefetch can read, and prefetch was built without "
                               "libjpeg-turbo, whose decoder would say why (%s)"
                               % (n, int(lengths[n]), int(offsets[n]),
                                  torch.ops.prefetch._jpeg_decoder_library()))
    _check_pixels(hw, "decode_jpeg")  # before anything is decoded, as the CPU decoder
    regions, bad = _regions(boxes, hw, n_images)
    if bad is not None:
        if with_cpu:
            _decode_on_cpu(r, boxes)  # raises its box error
        raise RuntimeError(bad)

    counts = regions[:, 2] * regions[:, 3] * 3
    starts = torch.cumsum(counts, 0) - counts
    sizes = torch.cat([regions[:, 2:], torch.full((n_images, 1), 3, dtype=torch.int64)], 1)
    total = int(counts.sum())
    # One row per image for _pack_windows: where its window goes, its size, its window.
    pack_table = torch.cat([starts[:, None], hw, regions], 1)

    refused = backend.refused(table, lambda n: jpeg_headers.jpeg_layout(memoryview(images[n].numpy())))
    every = not bool(refused.any())
    on_gpu = None if every else (~refused).nonzero().view(-1)
    if not every:
        images = torch.ops.prefetch._ragged_views(r.values, offsets[on_gpu], lengths[on_gpu].view(-1, 1))
    fits = torch.zeros(n_images, dtype=torch.bool)
    misfits = {}  # row -> what the backend returned, only where a message may need it

    def read(outputs, errors):
        values = torch.empty(total, dtype=torch.uint8, device=device)
        if outputs:
            packed = torch.ops.prefetch._pack_windows(
                outputs, pack_table if every else pack_table[on_gpu], backend.layout == "CHW", values)
            if every:
                fits.copy_(packed)
            else:
                fits[on_gpu] = packed
            if not with_cpu and not bool(packed.all()):
                for k in (~packed).nonzero().view(-1).tolist():
                    misfits[k] = None if outputs[k] is None else describe(outputs[k])
        return values

    values, errors = gpu_streams.decode_on_device(backend, images, device, read)
    if bool(fits.all()):
        return values, starts, sizes
    on_cpu = (~fits).nonzero().view(-1)
    if not with_cpu:
        n = int(on_cpu[0])
        raise RuntimeError("decode_jpeg: sample %d (%d bytes at offset %d) cannot be decoded by the "
                           "GPU decoder %s (%s), and prefetch was built without libjpeg-turbo, "
                           "whose CPU decoder would take it (%s)"
                           % (n, int(lengths[n]), int(offsets[n]), backend.name,
                              _why_not(backend, n, refused, on_gpu, errors, misfits, hw, images, device,
                                       r, offsets, lengths),
                              torch.ops.prefetch._jpeg_decoder_library()))
    try:
        # The batch's own values with the tables of these samples: no bytes are copied.
        cpu_values, cpu_offsets, cpu_sizes = torch.ops.prefetch.decode_jpeg(
            r.values, offsets[on_cpu], lengths[on_cpu], regions[on_cpu])
    except RuntimeError:
        _decode_on_cpu(r, boxes)  # names the sample by its index in this batch
        raise
    on_device = cpu_values.to(device, non_blocking=True)  # one copy of all the CPU's windows
    whole = torch.cat([starts[on_cpu, None], cpu_sizes[:, :2], torch.zeros_like(cpu_sizes[:, :2]),
                       cpu_sizes[:, :2]], 1)
    torch.ops.prefetch._pack_windows(torch.ops.prefetch._ragged_views(on_device, cpu_offsets, cpu_sizes),
                                     whole, False, values)
    tried = len(errors)
    if tried >= 2 and errors.count(None) == 0:
        gpu_decoders.disable(backend, errors[0], tried)
    return values, starts, sizes


def _why_not(backend, n, refused, on_gpu, errors, misfits, hw, images, device, r, offsets, lengths):
    """Why image ``n`` did not come from the GPU decoder (for the message of a build without the
    CPU decoder): its refusal, its error, or what the backend returned instead."""
    if bool(refused[n]):
        return backend.refuses(jpeg_headers.jpeg_layout(memoryview(r.values.numpy()), int(offsets[n]),
                                                        int(lengths[n])))
    k = n if on_gpu is None else int((on_gpu == n).nonzero()[0, 0])
    if errors[k] is not None:
        return "%s: %s" % (type(errors[k]).__name__, errors[k])
    shape = "3 x %d x %d" if backend.layout == "CHW" else "%d x %d x 3"
    return "it returned %s where the header says %s uint8 on %s" % (
        misfits.get(k), shape % (int(hw[n, 0]), int(hw[n, 1])), device)


def _check_pixels(hw, op):
    """:func:`check_image_pixels` on an int64 ``[N, 2]`` table of header sizes: a few tensor
    operations, and the per-image messages only when an image is over the limit."""
    limit = torch.ops.prefetch._max_image_pixels()
    if limit <= 0 or hw.shape[0] == 0:
        return
    if bool((hw[:, 0] * hw[:, 1] > limit).any()):  # H, W < 2^16: no overflow
        check_image_pixels(hw.tolist(), op)


def _regions(boxes, hw, n_images):
    """(int64 ``[N, 4]`` (top, left, height, width) per sample, None) when every box lies inside its
    image (``hw``: int64 ``[N, 2]``; the whole image without boxes), else (None, the CPU decoder's
    message for the first that does not). Boxes that are not integer [N, 4] count as outside: the
    CPU decoder says what they are."""
    if boxes is None:
        return torch.cat([torch.zeros_like(hw), hw], 1), None
    boxes = _boxes(boxes, n_images)
    if (boxes.dtype.is_floating_point or boxes.dtype.is_complex or boxes.dtype in (torch.bool, torch.uint64)
            or boxes.dim() != 2 or tuple(boxes.shape) != (n_images, 4)):
        return None, "decode_jpeg: boxes must be an integer tensor [N, 4] = [%d, 4], got %s" % (
            n_images, describe(boxes))
    rows = boxes.to("cpu", torch.int64)
    t, l, h, w = rows.unbind(1)
    H, W = hw.unbind(1)
    # As the CPU decoder's check: never a sum that could overflow (H - h, W - w: h, w >= 1 first).
    inside = (h >= 1) & (w >= 1) & (t >= 0) & (l >= 0)
    inside &= torch.where(inside, (t <= H - h) & (l <= W - w), inside)
    if bool(inside.all()):
        return rows.contiguous(), None
    n = int((~inside).nonzero()[0, 0])
    (t, l, h, w), (H, W) = rows[n].tolist(), hw[n].tolist()
    return None, ("decode_jpeg: boxes[%d] = (top=%d, left=%d, height=%d, width=%d) is not "
                  "inside sample %d's image of H x W = %d x %d; a box needs height, width "
                  ">= 1, 0 <= top <= H - height and 0 <= left <= W - width"
                  % (n, t, l, h, w, n, H, W))


def _with_cpu_decoder():
    from .._core.extension import built_with_jpeg

    return built_with_jpeg()


# --- the fake kernels of the JPEG ops (their shapes; the headers are read when the real ones run) ---

@torch.library.register_fake("prefetch::jpeg_sizes")
def _jpeg_sizes_fake(values, offsets, sizes):
    return offsets.new_empty((offsets.shape[0], 3))


@torch.library.register_fake("prefetch::decode_resized_crop")
def _decode_resized_crop_fake(values, offsets, sizes, boxes, size, mean, std, hflip=None, vflip=None,
                              dtype=torch.float32, channels_last=False, antialias=False,
                              bicubic=None):
    # The shape only: the boxes are checked against the headers when the real kernel runs.
    torch._check(len(mean) == 3, lambda: "decode_resized_crop: the decoded images are RGB: mean "
                 "and std need 3 values, got %d" % len(mean))
    torch._check(len(size) == 2, lambda: "resized_crop: size must be (h, w)")
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    return values.new_empty((offsets.shape[0], 3, size[0], size[1]), dtype=dtype).contiguous(
        memory_format=fmt)
