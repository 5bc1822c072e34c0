"""FusedAugment's resizing path: ``random_resized_crop=`` (training) and ``resize=`` /
``center_crop`` of a resized window (validation), for images of their own sizes (a
:class:`prefetch.Ragged`) or of one size (an NHWC uint8 batch).

Each image's window is drawn (or centred) in its own pixels (prefetch/crop_boxes.py), then
:func:`prefetch.ops.resized_crop` crops, resamples, flips, normalizes and casts every image in one
pass. A mask gets the same windows and flips with nearest-neighbour resampling (per sample,
in torch: masks are small and integer).
"""
import dataclasses

import torch

from .crop_boxes import center_boxes, random_resized_boxes
from .decode import decode_jpeg, decode_resized_crop, encoded_batch, jpeg_sizes
from .ops import resized_crop
from .ragged import Ragged

__all__ = ["as_ragged", "draw_boxes", "apply_resized", "apply_decoded", "DecodedWindows",
           "decode_on_host", "apply_decoded_windows"]


@dataclasses.dataclass
class DecodedWindows:
    """What FusedAugment(decode=True)'s host stage puts in place of the encoded image leaf: each
    image's drawn window, decoded (``windows``: a Ragged of HWC uint8 RGB), and the batch's flips.
    The loader copies it to the device like any dataclass of tensors; ``apply`` resizes the
    windows there. Only the windows' pixels cross, never the encoded bytes."""

    windows: Ragged
    hflip: torch.Tensor
    vflip: torch.Tensor


def as_ragged(images, what):
    """The image leaf as a Ragged whose offsets and sizes are on the CPU (the op checks the boxes
    there; from the host's knowledge when it has it, so nothing waits for the device). An NHWC
    uint8 batch is viewed as one, without a copy."""
    if isinstance(images, Ragged):
        if images.dtype != torch.uint8 or images.rank != 3:
            raise TypeError("prefetch: %s is a Ragged of rank %d %s; resizing takes HWC uint8 "
                            "images" % (what, images.rank, str(images.dtype).replace("torch.", "")))
        offsets, sizes = images.host_tables()
        return Ragged(images.values, offsets, sizes, shapes=images.shapes())
    if not isinstance(images, torch.Tensor) or images.dim() != 4 or images.dtype != torch.uint8:
        raise TypeError("prefetch: %s must be a Ragged of HWC uint8 images or an NHWC uint8 "
                        "batch to be resized, got %s" % (what, _describe(images)))
    n, h, w, c = images.shape
    values = images.contiguous().view(-1)
    offsets = torch.arange(n, dtype=torch.int64) * (h * w * c)
    sizes = torch.tensor([[h, w, c]], dtype=torch.int64).expand(n, 3).contiguous()
    return Ragged(values, offsets, sizes, shapes=[(h, w, c)] * n, dense=True)


def draw_boxes(aug, shapes, generator):
    """Each image's window: drawn as RandomResizedCrop draws it, or centred (validation)."""
    heights = [s[0] for s in shapes]
    widths = [s[1] for s in shapes]
    if aug.center_crop:
        return center_boxes(heights, widths, aug.output_size, aug.resize)
    return random_resized_boxes(heights, widths, aug.scale, aug.ratio, generator=generator)


def apply_resized(aug, batch, d, images, masks, set_leaf):
    """The batch with its image leaf (and mask leaf) resized through draws ``d``."""
    r = as_ragged(images, "FusedAugment's image leaf %r" % (aug.image_key,))
    channels = r.shapes()[0][2] if len(r) else len(aug.mean)
    if channels != len(aug.mean):
        raise ValueError("prefetch: mean and std have %d values but the images (leaf %r) have %d "
                         "channels" % (len(aug.mean), aug.image_key, channels))
    out = resized_crop(r, d.boxes, d.crop, aug.mean, aug.std, hflip=d.hflip, vflip=d.vflip,
                       dtype=aug.dtype, channels_last=aug.channels_last, antialias=aug.antialias)
    batch = set_leaf(batch, aug.image_key, out)
    if masks is not None:
        batch = set_leaf(batch, aug.mask_key, resize_masks(aug, masks, r, d))
    return batch


def apply_decoded(aug, batch, encoded, position, set_leaf):
    """decode=True: the windows are drawn from the JPEG headers' sizes (no pixel decoded for
    them), then only the windows are decoded, resized, flipped and normalized. (In a loader on a
    GPU the host stage has decoded them already: apply_decoded_windows.)"""
    device = encoded.device if isinstance(encoded, Ragged) else torch.device("cpu")
    data = _encoded(encoded)
    d = _decode_draws(aug, data, position)
    out = decode_resized_crop(data, d.boxes, d.crop, aug.mean, aug.std, hflip=d.hflip,
                              vflip=d.vflip, dtype=aug.dtype, channels_last=aug.channels_last,
                              antialias=aug.antialias, device=device)
    return set_leaf(batch, aug.image_key, out)


def decode_on_host(aug, batch, position, device):
    """The host stage of decode=True for a CUDA ``device``: the windows are drawn from the JPEG
    headers (the same draws ``apply`` would make at this position) and decoded here, on the
    host's bytes — by the GPU decoder straight onto ``device`` when one is available (its output
    then travels as a move), else by the CPU decoder (the windows then cross as uint8 pixels).
    The encoded bytes never go to the device."""
    encoded = _leaf(batch, aug.image_key)
    data = _encoded(encoded)
    d = _decode_draws(aug, data, position)
    from .decode import gpu_jpeg_decoder

    on_gpu = gpu_jpeg_decoder() != "cpu"
    windows = decode_jpeg(data, d.boxes, device=device if on_gpu else "cpu")
    return _set(batch, aug.image_key, DecodedWindows(windows, d.hflip, d.vflip))


def apply_decoded_windows(aug, batch, decoded, set_leaf):
    """``apply`` after the host stage: the decoded windows resized whole, flipped, normalized."""
    r = as_ragged(decoded.windows, "FusedAugment's decoded windows")
    whole = torch.tensor([[0, 0, h, w] for h, w, _ in r.shapes()], dtype=torch.int64).reshape(-1, 4)
    out = resized_crop(r, whole, aug.output_size, aug.mean, aug.std, hflip=decoded.hflip,
                       vflip=decoded.vflip, dtype=aug.dtype, channels_last=aug.channels_last,
                       antialias=aug.antialias)
    return set_leaf(batch, aug.image_key, out)


def _encoded(encoded):
    if not isinstance(encoded, (Ragged, list, tuple)):
        raise TypeError("prefetch: FusedAugment(decode=True) takes encoded JPEGs as its image leaf "
                        "(a Ragged of 1-D uint8 samples, what a Samples of the files' bytes "
                        "becomes), got %s" % _describe(encoded))
    return encoded_batch(encoded)  # on the CPU: libjpeg (and nvJPEG's host stage) read it there


def _decode_draws(aug, data, position):
    if len(aug.mean) != 3:
        raise ValueError("prefetch: decode=True gives RGB images: mean and std need 3 values, got %d"
                         % len(aug.mean))
    sizes = jpeg_sizes(data)
    return aug.draws(len(data), sizes[:, 0].tolist(), sizes[:, 1].tolist(), position.epoch,
                     position.index, position.rank)


def _leaf(batch, key):
    from .transforms import get_leaf

    return get_leaf(batch, key)


def _set(batch, key, value):
    from .transforms import set_leaf

    return set_leaf(batch, key, value)


def resize_masks(aug, masks, images, d):
    """Each mask cropped to its image's window and resampled to the output size with nearest
    neighbours (torchvision's mask interpolation), flipped as its image: ``[N, h, w]``."""
    what = "the mask leaf %r" % (aug.mask_key,)
    if isinstance(masks, Ragged):
        samples = masks.tensors()
    elif isinstance(masks, torch.Tensor) and masks.dim() in (3, 4):
        samples = list(masks[:, 0] if masks.dim() == 4 else masks)
    else:
        raise TypeError("prefetch: %s must be a Ragged or an [N, H, W] / [N, 1, H, W] integer "
                        "tensor, got %s" % (what, _describe(masks)))
    shapes = images.shapes()
    if len(samples) != len(shapes):
        raise ValueError("prefetch: %s has %d samples, the image leaf %d"
                         % (what, len(samples), len(shapes)))
    h, w = d.crop
    # Every value read here comes from the draws' host copies: on a GPU, reading the device flips
    # would synchronise the copy stream's producer with the device twice a batch.
    host = d.host if d.host is not None else d
    hflip, vflip = host.hflip.tolist(), host.vflip.tolist()
    boxes = host.boxes.tolist()
    crops, tables = [], []
    for k, (m, box) in enumerate(zip(samples, boxes)):
        if m.dim() == 3 and m.shape[-1] == 1:
            m = m[..., 0]
        if m.dim() != 2 or tuple(m.shape) != tuple(shapes[k][:2]):
            raise ValueError("prefetch: %s sample %d has shape %s, its image is %dx%d"
                             % (what, k, tuple(m.shape), shapes[k][0], shapes[k][1]))
        top, left, bh, bw = box
        crops.append(m[top:top + bh, left:left + bw])
        # nearest: source index floor(dst * in / out), as F.interpolate(mode="nearest") and
        # torchvision's InterpolationMode.NEAREST; done on integers through float64 indices.
        rows = torch.floor(torch.arange(h, dtype=torch.float64) * (bh / h)).long().clamp(max=bh - 1)
        cols = torch.floor(torch.arange(w, dtype=torch.float64) * (bw / w)).long().clamp(max=bw - 1)
        tables.append(torch.cat([rows.flip(0) if vflip[k] else rows, cols.flip(0) if hflip[k] else cols]))
    if not crops:
        return torch.empty((0, h, w), dtype=torch.int64)
    # Every sample's row and column indices in one table, sent to the masks' device in one copy.
    table = torch.stack(tables)
    device = crops[0].device
    if device.type == "cuda":
        table = table.pin_memory().to(device, non_blocking=True)
    out = [c.index_select(0, t[:h]).index_select(1, t[h:]) for c, t in zip(crops, table)]
    return torch.stack(out)


def _describe(x):
    if isinstance(x, torch.Tensor):
        return "a %d-D %s tensor" % (x.dim(), str(x.dtype).replace("torch.", ""))
    return "a %s" % type(x).__name__

