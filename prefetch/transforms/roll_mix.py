"""MixUp and CutMix with torchvision's ``transforms.v2`` semantics (``v2.MixUp``, ``v2.CutMix`` and
``v2.RandomChoice`` of them, torchvision 0.16+), seeded like every prefetch draw. MixUp: Zhang et
al., "mixup: Beyond Empirical Risk Minimization", ICLR 2018; CutMix: Yun et al., "CutMix:
Regularization Strategy to Train Strong Classifiers with Localizable Features", ICCV 2019.

What differs from timm's (:class:`~prefetch.transforms.MixUpCutMix`): sample ``i`` mixes with
sample ``i - 1`` (``roll(1, 0)``), one λ for the whole batch, no label smoothing, any batch size.
torchvision draws from torch's global generator; here a numpy generator seeded with the batch's
position ``(seed, rank, epoch, index)`` draws the same distributions: the transform chosen with
probabilities ``p``, λ ~ ``Beta(α, α)``, and for CutMix a centre uniform over the pixels with a
box of half-sides ``int(0.5 * sqrt(1 - λ) * side)``, clipped, and λ corrected to the area kept.
The pixel and label arithmetic are torchvision's own calls in its order (``roll``, ``mul_``,
``add_``; a box copied from the rolled batch), so with the same λ and box the output is the same.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

import numpy as np
import torch

from . import arguments
from .contract import (Batch, BatchPosition, LeafKey, SeededTransform, as_nchw,
                       check_image_layout, describe_tensor, from_nchw, get_leaf, set_leaf)
from .mix_labels import mixable_labels

__all__ = ["RollMix"]

KINDS = ("mixup", "cutmix")
_NAMES = {"mixup": "MixUp", "cutmix": "CutMix"}  # torchvision's classes, named in the messages


class RollMix(SeededTransform):
    """torchvision v2's MixUp / CutMix on the batch's float image leaf (``[N, C, H, W]`` or
    ``[N, H, W, C]``) and its label leaf, mixed with the same λ: integer class indices ``[N]``
    become one-hot float32 targets ``[N, num_classes]``; one-hot, multi-hot and soft labels
    ``[N, K]`` (torchvision 0.20+) are mixed as they are, in their float dtype (the forms:
    :mod:`.mix_labels`).

    Args:
        choices (sequence of (str, float)): ``[(kind, alpha), ...]``, kind ``"mixup"`` or
            ``"cutmix"``, alpha a finite number > 0 (torchvision's Beta(α, α)); one is chosen per
            batch with probabilities ``p`` (default uniform), as ``v2.RandomChoice`` does.
        num_classes (int, optional): the label space: needed for class indices, optional for ``[N,
            K]`` labels (checked against K when given), as torchvision's.
        p (sequence of float, optional): one finite weight >= 0 per choice, not all 0 (normalised
            to sum to 1).
        seed (int, optional): the draws are a function of ``(seed, rank, epoch, batch index)``;
            None picks a fresh seed, which the loader's ``state_dict()`` saves.
        image_key, label_key (int or str): which leaves are the images and the labels.
        layout (str): ``"NCHW"``, ``"NHWC"`` or ``"auto"``; the result keeps the layout.

    Every argument is checked when it is built (:mod:`.arguments`), naming it: an ``alpha`` of
    ``inf`` (Beta(inf, inf) draws NaN) or a ``p`` of ``[inf, 1]`` is refused there.

    Raises:
        ValueError: a bad argument, naming it (its TypeError subclass
            :class:`~prefetch.transforms.arguments.ArgumentTypeError` for a wrong type).
    """

    what_draws = "mixing draws"

    def __init__(self, choices: Sequence[Tuple[str, float]], *, num_classes: Optional[int] = None,
                 p: Optional[Sequence[float]] = None, seed: Optional[int] = None,
                 image_key: LeafKey = 0, label_key: LeafKey = 1, layout: str = "auto") -> None:
        if not isinstance(choices, (list, tuple)) or not choices:
            raise ValueError("prefetch: RollMix choices must be a non-empty list of (kind, alpha) "
                             "with kind 'mixup' or 'cutmix', got %r" % (choices,))
        checked = []
        for choice in choices:
            if not isinstance(choice, (list, tuple)) or len(choice) != 2:
                raise ValueError("prefetch: RollMix choices must be (kind, alpha) pairs, got %r"
                                 % (choice,))
            kind, alpha = choice
            arguments.one_of("RollMix", "choices' kind", kind, KINDS)
            alpha = arguments.number(_NAMES[kind], "alpha", alpha, low=0.0, low_open=True,
                                     expected="a finite number > 0")
            checked.append((kind, alpha))
        if num_classes is not None:
            num_classes = arguments.integer("RollMix", "num_classes", num_classes, low=1,
                                            expected="None or an int >= 1")
        if p is None:
            p = [1.0] * len(checked)
        if not isinstance(p, (list, tuple)) or len(p) != len(checked):
            raise ValueError("prefetch: RollMix p must be one weight per choice (%d), got %r"
                             % (len(checked), p))
        p = arguments.numbers_list("RollMix", "p", p, low=0.0,
                                   expected="finite weights >= 0, not all 0")
        if not sum(p) > 0:
            raise ValueError("prefetch: RollMix p must be finite weights >= 0, not all 0, got %r"
                             % (p,))
        check_image_layout(layout)
        self.choices, self.p = checked, [v / sum(p) for v in p]
        self.num_classes = num_classes
        self.image_key = arguments.leaf_key("RollMix", "image_key", image_key)
        self.label_key = arguments.leaf_key("RollMix", "label_key", label_key)
        self.layout = layout
        self._set_seed(seed)

    def __repr__(self):
        return "RollMix(%s, num_classes=%s, p=%s, seed=%d)" % (
            ", ".join("%s(alpha=%g)" % c for c in self.choices), self.num_classes,
            [round(v, 6) for v in self.p], self.seed)

    def params(self, height: int, width: int, epoch: int = 0, index: int = 0,
               rank: int = 0) -> Tuple[str, float, Optional[Tuple[int, int, int, int]]]:
        """The draws of one batch, as torchvision's ``_BaseMixUpCutMix`` subclasses draw them
        (torchvision/transforms/v2/_augment.py): λ ~ Beta(α, α); for CutMix a uniform centre
        and half-sides ``int(0.5 * sqrt(1 - λ) * side)``, clipped, λ corrected to the area kept.

        Args:
            height, width (int): the images' size in pixels.
            epoch, index, rank (int): the batch's :class:`~prefetch.transforms.BatchPosition`.

        Returns:
            tuple: ``(kind, lam, box)``: ``"mixup"`` or ``"cutmix"``; λ, the targets' weight of
            each sample's own label; CutMix's box ``(y1, y2, x1, x2)`` in pixels, or None.
        """
        rng = np.random.default_rng(BatchPosition(epoch, index, rank).seed(self.seed))
        kind, alpha = self.choices[int(rng.choice(len(self.choices), p=self.p))]
        lam = float(rng.beta(alpha, alpha))
        if kind == "mixup":
            return kind, lam, None
        r_x, r_y = int(rng.integers(0, width)), int(rng.integers(0, height))
        r = 0.5 * math.sqrt(1.0 - lam)
        r_w_half, r_h_half = int(r * width), int(r * height)
        x1, y1 = max(r_x - r_w_half, 0), max(r_y - r_h_half, 0)
        x2, y2 = min(r_x + r_w_half, width), min(r_y + r_h_half, height)
        lam = float(1.0 - (x2 - x1) * (y2 - y1) / (width * height))
        return kind, lam, (y1, y2, x1, x2)

    def apply(self, batch: Batch, position: BatchPosition) -> Batch:
        """Mixes each sample with the previous one (``roll(1, 0)``) with one λ for the batch.

        Args:
            batch: the batch; its image leaf a float ``Tensor[N, C, H, W]`` or
                ``Tensor[N, H, W, C]``, its label leaf as :mod:`.mix_labels` takes it.
            position (BatchPosition): where the batch sits.

        Returns:
            The batch with mixed images (same shape, dtype, layout) and targets
            ``Tensor[N, num_classes]`` float32 for class indices, or ``[N, K]`` in the labels'
            float dtype.

        Raises:
            KeyError: the batch has no such leaf.
            ValueError: the image leaf is not a 4-D float tensor; labels of a form
                :func:`~prefetch.transforms.mix_labels.mixable_labels` refuses.
        """
        images, labels = get_leaf(batch, self.image_key), get_leaf(batch, self.label_key)
        if not isinstance(images, torch.Tensor) or images.dim() != 4 or not images.is_floating_point():
            raise ValueError("prefetch: MixUp/CutMix take a float image batch (after ToDtype and "
                             "Normalize) at leaf %r, got %s" % (self.image_key, describe_tensor(images)))
        n = images.shape[0]
        form, y, dtype = mixable_labels(labels, n, self.num_classes, "MixUp/CutMix", self.label_key)
        x, layout = as_nchw(images, self.layout)
        if n == 0 or x.shape[2] == 0 or x.shape[3] == 0:  # nothing to mix: no draw
            kind, lam, box = "mixup", 1.0, None
        else:
            kind, lam, box = self.params(x.shape[2], x.shape[3], *position)
        if kind == "mixup":
            out = x.roll(1, 0).mul_(1.0 - lam).add_(x.mul(lam))
        else:
            y1, y2, x1, x2 = box
            out = x.clone()
            out[..., y1:y2, x1:x2] = x.roll(1, 0)[..., y1:y2, x1:x2]
        if form == "index":
            # one_hot(labels).float(), as torchvision makes them, without one_hot's host read-back.
            y = torch.zeros(n, self.num_classes, device=labels.device).scatter_(
                1, y.view(-1, 1), 1.0)
        # torchvision's _mixup_label: roll, mul_, add_ (float16/bfloat16 labels in float32, then
        # rounded once to their dtype).
        targets = y.roll(1, 0).mul_(1.0 - lam).add_(y.mul(lam)).to(dtype)
        return set_leaf(set_leaf(batch, self.image_key, from_nchw(out, layout)), self.label_key,
                        targets)
