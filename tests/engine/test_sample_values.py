"""Numbers and numpy arrays as samples — `prefetch.Samples` and `prefetch.collate.samples` —
against torch's own `default_collate`: the same dtype and values wherever default_collate gives
one; where it fails, a lossless tensor (numpy scalars of one type keep it) or a CollateError
naming the field, and for an int beyond int64 the sample and the value (it was "Overflow when
unpacking long long", or a bare internal exception). Arrays: non-contiguous, negative strides,
read-only, other byte orders, dtype aliases, 0-d, memmaps; strings, objects and dtypes torch
lacks refused naming the field — through a Prefetcher, and through DataLoader workers."""
import itertools

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, default_collate

import prefetch
from prefetch import CollateError, Samples
from prefetch._core.tree import flatten

VALUES = [True, 0, -1, 2 ** 63 - 1, -(2 ** 63), 2 ** 63, -(2 ** 63) - 1, 2 ** 70, 10 ** 400, 1.5,
          float("inf"), float("nan"), 1 + 2j, np.bool_(True), np.int8(-3), np.uint8(200),
          np.int16(5), np.uint16(7), np.int32(9), np.uint32(2 ** 32 - 1), np.int64(-5),
          np.uint64(2 ** 64 - 1), np.float16(1.5), np.float32(2.5), np.float64(3.5),
          np.complex64(1j)]
if np.dtype(np.longdouble).itemsize > 8:
    VALUES.append(np.longdouble(1))  # no torch dtype
IDS = [("%r" % v)[:24] for v in VALUES]


def outcome(fn, values):
    try:
        return fn(values)
    except Exception as e:  # noqa: BLE001 - the kind of failure is what is compared
        return e


def same_tensor(got, expected):
    return (isinstance(got, torch.Tensor) and got.dtype == expected.dtype
            and got.shape == expected.shape
            and torch.equal(torch.nan_to_num(got.to(torch.complex128), 7.0),
                            torch.nan_to_num(expected.to(torch.complex128), 7.0)))


def lossless(values):
    """What prefetch gives where default_collate fails: numpy scalars of one type as their own
    dtype; numpy integers and bools (with Python ints in int64) as numpy's integer promotion;
    None: a CollateError."""
    types = {type(v) for v in values}
    if len(types) == 1 and isinstance(values[0], (np.bool_, np.number)):
        return values[0].dtype
    ints = all(isinstance(v, (np.bool_, np.integer)) or
               (type(v) is int and -2 ** 63 <= v < 2 ** 63) for v in values)
    if ints and any(isinstance(v, (np.bool_, np.number)) for v in values):
        dtype = np.asarray(values).dtype
        return dtype if dtype.kind in "biu" else None
    return None


def check(got, values):
    expected = outcome(default_collate, values)
    if isinstance(expected, torch.Tensor):
        assert same_tensor(got, expected), (values, got, expected)
        return
    if type(values[0]) is complex:  # default_collate has no rule for it: torch's own tensor
        expected = outcome(torch.tensor, values)
        if isinstance(expected, torch.Tensor):
            assert same_tensor(got, expected), (values, got)
            return
    dtype = lossless(values)
    if dtype is not None and dtype.type in (np.longdouble, np.clongdouble):
        dtype = None
    if dtype is not None:
        reference = torch.from_numpy(np.array([np.asarray(v).astype(dtype) for v in values]))
        assert same_tensor(got, reference), (values, got)
        return
    assert isinstance(got, CollateError), (values, got)
    big = [(i, v) for i, v in enumerate(values)
           if type(v) is int and not -2 ** 63 <= v < 2 ** 63]
    if big:
        i, v = big[0]
        shown = "%d" % v if v.bit_length() <= 256 else "(an int of %d bits)" % v.bit_length()
        assert "sample %d of the batch holds the int %s" % (i, shown) in str(got), got


@pytest.mark.parametrize("a", VALUES, ids=IDS)
def test_samples_of_numbers_collate_as_default_collate_or_raise_collate_error(a):
    """Every pair (a, b) of VALUES as a Samples (the producer's conversion, `flatten`) and as a
    field of collate.samples."""
    for b in VALUES:
        values = [a, b]
        got = outcome(lambda v: flatten(Samples(v), "batch")[1][0].value, values)
        check(got, values)
        got = outcome(prefetch.collate.samples, values)
        check(got, values)
        if isinstance(got, CollateError):
            assert "the field (the sample itself)" in str(got)


def test_numbers_through_a_prefetcher_and_a_dataloader():
    """Labels and weights as users' datasets return them, through the whole path: the batch
    equals default_collate's; an int beyond int64 names its field, sample and value, and the
    next epoch works."""
    rows = [(np.int64(k), k / 3, np.float32(k), bool(k % 2), {"id": 2 ** 62 + k}) for k in range(6)]
    reference = default_collate(rows)
    loader = DataLoader(rows, batch_size=6, collate_fn=prefetch.collate.samples)
    with prefetch.Prefetcher(loader, device="cpu") as pf:
        (got,) = list(pf)
    for g, e in zip(got[:4], reference[:4]):
        assert same_tensor(g, e)
    assert same_tensor(got[4]["id"], reference[4]["id"])
    source = [Samples([2 ** 70, 1]), Samples([1, 2])]
    with prefetch.Prefetcher(source, device="cpu") as pf:
        with pytest.raises(CollateError, match=r"cannot collate batch: sample 0 of the batch holds "
                                               r"the int 1180591620717411303424, beyond int64"):
            list(pf)
        source.pop(0)  # the epoch ended with the error; the next one works
        (got,) = list(pf)
        assert same_tensor(got, torch.tensor([1, 2]))
    with prefetch.Prefetcher([Samples([-(2 ** 70), 1])], device="cpu") as pf:
        with pytest.raises(CollateError, match="sample 0 of the batch holds the int -11805916"):
            list(pf)
    bad = [{"x": (1, 2 ** 64)}, {"x": (2, 3)}]
    with pytest.raises(CollateError, match=r"the field \['x'\]\[1\]: sample 0 of the batch holds "
                                           r"the int 18446744073709551616"):
        prefetch.collate.samples(bad)


# -- numpy arrays --------------------------------------------------------------------------------

def _arrays(kind, n=3):
    """`n` samples of one kind of array, distinct values, shape [4, 5] (or what the kind needs)."""
    rng = np.random.default_rng(sum(map(ord, kind)))
    base = [rng.integers(0, 200, (4, 5)) for _ in range(n)]
    if kind == "uint8":
        return [b.astype(np.uint8) for b in base]
    if kind == "transposed":
        return [np.ascontiguousarray(b.astype(np.int16).T).T for b in base]  # F-order
    if kind == "strided slice":
        return [np.tile(b.astype(np.float32), (2, 3))[::2, ::3] for b in base]
    if kind == "negative strides":
        return [b.astype(np.uint8)[::-1, ::-1] for b in base]
    if kind == "read-only (frombuffer)":
        return [np.frombuffer(b.astype(np.uint8).tobytes(), np.uint8).reshape(4, 5) for b in base]
    if kind == "big-endian int32":
        return [b.astype(">i4") for b in base]
    if kind == "ulonglong alias":
        return [b.astype(np.ulonglong) for b in base]
    if kind in ("bool", "float16", "complex64", "uint16", "uint32", "uint64", "int8", "float64"):
        dtype = {"bool": np.bool_, "float16": np.float16, "complex64": np.complex64,
                 "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64, "int8": np.int8,
                 "float64": np.float64}[kind]
        return [(b % 2 if kind == "bool" else b).astype(dtype) for b in base]
    if kind == "0-d":
        return [np.array(b[0, 0], dtype=np.int32) for b in base]
    if kind == "memmap":
        return ["memmap"]  # made by the test: it needs a file
    raise AssertionError(kind)


GOOD = ["uint8", "transposed", "strided slice", "negative strides", "read-only (frombuffer)",
        "big-endian int32", "ulonglong alias", "bool", "float16", "complex64", "uint16",
        "uint32", "uint64", "int8", "float64", "0-d", "memmap"]


def reference(arrays):
    """default_collate's answer computed without it: np.stack of the samples (a copy) in the
    native byte order and the canonical dtype, as one tensor."""
    stacked = np.stack(arrays)
    canonical = np.dtype(stacked.dtype.str).newbyteorder("=")
    return torch.from_numpy(np.ascontiguousarray(stacked.astype(canonical)))


@pytest.mark.parametrize("kind", GOOD)
def test_numpy_samples_equal_a_stack_of_them(kind, tmp_path):
    arrays = _arrays(kind)
    if arrays == ["memmap"]:
        data = np.arange(3 * 20, dtype=np.uint8).reshape(3, 4, 5)
        data.tofile(tmp_path / "m.bin")
        mm = np.memmap(tmp_path / "m.bin", np.uint8, mode="r", shape=(3, 4, 5))
        arrays = [mm[i] for i in range(3)]
    expected = reference(arrays)
    sources = [[Samples(arrays)], [prefetch.collate.samples(arrays)]]
    for source in sources:
        with prefetch.Prefetcher(source, device="cpu") as pf:
            (got,) = list(pf)
        assert same_tensor(got, expected), (kind, got, expected)
    # Where default_collate takes them (torch.as_tensor refuses negative strides and another
    # byte order), the same.
    theirs = outcome(default_collate, arrays)
    if isinstance(theirs, torch.Tensor):
        assert same_tensor(theirs, expected)
    else:
        assert kind in ("negative strides", "big-endian int32", "ulonglong alias"), (kind, theirs)
    # The samples themselves are untouched (from_numpy shares memory; nothing writes to it).
    assert same_tensor(reference(arrays), expected)


BAD = {
    "object": ([np.array([1, None], dtype=object)] * 2, "dtype object"),
    "strings": ([np.array(["ab", "c"])] * 2, "dtype <U2"),
    "bytes": ([np.array([b"ab"])] * 2, "dtype |S2"),
    "datetime64": ([np.zeros(2, "M8[s]")] * 2, "datetime64"),
    "structured": ([np.zeros(2, "i4,f4")] * 2, "no torch dtype"),
    "mixed dtypes": ([np.zeros(2, np.uint8), np.zeros(2, np.int16)], "dtype"),
    "ragged ranks": ([np.zeros((2, 2), np.uint8), np.zeros(2, np.uint8)], "sample 1"),
}
if np.dtype(np.longdouble).itemsize > 8:
    BAD["longdouble"] = ([np.zeros(2, np.longdouble)] * 2, "no torch dtype")


@pytest.mark.parametrize("kind", sorted(BAD))
def test_numpy_samples_no_tensor_holds_raise_collate_error_naming_the_field(kind):
    arrays, what = BAD[kind]
    with pytest.raises(CollateError, match=what) as info:
        with prefetch.Prefetcher([{"img": Samples(arrays)}], device="cpu") as pf:
            list(pf)
    assert "batch['img']" in str(info.value)
    with pytest.raises(CollateError, match=what) as info:
        got = prefetch.collate.samples([{"img": a} for a in arrays])
        with prefetch.Prefetcher([got], device="cpu") as pf:
            list(pf)
    assert "['img']" in str(info.value)


class _Kinds(torch.utils.data.Dataset):
    """Module level (workers import it): each sample a dict of one array per good kind."""

    def __init__(self, n):
        self.fields = {k: _arrays(k, n) for k in GOOD if k != "memmap"}
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {k: v[i] for k, v in self.fields.items()}


@pytest.mark.parametrize("num_workers", [0, 2])
def test_numpy_samples_from_dataloader_workers_equal_default_collate(num_workers):
    """The worker path (the field's samples sent in one shared block, as tensors' are — numpy
    samples were pickled one by one): every kind equals its stack."""
    ds = _Kinds(6)
    loader = DataLoader(ds, batch_size=3, num_workers=num_workers,
                        collate_fn=prefetch.collate.samples)
    with prefetch.Prefetcher(loader, device="cpu") as pf:
        batches = list(pf)
    assert len(batches) == 2
    for b, batch in enumerate(batches):
        for kind, arrays in ds.fields.items():
            assert same_tensor(batch[kind], reference(arrays[3 * b:3 * b + 3])), kind


def test_numpy_samples_of_one_dtype_cost_no_python_per_sample(monkeypatch):
    """The common path converts a field with one map of torch.from_numpy: ndarray_to_tensor,
    the per-sample careful path, is not called for arrays from_numpy takes as they are — and is
    for a sample it refuses (negative strides), which still arrives right."""
    from prefetch._core import samples_to_tensors

    calls = []
    real = samples_to_tensors.ndarray_to_tensor
    monkeypatch.setattr(samples_to_tensors, "ndarray_to_tensor",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    arrays = _arrays("uint8", 64)
    flatten(Samples(arrays))
    prefetch.collate.samples(arrays)
    assert calls == []
    arrays[5] = arrays[5][::-1]
    (leaf,) = flatten(Samples(arrays))[1]
    assert len(calls) == 64
    assert same_tensor(torch.stack(leaf.value), reference(arrays))


def test_mixed_pairs_of_kinds_in_one_field_are_right_or_refused():
    """Two samples of different kinds of one field: a tensor equal to their stack when they share
    dtype and shape (any layout), else a CollateError."""
    kinds = [k for k in GOOD if k != "memmap"]
    for a, b in itertools.combinations(kinds, 2):
        pair = [_arrays(a, 1)[0], _arrays(b, 1)[0]]
        try:
            with prefetch.Prefetcher([Samples(pair)], device="cpu") as pf:
                (got,) = list(pf)
        except CollateError:
            x, y = (reference([p]) for p in pair)
            assert x.dtype != y.dtype or x.shape != y.shape, (a, b)
            continue
        assert same_tensor(got, reference(pair)), (a, b)
