"""Compose: several transforms as the one ``transform=`` a loader takes (issue 27), each applied in
order at the same :class:`~prefetch.transforms.BatchPosition` — e.g. ``Compose([FusedAugment(...),
RandomErasing(0.1)])``, or ``Compose([PolicyAugment(...), your_callable])``."""
from .contract import Transform, gathered_keys, has_host_stage, run_transform

__all__ = ["Compose"]


class Compose(Transform):
    """``transforms`` (Transforms or callables ``fn(batch) -> batch``) applied in order.

    What a loader asks of a transform follows from the members: the first may gather its leaves
    from a device-resident dataset (``gathers``; none after it may), the host stages run before
    the copy in order (so members with one come first: a host stage after a member without one
    would run before that member), and the state is each member's (``state_dict()`` /
    ``load_state_dict()``, a resumed loader restoring every member's seed).
    """

    def __init__(self, transforms):
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

    def host_stage_for(self, device):
        return any(has_host_stage(t, device) for t in self.transforms)

    def host_apply(self, batch, position, device):
        for t in self.transforms:
            if has_host_stage(t, device):
                batch = t.host_apply(batch, position, device)
        return batch

    def apply(self, batch, position):
        for t in self.transforms:
            batch = run_transform(t, batch, position)
        return batch

    def gather(self, batch, indices, position):
        batch = self.transforms[0].gather(batch, indices, position)
        for t in self.transforms[1:]:
            batch = run_transform(t, batch, position)
        return batch

    def state_dict(self):
        return {"transforms": [t.state_dict() if callable(getattr(t, "state_dict", None)) else None
                               for t in self.transforms]}

    def load_state_dict(self, state):
        states = (state or {}).get("transforms") or [None] * len(self.transforms)
        if len(states) != len(self.transforms):
            raise ValueError("prefetch: the state holds %d transforms' states; this Compose has %d"
                             % (len(states), len(self.transforms)))
        for t, s in zip(self.transforms, states):
            if callable(getattr(t, "load_state_dict", None)) and (
                    s is not None or getattr(t, "state_required", False)):
                t.load_state_dict(s)
