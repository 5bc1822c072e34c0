"""Splits a batch into the leaves the engine copies and a spec that rebuilds the same structure.

Structure follows ``default_collate``'s output: mappings, namedtuples, tuples and lists are
structure, and so are dataclass instances (rebuilt as the same dataclass); tensors and ndarrays
are leaves; a :class:`Samples` is one leaf collated from its samples; anything else (numbers,
strings, None) is carried through unchanged, with a one-time :class:`PassThroughWarning` for a
type that is not a known immutable (tensors inside it would stay where they are).
"""
import collections.abc
import copy
import dataclasses
import datetime
import enum
import numbers
import pathlib
import typing
import warnings

import numpy as np
import torch

from .extension import _C
from .errors import CollateError
from .ragged import Ragged
from .samples import Samples
from .samples_to_tensors import ndarray_to_tensor, ndarrays_to_tensors, numbers_to_tensor
from .spans import gather_spans

# The kinds of a spec's nodes (``node[0]``): public, for a source that reads or rewrites a spec
# (the worker ring strips a spec to what a worker sends, and turns its leaves into moves).
(LEAF_NODE, MOVE_NODE, CONST_NODE, MAP_NODE, NAMEDTUPLE_NODE, TUPLE_NODE, LIST_NODE, DATACLASS_NODE,
 RAGGED_NODE) = range(9)


class Leaf(typing.NamedTuple):
    """One output tensor of a batch, as the engine takes it: ``flatten`` returns a list of these,
    the ArrayLoader builds gather leaves itself, and ``_C.Engine.stage`` takes a list of
    them. The binding reads the three fields by name.

    A named tuple because one is built per leaf per batch on the producer's hot path.

    Attributes:
        name (str): where the leaf sits in the batch (``"batch[0]['image']"``); every error about
            the leaf names it.
        value (Tensor, list of Tensor or tuple of Tensor): a CPU tensor, copied as it is; or a
            list of CPU tensors of one shape and dtype (a ``Samples``), stacked along a new first
            dimension; or a tuple of CPU tensors of one dtype and any shapes, concatenated as flat
            elements into a 1-D output (the values of a :class:`Ragged`).
        rows (Tensor[R] or Tensor[R, 2], int64, optional): ``None``, or a 1-D int64 CPU tensor:
            the leaf is then rows ``rows`` of the tensor ``value`` stacked, a gather straight from
            a dataset's array. Every row must lie in ``[0, len(value))``; the C++ core checks it
            (``check_rows`` in csrc/core/collate.h) and the error names the leaf, the position and
            the index. Or an int64 ``[n, 2]`` CPU tensor of ``(start, count)`` pairs: the leaf is
            then those element ranges of the 1-D dense tensor ``value``, one after another (a
            ragged field's samples gathered from a dataset, e.g. a store's encoded bytes); the core
            checks every range lies inside ``value``.
        mapped (tuple, optional): ``None``, or ``(fd, size, path)`` when ``value`` maps a file (a
            store's ``values.bin``, :class:`prefetch.store.MappedFile`): once the engine has room
            for the batch, right before its threads read ``value``, it checks the file is still
            ``size`` bytes and raises ``prefetch.store.StoreError`` if not (a read past a
            truncated end is SIGBUS); a Python reader (``host_batch``) calls its ``check()`` (a
            :class:`prefetch.store.MappedGuard`).
    """

    name: str
    value: typing.Any  # torch.Tensor | list[torch.Tensor] | tuple[torch.Tensor, ...]
    rows: typing.Optional[torch.Tensor] = None
    mapped: typing.Optional[tuple] = None


class Packed(typing.NamedTuple):
    """A batch whose leaves lie packed in one host buffer already (a worker ring slot): the
    engine copies it in one piece instead of collating.

    Attributes:
        data (Tensor[B], uint8): a contiguous 1-D CPU tensor.
        layout (list): ``[(offset, dtype, shape)]``, one per leaf, in the order ``unflatten``
            takes them; offsets count in bytes from the start of the batch's bytes: ``data``
            itself, or with ``slot`` that slot of ``data``. The engine checks every leaf against
            those bytes.
        pin (_C.HostPin, optional): ``data`` registered with the copy stream, or None; held as
            long as the copy may read it.
        slot (tuple, optional): None, or ``(table, index, generation)``: the batch is slot
            ``index`` of ``data``, a block of ``table``'s (a ``_C.SlotTable``) slots, SENT in
            ``generation``; the engine leases it when it takes the batch and frees it once its
            copy has read it.
    """

    data: typing.Any
    layout: list
    pin: typing.Any = None
    slot: typing.Optional[tuple] = None


class PreparedBatch(typing.NamedTuple):
    """A batch already split for the engine: ``flatten``'s three outputs (``leaves`` a list of
    :class:`Leaf`). A source may yield these instead of batches (the ArrayLoader's host path
    does) so that no Python walks a structure or touches a sample. With ``packed`` (a
    :class:`Packed`) the leaves lie in its buffer as its layout says, and ``leaves`` is empty.

    Attributes:
        spec: rebuilds the batch's structure from its leaves' tensors and ``moves``
            (``unflatten``).
        leaves (list of Leaf): the tensors to collate and copy (empty with ``packed``).
        moves (list of Tensor): the batch's tensors already on an accelerator, moved by
            ``unflatten``.
        packed (Packed, optional): the buffer the leaves already lie in, or None.
    """

    spec: typing.Any
    leaves: list
    moves: list
    packed: typing.Optional[Packed] = None


class PassThroughWarning(UserWarning):
    """An object of a type prefetch does not know is passed through unchanged: nothing inside it
    is moved to the device. Issued once per type; filter it with ``warnings.filterwarnings``."""


# Passed through without a warning: values with nothing to move.
_KNOWN_CONSTANTS = (
    numbers.Number, str, bytes, bytearray, type(None), type(Ellipsis), type(NotImplemented),
    torch.dtype, torch.device, torch.layout, torch.memory_format, np.generic, np.dtype,
    enum.Enum, range, slice, frozenset, type, pathlib.PurePath, datetime.date, datetime.time,
    datetime.timedelta,
)
_warned_types = set()


def _warn_pass_through(obj, name):
    typ = type(obj)
    if isinstance(obj, _KNOWN_CONSTANTS) or typ in _warned_types:
        return
    _warned_types.add(typ)
    warnings.warn(
        "prefetch: %s is a %s.%s, passed through unchanged: prefetch only walks tensors, "
        "ndarrays, mappings, tuples, lists and dataclasses, so any tensor inside it stays where "
        "it is (warned once per type)" % (name, typ.__module__, typ.__qualname__),
        PassThroughWarning, stacklevel=2)


def _is_number(x):
    return isinstance(x, (numbers.Number, np.bool_, np.number)) and not isinstance(x, torch.Tensor)


def _samples_leaf(samples, name):
    if len(samples) == 0:
        raise CollateError("prefetch: %s is an empty Samples; nothing to collate" % name)
    first = samples[0]
    if isinstance(first, torch.Tensor):
        kind = torch.Tensor
    elif isinstance(first, np.ndarray):
        kind = np.ndarray
    elif _is_number(first):
        kind = None
    else:
        raise CollateError(
            "prefetch: %s sample 0 is a %s; Samples hold tensors, ndarrays or numbers"
            % (name, type(first).__name__)
        )
    for i, item in enumerate(samples):
        ok = _is_number(item) if kind is None else isinstance(item, kind)
        if not ok:
            raise CollateError(
                "prefetch: cannot collate %s: sample %d is a %s, expected a %s like sample 0"
                % (name, i, type(item).__name__, type(first).__name__)
            )
    if kind is None:
        return numbers_to_tensor(list(samples), name)
    if kind is np.ndarray:
        return ndarrays_to_tensors(samples, name)
    return list(samples)


def _can_be_ragged(tensors):
    """Same rank (the dtype the engine checks)."""
    rank = tensors[0].dim()
    return all(not t.is_nested and t.dim() == rank for t in tensors)


def _ragged_samples(tensors, name, leaves):
    """A Samples whose tensors differ in size: three leaves — every sample's elements
    concatenated (a tuple value: the engine copies them one after another, checking each as it
    checks any sample), their offsets and their sizes — that unflatten makes into one Ragged."""
    counts = [t.numel() for t in tensors]
    offsets = torch.tensor([0] + counts[:-1], dtype=torch.int64).cumsum_(0)
    # The shapes also travel in the spec, as plain tuples (a worker pickles them in its small
    # descriptor): the Ragged made on the device knows them without reading the device.
    shapes = tuple(tuple(t.shape) for t in tensors)
    sizes = torch.tensor(shapes, dtype=torch.int64).view(len(tensors), tensors[0].dim())
    children = []
    for suffix, value in ((".values", tuple(tensors)), (".offsets", offsets), (".sizes", sizes)):
        leaves.append(Leaf(name + suffix, value))
        children.append((LEAF_NODE, len(leaves) - 1))
    return (RAGGED_NODE, children, shapes, True)


def flatten(batch, name="batch"):
    """Returns (spec, leaves, moves): leaves are :class:`Leaf` (name, tensor | list of tensors)
    for the engine, in the order ``unflatten`` takes their tensors back; moves are tensors already
    on an accelerator, moved by ``unflatten``; spec rebuilds the structure from both."""
    leaves, moves = [], []
    spec = _flatten(batch, name, leaves, moves)
    return spec, leaves, moves


def _flatten(obj, name, leaves, moves):
    if isinstance(obj, torch.Tensor):
        if obj.device.type == "meta":
            raise CollateError("prefetch: %s is a meta tensor (shape %s, no data); only tensors "
                               "with data can be moved to a device" % (name, list(obj.shape)))
        if obj.device.type == "cpu":
            leaves.append(Leaf(name, obj))
            return (LEAF_NODE, len(leaves) - 1)
        moves.append(obj)
        return (MOVE_NODE, len(moves) - 1)
    if isinstance(obj, Samples):
        value = _samples_leaf(obj, name)
        # Samples of different sizes that can be packed become a Ragged; any other mismatch
        # (and a nested tensor, which has no shape to compare) the engine names, as always.
        if isinstance(value, list) and not _C.same_shapes(value) and _can_be_ragged(value):
            return _ragged_samples(value, name, leaves)
        leaves.append(Leaf(name, value))
        return (LEAF_NODE, len(leaves) - 1)
    if isinstance(obj, Ragged):
        children = [_flatten(getattr(obj, k), "%s.%s" % (name, k), leaves, moves)
                    for k in ("values", "offsets", "sizes")]
        return (RAGGED_NODE, children, obj._shapes, obj._dense)
    if isinstance(obj, np.ndarray):
        leaves.append(Leaf(name, ndarray_to_tensor(obj, name)))
        return (LEAF_NODE, len(leaves) - 1)
    if isinstance(obj, collections.abc.Mapping):
        keys = list(obj.keys())
        children = [_flatten(obj[k], "%s[%r]" % (name, k), leaves, moves) for k in keys]
        # A plain dict is rebuilt directly; other mappings are cloned (which needs the original).
        return (MAP_NODE, None if type(obj) is dict else obj, keys, children)
    if isinstance(obj, tuple):
        children = [_flatten(v, "%s[%d]" % (name, i), leaves, moves) for i, v in enumerate(obj)]
        kind = NAMEDTUPLE_NODE if hasattr(obj, "_fields") else TUPLE_NODE
        return (kind, type(obj), children)
    if isinstance(obj, list):
        children = [_flatten(v, "%s[%d]" % (name, i), leaves, moves) for i, v in enumerate(obj)]
        return (LIST_NODE, type(obj), children)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        # Every field, init=False ones too (one never set is left out, and stays unset).
        names = [f.name for f in dataclasses.fields(obj) if hasattr(obj, f.name)]
        children = [_flatten(getattr(obj, n), "%s.%s" % (name, n), leaves, moves) for n in names]
        return (DATACLASS_NODE, obj, names, children)
    _warn_pass_through(obj, name)
    return (CONST_NODE, obj)


def host_batch(batch):
    """A source's item as a batch structure on the host, for a transform's host stage. A
    PreparedBatch is rebuilt from its leaves (a Packed one from views of its buffer: a worker
    ring slot stays leased until the last of them dies; the rows a gather leaf names, taken); any
    other item is the batch itself."""
    if not isinstance(batch, PreparedBatch):
        return batch
    if batch.packed is not None:
        packed = batch.packed
        tensors = _C.packed_views(packed.data, packed.layout, packed.slot)
        return unflatten(batch.spec, tensors, batch.moves, None)
    tensors = []
    for leaf in batch.leaves:
        value = leaf.value
        if leaf.mapped is not None:  # a store's values.bin: read here, so checked here
            leaf.mapped.check()
        if leaf.rows is not None and leaf.rows.dim() == 2:
            value = gather_spans(value, leaf.rows, leaf.name)
        elif leaf.rows is not None:
            value = value.index_select(0, leaf.rows)
        elif isinstance(value, list):
            value = torch.stack(value)
        elif isinstance(value, tuple):
            value = torch.cat([t.reshape(-1) for t in value])
        tensors.append(value)
    return unflatten(batch.spec, tensors, batch.moves, None)


def ragged_fields(spec):
    """The spec with every Ragged's host shapes and packing flag dropped (a batch gathered from
    a ragged field is a different set of samples), and the leaf indices of each Ragged's
    ``(values, offsets, sizes)``."""
    groups = []

    def walk(node):
        kind = node[0]
        if kind == RAGGED_NODE:
            children = node[1]
            if all(c[0] == LEAF_NODE for c in children):
                groups.append(tuple(c[1] for c in children))
            return (RAGGED_NODE, children, None, False)
        if kind == MAP_NODE:
            return (MAP_NODE, node[1], node[2], [walk(c) for c in node[3]])
        if kind in (NAMEDTUPLE_NODE, TUPLE_NODE, LIST_NODE):
            return (kind, node[1], [walk(c) for c in node[2]])
        if kind == DATACLASS_NODE:
            return (DATACLASS_NODE, node[1], node[2], [walk(c) for c in node[3]])
        return node

    return walk(spec), groups


def unflatten(spec, tensors, moves, device):
    """The batch ``flatten`` split: its structure from ``spec``, leaf k from ``tensors[k]``, move k
    from ``moves[k]`` sent to ``device`` (None: as it is)."""
    kind = spec[0]
    if kind == LEAF_NODE:
        return tensors[spec[1]]
    if kind == MOVE_NODE:
        m = moves[spec[1]]
        return m if device is None else m.to(device, non_blocking=True)
    if kind == CONST_NODE:
        return spec[1]
    if kind == RAGGED_NODE:
        # Dense when the flatten made the offsets (_ragged_samples); a Ragged passed in a batch
        # keeps the packing it had, which only its own flag can vouch for.
        dense = spec[3] if len(spec) > 3 else False
        # Tables the engine made and may still be copying (the consumer waits for them): not
        # read here.
        return Ragged(*(unflatten(c, tensors, moves, device) for c in spec[1]), shapes=spec[2],
                      dense=dense, check=False)
    if kind == DATACLASS_NODE:
        # A shallow copy of the source's object with the delivered fields: no __init__ or
        # __post_init__ runs again, frozen dataclasses included, and the original is untouched.
        _, original, names, children = spec
        clone = copy.copy(original)
        for n, c in zip(names, children):
            object.__setattr__(clone, n, unflatten(c, tensors, moves, device))
        return clone
    if kind == MAP_NODE:
        _, original, keys, children = spec
        values = {k: unflatten(c, tensors, moves, device) for k, c in zip(keys, children)}
        if original is None:
            return values
        # As default_collate: keep the mapping's type where it can be copied or rebuilt.
        try:
            if isinstance(original, collections.abc.MutableMapping):
                clone = copy.copy(original)
                clone.update(values)
                return clone
            return type(original)(values)
        except TypeError:
            return values
    _, typ, children = spec
    values = [unflatten(c, tensors, moves, device) for c in children]
    if kind == NAMEDTUPLE_NODE:
        return typ(*values)
    if typ is tuple or typ is list:
        return typ(values)
    try:
        return typ(values)
    except TypeError:
        return tuple(values) if kind == TUPLE_NODE else values
