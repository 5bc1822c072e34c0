"""A batch's structure (prefetch/_engine/tree.py): dataclasses are structure and come back as the
same dataclass with every field delivered; an object of an unknown type passes through untouched
with one PassThroughWarning per type; known immutables never warn; a PreparedBatch is delivered as
it was flattened. (Tensors, sequences, mappings and namedtuples: loaders/test_prefetcher.py.)"""
import dataclasses
import warnings

import pytest
import torch

import prefetch

from ..helpers import assert_same


@dataclasses.dataclass
class _Pair:
    image: torch.Tensor
    label: torch.Tensor
    name: str = "x"


@dataclasses.dataclass(frozen=True)
class _Frozen:
    a: torch.Tensor
    inner: _Pair
    meta: dict


@dataclasses.dataclass
class _WithDerived:
    x: torch.Tensor
    scale: float = 1.0
    doubled: torch.Tensor = dataclasses.field(init=False)
    calls: int = dataclasses.field(init=False, default=0)

    def __post_init__(self):
        self.doubled = self.x * 2


def _assert_dataclass_same(got, expected, device):
    assert type(got) is type(expected)
    for f in dataclasses.fields(expected):
        g, e = getattr(got, f.name), getattr(expected, f.name)
        if dataclasses.is_dataclass(e):
            _assert_dataclass_same(g, e, device)
        else:
            assert_same(g, e, device, f.name)


def test_dataclass_batches_come_back_as_the_same_dataclass(device):
    batches = [
        _Pair(torch.randn(4, 3), torch.arange(4), "a"),
        _Frozen(torch.ones(2), _Pair(torch.zeros(3), torch.arange(3)),
                {"m": torch.full((2,), 7), "s": "t"}),
        _WithDerived(torch.arange(5)),
        [_Pair(torch.ones(1), torch.zeros(1)), {"d": _Pair(torch.ones(2), torch.ones(2), "n")}],
    ]
    batches[2].calls = 5
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a dataclass is structure, never "an unknown object"
        with prefetch.Prefetcher(batches, device=device) as pf:
            got = list(pf)
    for g, e in zip(got[:3], batches[:3]):
        _assert_dataclass_same(g, e, device)
    assert got[2].calls == 5 and torch.equal(got[2].doubled.cpu(), batches[2].x * 2)
    assert got[2].doubled.device == device  # init=False fields are delivered too
    _assert_dataclass_same(got[3][0], batches[3][0], device)
    _assert_dataclass_same(got[3][1]["d"], batches[3][1]["d"], device)
    assert got[0] is not batches[0]  # the source's own object is left alone
    assert batches[0].image.device.type == "cpu"


def test_a_dataclass_class_in_a_batch_is_a_constant():
    with prefetch.Prefetcher([(torch.ones(1), _Pair)], device="cpu") as pf:
        (got,) = list(pf)
    assert got[1] is _Pair


class _Opaque:
    def __init__(self, t):
        self.t = t


def test_an_unknown_object_warns_once_naming_its_type():
    batches = [(torch.ones(1), _Opaque(torch.zeros(1))) for _ in range(3)]
    with pytest.warns(prefetch.PassThroughWarning, match="_Opaque") as record:
        with prefetch.Prefetcher(batches, device="cpu") as pf:
            got = list(pf)
            got += list(pf)
    assert len([w for w in record if issubclass(w.category, prefetch.PassThroughWarning)]) == 1
    assert got[0][1] is batches[0][1]  # passed through untouched


def test_known_immutables_never_warn():
    import enum

    import numpy as np

    class Color(enum.Enum):
        RED = 1

    consts = [1, 2.5, True, 3j, "s", b"b", None, Ellipsis, torch.float16, torch.device("cpu"),
              torch.strided, torch.contiguous_format, np.float32(1), np.dtype("f4"), Color.RED,
              slice(1, 2), range(3), frozenset({1}), np.str_("x")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with prefetch.Prefetcher([(torch.ones(1), consts)], device="cpu") as pf:
            (got,) = list(pf)
    assert got[1] == consts


def test_prepared_batches_are_untouched():
    from prefetch._core.tree import flatten
    from prefetch._core.tree import PreparedBatch

    spec, leaves, moves = flatten({"x": torch.arange(4)})
    with prefetch.Prefetcher([PreparedBatch(spec, leaves, moves)], device="cpu") as pf:
        (got,) = list(pf)
    assert torch.equal(got["x"], torch.arange(4))
