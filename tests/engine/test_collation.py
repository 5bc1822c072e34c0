"""Collation: every leaf either collates to what plain torch gives, or fails with a
prefetch.CollateError (a ValueError) that names it, the sample and both shapes or dtypes (and,
when the source says, the dataset index); never a crash, a wrong batch or an internal error, and
nothing else is affected: the next epoch works. Tensors without ordinary strided CPU memory,
numpy dtypes torch lacks, sizes that would wrap around 64 bits, a batch too large to allocate.

Anything that could crash runs in a child interpreter (run_child), so a SIGSEGV or an abort fails
the test instead of killing pytest."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
import torch
from torch.utils.data import DataLoader, Dataset

import prefetch
from prefetch import CollateError

from ..conftest import SANITIZED
from ..helpers import run_child_to_done


def test_ragged_samples_name_the_sample_and_both_shapes():
    bad = [prefetch.Samples([torch.zeros(3, 4), torch.zeros(3, 4), torch.zeros(3)])]  # another rank
    with prefetch.Prefetcher([bad], device="cpu") as pf:
        with pytest.raises(prefetch.CollateError) as info:
            list(pf)
        msg = str(info.value)
        assert "sample 2" in msg and "[3]" in msg and "[3, 4]" in msg and "batch[0]" in msg


def test_mixed_dtypes_name_the_sample_and_both_dtypes():
    bad = {"x": prefetch.Samples([torch.zeros(2), torch.zeros(2, dtype=torch.float64)])}
    with prefetch.Prefetcher([bad], device="cpu") as pf:
        with pytest.raises(prefetch.CollateError) as info:
            list(pf)
    msg = str(info.value)
    assert "sample 1" in msg and "torch.float64" in msg and "torch.float32" in msg
    assert "batch['x']" in msg


@pytest.mark.parametrize("bad,match", [
    (prefetch.Samples([]), "empty Samples"),
    (prefetch.Samples([torch.zeros(2), np.zeros(2)]), "sample 1 is a ndarray"),
    (prefetch.Samples(["a", "b"]), "sample 0 is a str"),
    (np.array([object(), 1]), "dtype object"),
    (torch.zeros(3).to_sparse(), "layout"),
])
def test_bad_leaves_raise_clear_errors_and_the_next_epoch_works(bad, match):
    class Source:
        def __init__(self):
            self.first = True

        def __iter__(self):
            yield torch.ones(3)
            if self.first:
                self.first = False
                yield [bad]
            yield torch.full((3,), 2.0)

    with prefetch.Prefetcher(Source(), device="cpu") as pf:
        it = iter(pf)
        assert torch.equal(next(it), torch.ones(3))
        with pytest.raises(prefetch.CollateError, match=match):
            next(it)
        assert [b.tolist() for b in pf] == [[1.0] * 3, [2.0] * 3]


def test_a_batch_over_the_memory_cap_is_refused():
    batches = [torch.zeros(100, dtype=torch.uint8), torch.zeros(10_000, dtype=torch.uint8)]
    with prefetch.Prefetcher(batches, device="cpu", max_batch_bytes=4096) as pf:
        it = iter(pf)
        next(it)
        with pytest.raises(prefetch.CollateError, match="max_batch_bytes=4096"):
            next(it)


class _Ragged(Dataset):
    """Sample `bad` has another rank: samples that only differ in size would make a Ragged."""

    def __init__(self, n, bad):
        self.n, self.bad = n, bad

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.zeros(3) if i != self.bad else torch.zeros(4, 1)


def _collate_error_text(pf):
    """The message and notes of the CollateError that an epoch of `pf` raises."""
    with pytest.raises(prefetch.CollateError) as info:
        list(pf)
    return str(info.value) + "\n".join(getattr(info.value, "__notes__", []))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_ragged_sample_names_its_dataset_index(num_workers):
    loader = DataLoader(_Ragged(40, bad=22), batch_size=8, num_workers=num_workers,
                        collate_fn=prefetch.collate.samples)
    with prefetch.Prefetcher(loader, device="cpu") as pf:
        text = _collate_error_text(pf)
        assert "sample 6" in text and "[4, 1]" in text and "[3]" in text
        assert "dataset index 22" in text, text
        # The next epoch works: the ragged sample is still there, so it fails the same way.
        with pytest.raises(prefetch.CollateError, match="sample 6"):
            list(pf)


def test_a_ragged_sample_with_a_shuffled_sampler_names_no_index():
    loader = DataLoader(_Ragged(40, bad=22), batch_size=8, shuffle=True,
                        collate_fn=prefetch.collate.samples)
    with prefetch.Prefetcher(loader, device="cpu") as pf:
        text = _collate_error_text(pf)
    assert "sample " in text and "dataset index" not in text, text



# ---- leaves without ordinary memory, numpy dtypes torch lacks ----------------------------------
# The child's shared part: the three ways a leaf reaches the engine, each checked to fail with a
# CollateError naming the leaf, then to work again on the next epoch (same Prefetcher / loader).
_CHILD_PRELUDE = """
import sys, warnings
import numpy as np, torch, prefetch
from prefetch import CollateError
warnings.simplefilter("ignore")

def expect_collate_error(fn, needle):
    try:
        fn()
    except CollateError as exc:
        assert needle in str(exc), "%r does not name %r" % (str(exc), needle)
        print("collate-error:", str(exc)[:300], flush=True)
        return
    raise AssertionError("no CollateError")

def via_prefetcher(bad):
    good = torch.arange(12.).reshape(4, 3)
    batches = [{"x": good}, {"x": bad}]
    pf = prefetch.Prefetcher(batches, device="cpu", num_threads=2)
    expect_collate_error(lambda: list(pf), "batch['x']")
    batches[1] = {"x": good + 1}  # the next epoch, now good, works on the same Prefetcher
    out = list(pf)
    assert len(out) == 2 and torch.equal(out[1]["x"], good + 1), out

def via_samples(bad):
    good = torch.arange(3.)
    batches = [{"x": prefetch.Samples([good, good])}, {"x": prefetch.Samples([good, bad])}]
    pf = prefetch.Prefetcher(batches, device="cpu", num_threads=2)
    expect_collate_error(lambda: list(pf), "batch['x'] sample 1")
    batches[1] = {"x": prefetch.Samples([good, good + 1])}
    out = list(pf)
    assert torch.equal(out[1]["x"], torch.stack([good, good + 1])), out

def via_array_loader(bad):
    expect_collate_error(
        lambda: list(prefetch.ArrayLoader({"x": bad}, batch_size=2, device="cpu", shuffle=False)),
        "arrays['x']")
    good = torch.arange(12.).reshape(4, 3)
    out = list(prefetch.ArrayLoader({"x": good}, batch_size=2, device="cpu", shuffle=False))
    assert torch.equal(torch.cat([b["x"] for b in out]), good)
"""


_MAKERS = {
    "masked": """
from torch.masked import masked_tensor
bad = masked_tensor(torch.ones(4, 3), torch.ones(4, 3, dtype=torch.bool))
""",
    "wrapper_subclass_with_dispatch": """
class Wrapper(torch.Tensor):  # the DTensor / torchao pattern: no storage of its own
    @staticmethod
    def __new__(cls, inner):
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype)
    def __init__(self, inner):
        self.inner = inner
    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        unwrap = lambda x: x.inner if isinstance(x, Wrapper) else x
        args = torch.utils._pytree.tree_map(unwrap, args)
        kwargs = torch.utils._pytree.tree_map(unwrap, kwargs or {})
        return func(*args, **kwargs)
bad = Wrapper(torch.ones(4, 3))
""",
    "fake": """
from torch._subclasses.fake_tensor import FakeTensorMode
with FakeTensorMode():
    bad = torch.ones(4, 3)
""",
    "functional": """
bad = torch._to_functional_tensor(torch.ones(4, 3))
""",
    "storage_resized_to_0": """
bad = torch.ones(4, 3)
bad.untyped_storage().resize_(0)
""",
    "storage_too_small": """
bad = torch.ones(4, 3)
bad.untyped_storage().resize_(8)  # 2 floats of the 12 the sizes need
""",
    "meta": """
bad = torch.ones(4, 3, device="meta")
""",
    "nested_strided": """
bad = torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(3, 3)])
""",
    "nested_jagged": """
bad = torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(3, 3)], layout=torch.jagged)
""",
}


@pytest.mark.parametrize("kind", sorted(_MAKERS))
def test_leaves_without_ordinary_storage_raise_collate_error_naming_the_field(kind):
    out = run_child_to_done(_CHILD_PRELUDE + _MAKERS[kind] + """
via_prefetcher(bad)
via_samples(bad)
via_array_loader(bad)
print("done", flush=True)
""", timeout=90)
    assert out.stdout.count("collate-error:") == 3, out.stdout


def test_efficient_zero_tensors_are_materialised_as_torch_does():
    run_child_to_done("""
import torch, prefetch
z = torch._efficientzerotensor((4, 3))
expected = z.clone()  # what torch makes of it: a dense zero tensor
assert not expected._is_zerotensor() and torch.equal(expected, torch.zeros(4, 3))
got = list(prefetch.Prefetcher([{"x": z}], device="cpu"))[0]["x"]
assert torch.equal(got, expected) and got.dtype == expected.dtype, got
got = list(prefetch.Prefetcher([prefetch.Samples([z[0], z[1]])], device="cpu"))[0]
assert torch.equal(got, torch.zeros(2, 3)), got
got = list(prefetch.ArrayLoader(z, batch_size=4, device="cpu", shuffle=False))[0]
assert torch.equal(got, expected), got
print("done", flush=True)
""")


class _Plain(torch.Tensor):
    pass


def _kept_kinds():
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    complex_base = torch.complex(base, base + 1)
    return {
        "as_subclass": base.as_subclass(_Plain),
        "parameter": torch.nn.Parameter(base.clone()),
        "requires_grad": base.clone().requires_grad_(),
        "conj_view": complex_base.conj(),
        "neg_view": torch._neg_view(base),
        "transposed": base.t(),
        "expanded": torch.arange(6.).expand(4, 6),
        "storage_offset": torch.arange(40.)[7:31].reshape(4, 6),
    }


@pytest.mark.parametrize("kind", sorted(_kept_kinds()))
def test_tensors_with_storage_keep_working(kind):
    t = _kept_kinds()[kind]
    expected = t.detach().resolve_conj().resolve_neg().as_subclass(torch.Tensor).clone()
    got = list(prefetch.Prefetcher([{"x": t}], device="cpu", num_threads=2))[0]["x"]
    assert torch.equal(got, expected) and got.dtype == expected.dtype
    got = list(prefetch.Prefetcher([prefetch.Samples([t[0], t[1]])], device="cpu"))[0]
    assert torch.equal(got, expected[:2])
    got = torch.cat(list(prefetch.ArrayLoader(t, batch_size=3, device="cpu", shuffle=False)))
    assert torch.equal(got, expected)


_BAD_ARRAYS = {
    "datetime64": lambda: np.array(["2020-01-01", "2021-01-01"], dtype="datetime64[D]"),
    "timedelta64": lambda: np.array([1, 2], dtype="timedelta64[s]"),
    "longdouble": lambda: np.ones(2, dtype=np.longdouble),
    "clongdouble": lambda: np.ones(2, dtype=np.clongdouble),
    "structured": lambda: np.zeros(2, dtype=[("a", "f4"), ("b", "i4")]),
}


@pytest.mark.parametrize("kind", sorted(_BAD_ARRAYS))
def test_unsupported_numpy_dtypes_raise_collate_error_naming_the_field(kind):
    bad = _BAD_ARRAYS[kind]()
    batches = [{"x": bad}]
    pf = prefetch.Prefetcher(batches, device="cpu")
    with pytest.raises(CollateError, match=r"batch\['x'\].*%s" % bad.dtype.name[:4]):
        list(pf)
    batches[0] = {"x": np.ones(2, dtype=np.float32)}
    assert torch.equal(list(pf)[0]["x"], torch.ones(2))
    with pytest.raises(CollateError, match=r"batch\['y'\] sample 0"):
        list(prefetch.Prefetcher([{"y": prefetch.Samples([bad, bad])}], device="cpu"))
    # Numpy scalars of those dtypes in Samples too.
    with pytest.raises(CollateError, match=r"batch\['z'\]"):
        list(prefetch.Prefetcher([{"z": prefetch.Samples([bad[0], bad[1]])}], device="cpu"))
    with pytest.raises(CollateError, match=r"arrays\['x'\]"):
        prefetch.ArrayLoader({"x": bad}, batch_size=1, device="cpu")


@pytest.mark.parametrize("dtype", [np.longlong, np.ulonglong, ">u8", ">i2", np.intc])
def test_numpy_aliases_of_torch_dtypes_are_taken(dtype):
    array = np.arange(6).astype(dtype)
    expected = torch.from_numpy(array.astype(np.dtype(array.dtype.str).newbyteorder("=")))
    got = list(prefetch.Prefetcher([{"x": array}], device="cpu"))[0]["x"]
    assert got.dtype == expected.dtype and torch.equal(got, expected)
    got = list(prefetch.Prefetcher([{"x": prefetch.Samples(list(array))}], device="cpu"))[0]["x"]
    assert got.dtype == expected.dtype and torch.equal(got, expected)


# ---- sizes never wrap -----------------------------------------------------------------------------
# Huge (expanded) shapes: the true size is checked, never a wrapped one. In a child process:
# before the fix some of these wrote far past a small buffer.
_HUGE = {
    # 2^61 + 1 float64: 2^64 + 8 bytes, which wrapped to 8.
    "bytes_wrap_to_small": "torch.zeros(1, dtype=torch.float64).expand(2**61 + 1)",
    # 2^62 float64: 2^65 bytes, which wrapped to 0.
    "bytes_wrap_to_zero": "torch.zeros(1, dtype=torch.float64).expand(2**62)",
    "rows_times_row": "torch.zeros(1, 1, dtype=torch.float64).expand(2**31, 2**31)",
}


@pytest.mark.parametrize("kind", sorted(_HUGE))
def test_huge_expanded_leaves_raise_collate_error(kind):
    run_child_to_done(_CHILD_PRELUDE + """
bad = %s
via_prefetcher(bad)
pf = prefetch.Prefetcher([{"x": bad}], device="cpu", max_batch_bytes=1 << 20)
expect_collate_error(lambda: list(pf), "batch['x']")
print("done", flush=True)
""" % _HUGE[kind])


def test_samples_of_many_expanded_samples_raise_collate_error():
    run_child_to_done(_CHILD_PRELUDE + """
one = torch.zeros(1, dtype=torch.int8)
# Each sample fits; stacked, the element count (4 * 2^61 = 2^63) passes int64.
samples = prefetch.Samples([one.expand(2**61)] * 4)
pf = prefetch.Prefetcher([{"x": samples}], device="cpu")
expect_collate_error(lambda: list(pf), "batch['x']")
# A true size that fits 64 bits is checked against max_batch_bytes as it is.
samples = prefetch.Samples([one.expand(2**40)] * 4)
pf = prefetch.Prefetcher([{"x": samples}], device="cpu", max_batch_bytes=1 << 30)
expect_collate_error(lambda: list(pf), "max_batch_bytes")
print("done", flush=True)
""")


def test_gathered_leaves_with_huge_rows_raise_collate_error():
    run_child_to_done(_CHILD_PRELUDE + """
one = torch.zeros(1, 1, dtype=torch.float64)
bad = one.expand(4, 2**60)  # rows of 2^63 bytes, one past the largest size
expect_collate_error(
    lambda: list(prefetch.ArrayLoader({"x": bad}, batch_size=2, device="cpu", shuffle=False)),
    "arrays['x']")
rows = one.expand(4, 2**59)  # rows of 2^62 bytes: one fits, two (2^63) do not
expect_collate_error(
    lambda: list(prefetch.ArrayLoader({"x": rows}, batch_size=2, device="cpu", shuffle=False)),
    "arrays['x']")
print("done", flush=True)
""")


def test_zero_sized_dim_next_to_huge_dims_is_an_empty_batch():
    t = torch.zeros(1, 1, 1).expand(2**40, 0, 2**40)
    got = list(prefetch.Prefetcher([{"x": t}], device="cpu"))[0]["x"]
    assert got.shape == t.shape and got.numel() == 0


# A true size that fits 64 bits but no memory (2^62 bytes is past any address space, whatever
# the overcommit policy): a MemoryError naming the size and the leaf; the next epoch works.
# ASan aborts on such an allocation instead of failing it, so not under the sanitizers.
@pytest.mark.skipif(SANITIZED, reason="AddressSanitizer aborts on a 2^62-byte allocation")
def test_a_batch_too_large_to_allocate_is_a_memory_error_naming_the_leaf():
    run_child_to_done("""
import torch, prefetch
batches = [{"x": torch.zeros(1, dtype=torch.int8).expand(2**62)}]
pf = prefetch.Prefetcher(batches, device="cpu")
try:
    list(pf)
except MemoryError as exc:
    print("memory-error:", exc, flush=True)
    assert "batch['x']" in str(exc) and str(2**62) in str(exc), exc
batches[0] = {"x": torch.arange(3.)}
assert torch.equal(list(pf)[0]["x"], torch.arange(3.))
print("done", flush=True)
""", "memory-error:")


# --- ints beyond int64 ---------------------------------------------------------------------------------

def test_an_int_beyond_int64_names_its_field_sample_and_value():
    ds = [(torch.zeros(2), {"id": 5, "big": 5}), (torch.zeros(2), {"id": 6, "big": 2 ** 70})]
    loader = DataLoader(ds, batch_size=2, collate_fn=prefetch.collate.samples)
    message = r"the field \[1\]\['big'\]: sample 1 of the batch holds the int 1180591620717411303424"
    with pytest.raises(prefetch.CollateError, match=message):
        next(iter(loader))  # the DataLoader alone
    with prefetch.Prefetcher(loader, device="cpu") as p, pytest.raises(prefetch.CollateError, match=message):
        list(p)
    # In range, ints collate as default_collate collates them.
    assert torch.equal(prefetch.collate.samples([(1,), (2 ** 62,)])[0], torch.tensor([1, 2 ** 62]))


# --- fuzzing the Python boundary: whatever a Dataset returns -----------------------------------

_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
           torch.bfloat16, torch.float32, torch.float64, torch.bool, torch.complex64]


@st.composite
def _field_samples(draw, n):
    """One field of ``n`` samples: tensors whose dtype, rank and sizes mostly agree and sometimes
    do not (and sometimes are non-contiguous views), or Python numbers including ints beyond
    int64."""
    kind = draw(st.sampled_from(["tensor", "tensor", "tensor", "int", "float"]))
    if kind == "int":
        return [draw(st.integers(-2 ** 66, 2 ** 66) | st.integers(-5, 5)) for _ in range(n)]
    if kind == "float":
        return [draw(st.floats(allow_nan=False)) for _ in range(n)]
    dtype = draw(st.sampled_from(_DTYPES))
    shape = draw(st.lists(st.integers(0, 4), max_size=3))
    out = []
    for _ in range(n):
        d = draw(st.sampled_from(_DTYPES)) if draw(st.integers(0, 9)) == 0 else dtype
        s = list(shape)
        if s and draw(st.integers(0, 3)) == 0:
            s[draw(st.integers(0, len(s) - 1))] += draw(st.integers(1, 2))  # sizes differ
        if draw(st.integers(0, 19)) == 0:
            s = s + [1]  # another rank
        t = (torch.arange(int(np.prod(s + [2])), dtype=torch.float64) % 7).to(d).view(s + [2])[..., 0]
        out.append(t)  # a strided view, never contiguous past rank 0
    return out


def _expected(fields, n):
    """What collate.samples through a Prefetcher must give for each field, from torch alone: the
    default_collate of the field, the samples as a Ragged, or None: a CollateError."""
    from torch.utils.data import default_collate

    out = []
    for values in fields:
        if not isinstance(values[0], torch.Tensor):
            if any(isinstance(v, int) and not -2 ** 63 <= v < 2 ** 63 for v in values):
                return None
            out.append(default_collate(values))
            continue
        if any(t.dtype != values[0].dtype for t in values) or any(t.dim() != values[0].dim() for t in values):
            return None
        if all(t.shape == values[0].shape for t in values):
            out.append(torch.stack(values))
        elif values[0].dim() == 0:
            return None
        else:
            out.append(list(values))  # a Ragged of these
    return out


@given(data=st.data())
@settings(max_examples=15 if SANITIZED else 60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_whatever_the_dataset_returns_the_batch_is_right_or_a_collate_error(data):
    """Hypothesis over the collate boundary (the Python side of the fuzzing the C++ targets get):
    each batch either arrives equal to torch's own answer or raises CollateError; never another
    exception, a crash or a wrong value, and the next batch (or epoch) works."""
    n = data.draw(st.integers(1, 4))
    fields = [data.draw(_field_samples(n)) for _ in range(data.draw(st.integers(1, 3)))]
    batch = [tuple(f[i] for f in fields) for i in range(n)]
    expected = _expected(fields, n)
    good = [(torch.ones(2),)] * 2
    try:
        collated = prefetch.collate.samples(batch)
    except CollateError:
        assert expected is None
        return
    source = [collated, prefetch.collate.samples(good)]
    with prefetch.Prefetcher(source, device="cpu") as pf:
        it = iter(pf)
        try:
            got = next(it)
        except CollateError:
            assert expected is None
            source.pop(0)  # the epoch ended with the error; the next one works
            it = iter(pf)
        else:
            assert expected is not None
            for g, e in zip(got, expected):
                if isinstance(e, list):
                    assert isinstance(g, prefetch.Ragged) and len(g) == len(e)
                    for a, b in zip(g.tensors(), e):
                        assert a.dtype == b.dtype and torch.equal(a, b)
                else:
                    assert g.dtype == e.dtype and g.shape == e.shape and torch.equal(g, e)
        assert torch.equal(next(it)[0], torch.ones(2, 2))


class _ConjViews(Dataset):
    """Module level: forkserver workers (the sanitized run's) import it by name."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.complex(torch.arange(6.0) + i, torch.ones(6)).view(2, 3).conj(), torch.full((3,), i)


def test_samples_in_a_worker_travel_in_one_block_and_a_failure_to_send_them_is_raised_in_the_main_process(monkeypatch):
    """collate.samples in a DataLoader worker: the field's samples cross to the main process as
    views of one shared block, exact and resolved (a conjugate view); a failure while pickling
    them (the queue's feeder thread) arrives as an error in the main process instead of a batch
    that never comes."""
    from prefetch import collate as C

    Views = _ConjViews
    loader = DataLoader(Views(), batch_size=4, num_workers=2, collate_fn=prefetch.collate.samples)
    got = list(loader)
    for b, (images, index) in enumerate(got):
        assert type(images) is prefetch.Samples and len({t.untyped_storage().data_ptr() for t in images}) == 1
        for k, t in enumerate(images):
            want = Views()[4 * b + k][0].resolve_conj()
            assert not t.is_conj() and torch.equal(t, want)
    if SANITIZED:
        return  # fork() under ASan (conftest): the failure half is the regular run's
    monkeypatch.setattr(C, "_into_block", lambda tensors: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    loader = DataLoader(Views(), batch_size=4, num_workers=1, collate_fn=prefetch.collate.samples,
                        multiprocessing_context="fork")
    with pytest.raises(prefetch.SharedMemoryError, match=r"could not put a batch's 4 samples \(192 bytes\) into shared memory"):
        list(loader)
