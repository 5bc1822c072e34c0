"""The transform contract: what a loader hands a transform, when, and what the transform may do.

A loader (:class:`prefetch.Prefetcher`, :class:`prefetch.ArrayLoader`, the Lightning module)
takes either of two kinds of ``transform``:

- **Any callable** ``fn(batch) -> batch``. It is called once per batch, on the device, and knows
  nothing of where the batch sits.
- **A** :class:`Transform`. The loader calls ``transform.apply(batch, position)`` with the
  batch's :class:`BatchPosition` — epoch, batch index in the epoch, DDP rank — so random draws
  can be a pure function of ``(seed, rank, epoch, index)``: reproducible whatever the number of
  DataLoader workers, different on every rank, and the same again after a resume. A Transform
  that also declares ``gathers`` gathers its own leaves from a device-resident dataset, fused
  with its work (:meth:`Transform.gather`). :class:`prefetch.FusedAugment` is one.

When and where (both kinds):

- The transform runs on the loader's producer thread, once per batch, in batch order, after the
  batch has been copied to the device and before the consumer receives it. On CUDA the loader's
  copy stream is the current stream: enqueue work on it (``torch.cuda.current_stream()``), do not
  synchronise the host (no ``.item()``, ``.cpu()``, ``torch.cuda.synchronize()`` — they would
  stall the pipeline, though they are not wrong), and send host tensors to the device with
  ``pin_memory().to(device, non_blocking=True)``. The consumer's stream waits for all of it; the
  loader protects every CUDA tensor of the returned batch for the consumer's stream, so outputs
  may be allocated freely.
- The batch's tensors belong to this batch alone (they never alias the ring), so a transform may
  modify them in place or return new ones, and the returned structure is what the consumer gets.
- An exception raised by a transform reaches the consumer's ``next()`` with a note saying which
  batch it was; the next epoch starts normally.
- A transform with ``state_dict()`` and ``load_state_dict()`` has its state saved in the loader's
  ``state_dict()`` under ``"transform"`` and restored by ``load_state_dict()``.

The host stage (a :class:`Transform` only): a Transform that overrides
:meth:`Transform.host_apply` gets each batch **before** it is collated and copied — on the same
producer thread, in batch order, at the same :class:`BatchPosition` its :meth:`~Transform.apply`
will get, with the loader's ``device``. The batch is as the source gave it, on the host: CPU
tensors, ``Samples``, a :class:`prefetch.Ragged`; with DataLoader workers writing into prefetch's
shared ring, views of the ring's pinned slot (the slot is released once the engine has collated
what the stage returned). What it returns is what the loader collates, copies and hands to
``apply``, so only that crosses to the device: encoded JPEGs decoded here cross as pixels, not
as bytes that would come back to the host for the decoder (``FusedAugment(decode=True)`` on a GPU
does this). It may return tensors already on the device (a GPU decoder's output, say): the
loader's copy stream waits for the producer thread's current stream on their device before it
uses them. An exception raised there reaches the consumer like any other. A transform whose host
stage does work only for some devices says so with ``host_stage_for(device)`` (FusedAugment's
decoding: only before a copy to a GPU), and loaders going elsewhere skip it — the batch then
reaches the engine as the source made it. Loaders without a host stage call nothing; the ``ArrayLoader``'s device residency has no host stage (its data is on the
device already).

Leaves are addressed by key (:func:`get_leaf`): an index into a tuple/list batch, a key of a dict
batch, or 0 for a batch that is a single tensor.
"""
from __future__ import annotations

import secrets
from typing import Any

import torch

from .._core.checks import check_seed, is_stateful
from .._engine.transform_contract import (DIRECT_EPOCH, Batch, BatchPosition, LeafKey, Transform,
                                          has_host_stage, run_transform)
from .._core.ragged import Ragged

__all__ = ["Transform", "SeededTransform", "BatchPosition", "get_leaf", "set_leaf", "run_transform",
           "has_host_stage", "gathered_keys", "save_transform_state", "load_transform_state",
           "DIRECT_EPOCH"]


class SeededTransform(Transform):
    """A Transform whose draws are a function of ``(seed, rank, epoch, index)``: its seed (drawn
    when built with ``seed=None``) is its state, saved in a loader's ``state_dict()`` and required
    back by ``load_state_dict()``. ``what_draws`` words the refusal of another seed.

    Subclasses take ``seed`` in their constructor and pass it to ``_set_seed`` (None draws 63
    random bits from :mod:`secrets`); the base class takes no constructor argument.
    """

    state_required = True
    what_draws = "augmentation draws"

    def _set_seed(self, seed):
        if seed is None:
            self.seed, self.seed_given = secrets.randbits(63), False
        else:
            self.seed, self.seed_given = check_seed(seed, "%s seed" % type(self).__name__), True

    def state_dict(self) -> dict:
        """What a resumed run needs to draw as the interrupted one would have.

        Returns:
            dict: ``{"seed": int, "seed_given": bool, "calls": int}``: the seed in use (drawn
            when built with ``seed=None``), whether it was given, and the number of direct calls.
        """
        return {"seed": self.seed, "seed_given": self.seed_given, "calls": self.direct_calls}

    def load_state_dict(self, state: Optional[dict]) -> None:
        """Restores :meth:`state_dict`. A transform built with ``seed=None`` adopts the saved
        seed; one built with another explicit seed refuses the state (its draws would differ).

        Args:
            state (dict or None): what :meth:`state_dict` returned; None (a loader's state
                without a ``"transform"`` entry) keeps an explicit seed.

        Raises:
            ValueError: the state has no seed and this transform's seed was drawn
                (``seed=None``), or the state's seed differs from the explicit seed this
                transform was built with.
        """
        name = type(self).__name__
        saved = state.get("seed") if state is not None else None
        if saved is None:
            if not self.seed_given:
                raise ValueError(
                    "prefetch: the state has no seed for this %s, whose seed was drawn "
                    "(seed=None), so its %s cannot be resumed; pass seed= explicitly (the same "
                    "in both runs)" % (name, self.what_draws))
            return
        saved = int(saved)
        if self.seed_given and saved != self.seed:
            raise ValueError(
                "prefetch: the state was saved with %s seed %d, this one was built with seed=%d; "
                "a resume would draw different %s. Build it with seed=%d, or seed=None (which "
                "adopts the saved seed)" % (name, saved, self.seed, self.what_draws, saved))
        self.seed = saved
        self.direct_calls = int(state.get("calls", 0))


def gathered_keys(transform: Any) -> tuple:
    """The keys of the leaves a transform gathers itself from a device-resident dataset.

    Args:
        transform: the loader's transform (any callable).

    Returns:
        tuple: the Transform's ``gathers``; empty for anything else.
    """
    return tuple(transform.gathers) if isinstance(transform, Transform) else ()


def check_image_layout(layout: str) -> str:
    """Checks an image-layout argument.

    Args:
        layout (str): ``"auto"``, ``"NCHW"`` or ``"NHWC"``.

    Returns:
        str: ``layout``.

    Raises:
        ValueError: any other value, named.
    """
    if layout not in ("auto", "NCHW", "NHWC"):
        raise ValueError("prefetch: layout must be 'auto', 'NCHW' or 'NHWC', got %r" % (layout,))
    return layout


def as_nchw(images: torch.Tensor, layout: str) -> tuple:
    """An image batch as an NCHW view; :func:`from_nchw` puts a result back.

    Args:
        images (Tensor[N, C, H, W] or Tensor[N, H, W, C]): the batch, any dtype.
        layout (str): ``"NCHW"``, ``"NHWC"`` or ``"auto"`` (NHWC when the last dimension is 1
            or 3 and the second is not).

    Returns:
        tuple: ``(Tensor[N, C, H, W] view, the layout it was in: "NCHW" or "NHWC")``.
    """
    if layout == "auto":
        layout = "NHWC" if images.shape[-1] in (1, 3) and images.shape[1] not in (1, 3) else "NCHW"
    return (images.permute(0, 3, 1, 2) if layout == "NHWC" else images), layout


def uint8_nchw(who: str, images: Any, layout: str, image_key: Any, fill: Any = None) -> tuple:
    """A stage's uint8 image leaf (1 or 3 channels) as an NCHW view, checked, as the policies'
    and the warps' stages take it.

    Args:
        who (str): the stage's class, named in a refusal.
        images: the leaf.
        layout (str): as :func:`as_nchw` takes it.
        image_key: the leaf's key, named in a refusal.
        fill (optional): the stage's fill; a list must hold 1 value or one per channel.

    Returns:
        tuple: ``(Tensor[N, C, H, W] uint8 view, its layout)``, as :func:`as_nchw`.

    Raises:
        ValueError: not a 4-D uint8 tensor, not 1 or 3 channels, or a fill list of another
            length.
    """
    if not isinstance(images, torch.Tensor) or images.dtype != torch.uint8 or images.dim() != 4:
        raise ValueError("prefetch: %s takes a uint8 image batch [N, C, H, W] or [N, H, W, C] "
                         "(C 1 or 3) at leaf %r, got %s" % (who, image_key, describe_tensor(images)))
    x, layout = as_nchw(images, layout)
    if x.shape[1] not in (1, 3):
        raise ValueError("prefetch: %s's images at leaf %r have %d channels in layout %s; it takes "
                         "1 or 3" % (who, image_key, x.shape[1], layout))
    if isinstance(fill, list) and len(fill) not in (1, x.shape[1]):
        raise ValueError("prefetch: %s fill has %d values (one per channel) but the images at leaf "
                         "%r have %d channel(s): give one value or %d"
                         % (who, len(fill), image_key, x.shape[1], x.shape[1]))
    return x, layout


def from_nchw(x: torch.Tensor, layout: str) -> torch.Tensor:
    """An NCHW result back in the layout its input had.

    Args:
        x (Tensor[N, C, H, W]): the result.
        layout (str): ``"NCHW"`` or ``"NHWC"`` (as :func:`as_nchw` returned it).

    Returns:
        Tensor: ``x`` itself (NCHW), or a contiguous ``[N, H, W, C]`` copy.
    """
    return x.permute(0, 2, 3, 1).contiguous() if layout == "NHWC" else x


def describe_tensor(x: Any) -> str:
    """A leaf in words, for an error message.

    Args:
        x: any value.

    Returns:
        str: ``"a torch.uint8 tensor of shape [2, 3]"`` for a tensor, ``"a list"`` otherwise.
    """
    if isinstance(x, torch.Tensor):
        return "a %s tensor of shape %s" % (x.dtype, list(x.shape))
    return "a %s" % type(x).__name__


def get_leaf(batch: Batch, key: LeafKey) -> Any:
    """One leaf of a batch.

    Args:
        batch: a tuple/list, a mapping, or a single tensor or :class:`~prefetch.Ragged`.
        key: an index of a tuple/list, a key of a mapping, or 0 for a single tensor (or Ragged).

    Returns:
        The leaf (the batch itself for a single tensor).

    Raises:
        KeyError: the batch has no such leaf (naming the batch's type and the key).
    """
    if isinstance(batch, (torch.Tensor, Ragged)):
        if key != 0:
            raise KeyError("prefetch: the batch is a single %s; key %r does not apply"
                           % ("tensor" if isinstance(batch, torch.Tensor) else "Ragged", key))
        return batch
    try:
        return batch[key]
    except (KeyError, IndexError, TypeError):
        raise KeyError("prefetch: the batch (%s) has no leaf %r; set image_key/mask_key"
                       % (type(batch).__name__, key)) from None


def set_leaf(batch: Batch, key: LeafKey, value: Any) -> Batch:
    """A batch like ``batch`` with one leaf replaced; the input is not modified.

    Args:
        batch: a tuple/list (namedtuples keep their type), a mapping (dict subclasses keep
            theirs, other mappings become a dict), or a single tensor or Ragged.
        key: the leaf's key, as :func:`get_leaf` takes it.
        value: the new leaf.

    Returns:
        The new batch (``value`` itself for a single tensor or Ragged).

    Raises:
        IndexError: ``key`` is out of range of a tuple/list batch.
        TypeError: ``key`` is not an int for a tuple/list batch.
    """
    if isinstance(batch, (torch.Tensor, Ragged)):
        return value
    if isinstance(batch, tuple):
        items = list(batch)
        items[key] = value
        return type(batch)(*items) if hasattr(batch, "_fields") else type(batch)(items)
    if isinstance(batch, list):
        batch = list(batch)
        batch[key] = value
        return batch
    batch = dict(batch) if type(batch) is not dict else batch.copy()
    batch[key] = value
    return batch


def save_transform_state(transform: Any, state: dict) -> dict:
    """Adds a stateful transform's state (a FusedAugment's seed, drawn when built with
    ``seed=None``) to a loader's state.

    Args:
        transform: the loader's transform; one with ``state_dict()`` and ``load_state_dict()``
            is saved.
        state (dict): the loader's state, modified in place.

    Returns:
        dict: ``state``, with ``transform.state_dict()`` under ``"transform"`` when it has one.
    """
    if is_stateful(transform):
        state["transform"] = transform.state_dict()
    return state


def load_transform_state(transform: Any, state: dict) -> None:
    """Restores what :func:`save_transform_state` saved. A Transform with ``state_required``
    (a FusedAugment) is asked even when the state has none, with ``None``: it refuses a state
    that cannot resume its draws.

    Args:
        transform: the loader's transform.
        state (dict): the loader's saved state.

    Raises:
        ValueError: what the transform's ``load_state_dict`` raises (a
            :class:`SeededTransform` refuses another seed, or a missing one it needs).
    """
    if is_stateful(transform) and ("transform" in state
                                 or getattr(transform, "state_required", False)):
        transform.load_state_dict(state.get("transform"))

