"""Reference comparisons shared by the tests: structure, types, dtypes and exact values."""
import collections.abc

import numpy as np
import torch


def assert_same(got, expected, device, path="batch"):
    """`got` (from the Prefetcher) equals `expected` (plain iteration) exactly, with every tensor
    on `device` and every ndarray turned into the equal tensor."""
    if isinstance(expected, np.ndarray):
        expected = torch.from_numpy(expected)
    if isinstance(expected, torch.Tensor):
        assert isinstance(got, torch.Tensor), "%s: %r is not a tensor" % (path, type(got))
        assert got.device == device, "%s on %s, expected %s" % (path, got.device, device)
        assert got.dtype == expected.dtype, "%s: dtype %s != %s" % (path, got.dtype, expected.dtype)
        assert got.shape == expected.shape, "%s: shape %s != %s" % (path, got.shape, expected.shape)
        assert torch.equal(got.cpu(), expected.cpu()), "%s: values differ" % path
        return
    assert type(got) is type(expected), "%s: type %s != %s" % (path, type(got), type(expected))
    if isinstance(expected, collections.abc.Mapping):
        assert list(got.keys()) == list(expected.keys()), path
        for k in expected:
            assert_same(got[k], expected[k], device, "%s[%r]" % (path, k))
    elif isinstance(expected, (list, tuple)):
        assert len(got) == len(expected), path
        for i, (g, e) in enumerate(zip(got, expected)):
            assert_same(g, e, device, "%s[%d]" % (path, i))
    else:
        assert got == expected, "%s: %r != %r" % (path, got, expected)


def snapshot(batch):
    """A deep CPU copy, to compare later against what a held batch still contains."""
    if isinstance(batch, torch.Tensor):
        return batch.detach().cpu().clone()
    if isinstance(batch, collections.abc.Mapping):
        return {k: snapshot(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return [snapshot(v) for v in batch]
    return batch


def assert_snapshot_equal(batch, snap):
    if isinstance(batch, torch.Tensor):
        assert torch.equal(batch.cpu(), snap)
    elif isinstance(batch, collections.abc.Mapping):
        for k in batch:
            assert_snapshot_equal(batch[k], snap[k])
    elif isinstance(batch, (list, tuple)):
        for b, s in zip(batch, snap):
            assert_snapshot_equal(b, s)


class StatefulSource:
    """The smallest stateful source: batch i is ``make_batch(i)``; its state is the next batch.
    As StatefulDataLoader, a state saved at the end of an epoch resumes with a new one."""

    def __init__(self, make_batch, batches=12):
        self.make_batch, self.batches, self.pos, self.start = make_batch, batches, 0, 0

    def __len__(self):
        return self.batches

    def __iter__(self):
        self.pos, self.start = (self.start if self.start < self.batches else 0), 0
        while self.pos < self.batches:
            i = self.pos
            self.pos += 1
            yield self.make_batch(i)

    def state_dict(self):
        return {"pos": self.pos}

    def load_state_dict(self, state):
        self.start = state["pos"]


def engine_of(loader):
    """The ``_C.Engine`` under a Prefetcher or a host-resident ArrayLoader (its Pipeline's), for
    tests that inject delays or read the ring's capacities (``_C._testing``'s functions of it)."""
    return loader._pipeline.engine
