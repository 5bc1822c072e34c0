"""The base of the transforms that augment a batch's uint8 image leaf (1 or 3 channels, NCHW or
NHWC) sample by sample and return uint8 of the same shape: the policies (PolicyAugment), the
warps (AffineAugment) and AugMix. It finds the leaf, checks it and views it as NCHW, and puts the
result back in the leaf's layout; a subclass implements :meth:`Uint8Stage.augment`.
"""
from __future__ import annotations

import torch

from .contract import Batch, BatchPosition, SeededTransform, from_nchw, get_leaf, set_leaf, uint8_nchw

__all__ = ["Uint8Stage"]


class Uint8Stage(SeededTransform):
    """A seeded transform of the uint8 image leaf ``image_key`` (an attribute the subclass sets,
    with ``layout`` and ``fill``, None where it has none)."""

    image_key: object = 0
    layout: str = "auto"
    fill: object = None

    def augment(self, x: torch.Tensor, position: BatchPosition) -> torch.Tensor:
        """The augmented images.

        Args:
            x (Tensor[N, C, H, W], uint8): the images, C 1 or 3 (a view: not written).
            position (BatchPosition): where the batch sits (the draws' key).

        Returns:
            Tensor[N, C, H, W], uint8.
        """
        raise NotImplementedError

    def apply(self, batch: Batch, position: BatchPosition) -> Batch:
        """Each sample through its own draw (:meth:`augment`).

        Args:
            batch: the batch; its image leaf a uint8 ``Tensor[N, C, H, W]`` or
                ``Tensor[N, H, W, C]`` with C 1 or 3.
            position (BatchPosition): where the batch sits.

        Returns:
            The batch with the image leaf replaced (uint8, same shape and layout).

        Raises:
            KeyError: the batch has no ``image_key`` leaf.
            ValueError: the leaf is not a 4-D uint8 tensor of 1 or 3 channels, or ``fill`` has
                neither 1 nor C values.
        """
        x, layout = uint8_nchw(type(self).__name__, get_leaf(batch, self.image_key), self.layout,
                               self.image_key, self.fill)
        return set_leaf(batch, self.image_key, from_nchw(self.augment(x, position), layout))
