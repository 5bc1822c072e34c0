"""FusedAugment's resizing path, as methods it inherits (:class:`ResizingPath`):
``random_resized_crop=`` (training) and ``resize=`` / ``center_crop`` of a resized window
(validation), for images of their own sizes (a :class:`prefetch.Ragged`) or of one size (an NHWC
uint8 batch), and ``decode=True`` (encoded JPEGs, only each window decoded).

Each image's window is drawn (or centred) in its own pixels (:mod:`prefetch.transforms.crop_boxes`),
then :func:`prefetch.ops.resized_crop` crops, resamples, flips, normalizes and casts every image in
one pass. A mask gets the same windows and flips with nearest-neighbour resampling (per sample,
in torch: masks are small and integer).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence, Union

import numpy as np
import torch

from .._core.checks import describe
from ..ops.geometry import resized_crop
from ..ops.decode import (decode_jpeg, decode_resized_crop, decode_with_backend, encoded_batch,
                          gpu_backend_for, jpeg_sizes)
from .._core.ragged import Ragged
from .contract import Batch, BatchPosition, get_leaf, set_leaf
from .crop_boxes import center_boxes, random_resized_boxes

__all__ = ["ResizingPath", "DecodedWindows", "as_ragged", "as_samples", "uint8_hint", "channel_hint",
           "MASK_DTYPES"]

# The mask dtypes every path takes (flip_crop's: labels are moved, never computed on).
MASK_DTYPES = (torch.uint8, torch.int16, torch.int32, torch.int64)


@dataclasses.dataclass
class DecodedWindows:
    """What FusedAugment(decode=True)'s host stage puts in place of the encoded image leaf: each
    image's drawn window, decoded, and the batch's flips. The loader copies it to the device
    like any dataclass of tensors; ``apply`` resizes the windows there. Only the windows' pixels
    cross, never the encoded bytes.

    Args:
        windows (Ragged): each window's pixels, ``[h_i, w_i, 3]`` uint8 RGB samples.
        hflip, vflip (Tensor[N], bool): the batch's drawn flips.

    ``host_tables``, not a field (so the loader leaves it where it is: it carries a dataclass's
    other attributes over as they are): the windows' ``(offsets, sizes)`` as int64 CPU tensors,
    packed from 0 (``[N]``, ``[N, 3]``), when the host stage knew them; ``apply`` then resizes
    with no read of the device's tables and no Python per image. None: read from ``windows``.
    ``bicubic``, not a field either: the per-sample interpolation drawn with
    ``interpolation="random"`` (a bool CPU tensor ``[N]``, :attr:`Draws.bicubic`), or None.
    ``boxes``, not a field either: the region of each decoded sample that is resampled (an int64
    CPU ``[N, 4]`` of top, left, height, width in the sample's pixels), where the host decoded more
    than the window (:class:`~prefetch.transforms.multi_view.MultiView` decodes the union of its
    views' windows once); None: each sample whole."""

    windows: Ragged
    hflip: torch.Tensor
    vflip: torch.Tensor

    host_tables = None  # not annotated: not a field
    bicubic = None  # not annotated: not a field
    boxes = None  # not annotated: not a field


def uint8_hint(dtype: torch.dtype) -> str:
    """What to do with images of another dtype, for transforms that take uint8 pixels.

    Args:
        dtype (torch.dtype): the images' dtype.

    Returns:
        str: advice for an error message (16-bit: keep the top 8 bits, as torchvision's
        ``ToDtype(torch.uint8, scale=True)``; float: convert to 0-255 pixels).
    """
    if dtype == torch.uint16:
        return ("convert 16-bit images to 8 bits first, e.g. (images.to(torch.int32) >> 8)"
                ".to(torch.uint8) (the top 8 bits, as torchvision's ToDtype(torch.uint8, "
                "scale=True); torch has no shift for uint16), in the dataset or before the loader")
    if dtype.is_floating_point:
        return ("convert them to uint8 pixels (0-255) first, e.g. torchvision's "
                "ToDtype(torch.uint8, scale=True) in the dataset; prefetch normalizes them itself")
    return "convert them to uint8 pixels (0-255) in the dataset or before the loader"


def channel_hint(channels: int) -> str:
    """What to do with images that have no channel dimension.

    Args:
        channels (int): the number of values of mean/std.

    Returns:
        str: advice for an error message.
    """
    return ("one-channel images are taken as they are with mean and std of one value; for %d "
            "channels add the dimension yourself: images.unsqueeze(-1) (NHWC, one channel), "
            "then .expand(-1, -1, -1, %d) to repeat it" % (channels, channels))


def as_samples(items: Sequence[Any], what: str) -> list:
    """A list or tuple of samples (a user's collate, a ``Samples`` before collation) as tensors.

    Args:
        items (sequence): tensors or numpy arrays (viewed as tensors; a read-only one copied).
        what (str): the leaf's name, for an error message.

    Returns:
        list[Tensor]: one tensor per sample.

    Raises:
        TypeError: a sample is neither a tensor nor a numpy array (naming it).
    """
    out = []
    for k, item in enumerate(items):
        if isinstance(item, np.ndarray):  # a read-only one (np.frombuffer) is copied
            item = torch.from_numpy(item if item.flags.writeable else item.copy())
        if not isinstance(item, torch.Tensor):
            raise TypeError("prefetch: %s sample %d is %s, not a tensor" % (what, k, describe(item)))
        out.append(item)
    return out


def as_ragged(images: Union[Ragged, torch.Tensor, Sequence[torch.Tensor]], what: str,
              channels: Optional[int] = None) -> Ragged:
    """The image leaf as a Ragged whose offsets and sizes are on the CPU (the op checks the boxes
    there; from the host's knowledge when it has it, so nothing waits for the device).

    Args:
        images: a Ragged of ``[H, W, C]`` uint8 samples; an NHWC uint8 ``Tensor[N, H, W, C]``
            (viewed as one, without a copy); a list or tuple of ``[H, W, C]`` uint8 tensors (a
            user's collate; packed into one).
        what (str): the leaf's name, for an error message.
        channels (int, optional): the number of values of mean/std; 1: images without a
            channel dimension (``[N, H, W]``, a Ragged of ``[H, W]``, a list of them) are
            one-channel images.

    Returns:
        Ragged: rank-3 uint8 samples, offsets and sizes on the CPU.

    Raises:
        TypeError: anything else (another dtype, rank or type; mixed samples), naming the leaf.
    """
    if isinstance(images, (list, tuple)):
        items = as_samples(images, what)
        if not items:  # an empty batch: no image, the output has no sample either
            return Ragged(torch.empty(0, dtype=torch.uint8), torch.empty(0, dtype=torch.int64),
                          torch.empty(0, 3, dtype=torch.int64), shapes=[], dense=True)
        ranks = {t.dim() for t in items}
        dtypes = {t.dtype for t in items}
        if len(ranks) != 1 or len(dtypes) != 1:
            raise TypeError("prefetch: %s mixes samples of ranks %s and dtypes %s; resizing takes "
                            "HWC uint8 images" % (what, sorted(ranks), sorted(str(d) for d in dtypes)))
        images = Ragged.from_tensors(items)
    if isinstance(images, Ragged):
        if images.dtype != torch.uint8:
            raise TypeError("prefetch: %s is a Ragged of %s images; resizing takes HWC uint8 images: "
                            "%s" % (what, str(images.dtype).replace("torch.", ""),
                                    uint8_hint(images.dtype)))
        offsets, sizes = images.host_tables()
        shapes = images.shapes()
        if images.rank == 2 and channels == 1:  # [H, W] images: one channel each
            sizes = torch.cat([sizes, torch.ones(len(shapes), 1, dtype=torch.int64)], dim=1)
            shapes = [tuple(s) + (1,) for s in shapes]
        elif images.rank != 3:
            raise TypeError("prefetch: %s is a Ragged of rank %d uint8; resizing takes HWC uint8 "
                            "images%s" % (what, images.rank, "; " + channel_hint(channels or 3)
                                          if images.rank == 2 else ""))
        return Ragged(images.values, offsets, sizes, shapes=shapes)
    if isinstance(images, torch.Tensor) and images.dtype == torch.uint8 and images.dim() == 3 \
            and channels == 1:
        images = images.unsqueeze(-1)
    if not isinstance(images, torch.Tensor) or images.dim() != 4 or images.dtype != torch.uint8:
        hint = ""
        if isinstance(images, torch.Tensor) and images.dtype != torch.uint8:
            hint = ": " + uint8_hint(images.dtype)
        elif isinstance(images, torch.Tensor) and images.dim() == 3:
            hint = " ([N, H, W] has no channel dimension): " + channel_hint(channels or 3)
        raise TypeError("prefetch: %s must be a Ragged of HWC uint8 images, a list of them or an "
                        "NHWC uint8 batch to be resized, got %s%s" % (what, describe(images), hint))
    n, h, w, c = images.shape
    values = images.contiguous().view(-1)
    offsets = torch.arange(n, dtype=torch.int64) * (h * w * c)
    sizes = torch.tensor([[h, w, c]], dtype=torch.int64).expand(n, 3).contiguous()
    return Ragged(values, offsets, sizes, shapes=[(h, w, c)] * n, dense=True)


class ResizingPath:
    """The resizing path's methods; :class:`prefetch.FusedAugment` inherits them and holds what
    they read: ``output_size``, ``center_crop``, ``resize``, ``scale``, ``ratio``, ``antialias``,
    ``interpolation``,
    ``mean``, ``std``, ``dtype``, ``channels_last``, ``image_key``, ``mask_key``, ``decode`` and
    :meth:`draws`. It takes no constructor argument."""

    def draw_boxes(self, heights: Union[torch.Tensor, Sequence[int]],
                   widths: Union[torch.Tensor, Sequence[int]],
                   generator: Optional[torch.Generator]) -> torch.Tensor:
        """Each image's window: drawn as RandomResizedCrop draws it
        (:func:`~prefetch.transforms.crop_boxes.random_resized_boxes`), or centred (validation:
        :func:`~prefetch.transforms.crop_boxes.center_boxes`).

        Args:
            heights, widths (Tensor[N] or sequence of int): the images' sizes in pixels.
            generator (torch.Generator, optional): the batch's random stream.

        Returns:
            Tensor[N, 4], int64: top, left, height, width of each window in its image's pixels.

        Raises:
            ValueError: sizes that are not whole numbers >= 1, or (centred) an image whose
                resized size is smaller than the crop.
        """
        if self.center_crop:
            return center_boxes(heights, widths, self.output_size, self.resize, self.max_size)
        return random_resized_boxes(heights, widths, self.scale, self.ratio, generator=generator)

    def apply_resizing(self, batch: Batch, images: Any, position: BatchPosition) -> Batch:
        """``apply`` of the resizing path: the image leaf (and the mask leaf) through the draws
        at ``position``; encoded JPEGs decoded (decode=True), or windows the host stage decoded.

        Args:
            batch: the batch.
            images: its image leaf (Ragged, NHWC uint8 tensor, list of samples, encoded JPEGs or
                :class:`DecodedWindows`).
            position (BatchPosition): where the batch sits.

        Returns:
            The batch, its image leaf ``Tensor[N, C, h, w]`` of ``dtype`` (and its mask leaf
            ``[N, h, w]``, the masks' dtype).

        Raises:
            TypeError: the image or mask leaf is not a form this path takes.
            ValueError: the images' channels differ from ``len(mean)``; masks of another count
                or size than their images.
            RuntimeError: an encoded sample the JPEG decoder cannot read.
        """
        if isinstance(images, DecodedWindows):
            return self._apply_decoded_windows(batch, images)
        if self.decode:
            return self._apply_decoded(batch, images, position)
        r = as_ragged(images, "FusedAugment's image leaf %r" % (self.image_key,), len(self.mean))
        shapes = r.shapes()
        d = self.draws(len(shapes), [s[0] for s in shapes], [s[1] for s in shapes],
                       position.epoch, position.index, position.rank)
        if r.device.type != "cpu":
            d = d.to(r.device)
        channels = shapes[0][2] if shapes else len(self.mean)
        if channels != len(self.mean):
            raise ValueError("prefetch: mean and std have %d values but the images (leaf %r) have %d "
                             "channels" % (len(self.mean), self.image_key, channels))
        out = resized_crop(r, d.boxes, d.crop, self.mean, self.std, hflip=d.hflip, vflip=d.vflip,
                           dtype=self.dtype, channels_last=self.channels_last, antialias=self.antialias,
                           interpolation=self._interpolation_of(d.bicubic))
        masks = None if self.mask_key is None else get_leaf(batch, self.mask_key)
        batch = set_leaf(batch, self.image_key, out)
        if masks is not None:
            batch = set_leaf(batch, self.mask_key, self.resize_masks(masks, r, d))
        return batch

    def decode_on_host(self, batch: Batch, position: BatchPosition,
                       device: Union[torch.device, str]) -> Batch:
        """The host stage of decode=True for a CUDA ``device`` (or one a registered fake GPU
        decoder serves): the windows are drawn from the JPEG headers (the same draws ``apply``
        would make at this position) and decoded here, on the host's bytes — by the GPU decoder
        straight onto ``device`` when one is available (its output then travels as a move), else by
        the CPU decoder (the windows then cross as uint8 pixels). The encoded bytes never go to the
        device. With a GPU decoder every step is one call a batch, none an image
        (``prefetch.ops.decode.decode_with_backend``; counted by
        tests/ops/test_decode_host_stage.py).

        Args:
            batch: the batch on the host; its image leaf the encoded JPEGs.
            position (BatchPosition): where the batch sits.
            device (torch.device or str): where the loader copies.

        Returns:
            The batch, its image leaf a :class:`DecodedWindows`.

        Raises:
            TypeError: the image leaf is not encoded bytes.
            ValueError: ``mean`` has not 3 values.
            RuntimeError: a sample the JPEG decoder cannot read.
        """
        data = _encoded(get_leaf(batch, self.image_key))
        sizes = jpeg_sizes(data)
        d = self.decode_draws(data, position, sizes)
        backend = gpu_backend_for(torch.device(device))
        if backend is not None:
            values, offsets, window_sizes = decode_with_backend(data, d.boxes, torch.device(device),
                                                                backend, header_sizes=sizes)
            windows = Ragged(values, offsets, window_sizes, check=False)
        else:
            windows = decode_jpeg(data, d.boxes, device="cpu", header_sizes=sizes)
        decoded = DecodedWindows(windows, d.hflip, d.vflip)
        decoded.host_tables = (windows.offsets, windows.sizes)  # on the CPU in either case
        decoded.bicubic = d.bicubic
        return set_leaf(batch, self.image_key, decoded)

    def _apply_decoded(self, batch, encoded, position):
        """decode=True: the windows are drawn from the JPEG headers' sizes (no pixel decoded for
        them), then only the windows are decoded, resized, flipped and normalized."""
        device = encoded.device if isinstance(encoded, (Ragged, torch.Tensor)) else torch.device("cpu")
        data = _encoded(encoded)
        sizes = jpeg_sizes(data)
        d = self.decode_draws(data, position, sizes)
        out = decode_resized_crop(data, d.boxes, d.crop, self.mean, self.std, hflip=d.hflip,
                                  vflip=d.vflip, dtype=self.dtype, channels_last=self.channels_last,
                                  antialias=self.antialias, interpolation=self._interpolation_of(d.bicubic),
                                  device=device, header_sizes=sizes)
        return set_leaf(batch, self.image_key, out)

    def _apply_decoded_windows(self, batch, decoded):
        """``apply`` after the host stage: the decoded windows resized (whole, or the region
        ``decoded.boxes`` of each), flipped, normalized."""
        if decoded.host_tables is not None:  # known on the host: no table read back, no loop
            offsets, sizes = decoded.host_tables
            r = Ragged(decoded.windows.values, offsets, sizes, check=False)
            whole = torch.cat([torch.zeros_like(sizes[:, :2]), sizes[:, :2]], 1)
        else:
            r = as_ragged(decoded.windows, "FusedAugment's decoded windows", len(self.mean))
            whole = torch.tensor([[0, 0, h, w] for h, w, _ in r.shapes()], dtype=torch.int64).reshape(-1, 4)
        boxes = whole if decoded.boxes is None else decoded.boxes
        out = resized_crop(r, boxes, self.output_size, self.mean, self.std, hflip=decoded.hflip,
                           vflip=decoded.vflip, dtype=self.dtype, channels_last=self.channels_last,
                           antialias=self.antialias, interpolation=self._interpolation_of(decoded.bicubic))
        return set_leaf(batch, self.image_key, out)

    def _interpolation_of(self, bicubic):
        """resized_crop's ``interpolation``: the batch's drawn per-sample table (``"random"``), else
        the fixed filter."""
        if self.interpolation == "random":
            if bicubic is None:
                raise RuntimeError("prefetch: FusedAugment(interpolation='random') got a batch "
                                   "without its per-sample interpolation draws (Draws.bicubic)")
            return bicubic
        return self.interpolation

    def decode_draws(self, data: Ragged, position: BatchPosition,
                     sizes: Optional[torch.Tensor] = None) -> Any:
        """decode=True's draws for a batch of encoded JPEGs: each image's window drawn from its
        header's size (no pixel decoded), and its flips, as :meth:`apply` draws them at
        ``position``.

        Args:
            data (Ragged): the encoded JPEGs, 1-D uint8 samples on the CPU
                (:func:`prefetch.ops.decode.encoded_batch`).
            position (BatchPosition): where the batch sits.
            sizes (Tensor[N, 3], int64, optional): the headers' ``(height, width, channels)``
                (:func:`prefetch.ops.decode.jpeg_sizes`), when the caller has read them.

        Returns:
            Draws: on the CPU; ``boxes`` the windows in each image's pixels.

        Raises:
            ValueError: ``mean`` has not 3 values (decoding gives RGB).
            RuntimeError: a sample whose header the decoder cannot read (naming it).
        """
        if len(self.mean) != 3:
            raise ValueError("prefetch: decode=True gives RGB images: mean and std need 3 values, "
                             "got %d" % len(self.mean))
        sizes = jpeg_sizes(data) if sizes is None else sizes
        return self.draws(len(data), sizes[:, 0], sizes[:, 1], position.epoch, position.index,
                          position.rank)

    def resize_masks(self, masks: Any, images: Ragged, d: Any) -> torch.Tensor:
        """Each mask cropped to its image's window and resampled to the output size with nearest
        neighbours, flipped as its image. "Nearest" is torch's and torchvision's default for
        masks (``InterpolationMode.NEAREST``, ``F.interpolate(mode="nearest")``): output pixel
        ``x`` reads input ``floor(x * in / out)``, not ``nearest-exact``'s centre rule, so a mask
        resized here equals torchvision's ``Resize`` of it.

        Args:
            masks: a Ragged or list of ``[H, W]`` / ``[H, W, 1]`` masks, or a ``Tensor[N, H, W]``,
                ``[N, 1, H, W]`` or ``[N, H, W, 1]``; uint8, int16, int32 or int64.
            images (Ragged): the image leaf (each mask must have its image's H and W).
            d (Draws): the batch's draws (``boxes``, flips, ``crop``).

        Returns:
            Tensor[N, h, w]: the masks' dtype, on their device.

        Raises:
            TypeError: another form or dtype.
            ValueError: another count of masks than images, or a mask of another size than
                its image.
        """
        what = "the mask leaf %r" % (self.mask_key,)
        if isinstance(masks, Ragged):
            samples = masks.tensors()
        elif isinstance(masks, (list, tuple)):  # a user's collate: one mask per sample
            samples = as_samples(masks, what)
        elif isinstance(masks, torch.Tensor) and masks.dim() == 3:
            samples = list(masks)
        elif isinstance(masks, torch.Tensor) and masks.dim() == 4 and 1 in (masks.shape[1], masks.shape[3]):
            samples = list(masks[:, 0] if masks.shape[1] == 1 else masks[..., 0])
        else:
            raise TypeError("prefetch: %s must be a Ragged or a list of [H, W] or [H, W, 1] "
                            "masks, or an [N, H, W], [N, 1, H, W] or [N, H, W, 1] tensor, got %s"
                            % (what, describe(masks)))
        for dtype in {m.dtype for m in samples} if isinstance(masks, (list, tuple)) else {masks.dtype}:
            if dtype not in MASK_DTYPES:
                raise TypeError("prefetch: %s is %s; masks must be uint8, int16, int32 or int64 (one "
                                "label per pixel), as on the crop path"
                                % (what, str(dtype).replace("torch.", "")))
        shapes = images.shapes()
        if len(samples) != len(shapes):
            raise ValueError("prefetch: %s has %d samples, the image leaf %d"
                             % (what, len(samples), len(shapes)))
        h, w = d.crop
        # Every value read here comes from the draws' host copies: on a GPU, reading the device
        # flips would synchronise the copy stream's producer with the device twice a batch.
        host = d.host if d.host is not None else d
        hflip, vflip = host.hflip.tolist(), host.vflip.tolist()
        crops, tables = [], []
        for k, (m, box) in enumerate(zip(samples, host.boxes.tolist())):
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
            tables.append(torch.cat([rows.flip(0) if vflip[k] else rows,
                                     cols.flip(0) if hflip[k] else cols]))
        if not crops:  # an empty batch keeps the masks' dtype
            dtype = masks.dtype if isinstance(masks, (torch.Tensor, Ragged)) else torch.int64
            return torch.empty((0, h, w), dtype=dtype)
        # Every sample's row and column indices in one table, sent to the masks' device in one copy.
        table = torch.stack(tables)
        device = crops[0].device
        if device.type == "cuda":
            table = table.pin_memory().to(device, non_blocking=True)
        out = [c.index_select(0, t[:h]).index_select(1, t[h:]) for c, t in zip(crops, table)]
        return torch.stack(out)


def _encoded(encoded):
    """The encoded image leaf in any form a collate makes of the files' bytes — a Ragged (files of
    different lengths), an ``[N, L]`` uint8 tensor (files of one length: a batch of one, duplicate
    files), a list — as a CPU Ragged of 1-D uint8 samples."""
    if not isinstance(encoded, (Ragged, list, tuple, torch.Tensor)):
        raise TypeError("prefetch: FusedAugment(decode=True) takes encoded JPEGs as its image leaf "
                        "(a Ragged of 1-D uint8 samples, what a Samples of the files' bytes "
                        "becomes; or an [N, L] uint8 tensor when they have one length), got %s"
                        % describe(encoded))
    return encoded_batch(encoded)  # on the CPU: libjpeg (and nvJPEG's host stage) read it there
