"""Several augmented views of each image (self-supervised pretraining: SimCLR, BYOL, DINO and SwAV
multi-crop), each view a compiled :class:`prefetch.transforms.v2.Compose` run over the whole
batch with its own draws.

A :class:`MultiView` replaces the batch's image leaf with the list of its views' images — one
``[N, C, h, w]`` tensor per view, in view order, as the SSL repositories consume them — and
leaves the other leaves (the labels) as they are. View ``k``'s draws are a function of ``(seed,
rank, epoch, batch index, k)``: each view is compiled with a seed derived from the MultiView's
seed and its index (:func:`view_seeds`), so resuming, DataLoader workers and DDP ranks keep
working as for one Compose.

The published recipes are functions returning a MultiView, in :mod:`prefetch.transforms.ssl`.
"""
from __future__ import annotations

import dataclasses
from typing import List, Optional, Sequence, Union

import torch

from .._core.ragged import Ragged
from . import arguments
from .compose import Compose as _Compose
from .contract import (Batch, BatchPosition, LeafKey, Transform, get_leaf, has_host_stage,
                       run_transform, set_leaf)
from .resizing import DecodedWindows
from .v2_plan import Phase

__all__ = ["MultiView", "view_seeds", "union_boxes"]

# The key of the host stage's output: the views' host-staged batches, in view order.
_HOST_VIEWS = "prefetch.multi_view.host_views"
# ... or the batch with its images decoded once for every view, over the union of their windows
# (the shared decode).
_HOST_SHARED = "prefetch.multi_view.host_shared"
_MASK63 = (1 << 63) - 1


def _splitmix64(x: int) -> int:
    """splitmix64's finaliser (Steele, Lea, Flood, "Fast splittable pseudorandom number
    generators", OOPSLA 2014): a bijection of 64-bit words whose outputs for nearby inputs are
    unrelated."""
    x &= (1 << 64) - 1
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & ((1 << 64) - 1)
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & ((1 << 64) - 1)
    return x ^ (x >> 31)


@dataclasses.dataclass
class _UnionWindows:
    """The shared decode's output (its host stage puts it in place of the encoded image leaf, and
    the loader copies it like any dataclass of tensors): each image decoded once, over the
    bounding box of its views' windows, and every view's draws.

    Args:
        windows (Ragged): each image's union box, decoded: ``[h_i, w_i, 3]`` uint8 RGB samples.
        hflip, vflip (Tensor[V, N], bool): view ``k``'s drawn flips in row ``k``.

    Not fields (so the loader leaves them on the host, as :class:`DecodedWindows` keeps its own):
    ``host_tables``, the windows' ``(offsets, sizes)`` as int64 CPU tensors; ``boxes``, a list of
    ``V`` int64 CPU ``[N, 4]``: view ``k``'s windows (top, left, height, width) inside the union
    boxes; ``bicubic``, a list of ``V`` per-sample interpolation draws (bool CPU ``[N]``) or Nones.
    """

    windows: Ragged
    hflip: torch.Tensor
    vflip: torch.Tensor

    host_tables = None  # not annotated: not a field
    boxes = None  # not annotated: not a field
    bicubic = None  # not annotated: not a field

    def view_windows(self, k: int) -> DecodedWindows:
        """What view ``k``'s window step takes from its own host stage: the decoded union boxes,
        with its windows inside them and its flips."""
        out = DecodedWindows(self.windows, self.hflip[k], self.vflip[k])
        out.host_tables, out.boxes, out.bicubic = self.host_tables, self.boxes[k], self.bicubic[k]
        return out


def union_boxes(boxes: Sequence[torch.Tensor]) -> torch.Tensor:
    """The bounding box of each image's windows.

    Args:
        boxes (sequence of Tensor[N, 4], int64): one table per view, each row an image's window
            (top, left, height, width) in its pixels.

    Returns:
        Tensor[N, 4], int64: per image the smallest box holding every view's window, (top, left,
        height, width).
    """
    stacked = torch.stack(list(boxes))  # [V, N, 4]
    top, left = stacked[..., 0].amin(0), stacked[..., 1].amin(0)
    bottom = (stacked[..., 0] + stacked[..., 2]).amax(0)
    right = (stacked[..., 1] + stacked[..., 3]).amax(0)
    return torch.stack([top, left, bottom - top, right - left], 1)


def _decode_union(views, encoded, position: BatchPosition, device) -> _UnionWindows:
    """The shared decode: every view's windows drawn from the JPEG headers (the draws each view
    makes alone at ``position``), then each image decoded once over the union of its windows — by
    the GPU decoder straight onto ``device`` where one serves it (its output then travels as a
    move), else by the host's decoder. The tables stay on the host either way, so that nothing
    waits on the device for them (as FusedAugment's host stage keeps its windows')."""
    from ..ops.decode import (decode_jpeg, decode_with_backend, encoded_batch, gpu_backend_for,
                              jpeg_sizes)

    data = encoded_batch(encoded)
    sizes = jpeg_sizes(data)
    draws = [v.transforms[0].decode_draws(data, position, sizes) for v in views]
    union = union_boxes([d.boxes for d in draws])
    backend = gpu_backend_for(torch.device(device)) if len(data) else None
    if backend is None:
        windows = decode_jpeg(data, union, header_sizes=sizes)
    else:
        values, offsets, window_sizes = decode_with_backend(data, union, torch.device(device),
                                                            backend, header_sizes=sizes)
        windows = Ragged(values, offsets, window_sizes, check=False)
    out = _UnionWindows(windows, torch.stack([d.hflip for d in draws]),
                        torch.stack([d.vflip for d in draws]))
    out.host_tables = (windows.offsets, windows.sizes)  # on the CPU in either case
    corner = torch.cat([union[:, :2], torch.zeros_like(union[:, 2:])], 1)
    out.boxes = [d.boxes - corner for d in draws]
    out.bicubic = [d.bicubic for d in draws]
    return out


def _seeds_of(view) -> list:
    """The seeds a view draws with: its members' (its state)."""
    return [m.get("seed") if isinstance(m, dict) else None
            for m in view.state_dict()["transforms"]]


def _distinct(views: list) -> list:
    """``views`` with none drawing as an earlier one does: a view given twice (``[view] * 2``) or
    built with an earlier one's seeds would make the same images. One whose seeds were drawn
    (built with ``seed=None``) is compiled again with fresh ones; one built with an explicit seed
    is refused (its seeds are the user's)."""
    seen = []
    for k, view in enumerate(views):
        if _seeds_of(view) in seen:
            if view.seed is not None:
                raise ValueError(
                    "prefetch: MultiView view %d draws with the seeds of an earlier view (both "
                    "built with seed=%d): the two would make the same images. Give each view its "
                    "own seed, or pass seed= to MultiView" % (k, view.seed))
            views[k] = view = view.reseeded(None)
        seen.append(_seeds_of(view))
    return views


def view_seeds(seed: Optional[int], count: int) -> List[Optional[int]]:
    """The seed each of ``count`` views is compiled with, from the MultiView's ``seed``.

    A view's Compose derives its members' seeds as ``seed + j * 0x9E3779B97F4A7C15``
    (:func:`prefetch.transforms.v2_plan.seeds`); view seeds on that same sequence would give view
    0's policy the seed of view 1's window. So view ``k`` takes ``splitmix64(seed + (k + 1) *
    0xD1B54A32D192ED03) mod 2**63`` instead: unrelated to the other views' and their members'.

    Args:
        seed: an int in [-2**63, 2**64), or None (every view draws its own).
        count: the number of views.

    Returns:
        ``count`` ints in [0, 2**63), or ``count`` Nones.
    """
    if seed is None:
        return [None] * count
    return [_splitmix64(int(seed) + (k + 1) * 0xD1B54A32D192ED03) & _MASK63 for k in range(count)]


class MultiView(Transform):
    """Each of ``views`` applied to the same batch; the image leaf becomes the list of their
    images (one tensor per view, in order), the other leaves stay.

    Args:
        views: two or more :class:`prefetch.transforms.v2.Compose` (each its own crop size,
            scale, ops and probabilities). Each must end with the images as float tensors of one
            size (a window step and ``ToDtype``) and take no MixUp/CutMix (a view changes the
            images only). Every view reads the same ``image_key``.
        seed: each view is compiled again with the seed :func:`view_seeds` derives from this one
            and its index, so view ``k``'s draws are a function of ``(seed, rank, epoch, index,
            k)``; None keeps the views as they are (each with the seeds it was built with), but
            a view given twice, or drawing with an earlier view's drawn seeds, is compiled again
            with fresh ones.
        shared_decode: with ``decode=True`` views, True decodes every image once for all the
            views, False each view its windows, None (default) chooses by the views' expected
            coverage (below).

    Output: ``batch`` with its image leaf replaced by ``[view_0_images, view_1_images, ...]``,
    each ``[N, C, h_k, w_k]`` of its view's dtype and layout.

    With ``decode=True`` views (JPEG bytes) on the CPU device, each image is decoded once for all
    the views where their windows are expected to cover at least its area
    (:meth:`expected_coverage`: DINO's ten crops about 3.2 images, SimCLR's two 1.1), else each
    view decodes its own windows (``shared_decode`` forces either). The shared decode draws every
    view's windows from the JPEG headers first (the draws each view makes alone), decodes only the
    bounding box of each image's windows (:func:`union_boxes`; the rows below it are never
    entropy-decoded, the iMCU columns beside it and the rows above it never inverse-transformed),
    and resamples each view's window from that buffer. Every view's output is the same either
    way. Before a copy to a GPU the same choice is made in the host stage: each image's box
    decoded once (by the GPU decoder straight onto the device when one serves it, else on the
    host, its pixels then copied), and every view resampled from it on the device; or each view
    decoding its own windows. Only pixels cross, never the encoded bytes.

    Raises:
        ValueError: fewer than two views, a view that mixes the batch, views reading different
            image leaves, some decoding and others not, a view with an earlier view's explicit
            seeds, a bad seed or shared_decode (a TypeError too for the wrong type).
        TypeError: ``views`` not a list, or a view that is not a prefetch v2 Compose.
    """

    def __init__(self, views: Sequence, *, seed: Optional[int] = None,
                 shared_decode: Optional[bool] = None):
        if not isinstance(views, (list, tuple)):
            arguments.fail("MultiView", "views", "a list of prefetch.transforms.v2.Compose", views,
                           arguments.ArgumentTypeError)
        if len(views) < 2:
            arguments.fail("MultiView", "views", "two or more views (a single view is its "
                           "Compose)", views)
        for k, view in enumerate(views):
            # (prefetch.transforms.v2.Compose, told by what MultiView uses of it: v2 imports
            # this module)
            if not (isinstance(view, _Compose) and callable(getattr(view, "reseeded", None))):
                raise TypeError("prefetch: MultiView view %d is a %s, not a "
                                "prefetch.transforms.v2.Compose" % (k, type(view).__name__))
            mixing = [type(s).__name__ for s in view.steps if s.phase == Phase.MIX]
            if mixing:
                raise ValueError("prefetch: MultiView view %d has %s: a view changes the images "
                                 "only (mix the views' batches in the training step)"
                                 % (k, ", ".join(mixing)))
        keys = {repr(v.image_key) for v in views}
        if len(keys) > 1:
            raise ValueError("prefetch: MultiView's views read different image leaves (%s): give "
                             "them one image_key" % ", ".join(sorted(keys)))
        decoding = [k for k, v in enumerate(views) if v.decode]
        if decoding and len(decoding) < len(views):
            raise ValueError("prefetch: MultiView views %s decode JPEGs (decode=True) and the "
                             "others take pixels: every view reads the same image leaf, so all "
                             "or none may decode" % decoding)
        if seed is not None:
            seed = arguments.integer("MultiView", "seed", seed, low=-(1 << 63), high=(1 << 64) - 1,
                                     expected="None or an int in [-2**63, 2**64)")
            views = [v.reseeded(s) for v, s in zip(views, view_seeds(seed, len(views)))]
        else:
            views = _distinct(list(views))
        self.views = list(views)
        self.seed = seed
        self.image_key: LeafKey = self.views[0].image_key
        self.state_required = any(getattr(v, "state_required", False) for v in self.views)
        if shared_decode is not None:
            shared_decode = arguments.flag("MultiView", "shared_decode", shared_decode)
        self.shared_decode = shared_decode
        # One decode per image: possible where every view decodes (decode=True); each view then
        # takes its windows inside the decoded union box, as from its own host stage.
        self._shares_decode = all(v.decode for v in self.views) and shared_decode is not False

    def __repr__(self) -> str:
        return "MultiView([%s], seed=%r)" % (", ".join(repr(v) for v in self.views), self.seed)

    def __len__(self) -> int:
        return len(self.views)

    # --- the host stage, before the copy: the shared decode or each view's ------------------

    @property
    def host_stage(self) -> bool:
        return any(has_host_stage(v) for v in self.views)

    def host_stage_for(self, device: Union[torch.device, str]) -> bool:
        """Whether any view has a host stage for ``device`` (its decoding before a GPU copy).

        Args:
            device (torch.device or str): where the loader copies.

        Returns:
            bool: True when a loader must call :meth:`host_apply` before that copy.
        """
        return any(has_host_stage(v, device) for v in self.views)

    def host_apply(self, batch: Batch, position: BatchPosition,
                   device: Union[torch.device, str]) -> Batch:
        """The host stage for ``device`` on ``batch``: each image decoded once, over the union of
        its views' windows, for every view where the decode is shared (:meth:`_decode_once`),
        else each view's own host stage.

        Args:
            batch: the batch on the host.
            position (BatchPosition): where the batch sits.
            device (torch.device or str): where the loader copies.

        Returns:
            ``{"prefetch.multi_view.host_shared": the batch, its image leaf the decoded union
            boxes and every view's draws}`` where the decode is shared (:meth:`_decode_once`),
            else ``{"prefetch.multi_view.host_views": [view k's host-staged batch, ...]}`` (the
            batch itself for a view without a host stage); the loader copies it and
            :meth:`apply` takes it.
        """
        if self._shares_decode and self._decode_once(batch, position):
            return {_HOST_SHARED: set_leaf(batch, self.image_key, _decode_union(
                self.views, get_leaf(batch, self.image_key), position, device))}
        return {_HOST_VIEWS: [v.host_apply(batch, position, device) if has_host_stage(v, device)
                              else batch for v in self.views]}

    # --- apply -------------------------------------------------------------------------------

    def apply(self, batch: Batch, position: BatchPosition) -> Batch:
        """Every view on the batch at the same position.

        Args:
            batch: the batch on the device (or what :meth:`host_apply` returned).
            position (BatchPosition): where the batch sits.

        Returns:
            The batch with its image leaf the list of the views' images.

        Raises:
            Exception: whatever a view raises, with a note naming the view.
        """
        if isinstance(batch, dict) and _HOST_VIEWS in batch:
            inputs = batch[_HOST_VIEWS]
        elif isinstance(batch, dict) and _HOST_SHARED in batch:  # decoded once in the host stage
            inputs = self._view_inputs(batch[_HOST_SHARED])
        elif self._shares_decode and self._decode_once(batch, position):
            inputs = self._view_inputs(set_leaf(batch, self.image_key, _decode_union(
                self.views, get_leaf(batch, self.image_key), position, "cpu")))
        else:
            inputs = [batch] * len(self.views)
        images = []
        for k, (view, given) in enumerate(zip(self.views, inputs)):
            try:
                out = run_transform(view, given, position)
            except Exception as exc:
                exc.add_note("[prefetch] in MultiView view %d" % k)
                raise
            images.append(get_leaf(out, self.image_key))
        return set_leaf(inputs[0] if len(inputs) else batch, self.image_key, images)

    def _view_inputs(self, shared: Batch) -> list:
        """Each view's batch from the shared decode's: its image leaf what the view's window
        step takes from its own host stage (its windows inside the decoded union boxes)."""
        union = get_leaf(shared, self.image_key)
        return [set_leaf(shared, self.image_key, union.view_windows(k))
                for k in range(len(self.views))]

    def _decode_once(self, batch: Batch, position: BatchPosition) -> bool:
        """Whether this batch's images are decoded once for every view: with
        ``shared_decode`` or the views' expected coverage (:meth:`expected_coverage`) at least 1,
        for encoded images on the CPU (elsewhere each view decodes as it would alone). The shared
        decode draws each view's windows from the headers as the view would alone, and a window
        resampled from a decoded box that holds it equals the window decoded alone (the decoder's
        regions are exact crops of the whole image), so every view makes the same output either
        way."""
        encoded = get_leaf(batch, self.image_key)
        if getattr(encoded, "device", torch.device("cpu")).type != "cpu":
            return False
        if self.shared_decode is not None:
            return self.shared_decode
        return self.expected_coverage() >= 1.0

    def expected_coverage(self) -> float:
        """The views' windows' expected total area, in images: each RandomResizedCrop view its
        ``scale`` range's mean (the area is drawn uniformly in it; torchvision's fallback
        aside), a centred window 1. Decoding every window apart decodes about this many images'
        pixels, one shared decode at most one image's (the union of the windows; DINO's ten crops
        cover about 3.2, SimCLR's two about 1.1), and most of a window's decode is entropy
        decoding that no window skips.

        Returns:
            float: the sum over the views, in images (1.0: one image's area).
        """
        total = 0.0
        for view in self.views:
            fused = view.transforms[0]
            total += (sum(fused.scale) / 2 if fused.random_resized_crop is not None else 1.0)
        return total

    # --- state -------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Each view's state (its members' seeds).

        Returns:
            dict: ``{"views": [view.state_dict(), ...]}`` in view order.
        """
        return {"views": [v.state_dict() for v in self.views]}

    def load_state_dict(self, state: Optional[dict]) -> None:
        """Restores :meth:`state_dict` into each view.

        Args:
            state (dict or None): what :meth:`state_dict` returned.

        Raises:
            ValueError: the state holds another number of views, or a view refuses its state
                (built with other seeds).
        """
        states = (state or {}).get("views") or [None] * len(self.views)
        if len(states) != len(self.views):
            raise ValueError("prefetch: the state holds %d views' states; this MultiView has %d"
                             % (len(states), len(self.views)))
        for v, s in zip(self.views, states):
            v.load_state_dict(s)
