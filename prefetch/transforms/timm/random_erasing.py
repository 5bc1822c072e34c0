"""timm's ``RandomErasing`` (``timm/data/random_erasing.py``; Zhong et al., "Random Erasing Data
Augmentation", AAAI 2020) with each sample's own boxes drawn for the whole batch at once from
the batch's position, and written with a masked pass per box on the batch's device.

timm's differs from torchvision's (:class:`prefetch.transforms.RandomErasing`): its fill modes
(``const`` zeros, ``rand`` one normal colour per box and channel, ``pixel`` normal noise per
pixel), up to ``max_count`` boxes per image (the count uniform in ``[min_count, max_count]``,
each box's area divided by it), its aspect range ``(min_aspect, 1 / min_aspect)`` and area range
``(0.02, 1/3)``, and ``num_splits`` (the first ``N // num_splits`` samples, AugMix's clean split,
left alone). It goes where timm puts it: after the normalisation, on the float images
FusedAugment returns (timm's ``PrefetchLoader`` erases the normalized batch on the GPU)."""
from __future__ import annotations

import math
from typing import Optional

import torch

from .. import arguments
from ..contract import (Batch, BatchPosition, LeafKey, SeededTransform, as_nchw, check_image_layout,
                        describe_tensor, from_nchw, get_leaf, set_leaf)

__all__ = ["RandomErasing"]

_TRIES = 10  # timm's _erase tries 10 boxes before giving up on one
_MODES = ("const", "rand", "pixel")


class RandomErasing(SeededTransform):
    """Each sample of the image leaf (``Tensor[N, C, H, W]``, float; uint8 only with ``const``)
    erased with probability ``probability`` by 1 to ``max_count`` boxes of its own.

    The arguments are timm's (``timm.data.RandomErasing``), with its defaults; ``device`` is
    accepted and ignored (the batch's device is used).

    Args:
        probability (float): each sample's probability of being erased, in [0, 1].
        min_area, max_area (float): the range of a box's area as a fraction of the image's,
            ``0 <= min_area <= max_area <= 1``; with ``count`` boxes each is ``1 / count`` of it.
        min_aspect (float): > 0; the aspect ratio (height / width) is log-uniform in
            ``(min_aspect, max_aspect)``.
        max_aspect (float, optional): None: ``1 / min_aspect``.
        mode (str): ``"const"`` (0), ``"rand"`` (a standard normal colour per box and channel)
            or ``"pixel"`` (standard normal noise per pixel); any case, ``""`` is ``"const"``.
        min_count (int): >= 1.
        max_count (int, optional): >= min_count; None: ``min_count``. A sample's count is
            uniform in ``[min_count, max_count]``.
        num_splits (int): > 1: the first ``N // num_splits`` samples of the batch are left
            alone (AugMix's clean split); 0 or 1: none.
        seed (int, optional): the draws are a function of ``(seed, rank, epoch, batch index)``;
            None picks a fresh seed, which the loader's ``state_dict()`` saves.
        image_key (int or str): which leaf is the image batch.
        layout (str): ``"NCHW"`` (timm's), ``"NHWC"`` or ``"auto"``; the result keeps it.
        inplace (bool): True: on the CPU, the boxes are written into the leaf itself (timm's
            RandomErasing always erases in place), which is returned; for a caller that owns the
            batch (``create_transform``'s and ``prefetch.timm.create_loader``'s recipes: their
            float images are their own new tensors). False (prefetch's default): the leaf is
            never written; a copy of it is erased (a whole batch's copy, ~0.35 ms an image at
            224 in float32, batch 64, on the 2-core VM, where the boxes cost ~0.01 ms). On a device the
            batch is erased out of place either way (one masked pass a box slot).

    The boxes are drawn as timm's ``_erase`` draws them: for each box, up to 10 tries of an area
    ``uniform(min_area, max_area) * H * W / count`` and an aspect ``exp(uniform(log min_aspect,
    log max_aspect))``, ``h = round(sqrt(area * aspect))``, ``w = round(sqrt(area / aspect))``,
    the first with ``h < H`` and ``w < W`` kept, its corner uniform over the positions that fit
    (a box that finds none is skipped). Later boxes are written over earlier ones, as timm's.
    The random streams are the batch's, not Python's ``random``: the draws equal timm's in
    distribution, not draw for draw.

    Raises:
        ValueError: an argument out of range, naming it (its TypeError subclass
            :class:`~prefetch.transforms.arguments.ArgumentTypeError` for a wrong type).
    """

    what_draws = "erasing boxes"

    def __init__(self, probability: float = 0.5, min_area: float = 0.02, max_area: float = 1 / 3,
                 min_aspect: float = 0.3, max_aspect: Optional[float] = None, mode: str = "const",
                 min_count: int = 1, max_count: Optional[int] = None, num_splits: int = 0,
                 device: object = None, *, seed: Optional[int] = None, image_key: LeafKey = 0,
                 layout: str = "NCHW", inplace: bool = False) -> None:
        cls = "RandomErasing"
        self.inplace = arguments.flag(cls, "inplace", inplace)
        self.probability = arguments.probability(cls, "probability", probability)
        self.min_area = arguments.number(cls, "min_area", min_area, low=0.0, high=1.0)
        self.max_area = arguments.number(cls, "max_area", max_area, low=self.min_area, high=1.0,
                                         expected="a number in [min_area, 1]")
        self.min_aspect = arguments.number(cls, "min_aspect", min_aspect, low=0.0, low_open=True)
        self.max_aspect = (1.0 / self.min_aspect if max_aspect is None else
                           arguments.number(cls, "max_aspect", max_aspect, low=self.min_aspect,
                                            expected="a number >= min_aspect"))
        self.log_aspect_ratio = (math.log(self.min_aspect), math.log(self.max_aspect))
        if not isinstance(mode, str):
            arguments.fail(cls, "mode", "'const', 'rand' or 'pixel'", mode, arguments.ArgumentTypeError)
        self.mode = arguments.one_of(cls, "mode", mode.lower() or "const", _MODES,
                                     "'const', 'rand' or 'pixel'")
        self.min_count = arguments.integer(cls, "min_count", min_count, low=1)
        self.max_count = (self.min_count if max_count is None else
                          arguments.integer(cls, "max_count", max_count, low=self.min_count,
                                            expected="an int >= min_count (%d)" % self.min_count))
        self.num_splits = arguments.integer(cls, "num_splits", num_splits, low=0)
        self.image_key = arguments.leaf_key(cls, "image_key", image_key)
        check_image_layout(layout)
        self.layout = layout
        self._set_seed(seed)

    def __repr__(self):
        return "RandomErasing(p=%g, mode=%s, count=(%d, %d), seed=%d)" % (
            self.probability, self.mode, self.min_count, self.max_count, self.seed)

    def boxes(self, n: int, height: int, width: int, epoch: int = 0, index: int = 0,
              rank: int = 0) -> torch.Tensor:
        """Each sample's boxes, drawn as timm's ``_erase`` draws them (the class docstring).

        Args:
            n (int): the number of samples.
            height, width (int): the images' size in pixels.
            epoch, index, rank (int): the batch's :class:`~prefetch.transforms.BatchPosition`.

        Returns:
            Tensor[n, max_count, 5], int64, on the CPU: per sample and box ``(erase, top, left,
            height, width)``; ``erase`` is 1 where the box is written (the sample drawn with
            ``probability``, the box within its count, a try fitted, the sample past the clean
            split).
        """
        g = BatchPosition(epoch, index, rank).generator(self.seed)
        k = self.max_count
        chosen = torch.rand(n, generator=g, dtype=torch.float64) <= self.probability
        count = torch.randint(self.min_count, self.max_count + 1, (n,), generator=g)
        frac = torch.empty(n, k, _TRIES, dtype=torch.float64).uniform_(self.min_area, self.max_area,
                                                                        generator=g)
        target = frac * float(height * width) / count.view(n, 1, 1).to(torch.float64)
        aspect = torch.exp(torch.empty(n, k, _TRIES, dtype=torch.float64).uniform_(
            *self.log_aspect_ratio, generator=g))
        h = torch.round(torch.sqrt(target * aspect)).to(torch.int64)
        w = torch.round(torch.sqrt(target / aspect)).to(torch.int64)
        fits = (w < width) & (h < height)
        first = fits.to(torch.int8).argmax(dim=2, keepdim=True)  # the first try that fits
        h, w = h.gather(2, first).squeeze(2), w.gather(2, first).squeeze(2)
        top = (torch.rand(n, k, generator=g, dtype=torch.float64) * (height - h + 1)).floor()
        left = (torch.rand(n, k, generator=g, dtype=torch.float64) * (width - w + 1)).floor()
        erase = chosen.view(n, 1) & (torch.arange(k).view(1, k) < count.view(n, 1)) & fits.any(dim=2)
        if self.num_splits > 1:
            erase[: n // self.num_splits] = False
        return torch.stack([erase.to(torch.int64), top.to(torch.int64), left.to(torch.int64), h, w], dim=2)

    def apply(self, batch: Batch, position: BatchPosition) -> Batch:
        """Erases each chosen sample's boxes (:meth:`boxes`), one masked pass per box slot.

        Args:
            batch: the batch; its image leaf ``Tensor[N, C, H, W]`` (or NHWC with ``layout``),
                float (uint8 too with ``mode="const"``).
            position (BatchPosition): where the batch sits.

        Returns:
            The batch with the image leaf replaced (same shape, dtype and layout).

        Raises:
            KeyError: the batch has no ``image_key`` leaf.
            ValueError: the leaf is not a 4-D tensor, or (``rand``, ``pixel``) not a float one:
                normal noise has no integer value (timm's ``normal_()`` refuses it too).
        """
        images = get_leaf(batch, self.image_key)
        if not isinstance(images, torch.Tensor) or images.dim() != 4:
            raise ValueError("prefetch: RandomErasing takes an image batch [N, C, H, W] at leaf %r, "
                             "got %s" % (self.image_key, describe_tensor(images)))
        if self.mode != "const" and not images.dtype.is_floating_point:
            raise ValueError("prefetch: RandomErasing(mode=%r) fills with normal noise, which needs "
                             "float images (after the normalisation, as timm erases them); the leaf "
                             "%r is %s" % (self.mode, self.image_key, images.dtype))
        x, layout = as_nchw(images, self.layout)
        n, c, h, w = x.shape
        drawn = self.boxes(n, h, w, *position)
        if not bool(drawn[..., 0].any()):
            return batch
        dev = x.device
        if dev.type == "cpu" and (self.inplace or self.mode == "pixel"):
            out = x if self.inplace else x.clone()
            self._erase_boxes(out, drawn, position)
            return set_leaf(batch, self.image_key, from_nchw(out, layout))
        drawn = drawn.to(dev)
        rows = torch.arange(h, device=dev).view(1, h, 1)
        cols = torch.arange(w, device=dev).view(1, 1, w)
        noise = None
        if self.mode != "const":
            from ..erasing import position_seed

            device_g = torch.Generator(device=dev).manual_seed(position_seed(self.seed, position))
            # (a device draws the whole batch's noise in one launch; the CPU, _pixel_noise's boxes)
            shape = (n, c, h, w) if self.mode == "pixel" else (n, self.max_count, c)
            noise = torch.randn(shape, generator=device_g, device=dev, dtype=torch.float32).to(x.dtype)
        out = x
        for j in range(self.max_count):
            erase, top, left, bh, bw = (drawn[:, j, f].view(n, 1, 1) for f in range(5))
            mask = ((rows >= top) & (rows < top + bh) & (cols >= left) & (cols < left + bw)
                    & (erase != 0)).unsqueeze(1)
            if self.mode == "const":
                fill = torch.zeros((), dtype=x.dtype, device=dev)
            elif self.mode == "rand":
                fill = noise[:, j].view(n, c, 1, 1)
            else:
                fill = noise
            out = torch.where(mask, fill, out)
        return set_leaf(batch, self.image_key, from_nchw(out, layout))

    def _erase_boxes(self, out, drawn, position):
        """Writes each erased box into ``out`` (NCHW, on the CPU), box slot by slot (the last box
        over a pixel decides it, as timm erases in turn). ``pixel``: each box its own standard
        normal noise, drawn box by box from one generator per batch position (only the boxes'
        pixels are drawn: noise for the whole batch cost ~1.2 ms an image at 224 on 2 cores, more
        than RandAugment; a device draws the whole batch in one launch instead); ``rand``: one
        colour per sample, box slot and channel, drawn for the batch as a device draws them;
        ``const``: zeros."""
        from ..erasing import position_seed

        n, c = out.shape[:2]
        g = torch.Generator(device=out.device).manual_seed(position_seed(self.seed, position))
        colours = None
        if self.mode == "rand":
            colours = torch.randn((n, self.max_count, c), generator=g, dtype=torch.float32).to(out.dtype)
        for j in range(self.max_count):
            for i in torch.nonzero(drawn[:, j, 0]).flatten().tolist():
                _, top, left, bh, bw = drawn[i, j].tolist()
                box = out[i, :, top:top + bh, left:left + bw]
                if self.mode == "pixel":
                    box.copy_(torch.randn((c, bh, bw), generator=g, dtype=torch.float32))
                elif self.mode == "rand":
                    box.copy_(colours[i, j].view(c, 1, 1).expand_as(box))
                else:
                    box.zero_()
