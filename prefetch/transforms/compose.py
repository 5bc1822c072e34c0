"""Compose: several transforms as the one ``transform=`` a loader takes, each applied in order at
the same :class:`~prefetch.transforms.BatchPosition` — e.g. ``Compose([FusedAugment(...),
RandomErasing(0.1)])``, or ``Compose([PolicyAugment(...), your_callable])`` (a loader runs one
transform, so a recipe of several needs one object that is each of them in turn)."""
from __future__ import annotations

from typing import Callable, Iterable, Optional, Union

import torch

from .contract import (Batch, BatchPosition, Transform, gathered_keys, has_host_stage,
                       run_transform)

__all__ = ["Compose"]


class Compose(Transform):
    """``transforms`` (Transforms or callables ``fn(batch) -> batch``) applied in order.

    What a loader asks of a transform follows from the members: the first may gather its leaves
    from a device-resident dataset (``gathers``; none after it may), the host stages run before
    the copy in order (so members with one come first: a host stage after a member without one
    would run before that member), and the state is each member's (``state_dict()`` /
    ``load_state_dict()``, a resumed loader restoring every member's seed).

    Args:
        transforms (iterable): :class:`Transform` instances or callables ``fn(batch) -> batch``,
            applied in this order.

    Raises:
        ValueError: no transform; a member after the first declares ``gathers``; a member with
            a host stage comes after one without.
        TypeError: a member is not callable.
    """

    def __init__(self, transforms: Iterable[Callable]) -> None:
        members = list(transforms)
        if not members:
            raise ValueError("prefetch: Compose needs at least one transform")
        for k, t in enumerate(members):
            if not callable(t):
                raise TypeError("prefetch: Compose's member %d is a %s, not a transform or a "
                                "callable" % (k, type(t).__name__))
            if k > 0 and gathered_keys(t):
                raise ValueError(
                    "prefetch: Compose's member %d (%s) gathers from a resident dataset; only "
                    "the first member may (put it first)" % (k, type(t).__name__))
        stages = [has_host_stage(t) for t in members]
        if any(stages[k] and not stages[k - 1] for k in range(1, len(stages))):
            raise ValueError(
                "prefetch: Compose's members with a host stage (%s) must come before the others: "
                "host stages run before the copy, ahead of every member's apply" % ", ".join(
                    type(t).__name__ for t, s in zip(members, stages) if s))
        self.transforms = members
        self.state_required = any(getattr(t, "state_required", False) for t in members)

    def __repr__(self):
        return "Compose([%s])" % ", ".join(repr(t) for t in self.transforms)

    @property
    def gathers(self):
        return gathered_keys(self.transforms[0])

    @property
    def host_stage(self):
        return any(has_host_stage(t) for t in self.transforms)

    def host_stage_for(self, device: Union[torch.device, str]) -> bool:
        """Whether any member has a host stage for ``device``.

        Args:
            device (torch.device or str): where the loader copies.

        Returns:
            bool: True when a loader must call :meth:`host_apply` before that copy.
        """
        return any(has_host_stage(t, device) for t in self.transforms)

    def host_apply(self, batch: Batch, position: BatchPosition,
                   device: Union[torch.device, str]) -> Batch:
        """The members' host stages for ``device``, in order.

        Args:
            batch: the batch on the host.
            position (BatchPosition): where the batch sits.
            device (torch.device or str): where the loader copies.

        Returns:
            What the last member's host stage returned (the batch when none has one).
        """
        for t in self.transforms:
            if has_host_stage(t, device):
                batch = t.host_apply(batch, position, device)
        return batch

    def apply(self, batch: Batch, position: BatchPosition) -> Batch:
        """Every member applied in order at the same position.

        Args:
            batch: the batch on the device.
            position (BatchPosition): where the batch sits.

        Returns:
            The last member's result.

        Raises:
            Exception: whatever a member raises, unchanged.
        """
        for t in self.transforms:
            batch = run_transform(t, batch, position)
        return batch

    def gather(self, batch: Batch, indices: torch.Tensor, position: BatchPosition) -> Batch:
        """The first member's :meth:`Transform.gather`, then the others' ``apply``.

        Args:
            batch: the gathered leaves whole (see :meth:`Transform.gather`).
            indices (Tensor[B], int64): the batch's rows, on the device.
            position (BatchPosition): where the batch sits.

        Returns:
            The last member's result.
        """
        batch = self.transforms[0].gather(batch, indices, position)
        for t in self.transforms[1:]:
            batch = run_transform(t, batch, position)
        return batch

    def state_dict(self) -> dict:
        """Each member's state.

        Returns:
            dict: ``{"transforms": [member.state_dict() or None, ...]}`` in member order.
        """
        return {"transforms": [t.state_dict() if callable(getattr(t, "state_dict", None)) else None
                               for t in self.transforms]}

    def load_state_dict(self, state: Optional[dict]) -> None:
        """Restores :meth:`state_dict` into each member; a member with ``state_required`` is
        asked even when the state has none (with None).

        Args:
            state (dict or None): what :meth:`state_dict` returned.

        Raises:
            ValueError: the state holds another number of members' states, or a member refuses
                its state (a :class:`SeededTransform` built with another seed).
        """
        states = (state or {}).get("transforms") or [None] * len(self.transforms)
        if len(states) != len(self.transforms):
            raise ValueError("prefetch: the state holds %d transforms' states; this Compose has %d"
                             % (len(states), len(self.transforms)))
        for t, s in zip(self.transforms, states):
            if callable(getattr(t, "load_state_dict", None)) and (
                    s is not None or getattr(t, "state_required", False)):
                t.load_state_dict(s)
