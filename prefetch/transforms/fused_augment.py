"""FusedAugment: random crop (with padding), flips, normalization and cast in one kernel on the
device — the library's own :class:`prefetch.transforms.Transform`.

It draws every sample's flips and crop window from the seed stream of the batch's
:class:`~prefetch.transforms.BatchPosition` ``(seed, rank, epoch, batch index)``, so a run is
reproducible whatever the number of DataLoader workers and every DDP rank draws its own, and
applies :func:`prefetch.ops.normalize_flip` to the image leaf (and the same geometry, through
:func:`prefetch.ops.flip_crop`, to a mask leaf) in one pass. On a device-resident dataset
(``ArrayLoader(resident="device")``) it gathers the image and mask rows in the same pass.

Length: over 500 lines because the public class documents every argument, shape and error
(about 260 lines of docstrings; under 500 of code). Its resizing path is in :mod:`.resizing`.
"""
from __future__ import annotations

import math
import numbers
import typing
from typing import Optional, Sequence, Tuple, Union

import torch

from .._core.checks import whole
from ..ops.geometry import flip_crop
from ..ops.normalize import normalize_flip
from ..ops.gpu_decoders import may_serve
from . import arguments
from .resizing import MASK_DTYPES, ResizingPath, as_ragged, as_samples, channel_hint, uint8_hint
from .._core.ragged import Ragged
from .contract import Batch, BatchPosition, LeafKey, SeededTransform, get_leaf, set_leaf

__all__ = ["FusedAugment", "Draws"]

_OUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.uint8)



class Draws(typing.NamedTuple):
    """One batch's geometry, as :meth:`FusedAugment.draws` returns it (CPU tensors) and the ops
    take it. ``d["offsets"]`` reads a field too.

    Args:
        hflip (Tensor[N], bool): which samples are mirrored left-right.
        vflip (Tensor[N], bool): which samples are mirrored top-bottom.
        crop (tuple[int, int]): the output ``(h, w)`` in pixels.
        offsets (Tensor[N, 2], int64, optional): top, left of each window in the image's
            pixels (negative: inside the padding); None: centred.
        boxes (Tensor[N, 4], int64, optional): the resizing path's windows (top, left, height,
            width in each image's own pixels), kept on the CPU.
        host (Draws, optional): the CPU draws these were moved from (None: these are on the
            CPU); what host code reads.
        bicubic (Tensor[N], bool, optional): the resizing path's per-sample interpolation with
            ``interpolation="random"`` (True: bicubic, False: bilinear), kept on the CPU; None:
            every sample uses FusedAugment's ``interpolation``.
    """

    hflip: torch.Tensor
    vflip: torch.Tensor
    crop: tuple
    offsets: typing.Optional[torch.Tensor]
    boxes: typing.Optional[torch.Tensor] = None  # resizing: int64 [N, 4] windows, kept on the CPU
    # The CPU draws these were moved from (None: these are on the CPU): what host code reads.
    host: typing.Optional["Draws"] = None
    bicubic: typing.Optional[torch.Tensor] = None  # interpolation="random": bool [N], on the CPU

    def __getitem__(self, key):
        return getattr(self, key) if isinstance(key, str) else tuple.__getitem__(self, key)

    def to(self, device: Union[torch.device, str], non_blocking: bool = False) -> "Draws":
        """The same draws on another device, keeping the CPU draws in ``host`` for whatever the
        host must read of them.

        Args:
            device (torch.device or str): where ``hflip``, ``vflip`` and ``offsets`` go; on CUDA
                through pinned memory, without host synchronisation (``boxes`` stay on the CPU).
            non_blocking (bool): passed to ``Tensor.to`` for a non-CUDA device.

        Returns:
            Draws: the moved draws.
        """
        def move(t):
            if not isinstance(t, torch.Tensor):
                return t
            if torch.device(device).type == "cuda":
                return t.pin_memory().to(device, non_blocking=True)
            return t.to(device, non_blocking=non_blocking)
        # (boxes stay on the CPU: resized_crop checks them there, before any pixel is read; so
        # does the bicubic table, which the op uploads with the boxes)
        return Draws(move(self.hflip), move(self.vflip), self.crop, move(self.offsets), self.boxes,
                     self.host if self.host is not None else self, self.bicubic)


def _finite(values, name, positive=False):
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError("prefetch: FusedAugment %s must be a sequence of per-channel values, got %r"
                        % (name, values))
    out = []
    for i, v in enumerate(values):
        if isinstance(v, torch.Tensor) and v.dim() == 0 and v.dtype != torch.bool:
            v = v.item()  # (mean=torch.tensor([...]) iterates as 0-d tensors)
        if not arguments.is_number(v):  # (a bool, or a string float() reads, is no value)
            raise arguments.ArgumentTypeError(
                "prefetch: FusedAugment %s[%d] must be a finite number%s, got %r"
                % (name, i, " > 0" if positive else "", v))
        f = float(v)
        if not math.isfinite(f) or (positive and not f > 0):
            raise ValueError("prefetch: FusedAugment %s[%d] must be a finite number%s, got %r"
                             % (name, i, " > 0" if positive else "", v))
        out.append(f)
    return out


def _whole_or(value, default):
    """``value`` as an int when it is a whole number (not a bool), else ``default``."""
    try:
        return whole(value, "value")
    except TypeError:
        return default


def _whole_arg(value, name):
    """A whole-number argument of FusedAugment, or a TypeError naming it."""
    try:
        return whole(value, name)
    except TypeError:
        raise TypeError("prefetch: FusedAugment %s must be a whole number, got %r"
                        % (name, value)) from None


def _padding(padding):
    """torchvision's ``RandomCrop(padding=)`` as ``(left, top, right, bottom)`` whole numbers >= 0:
    an int pads every side, 2 values are (left and right, top and bottom), 4 are (left, top,
    right, bottom) (torchvision/transforms/v2/functional/_geometry.py: ``_parse_pad_padding``)."""
    values = list(padding) if isinstance(padding, (list, tuple)) else [padding]
    try:
        if len(values) not in (1, 2, 4):
            raise TypeError
        values = [whole(v, "padding") for v in values]
    except TypeError:
        values = [-1]
    if min(values) < 0:
        raise ValueError("prefetch: FusedAugment padding must be an int >= 0 or 2 or 4 of them "
                         "(torchvision's RandomCrop), got %r" % (padding,))
    if len(values) == 1:
        return (values[0],) * 4
    if len(values) == 2:
        return (values[0], values[1], values[0], values[1])
    return tuple(values)


def _name(key):
    return "%r" % (key,)


def _output_size(value, name):
    """None, or ``(h, w)`` of positive ints from an int (square) or a pair."""
    if value is None:
        return None
    sequence = isinstance(value, (list, tuple)) or (isinstance(value, torch.Tensor) and value.dim() > 0)
    pair = value if sequence else (value, value)
    try:
        sizes = tuple(whole(c, name) for c in pair)
    except TypeError:
        sizes = ()
    if len(sizes) != 2 or min(sizes) < 1:
        raise ValueError("prefetch: FusedAugment %s must be (h, w) of positive ints, got %r" % (name, value))
    return sizes


def _per_image(value, n):
    """One value per image, as a 1-D tensor: a sequence (or tensor) of n, or a number repeated;
    converted in one call, not image by image (the boxes' draws check they are whole numbers)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return torch.full((n,), int(value), dtype=torch.int64)
    value = torch.as_tensor(value).reshape(-1)
    if value.numel() != n:
        raise ValueError("prefetch: %d image sizes for %d images" % (value.numel(), n))
    return value


class FusedAugment(ResizingPath, SeededTransform):
    """Random crop (with padding), flips, normalization and cast in one kernel, on the device.

    The image leaf is a uint8 batch ``Tensor[N, H, W, C]`` or ``Tensor[N, C, H, W]`` (or a
    :class:`prefetch.Ragged` / list of ``[H, W, C]`` samples for the resizing path); the output is
    ``Tensor[N, C, h, w]`` of ``dtype`` (``channels_last``: that shape in NHWC memory order),
    ``(x / 255 - mean) / std`` per channel, flipped and cropped as drawn.

    Args:
        mean, std (sequence of float): per-channel, torchvision's ``Normalize`` convention
            (fractions of 1: ``(x / 255 - mean) / std``); ``std`` > 0, as many values as ``mean``.
        hflip, vflip (float): probability of mirroring each sample horizontally / vertically.
            ``hflip`` defaults to 0.5 for training and to 0 with ``center_crop=True`` (evaluation,
            as torchvision's evaluation transforms have no flip); pass a value to choose.
        crop (int or tuple[int, int], optional): output ``(h, w)`` in pixels (an int means square);
            None keeps the input size.
        center_crop (bool): take the centred window instead of a random one (validation), where
            torchvision's ``CenterCrop`` takes it: at ``int(round((H - h) / 2))`` (Python's round,
            half to even) inside the image, and a crop larger than the image gets ``(h - H) // 2``
            fill pixels before it and the rest after
            (:func:`~prefetch.transforms.crop_boxes.center_anchor`).
        padding (int or sequence of int): as torchvision's ``RandomCrop(padding=...)``: the window
            is drawn from the image padded by ``fill`` pixels — an int on every side,
            ``(left/right, top/bottom)`` or ``(left, top, right, bottom)``. With ``crop=None`` and
            no padding the window is the whole image.
        pad_if_needed (bool): as torchvision's ``RandomCrop(pad_if_needed=True)``: a (padded) side
            shorter than the crop is padded by the difference at both ends before the draw.
        fill (int): uint8 value of padding pixels, in [0, 255]; ``mask_fill`` (int) the mask's.
        dtype (torch.dtype): float32, float16 or bfloat16 output, or uint8: the normalized values
            rounded half to even and saturated (``mean=0, std=1/255`` gives the resampled pixels,
            as a policy that follows takes them); ``channels_last`` (bool) its memory format.
        seed (int, optional): the draws are a function of ``(seed, rank, epoch, batch index)`` —
            the loader passes its DDP rank, so ranks given the same seed draw differently; None
            picks a fresh seed, which :meth:`state_dict` saves and a resumed loader restores.
        image_key, mask_key (int or str): which leaf of the batch is the uint8 image batch (index
            or dict key) and, optionally, the integer mask batch ``[N, H, W]`` or ``[N, 1, H, W]``
            with the images' N, H and W (anything else is refused, naming both shapes). Each leaf
            may come in any form a collate makes of it: a tensor, a ``prefetch.Ragged``, a list or
            tuple of per-sample tensors (stacked when the path takes one size); a batch of one or
            of none. Images without a channel dimension (``[N, H, W]``) are one-channel images when
            ``mean`` and ``std`` have one value.
        layout (str): ``"NHWC"``, ``"NCHW"`` or ``"auto"`` (NHWC unless dim 1 looks like channels);
            a forced layout whose channel dimension does not hold ``len(mean)`` channels while the
            other one does is refused as looking wrong.
        random_resized_crop (int or tuple[int, int], optional): output ``(h, w)`` (an int means
            square): each image's window is drawn as torchvision's ``RandomResizedCrop(size, scale,
            ratio)`` draws it, in the image's own pixels, and resampled to the output in the same
            pass (:func:`prefetch.ops.resized_crop`, ``interpolation``, ``antialias``). Takes images of
            their own sizes (a :class:`prefetch.Ragged`, what a ``Samples`` of different sizes
            becomes) or an NHWC batch. Training only: it takes no ``center_crop``.
        scale, ratio (tuple[float, float]): RandomResizedCrop's area fraction and aspect ratio
            (width / height) ranges; defaults ``(0.08, 1.0)`` and ``(3/4, 4/3)`` are torchvision's
            (from the Inception paper, Szegedy et al., "Going deeper with convolutions", 2015).
        resize (int, optional): validation's ``Resize(resize) + CenterCrop(crop)`` as one resample,
            with ``center_crop=True`` and ``crop`` the output size (``resize >= crop``): the window
            of each image those two steps keep (torchvision's resized size and crop corner), to the
            nearest whole pixel of the original, resampled to ``crop``
            (:func:`~prefetch.transforms.crop_boxes.center_boxes`: each edge within half a pixel of
            the original from torchvision's window).
        max_size (int, optional): torchvision's ``Resize(resize, max_size=)``: the longer side
            after the resize at most this (an image whose resized size is then below the crop is
            refused when it arrives: torchvision would pad it).
        antialias (bool): for the resizing path: average every input pixel a downscale covers (as
            torchvision's default, and PIL), instead of sampling 2 x 2 (4 x 4 bicubic).
        interpolation (str): the resizing path's filter: ``"bilinear"`` (torchvision's default),
            ``"bicubic"`` (DeiT's, ViT's, ConvNeXt's; torchvision's InterpolationMode.BICUBIC and
            timm's "bicubic"), or ``"random"``, timm's default for training: each sample bilinear
            or bicubic with probability 1/2 (``Draws.bicubic``). The formulas are
            :func:`prefetch.ops.resized_crop`'s.
        decode (bool): the image leaf holds encoded JPEGs (a :class:`prefetch.Ragged` of 1-D uint8
            samples: a ``Samples`` of the files' bytes), decoded here for the resizing path: each
            window is drawn from the image's header and only the window is decoded
            (:func:`prefetch.ops.decode_resized_crop`; libjpeg-turbo in C++ threads on the CPU,
            nvJPEG through torchvision on a GPU when it is installed). Needs
            ``random_resized_crop`` or ``resize`` + ``center_crop``; takes no masks.

    Called directly, without ``epoch``/``index``, successive calls draw afresh: call ``k``
    draws as batch ``k`` of epoch ``-1`` (:meth:`Transform.direct_position`).

    Raises:
        ValueError: an argument out of range or two that conflict (``center_crop`` with
            ``padding``, ``pad_if_needed`` without ``crop``, ``random_resized_crop`` with
            ``crop``/``padding``/``center_crop``, ``resize`` without ``center_crop`` and
            ``crop`` or below the crop, ``max_size <= resize``, ``decode`` without a resizing
            path or with ``mask_key``), naming it; a wrong type (a bool ``center_crop`` given
            ``"yes"``, a string in ``mean``) raises its TypeError subclass
            (:class:`~prefetch.transforms.arguments.ArgumentTypeError`).
        TypeError: ``fill`` or ``mask_fill`` is not a whole number.
    """

    what_draws = "flips and crops"

    def __init__(self, mean: Sequence[float], std: Sequence[float], *,
                 hflip: Optional[float] = None, vflip: float = 0.0,
                 crop: Union[int, Tuple[int, int], None] = None, center_crop: bool = False,
                 padding: Union[int, Sequence[int]] = 0, fill: int = 0,
                 dtype: torch.dtype = torch.float32, channels_last: bool = False,
                 seed: Optional[int] = None, image_key: LeafKey = 0,
                 mask_key: Optional[LeafKey] = None, mask_fill: int = 0, layout: str = "auto",
                 random_resized_crop: Union[int, Tuple[int, int], None] = None,
                 scale: Tuple[float, float] = (0.08, 1.0),
                 ratio: Tuple[float, float] = (3 / 4, 4 / 3), resize: Optional[int] = None,
                 antialias: bool = True, decode: bool = False, pad_if_needed: bool = False,
                 max_size: Optional[int] = None, interpolation: str = "bilinear") -> None:
        self.mean = _finite(mean, "mean")
        self.std = _finite(std, "std", positive=True)
        if len(self.mean) != len(self.std):
            raise ValueError("prefetch: FusedAugment std must have as many values as mean (%d), got "
                             "%d" % (len(self.mean), len(self.std)))
        center_crop = arguments.flag("FusedAugment", "center_crop", center_crop)
        if hflip is None:
            hflip = 0.0 if center_crop else 0.5
        hflip = arguments.probability("FusedAugment", "hflip", hflip)
        vflip = arguments.probability("FusedAugment", "vflip", vflip)
        crop = _output_size(crop, "crop")
        self.pads = _padding(padding)
        fill = _whole_arg(fill, "fill")
        if not 0 <= fill <= 255:
            raise ValueError("prefetch: FusedAugment fill must be an int in [0, 255] (a uint8 pixel "
                             "value), got %d" % fill)
        if dtype not in _OUT_DTYPES:
            raise ValueError("prefetch: FusedAugment dtype must be torch.float32, float16, bfloat16 "
                             "or uint8, got %s" % (dtype,))
        if layout not in ("auto", "NHWC", "NCHW"):
            raise ValueError("prefetch: FusedAugment layout must be 'auto', 'NHWC' or 'NCHW', got %r"
                             % (layout,))
        self.hflip, self.vflip = float(hflip), float(vflip)
        self.crop = crop
        self.center_crop = center_crop
        # padding as given when it is one int (what most code reads), else torchvision's 4 sides
        self.padding = self.pads[0] if len(set(self.pads)) == 1 else self.pads
        self.fill = fill
        self.pad_if_needed = arguments.flag("FusedAugment", "pad_if_needed", pad_if_needed)
        if self.center_crop and (any(self.pads) or self.pad_if_needed):
            raise ValueError("prefetch: FusedAugment padding and pad_if_needed are RandomCrop's; "
                             "center_crop=True pads a crop larger than the image as torchvision's "
                             "CenterCrop does, by itself: got padding=%r, pad_if_needed=%r"
                             % (padding, pad_if_needed))
        if self.pad_if_needed and crop is None:
            raise ValueError("prefetch: FusedAugment pad_if_needed pads the image to the crop: it "
                             "needs crop=")
        self.mask_fill = _whole_arg(mask_fill, "mask_fill")
        self.dtype = dtype
        self.channels_last = arguments.flag("FusedAugment", "channels_last", channels_last)
        self._set_seed(seed)
        self.image_key, self.mask_key, self.layout = image_key, mask_key, layout
        self._init_resizing(random_resized_crop, scale, ratio, resize, antialias, max_size,
                            interpolation)
        self.decode = arguments.flag("FusedAugment", "decode", decode)
        if self.decode and not self.resizes:
            raise ValueError("prefetch: decode=True decodes each image's window for the resizing "
                             "path: pass random_resized_crop=size (training) or crop=, resize=, "
                             "center_crop=True (validation)")
        if self.decode and mask_key is not None:
            raise ValueError("prefetch: decode=True takes no mask_key: masks are not decoded; "
                             "decode the images and masks in the dataset, or use "
                             "random_resized_crop without decode")

    def _init_resizing(self, random_resized_crop, scale, ratio, resize, antialias, max_size,
                       interpolation):
        from .crop_boxes import _pair

        size = _output_size(random_resized_crop, "random_resized_crop")
        if size is not None:
            if self.crop is not None or any(self.pads) or self.pad_if_needed:
                raise ValueError("prefetch: random_resized_crop sets the output size and the "
                                 "window; it takes no crop= or padding=")
            if self.center_crop:
                raise ValueError("prefetch: random_resized_crop draws a random window each time; "
                                 "it takes no center_crop=True. For validation's centred window "
                                 "pass crop=%s, center_crop=True (and resize= for Resize + "
                                 "CenterCrop)" % (size,))
        if resize is not None:
            given, resize = resize, _whole_or(resize, 0)
            if resize < 1:
                raise ValueError("prefetch: FusedAugment resize must be a positive whole number (the "
                                 "shorter side after torchvision's Resize), got %r" % (given,))
            if not self.center_crop or self.crop is None:
                raise ValueError("prefetch: resize= is validation's Resize + CenterCrop: it needs "
                                 "center_crop=True and crop=")
            if resize < max(self.crop):
                raise ValueError(
                    "prefetch: FusedAugment resize must be >= the crop %r (Resize(%d) + "
                    "CenterCrop%r would pad the resized image, which one resample of a window "
                    "of the original cannot), got %r" % (self.crop, resize, self.crop, resize))
        if max_size is not None:
            given, max_size = max_size, _whole_or(max_size, 0)
            if resize is None or max_size <= resize:
                raise ValueError("prefetch: FusedAugment max_size must be a whole number > resize "
                                 "(torchvision's Resize(size, max_size=)), with resize=; got "
                                 "max_size=%r, resize=%r" % (given, resize))
        self.random_resized_crop, self.resize, self.max_size = size, resize, max_size
        self.scale = _pair(scale, "FusedAugment scale")
        self.ratio = _pair(ratio, "FusedAugment ratio")
        self.antialias = arguments.flag("FusedAugment", "antialias", antialias)
        self.interpolation = arguments.interpolation("FusedAugment", interpolation,
                                                     ("bilinear", "bicubic", "random"))
        # The resizing path: images of any size, one window each, resampled to output_size.
        self.resizes = size is not None or resize is not None
        if self.interpolation != "bilinear" and not self.resizes:
            raise ValueError("prefetch: FusedAugment interpolation=%r is the resizing path's filter: "
                             "pass random_resized_crop= or resize= (crop= alone copies pixels, "
                             "resampling none)" % (self.interpolation,))
        self.output_size = size if size is not None else self.crop

    def __repr__(self):
        if self.resizes:
            how = ("random_resized_crop=%s, scale=%s, ratio=%s" % (
                self.output_size, self.scale, self.ratio) if not self.center_crop else
                "crop=%s centred%s" % (self.output_size, ", resize=%g" % self.resize
                                        if self.resize is not None else ""))
            return "FusedAugment(%s, hflip=%g, vflip=%g, dtype=%s, seed=%d%s%s)" % (
                how, self.hflip, self.vflip, self.dtype, self.seed,
                ", interpolation=%r" % self.interpolation if self.interpolation != "bilinear" else "",
                ", decode=True" if self.decode else "")
        return ("FusedAugment(crop=%s%s, padding=%r%s, hflip=%g, vflip=%g, dtype=%s, seed=%d)"
                % (self.crop, " centred" if self.center_crop else "", self.padding,
                   ", pad_if_needed=True" if self.pad_if_needed else "", self.hflip, self.vflip,
                   self.dtype, self.seed))

    def _fixed_images(self, images):
        """The image leaf of the path without a resize as one 4-D tensor, from every form a
        collate makes of it: a tensor; a list or tuple of equal-shaped samples (a user's collate)
        or a Ragged whose samples have one shape, stacked (one copy); ``[N, H, W]`` (or samples
        ``[H, W]``) with one value of mean/std: one-channel images."""
        what = "FusedAugment's image leaf %s" % _name(self.image_key)
        if isinstance(images, (list, tuple, Ragged)):
            items = images.tensors() if isinstance(images, Ragged) else as_samples(images, what)
            shapes = {tuple(t.shape) for t in items}
            if len(shapes) > 1:
                raise TypeError(
                    "prefetch: %s is a %s (%d images of different sizes); without a resize "
                    "FusedAugment takes images of one size (these are %s, ...): pass "
                    "random_resized_crop=size (training) or crop=, resize=, center_crop=True "
                    "(validation)"
                    % (what, "prefetch.Ragged" if isinstance(images, Ragged) else
                       type(images).__name__, len(items),
                       ", ".join(str(list(s)) for s in sorted(shapes)[:2])))
            if not items:  # an empty batch: no sample to take a shape from
                h, w = self.crop if self.crop is not None else (0, 0)
                c = len(self.mean)
                shape = (0, c, h, w) if self.layout == "NCHW" else (0, h, w, c)
                return torch.empty(shape, dtype=torch.uint8)
            images = torch.stack(items)
        if isinstance(images, torch.Tensor) and images.dim() == 3 and len(self.mean) == 1 \
                and images.dtype == torch.uint8:
            return images.unsqueeze(1 if self.layout == "NCHW" else -1)
        return images

    def _layout(self, images):
        if not isinstance(images, torch.Tensor):
            raise TypeError("prefetch: FusedAugment's image leaf %s is a %s, not a uint8 tensor"
                            % (_name(self.image_key), type(images).__name__))
        if images.dtype != torch.uint8:
            raise TypeError("prefetch: FusedAugment's image leaf %s is %s; it takes uint8 images "
                            "(0-255, normalized by it): %s"
                            % (_name(self.image_key), str(images.dtype).replace("torch.", ""),
                               uint8_hint(images.dtype)))
        if images.dim() != 4:
            raise ValueError("prefetch: FusedAugment expects 4-D uint8 images, got shape %s%s"
                             % (tuple(images.shape), " ([N, H, W]: no channel dimension): "
                                + channel_hint(len(self.mean)) if images.dim() == 3 else ""))
        if self.layout != "auto":
            c = len(self.mean)
            dim = -1 if self.layout == "NHWC" else 1
            other = 1 if self.layout == "NHWC" else -1
            if images.shape[dim] != c and images.shape[other] == c:
                raise ValueError(
                    "prefetch: FusedAugment(layout=%r) got images of shape %s whose %s dimension "
                    "has the %d channels of mean/std: the layout looks wrong; these look %s "
                    "(pass layout=%r, or 'auto')" % (
                        self.layout, tuple(images.shape), "second" if other == 1 else "last", c,
                        "NCHW" if other == 1 else "NHWC", "NCHW" if other == 1 else "NHWC"))
            return self.layout
        channels = (1, 2, 3, 4)
        if images.shape[-1] not in channels and images.shape[1] in channels:
            return "NCHW"
        return "NHWC"

    def draws(self, n: int, height: Union[int, Sequence[int], torch.Tensor],
              width: Union[int, Sequence[int], torch.Tensor], epoch: int = 0, index: int = 0,
              rank: int = 0) -> Draws:
        """The geometry of one batch, a pure function of ``(seed, rank, epoch, index)``: each
        sample's flips (Bernoulli ``hflip`` / ``vflip``) and window, drawn as torchvision's
        ``RandomCrop.make_params`` draws it (torchvision/transforms/v2/_geometry.py: uniform
        over the padded image's positions) or ``RandomResizedCrop``'s
        (:func:`~prefetch.transforms.crop_boxes.random_resized_boxes`).

        Args:
            n (int): the number of samples.
            height, width (int): the images' size in pixels; on the resizing path one per image
                (a sequence or 1-D tensor of ``n``) or one for all.
            epoch, index, rank (int): the batch's :class:`~prefetch.transforms.BatchPosition`.

        Returns:
            Draws: on the CPU; ``offsets`` None for a centred or whole-image window, ``boxes``
            set on the resizing path.

        Raises:
            ValueError: the crop is larger than the padded image (without ``pad_if_needed``),
                the padding leaves more than ``2**62`` window positions on a side, or the
                resizing path gets ``height``/``width`` of another count than ``n`` or an image
                its ``resize``/``max_size`` make smaller than the crop.
        """
        g = BatchPosition(epoch, index, rank).generator(self.seed)
        hflip = torch.rand(n, generator=g) < self.hflip
        vflip = torch.rand(n, generator=g) < self.vflip
        if self.resizes:  # height and width: one per image (or one for all), as tensors
            boxes = self.draw_boxes(_per_image(height, n), _per_image(width, n), g)
            # timm's "random": bilinear or bicubic, each with probability 1/2, per sample; drawn
            # last, so the other draws are those of a fixed interpolation.
            bicubic = (torch.rand(n, generator=g) < 0.5) if self.interpolation == "random" else None
            return Draws(hflip, vflip, self.output_size, None, boxes, None, bicubic)
        h, w = self.crop if self.crop is not None else (height, width)
        if self.center_crop or (self.crop is None and not any(self.pads)):
            return Draws(hflip, vflip, (h, w), None)
        # torchvision's RandomCrop.make_params (torchvision/transforms/v2/_geometry.py): the window
        # is drawn uniformly from the image padded by `padding`; with pad_if_needed a side still
        # shorter than the crop gets the difference again on both of its ends.
        pad_left, pad_top, pad_right, pad_bottom = self.pads
        padded_h = height + pad_top + pad_bottom
        padded_w = width + pad_left + pad_right
        if self.pad_if_needed and padded_h < h:
            pad_top, padded_h = pad_top + h - padded_h, padded_h + 2 * (h - padded_h)
        if self.pad_if_needed and padded_w < w:
            pad_left, padded_w = pad_left + w - padded_w, padded_w + 2 * (w - padded_w)
        span_h, span_w = padded_h - h, padded_w - w
        if span_h < 0 or span_w < 0:
            raise ValueError(
                "prefetch: crop %s is larger than the image %dx%d padded by %r (torchvision's "
                "RandomCrop refuses it too; pad_if_needed=True pads it)"
                % ((h, w), height, width, self.padding))
        if max(span_h, span_w) >= 1 << 62:  # torch.randint's bound must fit an int64
            raise ValueError("prefetch: padding=%r around a %dx%d image leaves more window "
                             "positions than can be drawn (at most 2**62 per side)"
                             % (self.padding, height, width))
        top = torch.randint(0, span_h + 1, (n,), generator=g) - pad_top
        left = torch.randint(0, span_w + 1, (n,), generator=g) - pad_left
        return Draws(hflip, vflip, (h, w), torch.stack([top, left], dim=1))

    def draws_for(self, batch: Batch, position: Union[BatchPosition, Sequence[int]]) -> Draws:
        """The :class:`Draws` that :meth:`apply` makes for a batch: what a loader's batch
        ``index`` of ``epoch`` was augmented with, to log, test or replay it.

        Args:
            batch: the batch as :meth:`apply` would get it (its image leaf gives the sizes).
            position (BatchPosition or tuple): the position, or ``(epoch, index[, rank])``.

        Returns:
            Draws: on the CPU: each sample's flips and crop offsets, or, on the resizing path,
            each image's window (``boxes``: top, left, height, width in its own pixels; for
            ``decode=True`` read from the JPEG headers).

        Raises:
            TypeError, ValueError: the image leaf is not what :meth:`apply` takes (as
                :meth:`apply` raises them).
        """
        if not isinstance(position, BatchPosition):
            position = BatchPosition(*position)
        images = get_leaf(batch, self.image_key)
        if not self.resizes:
            images = self._fixed_images(images)
            height, width = self.image_size(images)
            return self.draws(images.shape[0], height, width, *position)
        if self.decode:
            from ..ops.decode import encoded_batch, jpeg_sizes

            sizes = jpeg_sizes(encoded_batch(images)).tolist()
            shapes = [(h, w) for h, w, _ in sizes]
        else:
            shapes = [s[:2] for s in as_ragged(images, "FusedAugment's image leaf",
                                               len(self.mean)).shapes()]
        return self.draws(len(shapes), [h for h, _ in shapes], [w for _, w in shapes], *position)

    def image_size(self, images: torch.Tensor) -> Tuple[int, int]:
        """The size of the images of a batch.

        Args:
            images (Tensor[N, H, W, C] or Tensor[N, C, H, W], uint8): in this transform's
                layout (``"auto"``: as :meth:`apply` reads it).

        Returns:
            tuple[int, int]: ``(height, width)`` in pixels.

        Raises:
            TypeError: ``images`` is not a uint8 tensor.
            ValueError: ``images`` is not 4-D, or a forced layout looks wrong (its channel
                dimension does not hold ``len(mean)`` channels while the other one does).
        """
        layout = self._layout(images)
        return (images.shape[1], images.shape[2]) if layout == "NHWC" else tuple(images.shape[2:])

    @property
    def gathers(self):
        """The image leaf and the mask leaf (if any): the ArrayLoader's device path hands them
        over whole and :meth:`gather` gathers their rows inside the kernels."""
        return (self.image_key,) if self.mask_key is None else (self.image_key, self.mask_key)

    def apply(self, batch: Batch, position: BatchPosition) -> Batch:
        """Draws the geometry of the batch at ``position`` (:meth:`draws`) and applies it with
        :func:`prefetch.ops.normalize_flip` (the mask leaf with :func:`prefetch.ops.flip_crop`)
        or, on the resizing path, :func:`prefetch.ops.resized_crop` /
        :func:`prefetch.ops.decode_resized_crop`.

        Args:
            batch: the batch; its image leaf a uint8 ``Tensor[N, H, W, C]`` or
                ``Tensor[N, C, H, W]`` (or a list / Ragged of samples, see the class), its mask
                leaf (``mask_key``) an integer ``Tensor[N, H, W]`` or ``Tensor[N, 1, H, W]``.
            position (BatchPosition): where the batch sits.

        Returns:
            The batch with the image leaf replaced by ``Tensor[N, C, h, w]`` of ``dtype`` and
            the mask leaf by the cropped and flipped masks (same dtype, ``[N, h, w]`` or
            ``[N, 1, h, w]``).

        Raises:
            KeyError: the batch has no ``image_key`` / ``mask_key`` leaf.
            TypeError: the image leaf is not uint8 images (or images of several sizes without a
                resizing path); the mask leaf is not an integer tensor.
            ValueError: the images' channels differ from ``len(mean)``, a 3-D or 5-D image
                leaf, masks whose N, H, W differ from the images', a crop larger than the padded
                image.
        """
        images = get_leaf(batch, self.image_key)
        if self.resizes:
            return self.apply_resizing(batch, images, position)
        images = self._fixed_images(images)
        batch = set_leaf(batch, self.image_key, images)
        return self._apply_draws(batch, self._device_draws(images, None, position))

    @property
    def host_stage(self):
        """Only ``decode=True`` has work before the copy: a loader calls :meth:`host_apply` then
        alone (a ``Compose`` may put other transforms ahead of one that has none)."""
        return self.decode

    def host_stage_for(self, device: Union[torch.device, str]) -> bool:
        """Whether a loader runs :meth:`host_apply` before copying to ``device``. Decoding
        before the copy is for a GPU only (or a device a registered fake GPU decoder serves,
        ``prefetch.ops.gpu_decoders.FakeGpuBackend``: the GPU path run on a CPU): on the CPU a
        loader hands the encoded batch to the engine as it is (an ArrayLoader's byte ranges are
        gathered in C++) and :meth:`apply` decodes it.

        Args:
            device (torch.device): where the loader copies.

        Returns:
            bool: True with ``decode=True`` and such a device.
        """
        return self.decode and may_serve(device)

    def host_apply(self, batch: Batch, position: BatchPosition,
                   device: Union[torch.device, str]) -> Batch:
        """The host stage (:mod:`prefetch.transforms.contract`): with ``decode=True`` and a CUDA
        ``device``, the drawn windows are decoded here, before the copy, so that the encoded
        bytes never cross to the device and back; otherwise nothing (the device kernels do all
        the work).

        Args:
            batch: the batch on the host; its image leaf the encoded JPEGs.
            position (BatchPosition): where the batch sits (the draws :meth:`apply` would make).
            device (torch.device or str): where the loader copies.

        Returns:
            The batch, its image leaf replaced by the decoded windows
            (:class:`~prefetch.transforms.resizing.DecodedWindows`) when decoding here.

        Raises:
            TypeError: the image leaf is not encoded bytes (a Ragged of 1-D uint8 samples or
                an ``[N, L]`` uint8 tensor).
            ValueError: ``mean`` has not 3 values (decoding gives RGB).
            RuntimeError: a sample is not a JPEG the decoder reads (naming the sample).
        """
        if not self.host_stage_for(torch.device(device)):
            return batch
        return self.decode_on_host(batch, position, device)

    def gather(self, batch: Batch, indices: torch.Tensor, position: BatchPosition) -> Batch:
        """:meth:`apply` on rows ``indices`` of the whole image (and mask) leaf, gathered by the
        kernels in the same pass; the loader gathered the other leaves.

        Args:
            batch: the image (and mask) leaf the whole dataset's tensor, on the device.
            indices (Tensor[B], int64): the batch's rows, on the device.
            position (BatchPosition): where the batch sits.

        Returns:
            What :meth:`apply` returns for the gathered batch.

        Raises:
            TypeError, ValueError: as :meth:`apply`.
        """
        images = get_leaf(batch, self.image_key)
        if self.resizes:  # the windows differ per image: gather the rows, then resize them
            batch = set_leaf(batch, self.image_key, images.index_select(0, indices))
            if self.mask_key is not None:
                masks = get_leaf(batch, self.mask_key)
                batch = set_leaf(batch, self.mask_key, masks.index_select(0, indices))
            return self.apply_resizing(batch, get_leaf(batch, self.image_key), position)
        if isinstance(images, torch.Tensor) and images.dim() == 3:  # one-channel [N, H, W]: a view
            images = self._fixed_images(images)
            batch = set_leaf(batch, self.image_key, images)
        return self._apply_draws(batch, self._device_draws(images, indices.numel(), position),
                                 indices=indices)

    def _device_draws(self, images, n, position):
        """The draws for ``n`` samples (None: the image batch's) on the images' device."""
        height, width = self.image_size(images)  # checks the leaf first
        n = images.shape[0] if n is None else n
        d = self.draws(n, height, width, position.epoch, position.index, position.rank)
        return d if images.device.type == "cpu" else d.to(images.device)

    def _apply_draws(self, batch, d, indices=None):
        """Applies draws ``d`` (from :meth:`draws`, on the batch's device). With ``indices``, the
        image and mask leaves are whole datasets and the kernels gather those samples."""
        images = get_leaf(batch, self.image_key)
        layout = self._layout(images)
        masks = None if self.mask_key is None else get_leaf(batch, self.mask_key)
        if isinstance(masks, (list, tuple, Ragged)):  # a user's collate: one mask per sample
            masks = self._mask_batch(masks, images, layout)
        if masks is not None:
            masks = self._check_masks(images, layout, masks)
        channels = images.shape[-1] if layout == "NHWC" else images.shape[1]
        if channels != len(self.mean):
            raise ValueError("prefetch: mean and std have %d values but the images (leaf %s, shape "
                             "%s, layout %s) have %d channels"
                             % (len(self.mean), _name(self.image_key), tuple(images.shape), layout,
                                channels))
        out = normalize_flip(images, self.mean, self.std, hflip=d.hflip, vflip=d.vflip,
                             crop=d.crop, offsets=d.offsets, fill=self.fill, dtype=self.dtype,
                             layout=layout, channels_last=self.channels_last, indices=indices)
        batch = set_leaf(batch, self.image_key, out)
        if masks is not None:
            squeeze = masks.dim() == 4
            m = flip_crop(masks[:, 0] if squeeze else masks, hflip=d.hflip, vflip=d.vflip,
                          crop=d.crop, offsets=d.offsets, fill=self.mask_fill, indices=indices)
            batch = set_leaf(batch, self.mask_key, m.unsqueeze(1) if squeeze else m)
        return batch

    def _mask_batch(self, masks, images, layout):
        """A list, tuple or Ragged of masks (one per image, each its image's size) stacked into
        one tensor; masks of different sizes are refused by :meth:`_check_masks`' rules."""
        what = "the mask leaf %s" % _name(self.mask_key)
        items = masks.tensors() if isinstance(masks, Ragged) else as_samples(masks, what)
        if not items:
            hw = tuple(images.shape[1:3] if layout == "NHWC" else images.shape[2:])
            return torch.empty((0,) + hw, dtype=masks.dtype if isinstance(masks, Ragged) else torch.uint8)
        shapes = sorted({tuple(t.shape) for t in items})
        if len(shapes) > 1:
            raise ValueError("prefetch: %s holds masks of different shapes (%s); each must be its "
                             "image's size" % (what, ", ".join(str(list(s)) for s in shapes[:3])))
        return torch.stack(items)

    def _check_masks(self, images, layout, masks):
        """The mask leaf gets the image's geometry: it must be an integer [N, H, W] or
        [N, 1, H, W] tensor with the image's N, H and W, on its device."""
        mk, ik = _name(self.mask_key), _name(self.image_key)
        if not isinstance(masks, torch.Tensor):
            raise TypeError("prefetch: the mask leaf %s is a %s, not a tensor"
                            % (mk, type(masks).__name__))
        if masks.dim() not in (3, 4) or (masks.dim() == 4 and masks.shape[1] != 1):
            raise ValueError("prefetch: the mask leaf %s must be [N, H, W] or [N, 1, H, W] (one "
                             "label per pixel), got shape %s" % (mk, tuple(masks.shape)))
        if masks.dtype not in MASK_DTYPES:
            raise TypeError("prefetch: the mask leaf %s is %s; masks must be uint8, int16, int32 "
                            "or int64" % (mk, str(masks.dtype).replace("torch.", "")))
        if masks.device != images.device:
            raise ValueError("prefetch: the mask leaf %s is on %s, the image leaf %s on %s"
                             % (mk, masks.device, ik, images.device))
        n, mh, mw = masks.shape[0], masks.shape[-2], masks.shape[-1]
        h, w = (images.shape[1], images.shape[2]) if layout == "NHWC" else tuple(images.shape[2:])
        if n != images.shape[0]:
            raise ValueError("prefetch: the mask leaf %s has %d samples, the image leaf %s has %d"
                             % (mk, n, ik, images.shape[0]))
        if (mh, mw) != (h, w):
            raise ValueError("prefetch: the mask leaf %s is %dx%d (HxW, shape %s) but the image "
                             "leaf %s is %dx%d (shape %s, layout %s); the mask would be cropped "
                             "and flipped with the image's offsets" % (
                                 mk, mh, mw, tuple(masks.shape), ik, h, w, tuple(images.shape),
                                 layout))
        info = torch.iinfo(masks.dtype)
        if not info.min <= self.mask_fill <= info.max:
            raise ValueError("prefetch: mask_fill=%d does not fit the mask leaf %s's dtype %s "
                             "([%d, %d]); it would be written as another label"
                             % (self.mask_fill, mk, str(masks.dtype).replace("torch.", ""),
                                info.min, info.max))
        return masks
