"""GaussianBlurAugment: torchvision's ``GaussianBlur`` (and ``RandomApply([GaussianBlur(...)], p)``,
as the self-supervised recipes write it) with each sample's own draw, applied to a batch of uint8
images on its device by one fused blur (:func:`prefetch.ops.gaussian_blur`).

torchvision draws one sigma per call (``torch.empty(1).uniform_(min, max).item()``, used for both
sides: ``torchvision/transforms/v2/_misc.py``, ``GaussianBlur.make_params``): per image in the
DataLoader's workers, per batch when it is given a batch. Here each sample draws whether it is
blurred (probability ``p``, RandomApply's ``torch.rand(1) < p``) and its sigma, uniform in
``sigma``, from the batch's generator (``BatchPosition(epoch, index, rank).generator(seed)``), so
the draws are a pure function of ``(seed, rank, epoch, index)`` and resume, DataLoader workers and
DDP keep working.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple, Union

import torch

from ..ops.filters import gaussian_blur
from . import arguments
from .contract import BatchPosition, LeafKey, check_image_layout
from .uint8_stage import Uint8Stage

__all__ = ["GaussianBlurAugment", "BlurDraws", "kernel_size_pair", "sigma_range"]


def kernel_size_pair(cls: str, kernel_size: Union[int, Sequence[int]]) -> Tuple[int, int]:
    """torchvision's ``_setup_size`` for a blur: an int k is ``(k, k)``, a sequence of one or two
    ints ``(x, y)``; each odd and positive.

    Raises:
        ValueError: anything else, naming ``cls`` (its TypeError subclass for a wrong type).
    """
    expected = "an odd positive int or a sequence of one or two (x, y)"
    values = list(kernel_size) if isinstance(kernel_size, (list, tuple)) else [kernel_size]
    if len(values) not in (1, 2):
        arguments.fail(cls, "kernel_size", expected, kernel_size)
    sizes = [arguments.integer(cls, "kernel_size", k, low=1, expected=expected) for k in values]
    if any(k % 2 == 0 for k in sizes):
        arguments.fail(cls, "kernel_size", expected, kernel_size)
    return (sizes[0], sizes[-1])


def sigma_range(cls: str, sigma: Union[float, Sequence[float]]) -> Tuple[float, float]:
    """torchvision's ``_setup_number_or_seq`` for a blur's sigma: a number s is ``(s, s)``, a
    sequence of one or two ``(min, max)``, with ``0 < min <= max``.

    Raises:
        ValueError: anything else, naming ``cls`` (its TypeError subclass for a wrong type).
    """
    if arguments.is_number(sigma):
        s = arguments.number(cls, "sigma", sigma, low=0.0, low_open=True)
        low, high = s, s
    elif isinstance(sigma, (list, tuple)) and len(sigma) == 1:
        s = arguments.number(cls, "sigma", sigma[0], low=0.0, low_open=True)
        low, high = s, s
    else:
        low, high = arguments.number_pair(cls, "sigma", sigma, low=0.0, low_open=True)
    if float(torch.tensor(low, dtype=torch.float32)) == 0.0:  # the draws are float32
        arguments.fail(cls, "sigma", "values > 0 in float32 (at least 1.4e-45)", sigma)
    return (low, high)


@dataclass(frozen=True)
class BlurDraws:
    """Each sample's draw: ``applied`` (bool ``[N]``) and ``sigma`` (float64 ``[N]``, pixels; the
    value torchvision's float32 ``uniform_`` would hold)."""

    applied: torch.Tensor
    sigma: torch.Tensor


class GaussianBlurAugment(Uint8Stage):
    """Each sample of the batch's uint8 image leaf blurred with probability ``p`` by torchvision's
    ``gaussian_blur`` with its own sigma: one fused blur for the samples drawn.

    Args:
        kernel_size (int or (int, int)): the taps along x and y, odd and positive (torchvision's
            ``GaussianBlur(kernel_size)``; ``kernel_size // 2`` must be below the images' sides).
        sigma (float or (float, float)): the sigma's range in pixels, ``0 < min <= max``
            (torchvision's default (0.1, 2.0)).
        p (float): the probability of blurring an image (1: torchvision's ``GaussianBlur``; p:
            ``RandomApply([GaussianBlur(...)], p)``).
        seed (int, optional): the draws are a function of ``(seed, rank, epoch, batch index)``;
            None picks a fresh seed, which the loader's ``state_dict()`` saves.
        image_key (int or str): which leaf is the uint8 image batch.
        layout (str): ``"NCHW"``, ``"NHWC"`` or ``"auto"``; the result keeps the layout.
        name (str): the class its refusals name (a front end's: ``"GaussianBlur"``).

    Raises:
        ValueError: an argument outside those, naming it (its TypeError subclass for a wrong
            type).
    """

    what_draws = "blur draws"

    def __init__(self, kernel_size: Union[int, Sequence[int]], sigma: Union[float, Sequence[float]] = (0.1, 2.0),
                 *, p: float = 1.0, seed: Optional[int] = None, image_key: LeafKey = 0, layout: str = "auto",
                 name: str = "GaussianBlurAugment") -> None:
        self.kernel_size = kernel_size_pair(name, kernel_size)
        self.sigma = sigma_range(name, sigma)
        self.p = arguments.probability(name, "p", p)
        self.image_key = arguments.leaf_key(name, "image_key", image_key)
        check_image_layout(layout)
        self.layout = layout
        self._set_seed(seed)

    def __repr__(self) -> str:
        return "GaussianBlurAugment(kernel_size=%r, sigma=%r, p=%r, seed=%d)" % (
            self.kernel_size, self.sigma, self.p, self.seed)

    def draws(self, n: int, epoch: int = 0, index: int = 0, rank: int = 0) -> BlurDraws:
        """Each sample's draw for one batch: first whether it is blurred, then its sigma.

        Args:
            n (int): the number of images.
            epoch, index, rank (int): the batch's :class:`~prefetch.transforms.BatchPosition`.

        Returns:
            BlurDraws: ``applied`` bool ``[n]``, ``sigma`` float64 ``[n]``.
        """
        g = BatchPosition(epoch, index, rank).generator(self.seed)
        applied = torch.rand(n, generator=g, dtype=torch.float64) < self.p
        low, high = self.sigma
        # float32, as torchvision's torch.empty(1).uniform_(min, max) holds it
        sigma = (low + (high - low) * torch.rand(n, generator=g, dtype=torch.float64)).float().double()
        return BlurDraws(applied, sigma)

    def augment(self, x: torch.Tensor, position: BatchPosition) -> torch.Tensor:
        # the drawn samples blurred, each with its sigma; the others as they are
        d = self.draws(x.shape[0], *position)
        # The sigmas stay on the CPU: the op's kernels are computed there and then moved.
        if bool(d.applied.all()):
            return gaussian_blur(x, self.kernel_size, d.sigma)
        out = x.clone(memory_format=torch.contiguous_format)  # x is a view, not to be written
        if not bool(d.applied.any()):
            return out
        picked = d.applied.nonzero().view(-1).to(x.device)
        out[picked] = gaussian_blur(x.index_select(0, picked), self.kernel_size, d.sigma[d.applied])
        return out
