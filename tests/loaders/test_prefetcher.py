"""The Prefetcher against plain iteration of its source: order, content, structure (also random
nested structures, a property test), epochs, DataLoader workers however they are started, the
lifetime of held batches, and the engine's ordering under injected delays."""
import collections
import threading
import time

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

import prefetch

from ..conftest import SANITIZED
from ..helpers import assert_same, assert_snapshot_equal, engine_of, snapshot

Pair = collections.namedtuple("Pair", "image label")


def make_dataset(n, seed, shape=(3, 10, 7)):
    g = torch.Generator().manual_seed(seed)
    return [
        {
            "image": torch.randint(0, 256, shape, dtype=torch.uint8, generator=g),
            "meta": (torch.randn(5, generator=g, dtype=torch.float64), i, float(i) / 3),
            "pair": Pair(torch.randn(2, 2, generator=g), np.int64(i)),
            "name": "sample-%d" % i,
        }
        for i in range(n)
    ]


def assert_epoch(pf, expected, device):
    """One epoch of `pf` is `expected`, batch by batch."""
    got = list(pf)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert_same(g, e, device)


def check_epochs(source, device, epochs=3, expected=None, **kwargs):
    """Each of `epochs` epochs of a Prefetcher over `source` is `expected` (by default, what plain
    iteration of `source` gives)."""
    expected = list(source) if expected is None else expected
    with prefetch.Prefetcher(source, device=device, **kwargs) as pf:
        for _ in range(epochs):
            assert_epoch(pf, expected, device)


@pytest.mark.parametrize("batch_size", [4, 5])  # 5: a partial last batch of 18 samples
def test_collated_source_matches_plain_iteration(device, batch_size):
    loader = DataLoader(make_dataset(18, seed=1), batch_size=batch_size)
    check_epochs(loader, device)


@pytest.mark.parametrize("batch_size", [4, 5])
def test_per_sample_source_matches_default_collate(device, batch_size):
    ds = make_dataset(18, seed=2)
    ours = DataLoader(ds, batch_size=batch_size, collate_fn=prefetch.collate.samples)
    check_epochs(ours, device, expected=list(DataLoader(ds, batch_size=batch_size)), depth=2)


def test_leaf_kinds_and_nesting(device):
    g = torch.Generator().manual_seed(3)
    base = torch.randn(6, 8, generator=g)
    batches = [
        torch.arange(12, dtype=torch.int32).reshape(3, 4),          # a bare tensor
        (base.t(), base[:, ::2], base[1:4, 2:5]),                   # non-contiguous views
        {"a": [np.arange(6, dtype=np.float32).reshape(2, 3), 7], "b": {"c": torch.tensor(True)}},
        [torch.zeros(0, 3), torch.ones(2, 0, dtype=torch.int16), torch.tensor(2.5)],  # empty, 0-dim
        (np.arange(10, dtype=np.int16)[::-3], np.asfortranarray(np.ones((3, 4), dtype=">f4"))),
        {"x": torch.randn(4, generator=g, dtype=torch.complex64).conj()},  # lazy conj view
        "just a string", 42, None,
    ]
    expected = [
        {"x": batches[5]["x"].resolve_conj()} if i == 5 else b for i, b in enumerate(batches)
    ]
    with prefetch.Prefetcher(batches, device=device) as pf:
        got = list(pf)
    assert len(got) == len(expected)
    for gb, eb in zip(got, expected):
        if isinstance(eb, tuple) and isinstance(eb[0], np.ndarray):
            eb = tuple(torch.from_numpy(np.ascontiguousarray(a).astype(a.dtype.newbyteorder("=")))
                       for a in eb)
        assert_same(gb, eb, device)


_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
           torch.bfloat16, torch.float32, torch.float64, torch.bool, torch.complex64]


@st.composite
def tensors(draw):
    dtype = draw(st.sampled_from(_DTYPES))
    shape = draw(st.lists(st.integers(0, 5), min_size=0, max_size=3))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    t = (torch.randn(shape, generator=g) * 50).to(dtype) if dtype != torch.bool else \
        torch.rand(shape, generator=g) < 0.5
    if t.dim() >= 2 and draw(st.booleans()):
        t = t.transpose(0, 1)  # non-contiguous
    return t


leaf_values = st.one_of(tensors(), st.integers(-5, 5), st.text(max_size=3), st.none())
nested_batches = st.recursive(leaf_values, lambda children: st.one_of(
    st.lists(children, max_size=3), st.tuples(children, children),
    st.dictionaries(st.text("abc", min_size=1, max_size=2), children, max_size=3)), max_leaves=8)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(nested_batches, min_size=0, max_size=4))
def test_property_output_equals_plain_iteration(source):
    with prefetch.Prefetcher(source, device="cpu", depth=2) as pf:
        got = list(pf)
    assert len(got) == len(source)
    for g, e in zip(got, source):
        assert_same(g, e, torch.device("cpu"))


@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
def test_worker_start_methods_with_the_pool_alive(context):
    if context == "fork" and SANITIZED:
        pytest.skip("fork() of a threaded process can deadlock in ASan's allocator (conftest.py)")
    # The engine's C++ pool and stream thread exist (a first epoch ran) before workers start.
    ds = [(torch.full((3, 4), i, dtype=torch.uint8), i) for i in range(24)]
    expected = list(DataLoader(ds, batch_size=5))
    loader = DataLoader(ds, batch_size=5, num_workers=2, multiprocessing_context=context,
                        collate_fn=prefetch.collate.samples)
    with prefetch.Prefetcher(loader, device="cpu", num_threads=2) as pf:
        for _ in range(2):
            got = list(pf)
            assert len(got) == len(expected)
            for g, e in zip(got, expected):
                assert_same(g, e, torch.device("cpu"))


def test_held_batches_are_never_overwritten(device):
    ds = make_dataset(40, seed=4)
    loader = DataLoader(ds, batch_size=4, collate_fn=prefetch.collate.samples)
    expected = list(DataLoader(ds, batch_size=4))
    with prefetch.Prefetcher(loader, device=device, depth=2) as pf:
        for _ in range(2):
            held = list(pf)  # every batch of the epoch alive at once
            for g, e in zip(held, expected):
                assert_same(g, e, device)


def test_batches_stay_valid_after_the_prefetcher_is_closed(device):
    batches = [torch.full((1000,), i, dtype=torch.int64) for i in range(6)]
    pf = prefetch.Prefetcher(batches, device=device, depth=2)
    held = list(pf)
    pf.close()
    del pf
    for i, b in enumerate(held):
        assert torch.equal(b.cpu(), batches[i])


@pytest.mark.parametrize("depth", [1, 2])
def test_injected_delays_never_reorder_or_overwrite(depth):
    # The host backend's stream sleeps up to 2 ms before every copy and event: if the ring ever
    # refilled a slot before its copy ran, a batch would carry the next one's bytes.
    rng = np.random.default_rng(5)
    batches = [
        (torch.from_numpy(rng.integers(0, 256, size=int(rng.integers(1, 300_000)), dtype=np.uint8)),
         torch.tensor(i))
        for i in range(60)
    ]
    snaps = [snapshot(b) for b in batches]
    pf = prefetch.Prefetcher(batches, device="cpu", depth=depth, num_threads=2)
    prefetch._C._testing.set_debug_delay(engine_of(pf), 2000, seed=depth)
    for epoch in range(2):
        held = []
        for i, got in enumerate(pf):
            assert int(got[1]) == i, "batch %d arrived at position %d" % (int(got[1]), i)
            assert_snapshot_equal(got, snaps[i])
            held.append(got)
        for i, got in enumerate(held):
            assert_snapshot_equal(got, snaps[i])
    pf.close()


def test_the_ring_grows_for_larger_batches_and_never_shrinks(device):
    sizes = [1000, 5_000_000, 10, 12_000_000, 100]
    batches = [torch.full((n,), i % 251, dtype=torch.uint8) for i, n in enumerate(sizes)]
    with prefetch.Prefetcher(batches, device=device, depth=1) as pf:
        seen = []
        for got, src in zip(pf, batches):
            assert torch.equal(got.cpu(), src)
            seen.append(prefetch._C._testing.slot_capacities(engine_of(pf))[0])
    if device.type == "cpu":
        # The CPU device collates straight into its output buffers: the ring stays unused.
        assert seen == [0] * len(sizes)
        return
    assert seen == sorted(seen), "slot capacity shrank: %s" % seen
    assert seen[-1] >= max(sizes)


def test_len_and_reiteration():
    loader = DataLoader(list(range(10)), batch_size=3)
    with prefetch.Prefetcher(loader, device="cpu") as pf:
        assert len(pf) == 4
        assert [b.tolist() for b in pf] == [b.tolist() for b in loader]
        # Starting a new epoch mid-way stops the old one cleanly.
        first = iter(pf)
        next(first)
        second = iter(pf)
        assert [b.tolist() for b in second] == [b.tolist() for b in loader]
        assert list(first) == []
    with pytest.raises(TypeError, match="has no len"):
        len(prefetch.Prefetcher(iter([1, 2]), device="cpu"))


def test_stats_count_batches_and_bytes():
    batches = [torch.ones(1000, dtype=torch.float32) for _ in range(5)]
    with prefetch.Prefetcher(batches, device="cpu") as pf:
        list(pf)
        s = pf.stats()
    assert s["batches"] == 5 and s["epochs"] == 1 and s["delivered"] == 5
    assert s["bytes_collated"] == 5 * 4000
    assert s["wait_s"] >= 0 and s["produce_s"] > 0 and s["collate_s"] > 0


def test_stats_say_which_stage_took_the_time():
    # Each stage made slow in turn: the counter of that stage carries the time, the others not.
    def slow_source(n, delay):
        for i in range(n):
            time.sleep(delay)
            yield torch.full((4,), i)

    def slow_transform(batch, position=None):
        time.sleep(0.03)
        return batch

    with prefetch.Prefetcher(slow_source(5, 0.03), device="cpu") as pf:
        assert [int(b[0]) for b in pf] == list(range(5))
        s = pf.stats()
    assert s["source_s"] >= 5 * 0.03 and s["transform_s"] < 0.05
    assert s["source_s"] <= s["produce_s"]
    with prefetch.Prefetcher(slow_source(5, 0), device="cpu",
                             device_transform=slow_transform) as pf:
        assert [int(b[0]) for b in pf] == list(range(5))
        s = pf.stats()
    assert s["transform_s"] >= 5 * 0.03 and s["source_s"] < 0.05
    assert s["transform_s"] <= s["produce_s"]


def test_default_device_and_bad_arguments():
    pf = prefetch.Prefetcher([1], device=None)
    expected = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() \
        else torch.device("cpu")
    assert pf.device == expected
    pf.close()
    with pytest.raises(ValueError, match="depth"):
        prefetch.Prefetcher([], depth=0)
    with pytest.raises(ValueError, match="num_threads"):
        prefetch.Prefetcher([], num_threads=0)
    with pytest.raises(ValueError, match="timeout"):
        prefetch.Prefetcher([], timeout=0)
    if not prefetch.built_with_cuda():
        with pytest.raises(RuntimeError, match="built without CUDA"):
            prefetch.Prefetcher([], device="cuda:0")


class _Range(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.tensor([i])


def test_dataloader_attributes_are_forwarded_and_set_epoch_reaches_the_sampler():
    ds = _Range(40)
    sampler = DistributedSampler(ds, num_replicas=2, rank=0, shuffle=True, seed=1)
    loader = DataLoader(ds, batch_size=4, sampler=sampler)
    with prefetch.Prefetcher(loader, device="cpu") as pf:
        assert pf.dataset is ds and pf.sampler is sampler
        assert pf.batch_sampler is loader.batch_sampler and pf.batch_size == 4
        for epoch in (0, 1, 2):
            pf.sampler.set_epoch(epoch)
            got = torch.cat(list(pf)).flatten()
            sampler.set_epoch(epoch)
            expected = torch.cat(list(loader)).flatten()
            assert torch.equal(got, expected)
        e1 = list(iter(sampler))
        pf.sampler.set_epoch(7)
        assert list(iter(sampler)) != e1  # it reached the DataLoader's own sampler


def test_missing_source_attributes_raise_attribute_error_naming_the_source():
    with prefetch.Prefetcher([torch.zeros(1)], device="cpu") as pf:
        for name in ("dataset", "sampler", "batch_sampler", "batch_size"):
            with pytest.raises(AttributeError, match="list"):
                getattr(pf, name)
            assert not hasattr(pf, name)


def test_pickling_a_prefetcher_says_why_it_cannot():
    import copy
    import pickle

    with prefetch.Prefetcher([torch.ones(1)], device="cpu") as pf:
        for attempt in (pickle.dumps, copy.copy, copy.deepcopy):
            with pytest.raises(TypeError, match="Prefetcher cannot be pickled"):
                attempt(pf)
        assert len(list(pf)) == 1



def test_collation_releases_the_gil():
    # While a large batch collates, a Python thread must keep counting.
    samples = prefetch.Samples(torch.ones(64, 1024, 1024, dtype=torch.uint8).unbind(0))
    pf = prefetch.Prefetcher([[samples]] * 6, device="cpu", depth=1, num_threads=1)
    counter = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            counter[0] += 1

    t = threading.Thread(target=count)
    t.start()
    before = counter[0]
    for _ in pf:
        pass
    stop.set()
    t.join()
    pf.close()
    assert counter[0] - before > 1000


def test_cuda_slow_consumer_checksums(device):
    if device.type != "cuda":
        pytest.skip("CUDA only: a slow consumer kernel on the current stream")
    rng = np.random.default_rng(6)
    batches = [torch.from_numpy(rng.integers(0, 256, size=(8, 3, 224, 224), dtype=np.uint8))
               for _ in range(12)]
    sums = [int(b.to(torch.int64).sum()) for b in batches]
    with prefetch.Prefetcher(batches, device=device, depth=2) as pf:
        for epoch in range(2):
            results = []
            for b in pf:
                assert b.device == torch.device("cuda", torch.cuda.current_device())
                torch.cuda._sleep(2_000_000)  # the consumer stream is busy while copies go on
                results.append(b.to(torch.int64).sum())
            assert [int(r) for r in results] == sums


class _ImageDataset(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randint(0, 256, (3, 16, 16), dtype=torch.uint8, generator=g), i


def test_dataloader_with_worker_processes(device):
    ds = _ImageDataset(37)
    expected = list(DataLoader(ds, batch_size=8))
    loader = DataLoader(ds, batch_size=8, num_workers=2, collate_fn=prefetch.collate.samples,
                        persistent_workers=False)
    with prefetch.Prefetcher(loader, device=device, depth=2) as pf:
        for _ in range(2):
            assert_epoch(pf, expected, device)
        for i, _ in enumerate(pf):  # an early break leaves the workers to be shut down
            if i == 1:
                break
        got = list(pf)
        assert len(got) == len(expected)


# --- the order of later epochs after one is broken off ---------------------------------------------

class _Indices(Dataset):
    """Each sample its index; ``delay`` seconds per sample make the source the slower side."""

    def __init__(self, n, delay=0.0):
        self.n, self.delay = n, delay

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.delay:
            time.sleep(self.delay)
        return torch.tensor([i])


def _orders(loader, consumer_delay, stop_after, epochs=2):
    """The dataset indices of each epoch as a Prefetcher over ``loader`` delivers them, the first
    epoch broken off after ``stop_after`` batches."""
    orders = []
    with prefetch.Prefetcher(loader, device="cpu", depth=3) as p:
        for epoch in range(epochs):
            seen = []
            for k, batch in enumerate(p):
                seen += batch.view(-1).tolist()
                time.sleep(consumer_delay)
                if epoch == 0 and k + 1 == stop_after:
                    break
            orders.append(seen)
    return orders


@pytest.mark.parametrize("num_workers", [0, 2])
def test_an_epoch_broken_off_leaves_later_orders_independent_of_timing(num_workers):
    """A shuffling DataLoader with a seeded generator, its first epoch broken off two batches
    before its end: whether the read-ahead had reached the sampler's end (a slow consumer) or not
    (a slow source), the next epoch's order is the same, and it is the order the plain DataLoader
    gives after a whole first epoch. (The sampler draws one more permutation at its end; it used
    to be drawn or not by timing.)"""
    collate = prefetch.collate.samples if num_workers else None

    def loader(delay, collate_fn=collate):
        return DataLoader(_Indices(40, delay), batch_size=4, shuffle=True, num_workers=num_workers,
                          generator=torch.Generator().manual_seed(3), collate_fn=collate_fn)

    slow_consumer = _orders(loader(0.0), consumer_delay=0.05, stop_after=8)
    slow_source = _orders(loader(0.01), consumer_delay=0.0, stop_after=8)
    plain = loader(0.0, collate_fn=None)
    whole_epochs = [[i for b in plain for i in b.view(-1).tolist()] for _ in range(2)]
    assert slow_consumer[0] == slow_source[0] == whole_epochs[0][:32]
    assert slow_consumer[1] == slow_source[1] == whole_epochs[1]


def test_a_sampler_seeded_per_epoch_gives_exactly_the_plain_dataloaders_orders_with_breaks():
    """The documented way to get exactly the plain DataLoader's orders whatever the breaks: a
    sampler whose epoch order depends on (seed, epoch) only, as DistributedSampler's does."""
    def loader():
        ds = _Indices(40)
        return DataLoader(ds, batch_size=4, sampler=DistributedSampler(ds, num_replicas=1, rank=0,
                                                                        shuffle=True, seed=11))

    with prefetch.Prefetcher(loader(), device="cpu") as p:
        got = []
        for epoch in range(3):
            p.sampler.set_epoch(epoch)
            got.append([i for k, b in zip(range(7 if epoch == 0 else 10), p) for i in b.view(-1).tolist()])
    plain, expected = loader(), []
    for epoch in range(3):
        plain.sampler.set_epoch(epoch)
        expected.append([i for k, b in zip(range(7 if epoch == 0 else 10), plain) for i in b.view(-1).tolist()])
    assert got == expected and got[1] != got[2]
