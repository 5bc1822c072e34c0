"""The public transform contract (prefetch/transforms/contract.py): what every loader hands a transform,
the resident-dataset gather, direct calls, state, and the leaf helpers; and the ResumeCursor's
rules. References are plain iteration and plain Python loops."""
import collections
import pathlib
import re

import numpy as np
import pytest
import torch

import prefetch
from prefetch._core.checks import mix64
from prefetch._engine.resume import ResumeCursor
from prefetch.transforms import (DIRECT_EPOCH, BatchPosition, Transform, get_leaf, run_transform,
                                 set_leaf)

from ..helpers import ROOT


class Recorder(Transform):
    """Records every position it is given and tags the label leaf with it."""

    def __init__(self):
        self.seen = []

    def apply(self, batch, position):
        self.seen.append(tuple(position))
        return set_leaf(batch, 1, batch[1] * 0 + position.index)


def arrays(n=40):
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 256, (n, 6, 5, 3), dtype=torch.uint8, generator=g), torch.arange(n)


def test_batch_position_seed_is_splitmix_of_seed_rank_epoch_index():
    def splitmix(*values):  # written out independently of prefetch._core.checks
        h, m = 0x9E3779B97F4A7C15, (1 << 64) - 1
        for v in values:
            h = ((h ^ (v & m)) + 0x9E3779B97F4A7C15) & m
            h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & m
            h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & m
            h ^= h >> 31
        return h & ((1 << 63) - 1)

    p = BatchPosition(epoch=3, index=7, rank=2)
    assert p.seed(11) == splitmix(11, 2, 3, 7) == mix64(11, 2, 3, 7)
    assert torch.equal(torch.rand(5, generator=p.generator(11)),
                       torch.rand(5, generator=torch.Generator().manual_seed(splitmix(11, 2, 3, 7))))
    assert BatchPosition(3, 7).rank == 0
    assert len({BatchPosition(e, i, r).seed(0) for e in range(3) for i in range(3) for r in range(3)}) == 27


def test_prefetcher_passes_each_batch_its_position_and_a_plain_callable_gets_the_batch():
    images, labels = arrays()
    batches = [(images[i:i + 8], labels[i:i + 8]) for i in range(0, 40, 8)]
    t = Recorder()
    with prefetch.Prefetcher(batches, device="cpu", transform=t, rank=3) as pf:
        pf.set_epoch(5)
        out = list(pf)
        assert t.seen == [(5, i, 3) for i in range(5)]
        assert [int(b[1][0]) for b in out] == list(range(5))
        assert all(torch.equal(b[0], e[0]) for b, e in zip(out, batches))
    calls = []
    with prefetch.Prefetcher(batches, device="cpu", transform=lambda b: calls.append(b) or b) as pf:
        out = list(pf)
    assert len(calls) == 5 and all(torch.equal(b[1], e[1]) for b, e in zip(out, batches))


@pytest.mark.parametrize("resident", ["host", "device"])
def test_array_loader_positions_continue_after_a_resume(resident):
    images, labels = arrays()
    t = Recorder()
    with prefetch.ArrayLoader((images, labels), 8, rank=1, world_size=2, transform=t,
                              resident=resident, device="cpu") as loader:
        it = iter(loader)
        next(it), next(it)
        state = loader.state_dict()
        it.close()  # the producer may still be transforming batches ahead: stop it first
        t.seen.clear()
        loader.load_state_dict(state)
        rest = list(loader)
    assert t.seen == [(0, 2, 1)]  # 20 samples per rank: batches 0..2, the last one partial
    assert [int(b[1][0]) for b in rest] == [2]


class CountingGather(Transform):
    """Declares the image leaf as gathered: checks what it receives, then gathers by index."""

    gathers = (0,)

    def __init__(self, dataset_len):
        self.dataset_len, self.calls = dataset_len, []

    def gather(self, batch, indices, position):
        assert batch[0].shape[0] == self.dataset_len  # the whole dataset
        assert batch[1].shape[0] == indices.numel()  # the others already gathered
        self.calls.append((tuple(position), indices.clone()))
        return (batch[0].index_select(0, indices).float() + position.index, batch[1])

    def apply(self, batch, position):
        return (batch[0].float() + position.index, batch[1])


def test_a_resident_gather_gets_the_whole_leaf_and_equals_the_host_path():
    images, labels = arrays()
    host_t, dev_t = CountingGather(40), CountingGather(40)
    with prefetch.ArrayLoader((images, labels), 8, seed=4, transform=host_t, device="cpu") as host, \
            prefetch.ArrayLoader((images, labels), 8, seed=4, transform=dev_t, device="cpu",
                                 resident="device") as dev:
        for epoch in range(2):
            h, d = list(host), list(dev)
            order = host.epoch_indices(epoch)
            for b, (x, y) in enumerate(zip(h, d)):
                idx = order[8 * b:8 * b + 8]
                assert torch.equal(x[0], images[idx].float() + b) and torch.equal(x[0], y[0])
                assert torch.equal(x[1], labels[idx]) and torch.equal(y[1], labels[idx])
    assert [c[0] for c in dev_t.calls] == [(e, b, 0) for e in range(2) for b in range(5)]
    assert host_t.calls == []  # the host path gathers in the engine and calls apply


def test_gathers_without_gather_says_so_at_the_consumer():
    class Half(Transform):
        gathers = (0,)

        def apply(self, batch, position):
            return batch

    images, labels = arrays()
    with prefetch.ArrayLoader((images, labels), 8, transform=Half(), device="cpu",
                              resident="device") as loader:
        with pytest.raises(NotImplementedError, match=r"Half declares gathers=\(0,\) but does not "
                                                      r"implement gather"):
            next(iter(loader))
    with pytest.raises(NotImplementedError, match="must implement apply"):
        Transform()(torch.zeros(1))


def test_direct_calls_count_and_given_positions_are_used():
    t = Recorder()
    batch = (torch.zeros(2), torch.zeros(2))
    t(batch), t(batch)
    t(batch, epoch=4, index=9, rank=2)
    t(batch, BatchPosition(1, 2, 3))
    t(batch, index=5)
    assert t.seen == [(DIRECT_EPOCH, 0, 0), (DIRECT_EPOCH, 1, 0), (4, 9, 2), (1, 2, 3), (0, 5, 0)]
    assert t.direct_calls == 2
    assert run_transform(t, batch, BatchPosition(7, 8, 9)) is not batch and t.seen[-1] == (7, 8, 9)
    assert run_transform(lambda b: "plain", batch, BatchPosition(0, 0)) == "plain"


class Stateful(Recorder):
    def __init__(self):
        super().__init__()
        self.value = 0

    def state_dict(self):
        return {"value": self.value}

    def load_state_dict(self, state):
        self.value = state["value"]


def test_a_stateful_transform_travels_in_the_loaders_state():
    images, labels = arrays()
    t = Stateful()
    t.value = 42
    with prefetch.ArrayLoader((images, labels), 8, transform=t, device="cpu") as loader:
        state = loader.state_dict()
    assert state["transform"] == {"value": 42}
    other = Stateful()
    with prefetch.ArrayLoader((images, labels), 8, transform=other, device="cpu") as loader:
        loader.load_state_dict(state)
    assert other.value == 42
    # A Transform without state_required is not asked when the state has none.
    with prefetch.ArrayLoader((images, labels), 8, transform=Stateful(), device="cpu") as loader:
        loader.load_state_dict({k: v for k, v in state.items() if k != "transform"})


def test_get_and_set_leaf_keep_the_structure():
    Pair = collections.namedtuple("Pair", "image label")
    t = torch.zeros(1)
    assert get_leaf(t, 0) is t and set_leaf(t, 0, "x") == "x"
    p = set_leaf(Pair(1, 2), 0, 5)
    assert type(p) is Pair and p == Pair(5, 2)
    assert set_leaf((1, 2), 1, 3) == (1, 3) and set_leaf([1, 2], 0, 3) == [3, 2]
    d = {"a": 1}
    assert set_leaf(d, "a", 2) == {"a": 2} and d == {"a": 1}
    with pytest.raises(KeyError, match=r"the batch \(dict\) has no leaf 'b'"):
        get_leaf(d, "b")
    with pytest.raises(KeyError, match="single tensor; key 1 does not apply"):
        get_leaf(t, 1)


def test_the_custom_ops_doc_example_runs_and_cuts_what_it_drew():
    text = (pathlib.Path(ROOT) / "docs" / "custom_ops.md").read_text()
    code = next(block for block in re.findall(r"```python\n(.*?)```", text, re.S)
                if "class Cutout" in block)
    images = torch.randint(1, 256, (24, 12, 10, 3), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(1))
    labels = torch.arange(24)
    namespace = {"images": images, "labels": labels}
    exec(compile(code.replace("256,", "8,").replace("Cutout(16,", "Cutout(4,"), "doc", "exec"),
         namespace)
    loader = namespace["loader"]
    with loader:
        got = list(loader)
        order = loader.epoch_indices(0)
    for b, batch in enumerate(got):
        idx = order[8 * b:8 * b + 8]
        g = BatchPosition(0, b, 0).generator(0)
        top = torch.randint(0, 12 - 4 + 1, (len(idx),), generator=g)
        left = torch.randint(0, 10 - 4 + 1, (len(idx),), generator=g)
        expected = images[idx].clone().numpy()
        for k in range(len(idx)):  # plain loops: the square each sample drew, zeroed
            for r in range(12):
                for c in range(10):
                    if top[k] <= r < top[k] + 4 and left[k] <= c < left[k] + 4:
                        expected[k, r, c, :] = 0
        assert np.array_equal(batch["image"].numpy(), expected)
        assert torch.equal(batch["label"], labels[idx])


def test_resume_cursor_rules():
    c = ResumeCursor()
    assert c.position() == (0, 0, None)
    assert c.start() == (0, 0) and c.position() == (0, 0, None)
    c.consumed(0, 1, "s1")
    assert c.position(length=3) == (0, 1, "s1")
    c.consumed(0, 3, "s3")
    assert c.position(length=3) == (1, 0, "s3")  # the whole epoch consumed: the next one
    c.ended(0)
    assert c.position(length=3) == (1, 0, "s3")
    assert c.start(source_state=lambda: "lazy") == (1, 0)
    assert c.position() == (1, 0, "lazy")
    c.ended(0)  # an older epoch's end does not move a newer epoch's position
    assert c.position() == (1, 0, "lazy")
    c.load(4, 2, "loaded")
    assert c.position(current_source_state=lambda: "now") == (4, 2, "loaded")
    c.set_epoch(4)
    assert c.start() == (4, 2)  # the loaded epoch keeps its resume index
    c.load(4, 2)
    c.set_epoch(6)
    assert c.start() == (6, 0) and c.position(current_source_state=lambda: "now") == (6, 0, "now")
