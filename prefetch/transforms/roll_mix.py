"""MixUp and CutMix with torchvision's ``transforms.v2`` semantics (``v2.MixUp``, ``v2.CutMix`` and
``v2.RandomChoice`` of them, torchvision 0.16+), seeded like every prefetch draw (issue 27).

What differs from timm's (:class:`~prefetch.transforms.MixUpCutMix`): sample ``i`` mixes with
sample ``i - 1`` (``roll(1, 0)``), one λ for the whole batch, no label smoothing, any batch size.
torchvision draws from torch's global generator; here a numpy generator seeded with the batch's
position ``(seed, rank, epoch, index)`` draws the same distributions: the transform chosen with
probabilities ``p``, λ ~ ``Beta(α, α)``, and for CutMix a centre uniform over the pixels with a
box of half-sides ``int(0.5 * sqrt(1 - λ) * side)``, clipped, and λ corrected to the area kept.
The pixel and label arithmetic are torchvision's own calls in its order (``roll``, ``mul_``,
``add_``; a box copied from the rolled batch), so with the same λ and box the output is the same.
"""
import math

import numpy as np
import torch

from .contract import (BatchPosition, SeededTransform, as_nchw, check_image_layout,
                       describe_tensor, from_nchw, get_leaf, set_leaf)

__all__ = ["RollMix"]

KINDS = ("mixup", "cutmix")


class RollMix(SeededTransform):
    """torchvision v2's MixUp / CutMix on the batch's float image leaf (``[N, C, H, W]`` or
    ``[N, H, W, C]``) and its integer label leaf ``[N]``, which becomes one-hot float32 targets
    ``[N, num_classes]`` mixed with the same λ.

    Args:
        choices: ``[(kind, alpha), ...]``, kind ``"mixup"`` or ``"cutmix"``; one is chosen per
            batch with probabilities ``p`` (default uniform), as ``v2.RandomChoice`` does.
        num_classes: the label space (required, as one-hot targets need it).
    """

    what_draws = "mixing draws"

    def __init__(self, choices, *, num_classes, p=None, seed=None, image_key=0, label_key=1,
                 layout="auto"):
        choices = [(str(kind), float(alpha)) for kind, alpha in choices]
        if not choices:
            raise ValueError("prefetch: RollMix needs at least one of MixUp and CutMix")
        for kind, alpha in choices:
            if kind not in KINDS:
                raise ValueError("prefetch: RollMix mixes by 'mixup' or 'cutmix', got %r" % (kind,))
            if not alpha > 0:
                raise ValueError("prefetch: %s's alpha must be > 0, got %g" % (kind, alpha))
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError("prefetch: num_classes must be a positive int (MixUp and CutMix make "
                             "one-hot targets), got %r" % (num_classes,))
        if p is None:
            p = [1.0 / len(choices)] * len(choices)
        p = [float(v) for v in p]
        if len(p) != len(choices) or any(v < 0 for v in p) or not sum(p) > 0:
            raise ValueError("prefetch: p must hold one non-negative weight per transform, not all "
                             "zero; got %r for %d transforms" % (p, len(choices)))
        check_image_layout(layout)
        self.choices, self.p = choices, [v / sum(p) for v in p]
        self.num_classes = num_classes
        self.image_key, self.label_key, self.layout = image_key, label_key, layout
        self._set_seed(seed)

    def __repr__(self):
        return "RollMix(%s, num_classes=%d, p=%s, seed=%d)" % (
            ", ".join("%s(alpha=%g)" % c for c in self.choices), self.num_classes,
            [round(v, 6) for v in self.p], self.seed)

    def params(self, height, width, epoch=0, index=0, rank=0):
        """The draws of batch ``index`` of ``epoch`` on ``rank``: (kind, λ the targets' weight of
        each sample's own label, box ``(y1, y2, x1, x2)`` of CutMix or None)."""
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

    def apply(self, batch, position):
        images, labels = get_leaf(batch, self.image_key), get_leaf(batch, self.label_key)
        if not isinstance(images, torch.Tensor) or images.dim() != 4 or not images.is_floating_point():
            raise ValueError("prefetch: MixUp/CutMix take a float image batch (after ToDtype and "
                             "Normalize) at leaf %r, got %s" % (self.image_key, describe_tensor(images)))
        n = images.shape[0]
        if not isinstance(labels, torch.Tensor) or labels.shape != (n,) or labels.is_floating_point():
            raise ValueError("prefetch: MixUp/CutMix take integer class labels [%d] at leaf %r, "
                             "got %s" % (n, self.label_key, describe_tensor(labels)))
        if not labels.is_cuda:  # on a GPU scatter_ asserts on the device (no host read-back)
            bad = ((labels < 0) | (labels >= self.num_classes)).nonzero()
            if len(bad):
                k = int(bad[0])
                raise ValueError("prefetch: MixUp/CutMix: label %d of sample %d is outside [0, "
                                 "num_classes = %d)" % (int(labels[k]), k, self.num_classes))
        x, layout = as_nchw(images, self.layout)
        kind, lam, box = self.params(x.shape[2], x.shape[3], *position)
        if kind == "mixup":
            out = x.roll(1, 0).mul_(1.0 - lam).add_(x.mul(lam))
        else:
            y1, y2, x1, x2 = box
            out = x.clone()
            out[..., y1:y2, x1:x2] = x.roll(1, 0)[..., y1:y2, x1:x2]
        # one_hot(labels).float(), as torchvision makes them, without one_hot's host read-back.
        targets = torch.zeros(n, self.num_classes, device=labels.device).scatter_(
            1, labels.long().view(-1, 1), 1.0)
        targets = targets.roll(1, 0).mul_(1.0 - lam).add_(targets.mul(lam))
        return set_leaf(set_leaf(batch, self.image_key, from_nchw(out, layout)), self.label_key,
                        targets)
