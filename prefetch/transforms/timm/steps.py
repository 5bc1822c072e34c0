"""timm's steps that :mod:`prefetch.transforms.v2`'s plan places beside torchvision's: timm's
``RandomResizedCropAndInterpolation`` (its window, with timm's ``"random"`` interpolation) and its
``RandomErasing`` on the float images. :func:`~prefetch.transforms.timm.create_transform` builds
its recipes from these and from v2's steps."""
from typing import Optional, Sequence, Tuple, Union

from .. import arguments
from ..v2_geometry import RandomResizedCrop as _V2RandomResizedCrop
from ..v2_photometric import PolicyStep
from ..v2_plan import Phase, Plan, Spec
from .augmix import AugMix
from .auto_augment import AutoAugment, RandAugment
from .random_erasing import RandomErasing

__all__ = ["RandomResizedCropAndInterpolation", "RandAugmentStep", "AutoAugmentStep",
           "AugMixStep", "RandomErasingStep"]


class RandomResizedCropAndInterpolation(_V2RandomResizedCrop):
    """timm's ``RandomResizedCropAndInterpolation`` (``timm/data/transforms.py``): torchvision's
    window draw, resized with ``interpolation`` ``"bilinear"``, ``"bicubic"`` or ``"random"``
    (each image bilinear or bicubic with probability 1/2, as timm draws it per image), always
    antialiased as PIL's resize, which timm calls, is. FusedAugment's ``random_resized_crop``.

    Args:
        size: the output ``(h, w)``, or an int for a square.
        scale: the area's range (timm: (0.08, 1.0)).
        ratio: the aspect's range, w / h, log-uniform (timm: (3/4, 4/3)).
        interpolation: ``"bilinear"`` (timm's default), ``"bicubic"`` or ``"random"``.

    Raises:
        ValueError: as v2's ``RandomResizedCrop``, or another interpolation (timm's
            ``"nearest"``, ``"lanczos"``, ``"box"``, ``"hamming"`` are not compiled).
    """

    def __init__(self, size: Union[int, Sequence[int]], scale: Tuple[float, float] = (0.08, 1.0),
                 ratio: Tuple[float, float] = (3 / 4, 4 / 3), interpolation: str = "bilinear"):
        super().__init__(size, scale=scale, ratio=ratio)
        self.interpolation = arguments.interpolation("RandomResizedCropAndInterpolation",
                                                     interpolation, ("bilinear", "bicubic", "random"))


class RandAugmentStep(PolicyStep):
    """timm's RandAugment by its string as a recipe step: the recipe's timm augmentation, on the
    uint8 window after the crop and flips (:class:`prefetch.transforms.timm.RandAugment`, each
    image its own draws, Pillow's arithmetic). It holds a slot of its own, not torchvision's
    one policy slot: a ColorJitter may follow it, as timm's create_transform keeps one after the
    3-Augment strings (DeiT III's recipe), and a torchvision policy or ColorJitter may stand
    beside it; each runs in the recipe's order.

    Args:
        config_str, interpolation, fill, translate_pct, translate_const: as that RandAugment
            takes them.

    Raises:
        ValueError: as that RandAugment refuses them.
    """

    stage = RandAugment
    # (a slot of its own: torchvision's one policy slot would refuse the ColorJitter after it)
    slot = "timm's auto_augment (RandAugment, AutoAugment or AugMix)"

    def __init__(self, config_str: str, interpolation: str = "random",
                 fill: Sequence[int] = (128, 128, 128), translate_pct: float = 0.45,
                 translate_const: float = 250):
        checked = self.stage(config_str, interpolation=interpolation, fill=fill,
                             translate_pct=translate_pct, translate_const=translate_const, seed=0)
        self.config_str, self.interpolation = checked.config_str, checked.interpolation
        self.fill, self.translate_pct = checked.fill, checked.translate_pct
        self.translate_const = checked.translate_const

    def __repr__(self):
        return "%s(%r, interpolation=%r, fill=%r)" % (self.stage.__name__, self.config_str,
                                                      self.interpolation, self.fill)

    def policy(self, seed: Optional[int]):
        return self.stage(self.config_str, interpolation=self.interpolation, fill=self.fill,
                          translate_pct=self.translate_pct, translate_const=self.translate_const,
                          seed=seed, layout="NCHW")


class AutoAugmentStep(RandAugmentStep):
    """timm's AutoAugment by its string (``"original"``, ``"v0r-mstd0.5"``, ...) as a recipe
    step (:class:`prefetch.transforms.timm.AutoAugment`), in the policy's place.

    Args:
        config_str, interpolation, fill, translate_pct, translate_const: as that AutoAugment
            takes them.

    Raises:
        ValueError: as that AutoAugment refuses them.
    """

    stage = AutoAugment


class AugMixStep(RandAugmentStep):
    """timm's AugMix by its string (``"augmix-m5-w4-d2"``) as a recipe step
    (:class:`prefetch.transforms.timm.AugMix`), in the policy's place.

    Args:
        config_str, interpolation, fill, translate_pct, translate_const: as that AugMix takes
            them (create_transform passes timm's ``translate_pct`` 0.3).

    Raises:
        ValueError: as that AugMix refuses them.
    """

    stage = AugMix


class RandomErasingStep(Spec):
    """timm's ``RandomErasing`` as a recipe step, after the normalisation
    (:class:`prefetch.transforms.timm.RandomErasing`, each image its own boxes).

    Args:
        probability, mode, max_count, num_splits: timm's ``RandomErasing`` arguments (the other
            ones at timm's defaults, as ``create_transform`` builds it).

    Raises:
        ValueError: as that RandomErasing refuses them.
    """

    phase = Phase.ERASE
    after = Phase.CONVERT
    rule = ("RandomErasing comes after ToDtype (and Normalize), on the float images, before "
            "MixUp/CutMix")

    def __init__(self, probability: float = 0.5, mode: str = "const",
                 max_count: Optional[int] = None, num_splits: int = 0):
        checked = RandomErasing(probability, mode=mode, max_count=max_count, num_splits=num_splits,
                                seed=0)
        self.probability, self.mode = checked.probability, checked.mode
        self.max_count, self.num_splits = checked.max_count, checked.num_splits

    def __repr__(self):
        return "RandomErasing(probability=%g, mode=%r, max_count=%d, num_splits=%d)" % (
            self.probability, self.mode, self.max_count, self.num_splits)

    def contribute(self, plan: Plan) -> None:
        # inplace: a float stage erases the plan's own images (FusedAugment's new output, or a
        # stage's after it), never the caller's batch
        plan.add_stage(lambda seed: RandomErasing(
            self.probability, mode=self.mode, max_count=self.max_count, num_splits=self.num_splits,
            seed=seed, image_key=plan.image_key, layout="NCHW", inplace=True))
