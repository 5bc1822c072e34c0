"""AugMixAugment: torchvision's ``AugMix`` (Hendrycks et al., "AugMix: A Simple Data Processing
Method to Improve Robustness and Uncertainty", ICLR 2020) with each sample's own draws, on a
batch of uint8 images on its device.

For each image, as torchvision's v2 ``AugMix.forward`` (``torchvision/transforms/v2/
_auto_augment.py``, 0.28) draws for each call (per image in the DataLoader's workers):
``m ~ Dirichlet(alpha, alpha)``; the chains' weights ``Dirichlet(alpha, ..., alpha) * m[1]``;
``mixture_width`` chains of ``chain_depth`` ops (1 to 3, uniform, when ``chain_depth <= 0``), each
op uniform over AugMix's space (9 ops, or 13 with ``all_ops``), at a bin uniform in ``[0,
severity)`` of 10, negated with probability 1/2 where the op is signed. The result is
``m[0] * x + sum_i w_i * chain_i(x)`` in float32, in that order, truncated to uint8, as
torchvision computes it. The chains run as the policies' tables
(:func:`~prefetch.transforms.policy_ops.apply_table`: one fused kernel per op kind and column).
The random streams are not torchvision's: equal in distribution, not draw for draw.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, List, Optional

import torch

from . import arguments
from .contract import BatchPosition, LeafKey, check_image_layout
from .uint8_stage import Uint8Stage
from .policies import OP_CODES, OpTable, _magnitudes, _sizes
from .policy_ops import Fill, apply_table

__all__ = ["AugMixAugment", "AugMixDraws", "AUGMIX_OPS", "AUGMIX_ALL_OPS", "mix_chains"]

# AugMix's bins: torchvision's _PARAMETER_MAX.
BINS = 10
MAX_DEPTH = 3  # a random chain's depth is in [1, 3]


def _lin(top):
    return lambda n, h, w: torch.linspace(0.0, top, n)


# torchvision's AugMix._PARTIAL_AUGMENTATION_SPACE, in its order (the op drawn is its index), and
# the four colour ops _AUGMENTATION_SPACE adds (all_ops=True).
_SPACE = {
    "ShearX": _lin(0.3), "ShearY": _lin(0.3),
    "TranslateX": lambda n, h, w: torch.linspace(0.0, w / 3.0, n),
    "TranslateY": lambda n, h, w: torch.linspace(0.0, h / 3.0, n),
    "Rotate": _lin(30.0),
    "Posterize": lambda n, h, w: (4 - (torch.arange(n) // ((n - 1) / 4))).round().int(),
    "Solarize": lambda n, h, w: torch.linspace(1.0, 0.0, n),
    "AutoContrast": lambda n, h, w: None,
    "Equalize": lambda n, h, w: None,
    "Brightness": _lin(0.9), "Color": _lin(0.9), "Contrast": _lin(0.9), "Sharpness": _lin(0.9),
}
AUGMIX_OPS = tuple(_SPACE)[:9]
AUGMIX_ALL_OPS = tuple(_SPACE)


@dataclass(frozen=True)
class AugMixDraws:
    """One batch's AugMix draws.

    Attributes:
        original (Tensor[N], float32): each image's weight of itself, ``m[0]``.
        weights (Tensor[N, W], float32): each chain's weight, ``Dirichlet(alpha) * m[1]``.
        chains (list of OpTable): W tables ``[N, 3]``, a chain's ops in column order (Identity
            past its depth).
    """

    original: torch.Tensor
    weights: torch.Tensor
    chains: List[OpTable]


class AugMixAugment(Uint8Stage):
    """Each sample of the batch's uint8 image leaf through its own draw of torchvision's
    ``AugMix`` (the module docstring says how).

    Args:
        severity (int): the bins drawn from, in [1, 10] (torchvision: 3).
        mixture_width (int): the chains, >= 1 (torchvision: 3).
        chain_depth (int): ops per chain, or <= 0 for a depth uniform in [1, 3] per chain and
            image (torchvision: -1).
        alpha (float): the Dirichlet's parameter, > 0 (torchvision: 1.0).
        all_ops (bool): the colour ops too (Brightness, Color, Contrast, Sharpness; torchvision:
            True).
        interpolation (str): the geometric ops' resampling, ``"bilinear"`` (torchvision's default
            for AugMix) or ``"nearest"``.
        fill (float or sequence of float, optional): where a geometric op leaves the image, in
            [0, 255]; None: zeros.
        seed (int, optional): the draws are a function of ``(seed, rank, epoch, batch index)``;
            None picks a fresh seed, which the loader's ``state_dict()`` saves.
        image_key (int or str): which leaf is the uint8 image batch.
        layout (str): ``"NCHW"``, ``"NHWC"`` or ``"auto"``; the result keeps the layout.
        name (str): the class its refusals name (a front end's: ``"AugMix"``).

    Raises:
        ValueError: an argument outside those, naming it (its TypeError subclass for a wrong
            type).
    """

    what_draws = "AugMix draws"

    def __init__(self, severity: int = 3, mixture_width: int = 3, chain_depth: int = -1,
                 alpha: float = 1.0, all_ops: bool = True, *, interpolation: str = "bilinear",
                 fill: Fill = None, seed: Optional[int] = None, image_key: LeafKey = 0,
                 layout: str = "auto", name: str = "AugMixAugment") -> None:
        self.severity = arguments.integer(name, "severity", severity, low=1, high=BINS)
        self.mixture_width = arguments.integer(name, "mixture_width", mixture_width, low=1)
        self.chain_depth = arguments.integer(name, "chain_depth", chain_depth)
        self.alpha = arguments.number(name, "alpha", alpha, low=0.0, low_open=True)
        self.all_ops = arguments.flag(name, "all_ops", all_ops)
        arguments.one_of(name, "interpolation", interpolation, ("nearest", "bilinear"))
        self.interpolation = interpolation
        self.fill = arguments.fill_value(name, "fill", fill, channels=(1, 3))
        self.image_key = arguments.leaf_key(name, "image_key", image_key)
        check_image_layout(layout)
        self.layout = layout
        self._set_seed(seed)

    def __repr__(self) -> str:
        return ("AugMixAugment(severity=%d, mixture_width=%d, chain_depth=%d, alpha=%r, "
                "all_ops=%r, interpolation=%r, seed=%d)" % (
                    self.severity, self.mixture_width, self.chain_depth, self.alpha, self.all_ops,
                    self.interpolation, self.seed))

    def draws(self, n: int, height: int, width: int, epoch: int = 0, index: int = 0,
              rank: int = 0) -> AugMixDraws:
        """Each sample's weights and chains for one batch, drawn in this order from the batch's
        generator: ``m``, the chains' Dirichlet, then each chain's depths, ops, bins and signs.

        Args:
            n (int): the number of images.
            height, width (int): their size in pixels (the translations' bins).
            epoch, index, rank (int): the batch's :class:`~prefetch.transforms.BatchPosition`.

        Returns:
            AugMixDraws: the weights (float32) and the chains' tables.
        """
        g = BatchPosition(epoch, index, rank).generator(self.seed)
        k = self.mixture_width
        m = torch._sample_dirichlet(torch.full((n, 2), float(self.alpha)), generator=g)
        weights = torch._sample_dirichlet(torch.full((n, k), float(self.alpha)), generator=g)
        weights = weights * m[:, 1].reshape(n, 1)
        space = AUGMIX_ALL_OPS if self.all_ops else AUGMIX_OPS
        heights, widths = _sizes(n, height, width)
        chains = []
        for _ in range(k):
            depth = (torch.full((n,), self.chain_depth, dtype=torch.int64) if self.chain_depth > 0
                     else torch.randint(1, MAX_DEPTH + 1, (n,), generator=g))
            columns = max(MAX_DEPTH, self.chain_depth)
            ops = torch.randint(len(space), (n, columns), generator=g)
            bins = torch.randint(self.severity, (n, columns), generator=g)
            negate = torch.rand(n, columns, generator=g) <= 0.5
            names = [space[int(o)] for o in ops.flatten()]
            mags = _magnitudes(_SPACE, names, bins.flatten(), BINS,
                               heights.repeat_interleave(columns), widths.repeat_interleave(columns),
                               negate.flatten()).view(n, columns)
            codes = torch.tensor([OP_CODES[x] for x in names], dtype=torch.int64).view(n, columns)
            past = torch.arange(columns).view(1, -1) >= depth.view(-1, 1)
            codes[past] = OP_CODES["Identity"]
            mags[past] = 0.0
            chains.append(OpTable(codes, mags))
        return AugMixDraws(m[:, 0].contiguous(), weights, chains)

    def augment(self, x: torch.Tensor, position: BatchPosition) -> torch.Tensor:
        # each sample mixed with its own chains
        n, _, h, w = x.shape
        d = self.draws(n, h, w, *position)
        chains = (apply_table(x, chain, interpolation=self.interpolation, fill=self.fill)
                  for chain in d.chains)
        return mix_chains(x, chains, d.original.to(x.device), d.weights.to(x.device))


# The CPU mix's rows a chunk: about 1.5 MB of float32 (a chunk's term stays in cache).
_MIX_CHUNK_ELEMENTS = 384 * 1024


def mix_chains(x: torch.Tensor, chains: Iterable[torch.Tensor], original: torch.Tensor,
               weights: torch.Tensor) -> torch.Tensor:
    """AugMix's mix as torchvision's v2 ``AugMix.forward`` computes it (``torchvision/transforms/
    v2/_auto_augment.py``, 0.28), in float32: ``mix = original * x``, then for each chain
    ``mix += weights[:, i] * chain_i``, each product and sum rounded once, truncated to uint8.

    The bytes are converted to float32 first (exactly) and every product and sum taken between
    float32 tensors (a uint8 * float32 product with broadcasting took torch ~14 ms on 64 images
    of 176^2 where the float32 one takes 0.2); same values, as IEEE products and sums commute.
    On the CPU each chain's term is converted, weighted and added a few images at a time, in
    cache, so that only the sum makes passes over a whole float32 batch (the mix was eleven
    whole-batch passes, ~23 ms for 64 images of 176^2; AugMix against torchvision's loop:
    benchmarks/results/cpu-2core-2026-12-01-v2-steps-augmix-chunked-mix.json); on a GPU in
    whole-batch launches. ``chains`` may be a generator: each chain's images are dropped once
    added, before the next is made (all three held at once cost ~11,000 page faults a call on the
    CPU, the heap grown and trimmed each time, and lost the gain).

    Args:
        x (Tensor[N, C, H, W], uint8): the images.
        chains (iterable of Tensor[N, C, H, W], uint8): each chain's images, on ``x``'s device.
        original (Tensor[N], float32): ``m[0]``, the images' weight, on ``x``'s device.
        weights (Tensor[N, k], float32): the chains' weights, on ``x``'s device.

    Returns:
        Tensor[N, C, H, W], uint8: the mix, a new tensor.
    """
    n = x.shape[0]
    per_image = max(1, x[0].numel()) if n else 1
    rows = max(1, n if x.device.type != "cpu" else min(n, _MIX_CHUNK_ELEMENTS // per_image))
    parts = [slice(s, min(n, s + rows)) for s in range(0, n, rows)]
    mix = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    term_rows = torch.empty((rows,) + tuple(x.shape[1:]), dtype=torch.float32, device=x.device)
    for part in parts:
        mix[part].copy_(x[part])  # exact: every byte is a float32
        mix[part].mul_(original[part].reshape(-1, 1, 1, 1))
    i = -1
    for chain in chains:  # (not enumerate: it holds each item until it has the next one)
        i += 1
        for part in parts:
            term = term_rows[:part.stop - part.start]
            term.copy_(chain[part])
            mix[part].add_(term.mul_(weights[part, i].reshape(-1, 1, 1, 1)))
        del chain  # before the generator makes the next chain: one chain's images alive at a time
    out = torch.empty_like(x)
    for part in parts:
        out[part].copy_(mix[part])  # truncated toward zero, as .to(torch.uint8)
    return out
