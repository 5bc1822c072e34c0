"""timm's RandAugment and AutoAugment (``timm/data/auto_augment.py``, timm 1.0) by their config
strings, each image its own draws, applied to the uint8 window of a batch with Pillow's arithmetic
(:mod:`.augment_ops`, :mod:`.pil_ops`), as timm applies them to each PIL image in a DataLoader
worker.

timm's string: ``rand`` then dash-separated sections in any order: ``m<int>`` the magnitude (10),
``n<int>`` ops per image (2), ``p<float>`` each op's probability (0.5), ``mstd<float>`` the
magnitude's Gaussian noise (above 100: uniform in [0, m]), ``mmax<int>`` the magnitude's upper
bound (10), ``inc<0|1>`` the ops that grow with the magnitude, ``t<name>`` the op set
(``weights``: timm's weighted set, chosen without replacement; ``3a``: DeiT III's 3-Augment set,
SolarizeIncreasing, Desaturate and GaussianBlur; ``3aw``: it weighted with eleven more). Per image, as timm draws per call:
``n`` ops (uniformly with replacement, or by weight without), each applied with probability ``p``
at magnitude ``m`` (plus noise, clipped to [0, mmax]), a sign for the signed ops with probability
1/2 each, and for the geometric ops bilinear or bicubic with probability 1/2 each unless
create_transform fixed the interpolation.

timm's AutoAugment string: a policy name (``original``, ``originalr``, ``v0``, ``v0r``, or ``3a``,
DeiT III's 3-Augment) then optionally ``-mstd<float>``. Per image, as timm draws per call: one of
the policy's sub-policies uniformly (25 of two ops; 3a's three of one: Solarize, Desaturate, a
Gaussian blur of radius uniform in [0.1, 2]), then each of its ops applied with its own
probability at its own magnitude (plus the noise), with a sign and a resampling drawn as above.
"""
import math
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import torch

from ..contract import BatchPosition, LeafKey
from .augment_ops import OpDraws, TimmOpsStage, config_sections, draw_magnitudes

__all__ = ["RandAugmentConfig", "rand_augment_config", "RandAugment", "RAND_TRANSFORMS",
           "RAND_INCREASING_TRANSFORMS", "RAND_WEIGHTED_0", "AutoAugment", "AUTO_AUGMENT_POLICIES",
           "auto_augment_policy"]

# timm's op sets (_RAND_TRANSFORMS, _RAND_INCREASING_TRANSFORMS, _RAND_WEIGHTED_0).
RAND_TRANSFORMS = ("AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize",
                   "SolarizeAdd", "Color", "Contrast", "Brightness", "Sharpness", "ShearX",
                   "ShearY", "TranslateXRel", "TranslateYRel")
RAND_INCREASING_TRANSFORMS = ("AutoContrast", "Equalize", "Invert", "Rotate",
                              "PosterizeIncreasing", "SolarizeIncreasing", "SolarizeAdd",
                              "ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing",
                              "SharpnessIncreasing", "ShearX", "ShearY", "TranslateXRel",
                              "TranslateYRel")
RAND_WEIGHTED_0 = (("Rotate", 3), ("ShearX", 2), ("ShearY", 2), ("TranslateXRel", 1),
                   ("TranslateYRel", 1), ("ColorIncreasing", .25), ("SharpnessIncreasing", 0.25),
                   ("AutoContrast", 0.25), ("SolarizeIncreasing", .05), ("SolarizeAdd", .05),
                   ("ContrastIncreasing", .05), ("BrightnessIncreasing", .05), ("Equalize", .05),
                   ("PosterizeIncreasing", 0.05), ("Invert", 0.05))
# timm's 3-Augment sets (DeiT III; _RAND_3A, _RAND_WEIGHTED_3A).
RAND_3A = ("SolarizeIncreasing", "Desaturate", "GaussianBlur")
RAND_WEIGHTED_3A = (("SolarizeIncreasing", 6), ("Desaturate", 6), ("GaussianBlur", 6), ("Rotate", 3),
                    ("ShearX", 2), ("ShearY", 2), ("PosterizeIncreasing", 1), ("AutoContrast", 1),
                    ("ColorIncreasing", 1), ("SharpnessIncreasing", 1), ("ContrastIncreasing", 1),
                    ("BrightnessIncreasing", 1), ("Equalize", 1), ("Invert", 1))



@dataclass(frozen=True)
class RandAugmentConfig:
    """A parsed RandAugment string (timm's ``rand_augment_transform`` defaults).

    Attributes:
        magnitude (int): ``m``, 10 by default.
        num_layers (int): ``n``, ops per image, 2 by default.
        prob (float): ``p``, each op's probability, 0.5 by default.
        magnitude_std (float): ``mstd``, the magnitude's Gaussian noise (``inf``: uniform in
            [0, magnitude]); 0 by default.
        magnitude_max (int or None): ``mmax``, the magnitude's upper bound (None or 0: 10).
        increasing (bool): ``inc``.
        transforms (tuple of str): the op set, timm's names.
        weights (tuple of float or None): the op set's choice weights (``tweights``), normalised.
    """

    magnitude: int = 10
    num_layers: int = 2
    prob: float = 0.5
    magnitude_std: float = 0.0
    magnitude_max: Optional[int] = None
    increasing: bool = False
    transforms: Tuple[str, ...] = RAND_TRANSFORMS
    weights: Optional[Tuple[float, ...]] = None


def _refuse(config_str, message):
    raise ValueError("prefetch: timm RandAugment %r: %s" % (config_str, message))


def rand_augment_config(config_str: str) -> RandAugmentConfig:
    """timm's RandAugment string parsed as ``timm.data.auto_augment.rand_augment_transform``
    parses it.

    Args:
        config_str (str): ``"rand-m9-mstd0.5-inc1"`` and the like (module docstring).

    Returns:
        RandAugmentConfig.

    Raises:
        ValueError: not a ``rand`` string, a section timm does not know (timm asserts), a value
            that does not parse, or more ops per image than a weighted set holds.
    """
    if not isinstance(config_str, str) or config_str.split("-")[0] != "rand":
        raise ValueError("prefetch: a timm RandAugment string starts with 'rand', got %r"
                         % (config_str,))
    found = config_sections("RandAugment", config_str, {
        "m": int, "n": int, "p": float, "mstd": float, "mmax": int, "inc": int, "t": str})
    std = found.get("mstd", 0.0)
    fields = dict(magnitude=found.get("m", 10), num_layers=found.get("n", 2),
                  prob=found.get("p", 0.5), magnitude_std=math.inf if std > 100 else std,
                  magnitude_max=found.get("mmax"))
    increasing, set_name = bool(found.get("inc", 0)), found.get("t")
    weights = None
    if set_name in ("weights", "3aw"):
        transforms, raw = zip(*(RAND_WEIGHTED_0 if set_name == "weights" else RAND_WEIGHTED_3A))
        total = sum(raw)
        weights = tuple(w / total for w in raw)
    elif set_name == "3a":
        transforms = RAND_3A
    else:  # (timm: any other name is the default set)
        transforms = RAND_INCREASING_TRANSFORMS if increasing else RAND_TRANSFORMS
    if fields["num_layers"] < 0:
        _refuse(config_str, "n must be >= 0, got %d" % fields["num_layers"])
    if weights is not None and fields["num_layers"] > len(transforms):
        _refuse(config_str, "n = %d ops chosen without replacement from a set of %d"
                % (fields["num_layers"], len(transforms)))
    return RandAugmentConfig(increasing=increasing, transforms=tuple(transforms),
                             weights=weights, **fields)


class RandAugment(TimmOpsStage):
    """timm's RandAugment on the batch's uint8 image leaf, each image its own draws, with
    Pillow's arithmetic (each op equals timm's on a PIL image: :mod:`.pil_ops`).

    Args:
        config_str (str): timm's string, e.g. ``"rand-m9-mstd0.5-inc1"``
            (:func:`rand_augment_config`).
        interpolation (str): the geometric ops' resampling: ``"random"`` (timm's default:
            bilinear or bicubic per op), ``"bilinear"`` or ``"bicubic"`` (create_transform passes
            its own interpolation unless it is ``"random"``).
        fill (int or sequence of int): the geometric ops' ``fillcolor``: timm's ``img_mean``
            (create_transform: ``round(255 * mean)`` per channel), 128 without it.
        translate_pct (float): TranslateXRel/YRel's largest shift as a fraction of the side
            (timm: 0.45).
        translate_const (float): TranslateX/Y's largest shift in pixels (none of timm's
            RandAugment sets draws them; create_transform passes timm's ``int(0.45 * size)``).
        seed (int, optional): the draws are a function of ``(seed, rank, epoch, batch index)``;
            None picks one (the loader's state saves it).
        image_key, layout: as :class:`~prefetch.transforms.PolicyAugment`'s.

    Raises:
        ValueError: a bad string (:func:`rand_augment_config`) or argument, naming it.
    """

    what_draws = "RandAugment draws"

    def __init__(self, config_str: str, *, interpolation: str = "random",
                 fill: Sequence[int] = (128, 128, 128), translate_pct: float = 0.45,
                 translate_const: float = 250, seed: Optional[int] = None,
                 image_key: LeafKey = 0, layout: str = "auto") -> None:
        self.config_str = config_str
        self.config = rand_augment_config(config_str)
        self.transforms = self.config.transforms
        self._init_common("RandAugment", interpolation, fill, translate_pct, translate_const, seed,
                          image_key, layout)

    def __repr__(self):
        return "RandAugment(%r, interpolation=%r, fill=%r, seed=%d)" % (
            self.config_str, self.interpolation, self.fill, self.seed)

    def draws(self, n: int, epoch: int = 0, index: int = 0, rank: int = 0) -> OpDraws:
        """Each image's draws for one batch, as timm draws them for each image.

        Args:
            n (int): the number of images.
            epoch, index, rank (int): the batch's :class:`~prefetch.transforms.BatchPosition`.

        Returns:
            OpDraws.
        """
        c = self.config
        g = BatchPosition(epoch, index, rank).generator(self.seed)
        layers = c.num_layers
        if c.weights is None:
            ops = torch.randint(len(c.transforms), (n, layers), generator=g)
        elif n and layers:
            w = torch.tensor(c.weights, dtype=torch.float64).expand(n, -1)
            ops = torch.multinomial(w, layers, replacement=False, generator=g)
        else:
            ops = torch.zeros((n, layers), dtype=torch.int64)
        applied = torch.rand((n, layers), generator=g, dtype=torch.float64) <= c.prob
        magnitudes = draw_magnitudes(g, torch.full((n, layers), float(c.magnitude), dtype=torch.float64),
                                 c.magnitude_std, c.magnitude_max)
        negative, bicubic = self._signs_and_filters(g, n, layers)
        return OpDraws(ops, applied, magnitudes, negative, bicubic)


# timm's AutoAugment policies (auto_augment_policy_original / _originalr / _v0 / _v0r: the
# AutoAugment paper's ImageNet policy and TensorFlow's EfficientNet policy "v0"; the "r" variants
# posterize with PosterizeIncreasing), each sub-policy two (op, probability, magnitude); 3a's
# sub-policies (below) one.
def _policy(text):
    return tuple(tuple((op, float(p), int(m)) for op, p, m in (step.split(":") for step in sub.split()))
                 for sub in text.strip().splitlines())


_V0 = """
Equalize:0.8:1 ShearY:0.8:4
Color:0.4:9 Equalize:0.6:3
Color:0.4:1 Rotate:0.6:8
Solarize:0.8:3 Equalize:0.4:7
Solarize:0.4:2 Solarize:0.6:2
Color:0.2:0 Equalize:0.8:8
Equalize:0.4:8 SolarizeAdd:0.8:3
ShearX:0.2:9 Rotate:0.6:8
Color:0.6:1 Equalize:1.0:2
Invert:0.4:9 Rotate:0.6:0
Equalize:1.0:9 ShearY:0.6:3
Color:0.4:7 Equalize:0.6:0
Posterize:0.4:6 AutoContrast:0.4:7
Solarize:0.6:8 Color:0.6:9
Solarize:0.2:4 Rotate:0.8:9
Rotate:1.0:7 TranslateYRel:0.8:9
ShearX:0.0:0 Solarize:0.8:4
ShearY:0.8:0 Color:0.6:4
Color:1.0:0 Rotate:0.6:2
Equalize:0.8:4 Equalize:0.0:8
Equalize:1.0:4 AutoContrast:0.6:2
ShearY:0.4:7 SolarizeAdd:0.6:7
Posterize:0.8:2 Solarize:0.6:10
Solarize:0.6:8 Equalize:0.6:1
Color:0.8:6 Rotate:0.4:5
"""

_ORIGINAL = """
PosterizeOriginal:0.4:8 Rotate:0.6:9
Solarize:0.6:5 AutoContrast:0.6:5
Equalize:0.8:8 Equalize:0.6:3
PosterizeOriginal:0.6:7 PosterizeOriginal:0.6:6
Equalize:0.4:7 Solarize:0.2:4
Equalize:0.4:4 Rotate:0.8:8
Solarize:0.6:3 Equalize:0.6:7
PosterizeOriginal:0.8:5 Equalize:1.0:2
Rotate:0.2:3 Solarize:0.6:8
Equalize:0.6:8 PosterizeOriginal:0.4:6
Rotate:0.8:8 Color:0.4:0
Rotate:0.4:9 Equalize:0.6:2
Equalize:0.0:7 Equalize:0.8:8
Invert:0.6:4 Equalize:1.0:8
Color:0.6:4 Contrast:1.0:8
Rotate:0.8:8 Color:1.0:2
Color:0.8:8 Solarize:0.8:7
Sharpness:0.4:7 Invert:0.6:8
ShearX:0.6:5 Equalize:1.0:9
Color:0.4:0 Equalize:0.6:3
Equalize:0.4:7 Solarize:0.2:4
Solarize:0.6:5 AutoContrast:0.6:5
Invert:0.6:4 Equalize:1.0:8
Color:0.6:4 Contrast:1.0:8
Equalize:0.8:8 Equalize:0.6:3
"""

#: timm's AutoAugment policies by name: 25 sub-policies of two ``(op, probability, magnitude)``.
AUTO_AUGMENT_POLICIES = {
    "original": _policy(_ORIGINAL),
    "originalr": _policy(_ORIGINAL.replace("PosterizeOriginal", "PosterizeIncreasing")),
    "v0": _policy(_V0),
    "v0r": _policy(_V0.replace("Posterize:", "PosterizeIncreasing:")),
    # 3-Augment (DeiT III): one op a sub-policy, always applied
    "3a": _policy("Solarize:1.0:5\nDesaturate:1.0:10\nGaussianBlurRand:1.0:10"),
}


def auto_augment_policy(config_str: str) -> Tuple[str, tuple, float]:
    """timm's AutoAugment string parsed as ``auto_augment_transform`` parses it.

    Args:
        config_str (str): ``"original"``, ``"originalr"``, ``"v0"``, ``"v0r"`` or ``"3a"``,
            optionally ``-mstd<float>``.

    Returns:
        (name, policy, magnitude_std): the policy's name, its sub-policies
        (:data:`AUTO_AUGMENT_POLICIES`) and the magnitude noise (0: none).

    Raises:
        ValueError: an unknown policy, or a section other than ``mstd``.
    """
    name = str(config_str).split("-")[0]
    std = config_sections("AutoAugment", str(config_str), {"mstd": float}).get("mstd", 0.0)
    if name not in AUTO_AUGMENT_POLICIES:
        raise ValueError("prefetch: timm AutoAugment %r: unknown policy %r (timm's are original, "
                         "originalr, v0, v0r and 3a)" % (config_str, name))
    return name, AUTO_AUGMENT_POLICIES[name], std


class AutoAugment(TimmOpsStage):
    """timm's AutoAugment on the batch's uint8 image leaf: each image one of the policy's
    sub-policies, each of its ops applied with its probability at its magnitude, with Pillow's
    arithmetic (each op equals timm's on a PIL image).

    Args:
        config_str (str): timm's string, e.g. ``"original"`` or ``"v0r-mstd0.5"``
            (:func:`auto_augment_policy`).
        interpolation, fill, translate_pct, translate_const, seed, image_key, layout: as
            :class:`RandAugment`'s.

    Raises:
        ValueError: a bad string or argument, naming it.
    """

    what_draws = "AutoAugment draws"

    def __init__(self, config_str: str, *, interpolation: str = "random",
                 fill: Sequence[int] = (128, 128, 128), translate_pct: float = 0.45,
                 translate_const: float = 250, seed: Optional[int] = None,
                 image_key: LeafKey = 0, layout: str = "auto") -> None:
        self.config_str = config_str
        self.name, self.policy, self.magnitude_std = auto_augment_policy(config_str)
        self.transforms = tuple(sorted({op for sub in self.policy for op, _, _ in sub}))
        code = {op: k for k, op in enumerate(self.transforms)}
        self._ops = torch.tensor([[code[op] for op, _, _ in sub] for sub in self.policy])
        self._probs = torch.tensor([[p for _, p, _ in sub] for sub in self.policy],
                                   dtype=torch.float64)
        self._magnitudes = torch.tensor([[m for _, _, m in sub] for sub in self.policy],
                                        dtype=torch.float64)
        self._init_common("AutoAugment", interpolation, fill, translate_pct, translate_const,
                          seed, image_key, layout)

    def __repr__(self):
        return "AutoAugment(%r, interpolation=%r, fill=%r, seed=%d)" % (
            self.config_str, self.interpolation, self.fill, self.seed)

    def draws(self, n: int, epoch: int = 0, index: int = 0, rank: int = 0) -> OpDraws:
        """Each image's sub-policy and its ops' draws for one batch, as timm draws them.

        Args:
            n (int): the number of images.
            epoch, index, rank (int): the batch's :class:`~prefetch.transforms.BatchPosition`.

        Returns:
            OpDraws: a layer per op of a sub-policy (two; 3a one), the sub-policy's ops in
            order.
        """
        g = BatchPosition(epoch, index, rank).generator(self.seed)
        sub = torch.randint(len(self.policy), (n,), generator=g)
        layers = self._ops.shape[1]
        probs = self._probs[sub]
        applied = torch.rand((n, layers), generator=g, dtype=torch.float64) <= probs  # (rand < 1)
        magnitudes = draw_magnitudes(g, self._magnitudes[sub], self.magnitude_std, None)
        negative, bicubic = self._signs_and_filters(g, n, layers)
        uniform = None
        if "GaussianBlurRand" in self.transforms:  # (drawn last: the other policies' draws keep)
            uniform = torch.rand((n, layers), generator=g, dtype=torch.float64)
        return OpDraws(self._ops[sub], applied, magnitudes, negative, bicubic, sub_policy=sub,
                       uniform=uniform)

