"""timm's AugMix by its string (``timm/data/auto_augment.py``'s ``augment_and_mix_transform``
and ``AugMixAugment``, timm 1.0), each image its own draws, with Pillow's arithmetic: ``width``
chains of timm's ops (:mod:`.augment_ops`), summed with Dirichlet weights in float32 as timm's
numpy sum, clipped and truncated, then blended with the image by a Beta weight (Pillow's
``Image.blend``). timm's string: ``augmix`` then ``m<int>`` the magnitude (3), ``w<int>`` the
chains (3), ``d<int>`` each chain's ops (-1: 1 to 3 uniformly), ``a<float>`` the Dirichlet's
and Beta's alpha (1.0), ``mstd<float>`` the magnitude noise (default: uniform in [0, m]),
``b<0|1>`` timm's blended mode (``b1``: each chain blended into the image in turn, Pillow's
``Image.blend``, by the weights of timm's ``_calc_blended_weights``).
"""
import math
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from ..contract import BatchPosition, LeafKey
from . import pil_ops
from .augment_ops import OpDraws, TimmOpsStage, config_sections, draw_magnitudes

__all__ = ["AugMix", "AugMixConfig", "AugMixDraws", "augmix_config", "blended_weights",
           "AUGMIX_TRANSFORMS"]


# timm's _AUGMIX_TRANSFORMS: RandAugment's increasing set without Invert and SolarizeAdd, in
# timm's order.
AUGMIX_TRANSFORMS = ("AutoContrast", "ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing",
                     "SharpnessIncreasing", "Equalize", "Rotate", "PosterizeIncreasing",
                     "SolarizeIncreasing", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel")


@dataclass(frozen=True)
class AugMixConfig:
    """A parsed AugMix string (timm's ``augment_and_mix_transform`` defaults).

    Attributes:
        magnitude (int): ``m``, 3 by default.
        width (int): ``w``, the chains, 3 by default.
        depth (int): ``d``, each chain's ops (-1: 1 to 3, uniformly).
        alpha (float): ``a``, the Dirichlet's and Beta's parameter, 1.0.
        magnitude_std (float): ``mstd`` (``inf``, uniform in [0, m], by default).
        blended (bool): ``b``, timm's blended mode (False by default).
    """

    magnitude: int = 3
    width: int = 3
    depth: int = -1
    alpha: float = 1.0
    magnitude_std: float = math.inf
    blended: bool = False


def augmix_config(config_str: str) -> AugMixConfig:
    """timm's AugMix string parsed as ``augment_and_mix_transform`` parses it.

    Args:
        config_str (str): ``"augmix-m5-w4-d2"`` and the like: sections ``m``, ``w``, ``d``,
            ``a``, ``mstd`` and ``b`` (``b1``: timm's blended mode).

    Returns:
        AugMixConfig.

    Raises:
        ValueError: not an ``augmix`` string, an unknown section, a value that does not parse, a
            width below 1 or ``alpha`` <= 0.
    """
    sections = str(config_str).split("-")
    if sections[0] != "augmix":
        raise ValueError("prefetch: a timm AugMix string starts with 'augmix', got %r" % (config_str,))
    found = config_sections("AugMix", config_str,
                            {"m": int, "w": int, "d": int, "a": float, "mstd": float, "b": int})
    fields = dict(magnitude=found.get("m", 3), width=found.get("w", 3), depth=found.get("d", -1),
                  alpha=found.get("a", 1.0), magnitude_std=found.get("mstd", math.inf),
                  blended=bool(found.get("b", 0)))
    if fields["width"] < 1 or not fields["alpha"] > 0:
        raise ValueError("prefetch: timm AugMix %r: w must be >= 1 and a > 0, got w = %d, a = %g"
                         % (config_str, fields["width"], fields["alpha"]))
    return AugMixConfig(**fields)


@dataclass
class AugMixDraws:
    """One batch's AugMix draws on the host: ``weights`` (float32 ``[N, width]``, each chain's
    Dirichlet weight), ``m`` (float32 ``[N]``, the Beta skip weight) and ``chains`` (one
    :class:`OpDraws` a chain, three layers, those past the chain's depth not applied)."""

    weights: torch.Tensor
    m: torch.Tensor
    chains: list


class AugMix(TimmOpsStage):
    """timm's AugMix (``AugMixAugment``) on the batch's uint8 image leaf: each image ``width``
    chains of 1 to 3 ops from timm's AugMix set (each op always applied, the magnitude uniform in
    [0, m] by default), with Pillow's arithmetic throughout. The basic mode (timm's
    ``_apply_basic``): the chains summed with Dirichlet weights in float32, clipped and truncated
    to uint8, then blended with the image by a Beta weight ``m`` (Pillow's ``Image.blend``). The
    blended mode (``b1``, timm's ``_apply_blended``): the image blended with each chain's result
    in turn, chain ``k`` by ``a_k``, where from the last chain back ``a_k = w_k m / c`` and ``c``
    (from 1) is multiplied by ``1 - a_k`` (timm's ``_calc_blended_weights``, in float32 as NumPy
    2 computes it; NumPy 1 computes it in float64 and rounds each weight to float32, which can
    differ in a weight's last bit).

    Args:
        config_str (str): timm's string, e.g. ``"augmix-m5-w4-d2"`` (:func:`augmix_config`).
        interpolation, fill, seed, image_key, layout: as :class:`RandAugment`'s.
        translate_pct (float): TranslateXRel/YRel's largest shift (create_transform: timm's
            0.3 for AugMix).
        translate_const (float): TranslateX/Y's shift in pixels, which AugMix's set does not
            draw (taken as timm's hparams take it).

    Raises:
        ValueError: a bad string or argument, naming it.
    """

    what_draws = "AugMix draws"
    transforms = AUGMIX_TRANSFORMS

    def __init__(self, config_str: str, *, interpolation: str = "random",
                 fill: Sequence[int] = (128, 128, 128), translate_pct: float = 0.3,
                 translate_const: float = 250, seed: Optional[int] = None,
                 image_key: LeafKey = 0, layout: str = "auto") -> None:
        self.config_str = config_str
        self.config = augmix_config(config_str)
        self._init_common("AugMix", interpolation, fill, translate_pct, translate_const, seed,
                          image_key, layout)

    def __repr__(self):
        return "AugMix(%r, interpolation=%r, fill=%r, seed=%d)" % (
            self.config_str, self.interpolation, self.fill, self.seed)

    def draws(self, n: int, epoch: int = 0, index: int = 0, rank: int = 0) -> AugMixDraws:
        """Each image's weights and chains for one batch, as timm draws them per image.

        Args:
            n (int): the number of images.
            epoch, index, rank (int): the batch's :class:`~prefetch.transforms.BatchPosition`.

        Returns:
            AugMixDraws.
        """
        c = self.config
        g = BatchPosition(epoch, index, rank).generator(self.seed)
        alpha = float(c.alpha)
        weights = torch._sample_dirichlet(torch.full((n, c.width), alpha, dtype=torch.float64),
                                          generator=g).to(torch.float32)
        m = torch._sample_dirichlet(torch.full((n, 2), alpha, dtype=torch.float64),
                                    generator=g)[:, 0].to(torch.float32)  # Beta(alpha, alpha)
        chains = []
        for _ in range(c.width):
            if c.depth > 0:
                depth = torch.full((n,), c.depth, dtype=torch.int64)
            else:
                depth = torch.randint(1, 4, (n,), generator=g)
            layers = max(c.depth, 3)
            ops = torch.randint(len(self.transforms), (n, layers), generator=g)
            applied = torch.arange(layers).view(1, layers) < depth.view(n, 1)
            magnitudes = draw_magnitudes(g, torch.full((n, layers), float(c.magnitude),
                                                   dtype=torch.float64), c.magnitude_std, None)
            negative, bicubic = self._signs_and_filters(g, n, layers)
            chains.append(OpDraws(ops, applied, magnitudes, negative, bicubic))
        return AugMixDraws(weights, m, chains)

    def augment(self, x: torch.Tensor, position: BatchPosition) -> torch.Tensor:
        self.check_fill(x)
        d = self.draws(x.shape[0], *position)
        n = x.shape[0]
        if self.config.blended:
            out = x
            for k, alpha in enumerate(blended_weights(d.weights, d.m).unbind(1)):
                out = pil_ops.blend(out, self.apply_layers(x, d.chains[k]), alpha.to(torch.float64))
            return out
        mixed = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        weights = d.weights.to(x.device)
        for k, chain in enumerate(d.chains):  # float32, each product and sum rounded (numpy's)
            mixed = mixed + weights[:, k].view(n, 1, 1, 1) * self.apply_layers(x, chain).to(torch.float32)
        mixed = mixed.clamp_(0.0, 255.0).to(torch.uint8)
        return pil_ops.blend(x, mixed, d.m.to(torch.float64))


def blended_weights(weights: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """timm's ``AugMixAugment._calc_blended_weights`` for each image, in float32 as NumPy 2
    computes it: ``w = weights * m``; from the last chain back, ``a_k = w_k / c`` and
    ``c = c * (1 - a_k)``, ``c`` from 1.

    Args:
        weights (Tensor[N, width]): float32, each image's Dirichlet weights.
        m (Tensor[N]): float32, each image's Beta weight.

    Returns:
        Tensor[N, width]: float32, the weight each chain's result is blended in by, in chain
        order.
    """
    w = weights.to(torch.float32) * m.to(torch.float32).view(-1, 1)
    c = torch.ones(w.shape[0], dtype=torch.float32)
    out = torch.empty_like(w)
    for k in range(w.shape[1] - 1, -1, -1):
        out[:, k] = w[:, k] / c
        c = c * (1 - out[:, k])
    return out
