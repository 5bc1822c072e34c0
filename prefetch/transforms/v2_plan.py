"""How :class:`prefetch.transforms.v2.Compose` compiles a recipe: each step is a :class:`Spec`
that says where it goes (its :class:`Phase`) and what it sets in the :class:`Plan`; the plan
checks the order and the duplicates the same way for every step and builds the transforms.

As FFCV's pipeline compiler asks each Operation what it needs and torchvision's v2 asks each
Transform for ``make_params``/``transform``, Compose knows no step by name: a new torchvision
name is one :class:`Spec` subclass (its phase, its rule, its arguments, its :meth:`Spec.contribute`)
in the v2 module of its phase (``v2_geometry``, ``v2_photometric``, ``v2_float``), listed in that
module's ``__all__``.

The plan's parts, in torchvision's recipe order:

- :attr:`Phase.GEOMETRY`: the window (crop, resize, flips) as :class:`~prefetch.FusedAugment`'s
  arguments (:meth:`Plan.set_fused`), decoded there with ``decode=True``;
- :attr:`Phase.PHOTOMETRIC`: transforms on the uint8 window (:meth:`Plan.add_stage`); with any,
  FusedAugment stores uint8 and the normalisation is a pass of its own after them;
- :attr:`Phase.CONVERT` and :attr:`Phase.NORMALIZE`: the output dtype, mean and std;
- :attr:`Phase.ERASE` and :attr:`Phase.MIX`: transforms on the float images, then on the batch's
  images and labels (:meth:`Plan.add_stage`).
"""
import enum
from typing import Callable, ClassVar, Dict, List, Optional, Sequence, Tuple

import torch

from ..ops.normalize import normalize_flip
from . import arguments
from .contract import BatchPosition, Transform, get_leaf, set_leaf
from .fused_augment import FusedAugment

__all__ = ["Phase", "Spec", "Plan"]


class Phase(enum.IntEnum):
    """Where a step goes, in torchvision's recipe order (a step may not follow a later phase)."""

    GEOMETRY = 0
    PHOTOMETRIC = 1
    CONVERT = 2
    NORMALIZE = 3
    ERASE = 4
    MIX = 5

    @property
    def label(self) -> str:
        """The phase as a recipe's reader knows it (said in the order refusals)."""
        return _LABELS[self]


_LABELS = {Phase.GEOMETRY: "geometry and flips", Phase.PHOTOMETRIC: "policy",
           Phase.CONVERT: "ToDtype", Phase.NORMALIZE: "Normalize",
           Phase.ERASE: "RandomErasing", Phase.MIX: "MixUp/CutMix"}

# A compiled stage: its seed (None: drawn) -> the Transform.
StageFactory = Callable[[Optional[int]], Transform]


class Spec:
    """A recipe step: torchvision's name and arguments, checked when built, compiled by its
    :meth:`contribute` into the :class:`Plan`.

    A subclass sets these class attributes:

    - ``phase`` (:class:`Phase`): where it goes; a step after one of a later phase is refused.
    - ``rule`` (str): where it goes and how many, in words: said in every refusal of its place.
    - ``slot`` (str or None): the part of the plan it sets once per recipe (a second step with
      the same slot is refused naming both), None if it may repeat.
    - ``after`` (:class:`Phase` or None): a phase the recipe must have reached before it.
    - ``moves`` (bool): whether it moves the recipe to its phase (False: it may come anywhere up
      to its phase and compiles to nothing of its own place, as ``ToImage``).
    """

    phase: ClassVar[Phase]
    rule: ClassVar[str]
    slot: ClassVar[Optional[str]] = None
    after: ClassVar[Optional[Phase]] = None
    moves: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # a public step without its place would fail only when a recipe uses it
        if not cls.__name__.startswith("_") and not (
                isinstance(getattr(cls, "phase", None), Phase)
                and isinstance(getattr(cls, "rule", None), str)):
            raise TypeError("prefetch: the v2 step %s needs a phase (a v2_plan.Phase) and a rule "
                            "(where it goes, in words) as class attributes" % cls.__name__)

    def joins(self, holder: "Spec") -> bool:
        """Whether this step completes the step ``holder`` that has its slot already (a
        ``CenterCrop`` after a ``Resize``) rather than being a second one. Default: False.

        Args:
            holder: the step that set this step's slot.

        Returns:
            True to take the slot over from ``holder``; False to be refused as a duplicate.
        """
        return False

    def contribute(self, plan: "Plan") -> None:
        """Set this step's part of ``plan`` (its FusedAugment arguments, its stage, its dtype).

        Args:
            plan: the recipe's plan, its order and slot already checked for this step.

        Raises:
            ValueError: what the plan cannot express with this step.
        """
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join("%s=%r" % kv for kv in vars(self).items())
        return "%s(%s)" % (type(self).__name__, args)


class Plan:
    """A recipe's compiled form, filled in by its steps in order, then built into transforms.

    Args:
        seed: the recipe's seed (None: every compiled transform draws its own).
        decode: the image leaf holds encoded JPEGs (FusedAugment's ``decode=True``).
        image_key, label_key: the batch leaves of the images and the labels.
        layout: the images' layout as FusedAugment takes it (``"auto"``, ``"NHWC"``, ``"NCHW"``).
        channels: the channel count assumed for mean and std when no step sets them.

    Attributes:
        fused (dict): FusedAugment's keyword arguments set by the steps (the window).
        dtype (torch.dtype or None): the output dtype (``ToDtype``).
        mean, std (tuple of float or None): the normalisation (``Normalize``).
        joined (Spec or None): while a step contributes, the step it completes (its
            :meth:`Spec.joins` took that step's slot over: the Pad before a RandomCrop).
    """

    def __init__(self, *, seed: Optional[int], decode: bool, image_key, label_key, layout: str,
                 channels: int):
        self.seed, self.decode, self.layout, self.channels = seed, decode, layout, channels
        self.image_key, self.label_key = image_key, label_key
        self.fused: Dict[str, object] = {}
        self.dtype: Optional[torch.dtype] = None
        self.mean: Optional[Tuple[float, ...]] = None
        self.std: Optional[Tuple[float, ...]] = None
        self._uint8: List[StageFactory] = []
        self._float: List[StageFactory] = []
        self._moved: List[Tuple[int, Spec]] = []  # the steps that moved the phase, in order
        self._slots: Dict[str, Tuple[int, Spec]] = {}
        self._setters: Dict[str, Tuple[int, Spec]] = {}
        self._needs: List[Tuple[str, str]] = []
        self._at: Optional[Tuple[int, Spec]] = None
        # The step that the step being placed completes (Spec.joins), while it contributes.
        self.joined: Optional[Spec] = None

    @property
    def where(self) -> str:
        """The step being placed, as the refusals name it: ``step <k> (<Class>)``."""
        return _where(*self._at)

    def place(self, k: int, step: Spec) -> None:
        """Check ``step``'s place (order, its phase's predecessor, its slot), then let it
        contribute.

        Args:
            k: its index in the recipe.
            step: the step.

        Raises:
            ValueError: the step comes after a step of a later phase, before the phase it needs,
                or a second time where one goes, naming it and the step it conflicts with.
        """
        self._at = (k, step)
        later = next(((j, s) for j, s in self._moved if s.phase > step.phase), None)
        if later is not None:
            raise ValueError("prefetch: %s comes after %s (step %d): %s (torchvision's recipe "
                             "order: %s)" % (
                                 self.where, type(later[1]).__name__, later[0], step.rule,
                                 ", ".join(p.label for p in Phase)))
        if step.after is not None and not any(s.phase >= step.after for _, s in self._moved):
            raise ValueError("prefetch: %s has no %s before it: %s"
                             % (self.where, step.after.label, step.rule))
        self.joined = None
        if step.slot is not None:
            held = self._slots.get(step.slot)
            if held is not None:
                if not step.joins(held[1]):
                    raise ValueError("prefetch: %s sets %s, which step %d, %r, set already: %s"
                                     % (self.where, step.slot, held[0], held[1], step.rule))
                self.joined = held[1]
            self._slots[step.slot] = (k, step)
        if step.moves:
            self._moved.append((k, step))
        step.contribute(self)

    def set_fused(self, **values) -> None:
        """Set FusedAugment keyword arguments for the step being placed.

        Args:
            **values: FusedAugment's arguments (``crop=224``, ``hflip=0.5``, ...).

        Raises:
            ValueError: an argument another step set already, naming both steps and values.
        """
        for name, value in values.items():
            if name in self._setters:
                j, other = self._setters[name]
                raise ValueError("prefetch: %s sets FusedAugment's %s to %r, which step %d, %r, "
                                 "set already to %r: %s" % (self.where, name, value, j, other,
                                                            self.fused[name], self._at[1].rule))
            self.fused[name] = value
            self._setters[name] = self._at

    def need(self, argument: str, message: str) -> None:
        """Refuse the recipe, when it is built, with ``message`` unless a step sets FusedAugment's
        ``argument`` (a ``Resize`` needs the ``crop`` of a ``CenterCrop``)."""
        self._needs.append((argument, message))

    def add_stage(self, factory: StageFactory) -> None:
        """Add the step being placed as a transform of its own, run in step order: on the uint8
        window (a step before :attr:`Phase.CONVERT`) or on the float images after the
        normalisation (one after).

        Args:
            factory: its seed (None: drawn) -> the Transform (on NCHW images).
        """
        (self._uint8 if self._at[1].phase < Phase.CONVERT else self._float).append(factory)

    def build(self) -> List[Transform]:
        """The compiled transforms, in order: one FusedAugment (with uint8 stages: to uint8, the
        stages, then the normalisation), then the float stages.

        Seeds (:func:`seeds`): 0 FusedAugment, 1 the first uint8 stage (kept for it when there is
        none, so a recipe's draws do not change with it), then every other stage in order.

        Returns:
            The transforms, for :class:`prefetch.transforms.Compose`.

        Raises:
            ValueError: a step's need unmet (a Resize without its CenterCrop), no ToDtype, or
                ``decode=True`` without a resampling window.
        """
        for argument, message in self._needs:
            if argument not in self.fused:
                raise ValueError(message)
        if self.dtype is None:
            raise ValueError("prefetch: the recipe needs ToDtype(torch.float32 (or float16, "
                             "bfloat16), scale=True): prefetch's transforms return float images")
        fused = dict(self.fused)
        fused.setdefault("hflip", 0.0)
        fused.setdefault("vflip", 0.0)
        if self.decode and not fused.get("random_resized_crop") and not fused.get("resize"):
            raise ValueError("prefetch: decode=True needs RandomResizedCrop or Resize + CenterCrop "
                             "(FusedAugment decodes each window as it resamples it)")
        first = 1 + max(len(self._uint8), 1)  # the float stages' first seed index
        seed = seeds(self.seed, first + len(self._float))
        common = dict(seed=seed[0], image_key=self.image_key, layout=self.layout, **fused)
        if self.decode:
            common["decode"] = True
        mean = self.mean if self.mean is not None else (0.0,) * self.channels
        std = self.std if self.std is not None else (1.0,) * self.channels
        if not self._uint8:
            members = [FusedAugment(mean, std, dtype=self.dtype, **common)]
        else:
            n = len(mean)
            members = [FusedAugment((0.0,) * n, (1.0 / 255,) * n, dtype=torch.uint8, **common)]
            # The steps build their uint8 stages on leaf 0; each reads the recipe's image leaf.
            members += [_on_leaf(f(s), self.image_key) for f, s in zip(self._uint8, seed[1:])]
            members.append(_Normalize(mean, std, self.dtype, self.image_key))
        members += [f(s) for f, s in zip(self._float, seed[first:])]
        return members


def _on_leaf(stage: Transform, image_key) -> Transform:
    """A uint8 stage (a Uint8Stage or PolicyAugment: the leaf is read at each apply) reading
    ``image_key``."""
    stage.image_key = image_key
    return stage


def _where(k: int, step) -> str:
    return "step %d (%s)" % (k, type(step).__name__)


def seeds(seed: Optional[int], count: int) -> List[Optional[int]]:
    """One seed per compiled transform, derived from ``seed`` (None: each drawn).

    Args:
        seed: the recipe's seed, an int in [-2**63, 2**64), or None.
        count: how many.

    Returns:
        ``count`` ints in [0, 2**63): ``seed + k * 0x9E3779B97F4A7C15`` (the 64-bit golden ratio,
        as splitmix64 steps) modulo 2**63; or ``count`` Nones.
    """
    if seed is None:
        return [None] * count
    return [(int(seed) + k * 0x9E3779B97F4A7C15) % (1 << 63) for k in range(count)]


def numbers(values: Sequence[float], cls: str, arg: str, positive: bool = False
            ) -> Tuple[float, ...]:
    """A non-empty sequence (or a 1-D tensor) of finite numbers (> 0 with ``positive``), as a
    tuple of floats; refused naming ``cls`` and ``arg`` (:func:`arguments.numbers_list`)."""
    if isinstance(values, torch.Tensor) and values.dim() == 1:
        values = values.tolist()
    return tuple(arguments.numbers_list(cls, arg, values, low=0.0 if positive else None,
                                        low_open=positive))


class _Normalize(Transform):
    """``ToDtype(scale=True)`` + ``Normalize`` of uint8 NCHW images in one pass
    (:func:`prefetch.ops.normalize_flip`), after the uint8 stages."""

    def __init__(self, mean, std, dtype, image_key):
        self.mean, self.std, self.dtype, self.image_key = mean, std, dtype, image_key

    def apply(self, batch, position: BatchPosition):
        x = get_leaf(batch, self.image_key)
        c = x.shape[1]
        mean = self.mean if len(self.mean) == c else self.mean * c
        std = self.std if len(self.std) == c else self.std * c
        return set_leaf(batch, self.image_key, normalize_flip(
            x, mean, std, dtype=self.dtype, layout="NCHW"))
