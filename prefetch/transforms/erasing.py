"""RandomErasing with each sample's own box: torchvision v2's ``RandomErasing`` (from Zhong et al.,
"Random Erasing Data Augmentation", AAAI 2020) — with
probability ``p`` a sample gets a rectangle of area ``scale`` of the image and aspect ``ratio``
(log-uniform), found in at most 10 tries, filled with ``value`` (a number, one per channel, or
``"random"``: standard normal noise) — drawn for every sample of the batch at once from the
batch's position, and written with one masked pass on the batch's device. It goes where
torchvision's recipes put it: after ``Normalize``, on the float images FusedAugment returns
(uint8 images work too, as torchvision's ``erase`` casts the value)."""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple, Union

import torch

from . import arguments
from .contract import (Batch, BatchPosition, LeafKey, SeededTransform, as_nchw,
                       check_image_layout, describe_tensor, from_nchw, get_leaf, set_leaf)

__all__ = ["RandomErasing"]

_TRIES = 10  # torchvision's RandomErasing.make_params tries 10 boxes before giving up


class RandomErasing(SeededTransform):
    """Each sample of the batch's image leaf (``Tensor[N, C, H, W]`` or ``Tensor[N, H, W, C]``,
    float or uint8) erased with probability ``p`` by its own box.

    Args:
        p (float): each sample's probability of being erased, in [0, 1].
        scale (tuple[float, float]): ``(min, max)`` of the box's area as a fraction of the
            image's, in [0, 1].
        ratio (tuple[float, float]): ``(min, max)`` of the box's aspect ratio (height / width),
            above 0, drawn log-uniformly. The defaults are torchvision's
            ``RandomErasing``'s (``p=0.5``, ``scale=(0.02, 0.33)``, ``ratio=(0.3, 3.3)``).
        value (float, sequence of float or str): the fill: a number, one per channel, or
            ``"random"`` (standard normal noise, per pixel).
        seed (int, optional): the draws are a function of ``(seed, rank, epoch, batch index)``;
            None picks a fresh seed, which the loader's ``state_dict()`` saves.
        image_key (int or str): which leaf is the image batch.
        layout (str): ``"NCHW"``, ``"NHWC"`` or ``"auto"`` (NHWC when the last dimension is 1 or
            3 and the second is not); the result keeps the layout.

    The arguments are checked when it is built, as torchvision's constructor checks them and
    more strictly: ``p`` in [0, 1]; ``scale`` ``(min, max)`` in [0, 1]; ``ratio`` ``(min, max)``
    above 0; both finite with ``min <= max`` (torchvision only warns at ``min > max``); ``value``
    finite.

    Raises:
        ValueError: a bad argument, naming it (its TypeError subclass
            :class:`~prefetch.transforms.arguments.ArgumentTypeError` for a wrong type).
    """

    what_draws = "erasing boxes"

    def __init__(self, p: float = 0.5, scale: Tuple[float, float] = (0.02, 0.33),
                 ratio: Tuple[float, float] = (0.3, 3.3),
                 value: Union[float, Sequence[float], str] = 0.0, *, seed: Optional[int] = None,
                 image_key: LeafKey = 0, layout: str = "auto") -> None:
        p = arguments.probability("RandomErasing", "p", p)
        scale = arguments.number_pair("RandomErasing", "scale", scale, low=0.0, high=1.0)
        ratio = arguments.number_pair("RandomErasing", "ratio", ratio, low=0.0, low_open=True)
        expected = "a finite number, one per channel, or 'random'"
        if isinstance(value, str):
            arguments.one_of("RandomErasing", "value", value, ("random",), expected)
            self.value = None
        elif arguments.is_number(value):
            self.value = [arguments.number("RandomErasing", "value", value, expected=expected)]
        else:
            self.value = arguments.numbers_list("RandomErasing", "value", value, expected=expected)
        image_key = arguments.leaf_key("RandomErasing", "image_key", image_key)
        check_image_layout(layout)
        self.p, self.scale, self.ratio = p, scale, ratio
        self.image_key, self.layout = image_key, layout
        self._set_seed(seed)

    def __repr__(self):
        return "RandomErasing(p=%g, scale=%s, ratio=%s, value=%s, seed=%d)" % (
            self.p, self.scale, self.ratio, "'random'" if self.value is None else self.value,
            self.seed)

    def boxes(self, n: int, height: int, width: int, epoch: int = 0, index: int = 0,
              rank: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
        """Each sample's box, drawn as torchvision's ``RandomErasing.make_params``
        (torchvision/transforms/v2/_augment.py): area uniform in ``scale``, aspect ratio
        log-uniform in ``ratio``, the first of 10 tries that fits, a uniform corner.

        Args:
            n (int): the number of samples.
            height, width (int): the images' size in pixels.
            epoch, index, rank (int): the batch's :class:`~prefetch.transforms.BatchPosition`.

        Returns:
            tuple: ``(erase, boxes)`` on the CPU: ``Tensor[n]`` bool (erased: drawn with
            probability ``p`` and a try fitted), ``Tensor[n, 4]`` int64 top, left, height, width
            (meaningful where ``erase``).
        """
        g = BatchPosition(epoch, index, rank).generator(self.seed)
        chosen = torch.rand(n, generator=g, dtype=torch.float64) < self.p
        area = float(height * width)
        scale = torch.empty(n, _TRIES, dtype=torch.float64).uniform_(*self.scale, generator=g)
        log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        aspect = torch.exp(torch.empty(n, _TRIES, dtype=torch.float64).uniform_(*log_ratio,
                                                                                generator=g))
        h = torch.round(torch.sqrt(area * scale * aspect)).to(torch.int64)
        w = torch.round(torch.sqrt(area * scale / aspect)).to(torch.int64)
        fits = (h < height) & (w < width)
        first = fits.to(torch.int8).argmax(dim=1, keepdim=True)  # the first try that fits
        h, w = h.gather(1, first).squeeze(1), w.gather(1, first).squeeze(1)
        top = (torch.rand(n, generator=g, dtype=torch.float64) * (height - h + 1)).floor()
        left = (torch.rand(n, generator=g, dtype=torch.float64) * (width - w + 1)).floor()
        erase = chosen & fits.any(dim=1)
        return erase, torch.stack([top.to(torch.int64), left.to(torch.int64), h, w], dim=1)

    def apply(self, batch: Batch, position: BatchPosition) -> Batch:
        """Erases each chosen sample's box (:meth:`boxes`) in one masked pass.

        Args:
            batch: the batch; its image leaf ``Tensor[N, C, H, W]`` or ``Tensor[N, H, W, C]``,
                float or uint8 (the fill cast to its dtype, as torchvision's ``erase``).
            position (BatchPosition): where the batch sits.

        Returns:
            The batch with the image leaf replaced (same shape, dtype and layout).

        Raises:
            KeyError: the batch has no ``image_key`` leaf.
            ValueError: the leaf is not a 4-D tensor, or ``value`` has neither 1 nor C numbers.
        """
        images = get_leaf(batch, self.image_key)
        if not isinstance(images, torch.Tensor) or images.dim() != 4:
            raise ValueError("prefetch: RandomErasing takes an image batch [N, C, H, W] or "
                             "[N, H, W, C] at leaf %r, got %s" % (self.image_key, describe_tensor(images)))
        x, layout = as_nchw(images, self.layout)
        n, c, h, w = x.shape
        if self.value is not None and len(self.value) not in (1, c):
            raise ValueError("prefetch: RandomErasing's value has %d numbers; the images at leaf "
                             "%r have %d channels" % (len(self.value), self.image_key, c))
        erase, boxes = self.boxes(n, h, w, *position)
        dev = x.device
        boxes, erase = boxes.to(dev), erase.to(dev)
        rows = torch.arange(h, device=dev).view(1, h, 1)
        cols = torch.arange(w, device=dev).view(1, 1, w)
        top, left, bh, bw = (boxes[:, k].view(n, 1, 1) for k in range(4))
        mask = ((rows >= top) & (rows < top + bh) & (cols >= left) & (cols < left + bw)
                & erase.view(n, 1, 1)).unsqueeze(1)
        if self.value is None:
            device_g = torch.Generator(device=dev).manual_seed(position_seed(self.seed, position))
            fill = torch.randn(x.shape, generator=device_g, device=dev).to(x.dtype)
        else:
            fill = torch.tensor(self.value, device=dev).view(1, -1, 1, 1).to(x.dtype)
        return set_leaf(batch, self.image_key, from_nchw(torch.where(mask, fill, x), layout))


def position_seed(seed: int, position: BatchPosition) -> int:
    """The seed of ``value="random"``'s noise: the position's own, apart from the boxes' stream.

    Args:
        seed (int): the transform's seed.
        position (BatchPosition or tuple): the batch's position.

    Returns:
        int: a 63-bit seed.
    """
    return BatchPosition(*position).seed(seed ^ 0x5EED_E7A5)
