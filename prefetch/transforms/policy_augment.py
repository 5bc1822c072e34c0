"""PolicyAugment: an automatic augmentation policy (TrivialAugmentWide, RandAugment, AutoAugment)
or ColorJitter with each sample's own draw, applied to a batch on its device.

torchvision's v2 transforms applied to a batch draw one set of parameters for the whole batch
(pytorch/vision issue 8484); applied per image they cost a Python call per image. Here every
sample draws its own ops and magnitudes (:mod:`.policies`, a pure function of ``(seed, rank,
epoch, index)``) and the batch is augmented by :mod:`.policy_ops`, bit for bit torchvision's ops.

Where it goes: torchvision's recipes apply a policy to the uint8 image after the crop and flip and
before ``ToDtype``/``Normalize``, so PolicyAugment takes uint8 batches already at the training
size (an ArrayLoader over fixed-size images, a DataLoader whose workers crop) and returns uint8;
the float conversion follows (in the training step, or FusedAugment on the next loader). It is a
pass of its own, not fused with FusedAugment's crop and normalisation: the policies' ops run
between the two (after the crop, before the float conversion), as torchvision's recipes order them.
"""
from __future__ import annotations

import inspect
from typing import Optional, Sequence, Union

import torch

from . import arguments, policies
from .contract import BatchPosition, LeafKey, check_image_layout
from .uint8_stage import Uint8Stage
from .policy_ops import apply_table

__all__ = ["PolicyAugment"]

_DRAWS = {"trivial_augment_wide": policies.trivial_augment_wide,
          "rand_augment": policies.rand_augment,
          "auto_augment": policies.auto_augment,
          "color_jitter": policies.color_jitter,
          "random_op": policies.random_op,
          "chain": policies.chain,
          "choice": policies.choice,
          "random_order": policies.random_order}
_SIZED = {"trivial_augment_wide", "rand_augment", "auto_augment"}  # take height and width


class PolicyAugment(Uint8Stage):
    """Each sample of the batch's uint8 image leaf augmented by its own draw of ``policy``.

    Args:
        policy (str): ``"trivial_augment_wide"`` (``num_magnitude_bins=31``), ``"rand_augment"``
            (``num_ops=2, magnitude=9, num_magnitude_bins=31``), ``"auto_augment"`` (the ImageNet
            policy), ``"color_jitter"`` (``brightness, contrast, saturation, hue, p``) or
            ``"random_op"`` (``op, p, parameter``: torchvision's single-op random transforms,
            :func:`~prefetch.transforms.policies.random_op`), ``"chain"`` (``steps, p``:
            ``RandomApply`` over them, :func:`~prefetch.transforms.policies.chain`), ``"choice"``
            (``steps, p``: ``RandomChoice``) or ``"random_order"`` (``steps``: ``RandomOrder``),
            with
            torchvision's options as keywords (``**options``: ``num_magnitude_bins``, ``num_ops``,
            ``magnitude``, ``brightness``, ...; see :mod:`prefetch.transforms.policies`).
        interpolation (str), fill (float or sequence of float, optional): the geometric ops'
            resampling (``"nearest"``, torchvision's default, or ``"bilinear"``) and the value (or
            one per channel) where they leave the image, in [0, 255] (None: zeros, as torchvision's
            default).
        seed (int, optional): the draws are a function of ``(seed, rank, epoch, batch index)``;
            None picks a fresh seed, which the loader's ``state_dict()`` saves.
        image_key (int or str): which leaf is the uint8 image batch (see ``get_leaf``).
        layout (str): ``"NCHW"``, ``"NHWC"`` or ``"auto"`` (NHWC when the last dimension is 1 or 3
            and the second is not); the result keeps the layout.

    Every argument is checked when it is built (:mod:`.arguments`): a bad one raises ValueError
    (its TypeError subclass for the wrong type) naming the argument, with the policy's
    torchvision name for its options (``"prefetch: RandAugment num_ops must be an int >= 0, got
    1.5"``). A policy with no step (``num_ops=0``; ColorJitter with every argument None or 0)
    returns the images as they are, as torchvision does; so does an empty batch.

    Raises:
        ValueError: a bad argument, naming it (its TypeError subclass
            :class:`~prefetch.transforms.arguments.ArgumentTypeError` for a wrong type).
        TypeError: an option the policy does not take.
    """

    what_draws = "policy draws"

    def __init__(self, policy: str, *, interpolation: str = "nearest",
                 fill: Union[float, Sequence[float], None] = None, seed: Optional[int] = None,
                 image_key: LeafKey = 0, layout: str = "auto", **options: object) -> None:
        arguments.one_of("PolicyAugment", "policy", policy, tuple(sorted(_DRAWS)))
        arguments.one_of("PolicyAugment", "interpolation", interpolation, ("nearest", "bilinear"))
        fill = arguments.fill_value("PolicyAugment", "fill", fill, channels=(1, 3))
        image_key = arguments.leaf_key("PolicyAugment", "image_key", image_key)
        check_image_layout(layout)
        # (auto_augment's own `policy`, a custom table, is policies.auto_augment's alone)
        known = [name for name in inspect.signature(_DRAWS[policy]).parameters
                 if name not in ("n", "generator", "height", "width", "policy")]
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise TypeError("prefetch: PolicyAugment(%r) does not take %s; %s" % (
                policy, ", ".join(unknown),
                "its options are " + ", ".join(known) if known else "it takes no option"))
        self.policy, self.options = policy, dict(options)
        self.interpolation, self.fill = interpolation, fill
        self.image_key, self.layout = image_key, layout
        self._set_seed(seed)
        self.draws(0, 8, 8)  # checks the options now (naming the policy's class), not at the
        # first batch

    def __repr__(self):
        extra = "".join(", %s=%r" % kv for kv in sorted(self.options.items()))
        return "PolicyAugment(%r%s, interpolation=%r, seed=%d)" % (
            self.policy, extra, self.interpolation, self.seed)

    def draws(self, n: int, height: int, width: int, epoch: int = 0, index: int = 0,
              rank: int = 0) -> policies.OpTable:
        """Each sample's ops and magnitudes for one batch (:mod:`prefetch.transforms.policies`).

        Args:
            n (int): the number of images.
            height, width (int): their size in pixels (the translations' bins depend on it).
            epoch, index, rank (int): the batch's :class:`~prefetch.transforms.BatchPosition`.

        Returns:
            OpTable: ``ops`` ``Tensor[n, K]`` int64, ``magnitudes`` ``Tensor[n, K]`` float32.

        Raises:
            ValueError: a policy option out of range (named by the policy's torchvision class).
        """
        g = BatchPosition(epoch, index, rank).generator(self.seed)
        draw = _DRAWS[self.policy]
        if self.policy in _SIZED:
            return draw(n, g, height=height, width=width, **self.options)
        return draw(n, g, **self.options)

    def augment(self, x: torch.Tensor, position: BatchPosition) -> torch.Tensor:
        # each sample through its own draw of the policy (policy_ops.apply_table)
        table = self.draws(x.shape[0], x.shape[2], x.shape[3], *position)
        return apply_table(x, table, interpolation=self.interpolation, fill=self.fill)
