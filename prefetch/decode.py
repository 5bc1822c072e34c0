"""JPEG decoding for batches of encoded images (re-exported by :mod:`prefetch.ops`).

The encoded images of a batch are a :class:`prefetch.Ragged` of 1-D uint8 samples (what a
``prefetch.Samples`` of byte tensors of different lengths becomes in the Prefetcher) or a list of
``bytes`` / 1-D uint8 tensors. On the CPU they are decoded by libjpeg-turbo in C++ on torch's
intra-op threads (``torch.set_num_threads``), with the GIL released; a box per image decodes only
that region (the columns beside it and the rows below it are never decoded, the rows above it are
entropy-decoded only), with the same pixels as a full decode. The result equals Pillow's
``Image.open(f).convert("RGB")``: grayscale images repeat their channel, CMYK and YCCK images are
converted as Pillow converts them, progressive images decode like baseline ones.

With a CUDA ``device`` and torchvision installed, :func:`decode_jpeg` decodes with nvJPEG
(``torchvision.io.decode_jpeg(..., device="cuda")``); the regions are then cut from the decoded
images.
"""
import torch

from ._extension import _C  # noqa: F401  (loading the extension registers the ops)
from .ragged import Ragged

__all__ = ["decode_jpeg", "jpeg_sizes", "decode_resized_crop"]


def encoded_batch(data):
    """``data`` as a Ragged of 1-D uint8 samples on the CPU (one copy for a list, none for a CPU
    Ragged)."""
    if isinstance(data, Ragged):
        if data.dtype != torch.uint8 or data.rank != 1:
            raise TypeError("prefetch: encoded images must be a Ragged of 1-D uint8 samples (the "
                            "bytes of each file), got a Ragged of rank %d and dtype %s"
                            % (data.rank, data.dtype))
        return data if data.device.type == "cpu" else data.to("cpu")
    if not isinstance(data, (list, tuple)):
        raise TypeError("prefetch: encoded images must be a prefetch.Ragged of 1-D uint8 samples or "
                        "a list of bytes or 1-D uint8 tensors, got %s" % type(data).__name__)
    parts = []
    for n, item in enumerate(data):
        if isinstance(item, (bytes, bytearray, memoryview)):
            item = torch.frombuffer(bytearray(item), dtype=torch.uint8) if len(item) else \
                torch.empty(0, dtype=torch.uint8)
        elif not isinstance(item, torch.Tensor) or item.dtype != torch.uint8 or item.dim() != 1:
            raise TypeError("prefetch: encoded image %d must be bytes or a 1-D uint8 tensor, got %s"
                            % (n, _describe(item)))
        parts.append(item.cpu())
    if not parts:
        return Ragged(torch.empty(0, dtype=torch.uint8), torch.empty(0, dtype=torch.int64),
                      torch.empty(0, 1, dtype=torch.int64), shapes=[], dense=True)
    return Ragged.from_tensors(parts)


def jpeg_sizes(data):
    """int64 ``[N, 3]``: ``(H, W, 3)`` of each encoded image, from its header alone (no pixel is
    decoded): the ``sizes`` of the Ragged :func:`decode_jpeg` returns. A stream that is not a JPEG
    raises RuntimeError naming the sample."""
    r = encoded_batch(data)
    offsets, sizes = r.host_tables()
    return torch.ops.prefetch.jpeg_sizes(r.values, offsets, sizes)


def decode_jpeg(data, boxes=None, *, device="cpu"):
    """Decodes every image (or only the region ``boxes[n]`` = (top, left, height, width) of image
    ``n``, inside it) to HWC uint8 RGB: a :class:`prefetch.Ragged` of ``N`` images of their own
    sizes, packed without padding, on ``device``.

    A stream that is not a JPEG, is truncated before the end of the rows it must decode, or has
    an unsupported layout raises RuntimeError naming the sample and libjpeg's reason (a stream cut
    below a box decodes that box: its rows are all there); a box outside its image raises before
    any pixel is decoded. Needs an extension built with libjpeg-turbo (``prefetch.built_with_jpeg()``) for
    the CPU, or torchvision for a CUDA ``device``.
    """
    device = torch.device(device)
    if device.type == "cuda" and _torchvision_decoder() is not None:
        return _decode_on_gpu(data, boxes, device)
    r = encoded_batch(data)
    offsets, sizes = r.host_tables()
    if boxes is not None:
        boxes = _boxes(boxes, len(r))
    values, offsets, sizes = torch.ops.prefetch.decode_jpeg(r.values, offsets, sizes, boxes)
    out = Ragged(values, offsets, sizes, shapes=sizes.tolist(), dense=True)
    return out if device.type == "cpu" else out.to(device, non_blocking=True)


def decode_resized_crop(data, boxes, size, mean, std, *, hflip=None, vflip=None,
                        dtype=torch.float32, channels_last=False, antialias=False, device="cpu"):
    """:func:`prefetch.ops.resized_crop` of the decoded images, decoding only each box: the
    output equals ``resized_crop(decode_jpeg(data), boxes, ...)`` without decoding the pixels
    outside the boxes. ``[N, 3, h, w]`` of ``dtype`` on ``device`` (the regions are decoded on
    the CPU and cross to a CUDA device as uint8, or nvJPEG decodes them there)."""
    from .ops import _size_list, resized_crop

    boxes = _boxes(boxes, None)
    device = torch.device(device)
    if device.type == "cpu":
        # One pass per sample: each thread decodes a box and resizes it while it is in cache.
        r = encoded_batch(data)
        offsets, sizes = r.host_tables()
        return torch.ops.prefetch.decode_resized_crop(
            r.values, offsets, sizes, boxes, _size_list(size), [float(m) for m in mean],
            [float(s) for s in std], hflip, vflip, dtype, bool(channels_last), bool(antialias))
    # On a GPU: the boxes decoded (nvJPEG, or the CPU and then a copy of the boxes only), then
    # resized there.
    regions = decode_jpeg(data, boxes, device=device)
    whole = torch.zeros_like(boxes, dtype=torch.int64, device="cpu")
    whole[:, 2:] = boxes[:, 2:].cpu()
    return resized_crop(regions, whole, size, mean, std, hflip=hflip, vflip=vflip, dtype=dtype,
                        channels_last=channels_last, antialias=antialias)


@torch.library.register_fake("prefetch::jpeg_sizes")
def _jpeg_sizes_fake(values, offsets, sizes):
    return offsets.new_empty((offsets.shape[0], 3))


@torch.library.register_fake("prefetch::decode_resized_crop")
def _decode_resized_crop_fake(values, offsets, sizes, boxes, size, mean, std, hflip=None, vflip=None,
                              dtype=torch.float32, channels_last=False, antialias=False):
    # The shape only: the boxes are checked against the headers when the real kernel runs.
    torch._check(len(mean) == 3, lambda: "decode_resized_crop: the decoded images are RGB: mean "
                 "and std need 3 values, got %d" % len(mean))
    torch._check(len(size) == 2, lambda: "resized_crop: size must be (h, w)")
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    return values.new_empty((offsets.shape[0], 3, size[0], size[1]), dtype=dtype).contiguous(
        memory_format=fmt)


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


def _torchvision_decoder():
    try:
        from torchvision.io import decode_jpeg as tv_decode_jpeg
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return None
    return tv_decode_jpeg


def _decode_on_gpu(data, boxes, device):
    """nvJPEG through torchvision (whole images; the boxes are cut afterwards, on the device)."""
    from torchvision.io import ImageReadMode

    r = encoded_batch(data)
    images = _torchvision_decoder()(r.tensors(), mode=ImageReadMode.RGB, device=device)
    images = [im.permute(1, 2, 0) for im in images]  # CHW -> HWC views
    if boxes is not None:
        sizes = [tuple(im.shape[:2]) for im in images]
        for n, (t, l, h, w) in enumerate(torch.as_tensor(boxes).reshape(-1, 4).tolist()):
            H, W = sizes[n]
            if not (h >= 1 and w >= 1 and 0 <= t <= H - h and 0 <= l <= W - w):
                raise RuntimeError("decode_jpeg: boxes[%d] = (top=%d, left=%d, height=%d, width=%d) "
                                   "is not inside sample %d's image of H x W = %d x %d"
                                   % (n, t, l, h, w, n, H, W))
            images[n] = images[n][t:t + h, l:l + w]
    return Ragged.from_tensors([im.contiguous() for im in images])


def _describe(x):
    if isinstance(x, torch.Tensor):
        return "a %s tensor of shape %s" % (str(x.dtype).replace("torch.", ""), list(x.shape))
    return type(x).__name__
