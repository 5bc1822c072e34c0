"""The steps of :mod:`prefetch.transforms.v2` from ``ToDtype`` on: the conversion
(:attr:`Phase.CONVERT`), ``Normalize``, ``RandomErasing`` on the float images and, last,
``MixUp``/``CutMix`` (or a ``RandomChoice`` of them) on the batch's images and labels; and
``ToImage``/``PILToTensor``, accepted before ``ToDtype`` and doing nothing (batches are tensors).
Arguments and defaults are torchvision's (``torchvision/transforms/v2/_misc.py``,
``_augment.py``, ``_container.py``, ``_type_conversion.py``).
"""
from typing import Optional, Sequence, Tuple, Union

import torch

from . import arguments
from .erasing import RandomErasing as _Erasing
from .roll_mix import RollMix
from . import v2_photometric
from .policy_augment import PolicyAugment
from .v2_plan import Phase, Plan, Spec, numbers

__all__ = ["ToDtype", "Normalize", "RandomErasing", "MixUp", "CutMix", "RandomChoice", "ToImage",
           "PILToTensor"]


class ToImage(Spec):
    """torchvision's ``ToImage``: accepted anywhere before ``ToDtype``; compiles to nothing (the
    loader's batches are tensors already)."""

    phase = Phase.PHOTOMETRIC
    rule = "ToImage and PILToTensor come before ToDtype (they do nothing: batches are tensors)"
    moves = False

    def contribute(self, plan: Plan) -> None:
        pass


class PILToTensor(ToImage):
    """torchvision's ``PILToTensor``: as :class:`ToImage`."""


class ToDtype(Spec):
    """torchvision's ``ToDtype(dtype, scale=True)``: the output's dtype, values in [0, 1]
    (FusedAugment's ``dtype``, in the same pass as the window and the normalisation).

    Args:
        dtype: ``torch.float32``, ``torch.float16`` or ``torch.bfloat16``.
        scale: True (torchvision's default is False, which would keep 0-255: refused).

    Raises:
        ValueError: another dtype, or ``scale`` not True (TypeError too for a non-bool).
    """

    phase = Phase.CONVERT
    rule = "one ToDtype, after the uint8 steps"
    slot = "the output dtype"

    def __init__(self, dtype: torch.dtype, scale: bool = False):
        if dtype not in (torch.float32, torch.float16, torch.bfloat16):
            arguments.fail("ToDtype", "dtype", "torch.float32, float16 or bfloat16", dtype)
        if arguments.flag("ToDtype", "scale", scale) is not True:
            raise ValueError("prefetch: ToDtype scale must be True, got False: prefetch supports "
                             "ToDtype(dtype, scale=True) (values in [0, 1], as torchvision's "
                             "recipes use it); scale=False would keep 0-255")
        self.dtype, self.scale = dtype, True

    def contribute(self, plan: Plan) -> None:
        plan.dtype = self.dtype


class Normalize(Spec):
    """torchvision's ``Normalize``: ``(x - mean) / std`` per channel, in FusedAugment's pass
    (or the one-pass normalisation after a policy).

    Args:
        mean: one finite number per channel (a sequence or a 1-D tensor).
        std: as many numbers > 0.
        inplace: a bool, ignored (the compiled pass writes a new tensor; torchvision: False).

    Raises:
        ValueError: a non-finite mean, a std <= 0, lengths that differ (TypeError too for the
            wrong type).
    """

    phase = Phase.NORMALIZE
    after = Phase.CONVERT
    rule = "Normalize comes right after ToDtype"
    slot = "mean and std"

    def __init__(self, mean: Sequence[float], std: Sequence[float], inplace: bool = False):
        self.mean = numbers(mean, "Normalize", "mean")
        self.std = numbers(std, "Normalize", "std", positive=True)
        if len(self.mean) != len(self.std):
            arguments.fail("Normalize", "std", "as many values as mean (%d)" % len(self.mean), std)
        arguments.flag("Normalize", "inplace", inplace)

    def contribute(self, plan: Plan) -> None:
        plan.mean, plan.std = self.mean, self.std


class RandomErasing(Spec):
    """torchvision's ``RandomErasing`` on the float images, each its own box
    (:class:`prefetch.transforms.RandomErasing`); several may follow each other.

    Args:
        p: the probability of erasing an image, in [0, 1] (torchvision: 0.5).
        scale: the box's area range, a fraction of the image's, in [0, 1]
            (torchvision: (0.02, 0.33)).
        ratio: the box's aspect range, > 0 (torchvision: (0.3, 3.3)).
        value: a number, one per channel, or ``"random"`` (torchvision: 0).
        inplace: a bool, ignored (torchvision: False).

    Raises:
        ValueError: as the RandomErasing it compiles to refuses them, with the same message.
    """

    phase = Phase.ERASE
    after = Phase.CONVERT
    rule = ("RandomErasing comes after ToDtype (and Normalize), on the float images, before "
            "MixUp/CutMix")

    def __init__(self, p: float = 0.5, scale: Tuple[float, float] = (0.02, 0.33),
                 ratio: Tuple[float, float] = (0.3, 3.3),
                 value: Union[float, Sequence[float], str] = 0, inplace: bool = False):
        # checked as the RandomErasing it compiles to checks them (torchvision: "Scale should be
        # between 0 and 1"; the ratio a positive (min, max); the value a number, one per channel
        # or 'random')
        checked = _Erasing(p, scale, ratio, value, seed=0)
        self.p, self.scale, self.ratio = checked.p, checked.scale, checked.ratio
        self.value = value
        arguments.flag("RandomErasing", "inplace", inplace)

    def contribute(self, plan: Plan) -> None:
        plan.add_stage(lambda seed: _Erasing(self.p, self.scale, self.ratio, self.value,
                                             seed=seed, image_key=plan.image_key, layout="NCHW"))


_MIX_RULE = ("MixUp/CutMix come last, on the float images (after ToDtype, Normalize and "
             "RandomErasing): one of them or a RandomChoice of them")


class _BatchMix(Spec):
    """The batch's mix, last: a :class:`RollMix` on its images and labels."""

    phase = Phase.MIX
    after = Phase.CONVERT
    rule = _MIX_RULE
    slot = "the batch's mix (MixUp, CutMix or a RandomChoice of them)"

    def contribute(self, plan: Plan) -> None:
        mixes = self.transforms if isinstance(self, RandomChoice) else [self]
        # num_classes may be None: RollMix then needs [N, K] one-hot or soft labels, as
        # torchvision's MixUp/CutMix do (checked when a batch arrives).
        plan.add_stage(lambda seed: RollMix(
            [(m.kind, m.alpha) for m in mixes], num_classes=mixes[0].num_classes,
            p=getattr(self, "p", None), seed=seed, image_key=plan.image_key,
            label_key=plan.label_key, layout="NCHW"))


class _Mix(_BatchMix):
    kind: str

    def __init__(self, *, alpha: float = 1.0, num_classes: Optional[int] = None,
                 labels_getter: str = "default"):
        name = type(self).__name__
        if labels_getter != "default":
            raise ValueError("prefetch: %s takes the labels from the Compose's label_key; "
                             "labels_getter must be 'default'" % name)
        self.alpha = arguments.number(name, "alpha", alpha, low=0.0, low_open=True)
        if num_classes is not None:
            num_classes = arguments.integer(name, "num_classes", num_classes, low=1,
                                            expected="None or an int >= 1")
        self.num_classes = num_classes


class MixUp(_Mix):
    """torchvision's ``MixUp``: each image blended with its batch neighbour's, labels alike,
    lambda ~ Beta(alpha, alpha) (:class:`prefetch.transforms.RollMix`).

    Args:
        alpha: the Beta's parameter, > 0 (torchvision: 1.0).
        num_classes: for class-index labels, an int >= 1; None (torchvision's default since
            0.20) takes one-hot or soft ``[N, K]`` labels.
        labels_getter: ``"default"`` only (the labels are the Compose's ``label_key``).

    Raises:
        ValueError: a bad alpha or num_classes, another labels_getter.
    """

    kind = "mixup"


class CutMix(_Mix):
    """torchvision's ``CutMix``: a box of each image from its batch neighbour, labels by area
    (:class:`prefetch.transforms.RollMix`).

    Args:
        alpha: the Beta's parameter, > 0 (torchvision: 1.0).
        num_classes: an int >= 1, or None for ``[N, K]`` labels (torchvision's default).
        labels_getter: ``"default"`` only.

    Raises:
        ValueError: a bad alpha or num_classes, another labels_getter.
    """

    kind = "cutmix"


class RandomChoice(_BatchMix):
    """torchvision's ``RandomChoice``: of MixUp and CutMix (the batch transforms torchvision's
    recipes choose between), one drawn per batch; or of photometric steps (``ColorJitter``, the
    single-op random transforms: :mod:`.v2_photometric`), one drawn per image on the uint8 window
    before ``ToDtype``, as a PolicyAugment stage (:func:`~prefetch.transforms.policies.choice`).

    Args:
        transforms: MixUp and/or CutMix steps, with the same ``num_classes``; or photometric
            steps.
        p: one weight >= 0 per transform, not all 0, or None for equal ones (torchvision's
            default).

    Raises:
        ValueError: a mix of both kinds or another step in ``transforms``, none, differing
            num_classes, bad weights.
    """

    def __init__(self, transforms: Sequence[Spec], p: Optional[Sequence[float]] = None):
        steps = list(transforms) if hasattr(transforms, "__iter__") else []
        if steps and all(isinstance(t, v2_photometric.TABLE_STEPS) for t in steps):
            # The photometric choice: this step goes where the photometric steps go.
            self.phase, self.after, self.slot = Phase.PHOTOMETRIC, None, None
            self.rule = v2_photometric.RandomApply.rule
            self.transforms, self.p = steps, p
            self.policy(0)  # the weights checked now (policies.choice), naming RandomChoice
            return
        self.transforms = list(transforms)
        others = [type(t).__name__ for t in self.transforms if not isinstance(t, _Mix)]
        if others or not self.transforms:
            raise ValueError("prefetch: RandomChoice compiles a choice between MixUp and CutMix, "
                             "or between photometric steps (ColorJitter, RandomGrayscale, "
                             "RandomSolarize, ...), not both; got %s"
                             % (", ".join(others) or "no transform"))
        if p is not None:
            weights = numbers(p, "RandomChoice", "p")
            if len(weights) != len(self.transforms) or min(weights) < 0 or not sum(weights) > 0:
                arguments.fail("RandomChoice", "p", "one weight >= 0 per transform (%d), not all "
                               "0" % len(self.transforms), p)
        self.p = p
        classes = {t.num_classes for t in self.transforms}
        if len(classes) != 1:
            raise ValueError("prefetch: RandomChoice: its MixUp and CutMix must have the same "
                             "num_classes, got %s" % sorted(classes, key=str))

    def policy(self, seed: Optional[int]) -> PolicyAugment:
        """The compiled photometric choice (its steps photometric only).

        Args:
            seed: its seed (None: drawn).

        Returns:
            A PolicyAugment on NCHW uint8 images.
        """
        return PolicyAugment("choice", steps=[t.table_step() for t in self.transforms],
                             p=self.p, seed=seed, layout="NCHW")

    def contribute(self, plan: Plan) -> None:
        if self.phase == Phase.PHOTOMETRIC:
            plan.add_stage(self.policy)
        else:
            super().contribute(plan)

    def __repr__(self) -> str:
        return "RandomChoice(transforms=%r, p=%r)" % (self.transforms, self.p)
