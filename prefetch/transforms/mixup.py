"""MixUp and CutMix with timm's semantics (``timm.data.Mixup``, timm/data/mixup.py, 1.0), on the
device, seeded like every prefetch draw.

timm draws from numpy's global generator in the training loop; here the draws come from a numpy
generator seeded with the batch's position ``(seed, rank, epoch, index)``, so a resumed run, any
number of DataLoader workers and every DDP rank draw as timm would, reproducibly. The draws follow
timm's code step for step (the same calls, so the same distributions): with probability ``prob`` a
batch (``mode="batch"``), a pair of samples ``i`` and ``N - 1 - i`` (``"pair"``) or a sample
(``"elem"``) is mixed; when both are enabled CutMix is chosen with ``switch_prob``; λ is
``Beta(α, α)``; a CutMix box is ``sqrt(1 - λ)`` of each side around a uniform centre, clipped, and
λ corrected to the area it kept (``correct_lam``), or drawn between ``cutmix_minmax`` of each
side. The mixing itself is batched: one pass for the mixed samples, one masked pass for the boxes,
with timm's float arithmetic. Labels become timm's smoothed one-hot targets, mixed with the same
λ: ``[N, num_classes]`` float32 (one-hot and soft labels ``[N, K]`` are smoothed and mixed the
same way, see :class:`MixUpCutMix`).
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

import numpy as np
import torch

from . import arguments
from .contract import (Batch, BatchPosition, LeafKey, SeededTransform, as_nchw,
                       check_image_layout, describe_tensor, from_nchw, get_leaf, set_leaf)
from .mix_labels import mixable_labels

__all__ = ["MixUpCutMix", "mixup_target"]


def mixup_target(labels: torch.Tensor, num_classes: int, lam: Union[float, torch.Tensor],
                 smoothing: float = 0.0) -> torch.Tensor:
    """timm's ``mixup_target`` (timm/data/mixup.py): smoothed one-hot targets of ``labels``
    mixed with those of the flipped batch, ``y * lam + y.flip(0) * (1 - lam)``; a one-hot row is
    ``1 - smoothing + smoothing / num_classes`` at its class and ``smoothing / num_classes``
    elsewhere.

    Args:
        labels (Tensor[N], integer): class indices in ``[0, num_classes)``.
        num_classes (int): the label space.
        lam (float or Tensor[N, 1]): each sample's weight of its own label.
        smoothing (float): label smoothing, in [0, 1].

    Returns:
        Tensor[N, num_classes]: float32 targets (type-promoted with ``lam`` when it is a
        tensor), on the labels' device.
    """
    off = smoothing / num_classes
    on = 1.0 - smoothing + off
    y1 = torch.full((labels.shape[0], num_classes), off, device=labels.device).scatter_(
        1, labels.long().view(-1, 1), on)
    return y1 * lam + y1.flip(0) * (1.0 - lam)


def _mix_dense(y, lam, smoothing):
    """One-hot or soft labels ``y`` ``[N, K]`` as :func:`mixup_target` mixes class indices:
    smoothed as timm smooths a one-hot row (``y (1 - s) + s / K``: its ``on`` and ``off`` values
    where ``y`` is one-hot), then ``y * λ + y.flip(0) * (1 - λ)``, in ``y``'s dtype."""
    if smoothing:
        y = y * (1.0 - smoothing) + smoothing / y.shape[1]
    return y * lam + y.flip(0) * (1.0 - lam)


def _on(weight, device):
    return weight.to(device) if isinstance(weight, torch.Tensor) else weight


class MixUpCutMix(SeededTransform):
    """MixUp and/or CutMix on the batch's float image leaf (``Tensor[N, C, H, W]`` or
    ``Tensor[N, H, W, C]``) and its label leaf, timm's ``Mixup`` arguments and defaults. The
    batch size must be even, as timm requires (``drop_last=True``).

    Args:
        num_classes (int, optional): the label space (needed for class indices).
        mixup_alpha (float): MixUp's Beta(α, α), >= 0 (0: no MixUp). Zhang et al., "mixup:
            Beyond Empirical Risk Minimization", ICLR 2018.
        cutmix_alpha (float): CutMix's Beta(α, α), >= 0 (0: no CutMix). Yun et al., "CutMix",
            ICCV 2019.
        cutmix_minmax (tuple[float, float], optional): draw the box's sides between these
            fractions of the image's (turns CutMix on, as timm).
        prob (float): the probability that a batch / pair / sample is mixed.
        switch_prob (float): the probability of CutMix when both are enabled.
        mode (str): ``"batch"``, ``"pair"`` (samples ``i`` and ``N - 1 - i``) or ``"elem"``.
        correct_lam (bool): λ corrected to the area a clipped CutMix box kept.
        label_smoothing (float): in [0, 1], timm's default 0.1.
        seed (int, optional): the draws are a function of ``(seed, rank, epoch, batch index)``;
            None picks a fresh seed, which the loader's ``state_dict()`` saves.
        image_key, label_key (int or str): which leaves are the images and the labels.
        layout (str): ``"NCHW"``, ``"NHWC"`` or ``"auto"``; the result keeps the layout.

    Labels (:mod:`.mix_labels`): integer class indices ``[N]`` (any integer dtype) become timm's
    smoothed one-hot float32 targets ``[N, num_classes]``, exactly; one-hot, multi-hot or soft
    labels ``[N, K]`` (which timm's ``Mixup`` does not take) are smoothed as timm smooths a
    one-hot row, ``y (1 - label_smoothing) + label_smoothing / K`` (pass ``label_smoothing=0``
    for labels already smoothed), and mixed with the same λ, in their float dtype.
    ``num_classes``: needed for class indices; optional for ``[N, K]`` labels, checked against K
    when given.

    Every argument is checked when it is built (:mod:`.arguments`), naming it: the alphas finite
    and >= 0 (``mixup_alpha=inf`` would give NaN batches), the probabilities in [0, 1],
    ``correct_lam`` a bool, ``cutmix_minmax`` ``0 < min < max <= 1``.

    Raises:
        ValueError: a bad argument, naming it (its TypeError subclass
            :class:`~prefetch.transforms.arguments.ArgumentTypeError` for a wrong type), or
            neither MixUp nor CutMix enabled.
    """

    what_draws = "mixing draws"

    def __init__(self, *, num_classes: Optional[int] = None, mixup_alpha: float = 1.0,
                 cutmix_alpha: float = 0.0,
                 cutmix_minmax: Optional[Tuple[float, float]] = None, prob: float = 1.0,
                 switch_prob: float = 0.5, mode: str = "batch", correct_lam: bool = True,
                 label_smoothing: float = 0.1, seed: Optional[int] = None,
                 image_key: LeafKey = 0, label_key: LeafKey = 1, layout: str = "auto") -> None:
        cls = "MixUpCutMix"
        if num_classes is not None:
            num_classes = arguments.integer(cls, "num_classes", num_classes, low=1,
                                            expected="None or an int >= 1")
        arguments.one_of(cls, "mode", mode, ("batch", "pair", "elem"))
        mixup_alpha = arguments.number(cls, "mixup_alpha", mixup_alpha, low=0.0)
        cutmix_alpha = arguments.number(cls, "cutmix_alpha", cutmix_alpha, low=0.0)
        if cutmix_minmax is not None:
            cutmix_minmax = arguments.number_pair(cls, "cutmix_minmax", cutmix_minmax, low=0.0,
                                                  high=1.0, low_open=True)
            if not cutmix_minmax[0] < cutmix_minmax[1]:
                raise ValueError("prefetch: MixUpCutMix cutmix_minmax must be (min, max) with "
                                 "0 < min < max <= 1, got %r" % (cutmix_minmax,))
            cutmix_alpha = 1.0  # as timm: the box is drawn from minmax, CutMix on
        if not (mixup_alpha > 0 or cutmix_alpha > 0):
            raise ValueError("prefetch: MixUpCutMix needs mixup_alpha > 0, cutmix_alpha > 0 or "
                             "cutmix_minmax, got mixup_alpha=%r, cutmix_alpha=%r"
                             % (mixup_alpha, cutmix_alpha))
        prob = arguments.probability(cls, "prob", prob)
        switch_prob = arguments.probability(cls, "switch_prob", switch_prob)
        label_smoothing = arguments.number(cls, "label_smoothing", label_smoothing, low=0.0,
                                           high=1.0)
        correct_lam = arguments.flag(cls, "correct_lam", correct_lam)
        check_image_layout(layout)
        self.num_classes = num_classes
        self.mixup_alpha, self.cutmix_alpha = mixup_alpha, cutmix_alpha
        self.cutmix_minmax, self.prob, self.switch_prob = cutmix_minmax, prob, switch_prob
        self.mode, self.correct_lam = mode, correct_lam
        self.label_smoothing = label_smoothing
        self.image_key = arguments.leaf_key(cls, "image_key", image_key)
        self.label_key = arguments.leaf_key(cls, "label_key", label_key)
        self.layout = layout
        self._set_seed(seed)

    def __repr__(self):
        return ("MixUpCutMix(num_classes=%s, mixup_alpha=%g, cutmix_alpha=%g, prob=%g, "
                "switch_prob=%g, mode=%r, label_smoothing=%g, seed=%d)" % (
                    self.num_classes, self.mixup_alpha, self.cutmix_alpha, self.prob,
                    self.switch_prob, self.mode, self.label_smoothing, self.seed))

    # --- the draws, timm's calls in timm's order --------------------------------------------

    def _lams(self, rng, count):
        """timm's ``_params_per_elem`` (``count`` samples or pairs) or, with ``count`` None,
        ``_params_per_batch``: (λ float32 [count], use_cutmix bool [count])."""
        both = self.mixup_alpha > 0 and self.cutmix_alpha > 0
        if count is None:
            lam, cut = 1.0, False
            if rng.random() < self.prob:
                if both:
                    cut = bool(rng.random() < self.switch_prob)
                    alpha = self.cutmix_alpha if cut else self.mixup_alpha
                    lam = rng.beta(alpha, alpha)
                elif self.mixup_alpha > 0:
                    lam = rng.beta(self.mixup_alpha, self.mixup_alpha)
                else:
                    cut, lam = True, rng.beta(self.cutmix_alpha, self.cutmix_alpha)
            return np.array([lam], dtype=np.float64), np.array([cut])
        lam = np.ones(count, dtype=np.float32)
        if both:
            cut = rng.random(count) < self.switch_prob
            mix = np.where(cut, rng.beta(self.cutmix_alpha, self.cutmix_alpha, size=count),
                           rng.beta(self.mixup_alpha, self.mixup_alpha, size=count))
        elif self.mixup_alpha > 0:
            cut, mix = np.zeros(count, dtype=bool), rng.beta(self.mixup_alpha, self.mixup_alpha,
                                                             size=count)
        else:
            cut, mix = np.ones(count, dtype=bool), rng.beta(self.cutmix_alpha, self.cutmix_alpha,
                                                            size=count)
        lam = np.where(rng.random(count) < self.prob, mix.astype(np.float32), lam)
        return lam, cut

    def _box(self, rng, h, w, lam):
        """timm's ``cutmix_bbox_and_lam`` for one box: (top, bottom, left, right), λ."""
        if self.cutmix_minmax is not None:
            lo, hi = self.cutmix_minmax
            cut_h = int(rng.integers(int(h * lo), int(h * hi)))
            cut_w = int(rng.integers(int(w * lo), int(w * hi)))
            yl, xl = int(rng.integers(0, h - cut_h + 1)), int(rng.integers(0, w - cut_w + 1))
            yh, xh = yl + cut_h, xl + cut_w
        else:
            ratio = np.sqrt(1 - lam)
            cut_h, cut_w = int(h * ratio), int(w * ratio)
            cy, cx = int(rng.integers(0, h)), int(rng.integers(0, w))
            yl, yh = np.clip(cy - cut_h // 2, 0, h), np.clip(cy + (cut_h + 1) // 2, 0, h)
            xl, xh = np.clip(cx - cut_w // 2, 0, w), np.clip(cx + (cut_w + 1) // 2, 0, w)
        if self.correct_lam or self.cutmix_minmax is not None:
            lam = 1.0 - (yh - yl) * (xh - xl) / float(h * w)
        return (int(yl), int(yh), int(xl), int(xh)), lam

    def params(self, n: int, height: int, width: int, epoch: int = 0, index: int = 0,
               rank: int = 0) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The draws of one batch, timm's calls in timm's order (``_params_per_batch`` /
        ``_params_per_elem`` and ``cutmix_bbox_and_lam``), as its ``mode`` applies them.

        Args:
            n (int): the number of images.
            height, width (int): their size in pixels.
            epoch, index, rank (int): the batch's :class:`~prefetch.transforms.BatchPosition`.

        Returns:
            tuple: per sample, ``lam`` (ndarray[n], float64: the targets' weight of each
            sample's own label), ``cut`` (ndarray[n], bool: a CutMix) and ``boxes``
            (ndarray[n, 4], int64: top, bottom, left, right; zeros where none).
        """
        rng = np.random.default_rng(BatchPosition(epoch, index, rank).seed(self.seed))
        lam = np.ones(n, dtype=np.float64)
        cut = np.zeros(n, dtype=bool)
        boxes = np.zeros((n, 4), dtype=np.int64)
        if self.mode == "batch":
            lams, cuts = self._lams(rng, None)
            value = float(lams[0])
            if value != 1.0:
                if cuts[0]:
                    box, value = self._box(rng, height, width, value)
                    boxes[:] = box
                    cut[:] = True
                lam[:] = value
            return lam, cut, boxes
        count = n // 2 if self.mode == "pair" else n
        lams, cuts = self._lams(rng, count)
        for i in range(count):
            value = lams[i]
            if value == 1.0:
                continue
            if cuts[i]:
                box, value = self._box(rng, height, width, value)
                boxes[i], cut[i] = box, True
                if self.mode == "pair":
                    boxes[n - 1 - i], cut[n - 1 - i] = box, True
            lam[i] = value
            if self.mode == "pair":
                lam[n - 1 - i] = value
        return lam, cut, boxes

    # --- the mixing ---------------------------------------------------------------------------

    def apply(self, batch: Batch, position: BatchPosition) -> Batch:
        """Mixes each sample with sample ``N - 1 - i`` (timm's ``flip(0)``) by the draws of
        :meth:`params`.

        Args:
            batch: the batch; its image leaf a float ``Tensor[N, C, H, W]`` or
                ``Tensor[N, H, W, C]`` with N even, its label leaf as :mod:`.mix_labels` takes
                it.
            position (BatchPosition): where the batch sits.

        Returns:
            The batch with mixed images (same shape, dtype, layout) and targets: timm's smoothed
            one-hot ``Tensor[N, num_classes]`` float32 for class indices, or ``[N, K]`` in the
            labels' float dtype.

        Raises:
            KeyError: the batch has no such leaf.
            ValueError: the image leaf is not a 4-D float tensor, N is odd, or the labels are
                of a form :func:`~prefetch.transforms.mix_labels.mixable_labels` refuses.
        """
        images, labels = get_leaf(batch, self.image_key), get_leaf(batch, self.label_key)
        if not isinstance(images, torch.Tensor) or images.dim() != 4 or not images.is_floating_point():
            raise ValueError("prefetch: MixUpCutMix takes a float image batch (after normalisation: "
                             "FusedAugment's output) at leaf %r, got %s" % (
                                 self.image_key, describe_tensor(images)))
        n = images.shape[0]
        form, y, dtype = mixable_labels(labels, n, self.num_classes, "MixUpCutMix", self.label_key)
        if n % 2:
            raise ValueError("prefetch: MixUpCutMix needs an even batch size, as timm's Mixup "
                             "does; got %d (use drop_last=True)" % n)
        x, layout = as_nchw(images, self.layout)
        h, w = x.shape[2], x.shape[3]
        if n == 0:  # nothing to mix (timm's batch mode would index the empty batch)
            out, lam = x.clone(), np.ones(0)
        else:
            lam, cut, boxes = self.params(n, h, w, *position)
            out = self._mix(x, lam, cut, boxes)
        if self.mode == "batch" and n:
            weight = float(lam[0])  # timm passes the batch's λ as a Python float
        else:  # timm: its per-sample λ in the images' dtype (soft labels: in theirs)
            weight = torch.tensor(lam, dtype=x.dtype if form == "index" else y.dtype).view(n, 1)
        if form == "index":
            targets = mixup_target(y, self.num_classes, _on(weight, y.device), self.label_smoothing)
        else:
            targets = _mix_dense(y, _on(weight, y.device), self.label_smoothing).to(dtype)
        return set_leaf(set_leaf(batch, self.image_key, from_nchw(out, layout)), self.label_key,
                        targets)

    def _mix(self, x, lam, cut, boxes):
        n = x.shape[0]
        dev = x.device
        partner = x.flip(0)  # sample i mixes with N - 1 - i, in every mode
        if self.mode == "batch":
            if lam[0] == 1.0:
                return x.clone()
            if cut[0]:
                yl, yh, xl, xh = boxes[0].tolist()
                out = x.clone()
                out[:, :, yl:yh, xl:xh] = partner[:, :, yl:yh, xl:xh]
                return out
            return x.mul(float(lam[0])).add_(partner.mul(1.0 - float(lam[0])))
        # timm multiplies by its float32 λ and 1 - λ, then adds (no fused multiply-add).
        lam32 = torch.tensor(lam.astype(np.float32), device=dev).view(n, 1, 1, 1).to(x.dtype)
        blend = ~cut & (lam != 1.0)
        mixed = x * lam32 + partner * (1 - lam32)
        out = torch.where(torch.tensor(blend, device=dev).view(n, 1, 1, 1), mixed, x)
        if cut.any():
            b = torch.tensor(boxes, device=dev)
            rows = torch.arange(x.shape[2], device=dev).view(1, -1, 1)
            cols = torch.arange(x.shape[3], device=dev).view(1, 1, -1)
            yl, yh, xl, xh = (b[:, k].view(n, 1, 1) for k in range(4))
            inside = ((rows >= yl) & (rows < yh) & (cols >= xl) & (cols < xh)
                      & torch.tensor(cut, device=dev).view(n, 1, 1)).unsqueeze(1)
            out = torch.where(inside, partner, out)
        return out
