"""A ``torchvision.transforms.v2``-compatible front end: the same names and arguments
for the supported subset, compiled by :class:`Compose` into one prefetch Transform that runs on
the batch, each sample with its own draws::

    from prefetch.transforms import v2 as T  # was: from torchvision.transforms import v2 as T
    train = T.Compose([T.RandomResizedCrop(176), T.RandomHorizontalFlip(),
                       T.TrivialAugmentWide(interpolation="bilinear"),
                       T.ToDtype(torch.float32, scale=True),
                       T.Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
                       T.RandomErasing(0.1)], seed=0)
    loader = prefetch.Prefetcher(dataloader, transform=train)

The order a recipe may have (torchvision's recipes have it): one geometry —
``RandomResizedCrop``, ``Resize`` + ``CenterCrop``, ``CenterCrop``, ``RandomCrop`` or ``Pad`` +
``RandomCrop`` — with
flips, on uint8 images; at most one policy (``TrivialAugmentWide``, ``RandAugment``,
``AutoAugment``, ``ColorJitter``, ``AugMix``) and any number of single-op random transforms
(``RandomGrayscale``, ``RandomSolarize``, ...), ``RandomApply``, ``RandomChoice`` and
``RandomOrder`` of them, ``RandomAffine`` and ``RandomRotation`` on uint8;
``ToDtype(float, scale=True)``; ``Normalize``;
``RandomErasing``; last, ``MixUp``, ``CutMix`` or a ``RandomChoice`` of them, on the batch's
images and labels as torchvision's v2 does (:class:`~prefetch.transforms.roll_mix.RollMix`).
``ToImage``/``PILToTensor`` are accepted and do nothing (batches are tensors).
A transform outside the subset, or out of that order, is refused when the Compose is built,
naming it: keep it in the DataLoader's workers, before collation.

What it compiles to: without a policy, one :class:`~prefetch.FusedAugment` (crop, resample,
flips, normalisation and cast in one pass) and the erasings. With a policy the uint8 image after
the geometry is needed first, as torchvision's recipes apply the policy to it: FusedAugment
resamples and rounds to uint8 in its store (``dtype=torch.uint8``; torchvision's uint8 resize
rounds in fixed point on the CPU: 18% of resampled pixels differ from it by 1, and a threshold op
of the policy can enlarge that for those pixels; a crop without resampling is exact), then
:class:`PolicyAugment` (one fused kernel per op kind and step), then
:func:`prefetch.ops.normalize_flip` — three passes over the uint8 image.

Several views of each image (self-supervised pretraining): :class:`MultiView` runs several
Composes on the same batch, each view with its own draws, and returns the list of their images
(:mod:`.multi_view`); :mod:`prefetch.transforms.ssl` builds the published recipes.

How: each step is a :class:`~prefetch.transforms.v2_plan.Spec` that says its phase (the order
above) and sets its part of a :class:`~prefetch.transforms.v2_plan.Plan`; Compose places the steps
in turn (the plan refuses one out of order or a second one where one goes, naming it) and builds
the plan. The steps live by phase in :mod:`.v2_geometry`, :mod:`.v2_photometric` and
:mod:`.v2_float`; this module exports every name of their ``__all__``.
"""
from typing import Iterable, Optional

from .compose import Compose as _Compose
from .contract import LeafKey
from . import arguments, v2_float, v2_geometry, v2_photometric
from .v2_float import *  # noqa: F401,F403 (the steps, by torchvision's names)
from .v2_geometry import *  # noqa: F401,F403
from .v2_geometry import InterpolationMode
from .v2_photometric import *  # noqa: F401,F403
from .v2_photometric import AutoAugmentPolicy
from .v2_names import TORCHVISION_V2_NAMES, is_torchvision_object
from .v2_plan import Plan, Spec
from .multi_view import MultiView

# The steps Compose compiles (named in its refusals): every name of the step modules' __all__,
# so a new step is a class in the module of its phase, listed there.
_COMPILED = [*v2_geometry.__all__, *v2_photometric.__all__, *v2_float.__all__]

# Several views of each image (self-supervised pretraining), each view a Compose: not a step.
__all__ = ["Compose", "InterpolationMode", "AutoAugmentPolicy", *_COMPILED, "MultiView"]


class Compose(_Compose):
    """torchvision's recipe ``transforms`` compiled into prefetch transforms (see the module
    docstring for the order it takes and what it compiles to): each step is placed in a
    :class:`~prefetch.transforms.v2_plan.Plan` in turn (its order and duplicates checked), then
    the plan is built.

    Args:
        transforms: the recipe's steps, built from this module (torchvision's names).
        seed: the draws are a function of ``(seed, rank, epoch, batch index)``; each compiled
            transform gets its own seed derived from it; None draws them (a loader's state
            saves them). An int in [-2**63, 2**64).
        decode: the image leaf holds encoded JPEGs (``FusedAugment(decode=True)``).
        image_key, label_key: the batch leaves of the images and of the labels (MixUp/CutMix).
        layout: the images' layout, ``"auto"`` (FusedAugment's default), ``"NHWC"`` or
            ``"NCHW"``.
        channels: the images' channel count when the recipe has no ``Normalize`` (default 3).

    Raises:
        ValueError: a step outside the subset or out of order (naming it: ``step <k> (<Class>)``),
            a second step where one goes, a recipe without ``ToDtype``, or a bad argument
            (TypeError too for a value of the wrong type).
    """

    def __init__(self, transforms: Iterable[Spec], *, seed: Optional[int] = None,
                 decode: bool = False, image_key: LeafKey = 0, label_key: LeafKey = 1,
                 layout: str = "auto",
                 channels: int = 3):
        if isinstance(transforms, Spec) or not hasattr(transforms, "__iter__"):
            arguments.fail("Compose", "transforms", "a list of steps", transforms,
                           arguments.ArgumentTypeError)
        steps = list(transforms)
        self.steps = steps
        if seed is not None:  # torch.manual_seed's range; a fraction is refused, not truncated
            seed = arguments.integer("Compose", "seed", seed, low=-(1 << 63), high=(1 << 64) - 1,
                                     expected="None or an int in [-2**63, 2**64)")
        decode = arguments.flag("Compose", "decode", decode)
        if layout not in ("auto", "NHWC", "NCHW"):
            arguments.fail("Compose", "layout", "'auto', 'NHWC' or 'NCHW'", layout)
        channels = arguments.integer("Compose", "channels", channels, low=1)
        self.seed, self.decode, self.layout, self.channels = seed, decode, layout, channels
        self.image_key, self.label_key = image_key, label_key
        plan = Plan(seed=seed, decode=decode, image_key=image_key, label_key=label_key,
                    layout=layout, channels=channels)
        for k, step in enumerate(steps):
            if not isinstance(step, Spec):
                where = "step %d (%s)" % (k, type(step).__name__)
                if is_torchvision_object(step):
                    raise ValueError(_torchvision_step(where, step))
                raise ValueError(
                    "prefetch: %s is not one prefetch.transforms.v2 compiles (%s); keep it in the "
                    "DataLoader's workers, before collation, or apply it in the training step"
                    % (where, ", ".join(_COMPILED)))
            plan.place(k, step)
        super().__init__(plan.build())

    def __repr__(self) -> str:
        return "prefetch.transforms.v2.Compose([%s])" % ", ".join(repr(s) for s in self.steps)

    def reseeded(self, seed: Optional[int]) -> "Compose":
        """The same recipe (steps and settings) compiled with another ``seed``
        (:class:`~prefetch.transforms.multi_view.MultiView` gives each view its own).

        Args:
            seed: as the constructor's.

        Returns:
            A new Compose.
        """
        return Compose(self.steps, seed=seed, decode=self.decode, image_key=self.image_key,
                       label_key=self.label_key, layout=self.layout, channels=self.channels)


def _torchvision_step(where, step):
    """The refusal of one of torchvision's own objects in the list: what to build instead."""
    name = type(step).__name__
    origin = "torchvision's %s (%s.%s)" % (name, type(step).__module__, name)
    if name in _COMPILED:
        return ("prefetch: %s is %s, not prefetch's: Compose compiles its own classes, with "
                "torchvision's names and arguments. Build the step as "
                "prefetch.transforms.v2.%s(...) with the same arguments (import "
                "prefetch.transforms.v2 as T in place of torchvision.transforms.v2)"
                % (where, origin, name))
    return ("prefetch: %s is %s, which prefetch does not compile: keep it in the DataLoader's "
            "workers (in the Dataset, before collation) and give Compose the steps it compiles "
            "(%s), built from prefetch.transforms.v2" % (where, origin, ", ".join(_COMPILED)))


def __getattr__(name):
    """torchvision's v2 names that prefetch does not compile get an AttributeError that says so
    and what to do; other names the plain one."""
    if name in TORCHVISION_V2_NAMES:
        raise AttributeError(
            "prefetch: prefetch.transforms.v2 has no %s: it is a torchvision.transforms.v2 %s "
            "prefetch does not compile (yet). Keep that step in the DataLoader's workers "
            "(torchvision's %s in the Dataset, before collation) and compile the rest with "
            "prefetch.transforms.v2.Compose (it compiles %s)"
            % (name, "name" if name in ("Transform", "InterpolationMode") else "transform", name,
               ", ".join(_COMPILED)))
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


