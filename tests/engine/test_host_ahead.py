"""The host stage one batch ahead (``prefetch._engine.host_ahead``): a transform's ``host_apply``
for batch k+1 runs on the producer's own host-stage thread while batch k is collated, transformed
and published; everything a consumer sees stays as with one thread.

- the overlap itself: batch k's ``apply`` sees batch k+1's ``host_apply`` start (it would wait
  forever without it; bounded here);
- order and content: every batch, in order, equal to the transform applied by plain iteration;
- an error in the source or the host stage of batch k arrives after batches 0..k-1, naming batch
  k and the step, and the next epoch is whole;
- a ``break`` (or close) joins the host-stage thread: none is left behind;
- ``stats()``'s shares of the producer's time still sum to 1;
- resume after a consumed batch gives the rest of the epoch as an unbroken run does.
"""
import threading

import pytest
import torch

import prefetch
from prefetch.transforms import Transform


def _batches(n=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, 256, (4, 5, 5, 3), dtype=torch.uint8, generator=g),
             torch.arange(4) + 10 * k) for k in range(n)]


def _reference(batch):
    """What _Summing makes of a batch, computed directly."""
    images, labels = batch
    return images, labels + images.reshape(4, -1).sum(1)


class _Summing(Transform):
    """A host stage that adds each sample's pixel sum to its label; ``fail_at`` (epoch, index)
    raises there."""

    def __init__(self, fail_at=None):
        self.fail_at = fail_at

    def host_apply(self, batch, position, device):
        if (position.epoch, position.index) == self.fail_at:
            raise ValueError("host stage refused batch %d" % position.index)
        return _reference(batch)

    def apply(self, batch, position):
        return batch


def _host_threads():
    return [t for t in threading.enumerate() if t.name == "prefetch-host-stage"]


def test_batch_k_applys_while_batch_k_plus_1s_host_stage_runs():
    started = {}  # index -> an Event set when host_apply of that batch begins
    lock = threading.Lock()
    overlapped = []

    def event(index):
        with lock:
            return started.setdefault(index, threading.Event())

    class Overlap(_Summing):
        def host_apply(self, batch, position, device):
            event(position.index).set()
            return super().host_apply(batch, position, device)

        def apply(self, batch, position):
            # One thread would run host_apply(k + 1) only after this returns: the wait would
            # time out. With the host stage ahead it has begun already, or begins meanwhile.
            if position.index + 1 < len(batches):  # (the last has no successor)
                overlapped.append(event(position.index + 1).wait(timeout=5))
            return batch

    batches = _batches()
    with prefetch.Prefetcher(batches, device="cpu", transform=Overlap()) as p:
        got = list(p)
    assert len(got) == len(batches)
    assert overlapped == [True] * (len(batches) - 1)


def test_every_batch_arrives_in_order_equal_to_plain_iteration_every_epoch():
    batches = _batches(n=9)
    with prefetch.Prefetcher(batches, device="cpu", transform=_Summing(), depth=3) as p:
        for epoch in range(3):
            got = list(p)
            assert len(got) == len(batches)
            for batch, (images, labels) in zip(batches, got):
                want_images, want_labels = _reference(batch)
                assert torch.equal(images, want_images) and torch.equal(labels, want_labels)


@pytest.mark.parametrize("fail_at", [0, 3, 5])
def test_a_host_stage_error_comes_after_the_batches_before_it_and_the_next_epoch_is_whole(fail_at):
    batches = _batches()
    t = _Summing(fail_at=(0, fail_at))
    with prefetch.Prefetcher(batches, device="cpu", transform=t) as p:
        got = []
        with pytest.raises(ValueError, match="host stage refused batch %d" % fail_at) as info:
            for b in p:
                got.append(b)
        assert len(got) == fail_at  # every batch before it, none after
        for batch, (_, labels) in zip(batches, got):
            assert torch.equal(labels, _reference(batch)[1])
        assert any("in the transform, on batch %d of the epoch" % fail_at in note
                   for note in getattr(info.value, "__notes__", []))
        assert [len(list(p)) for _ in range(2)] == [len(batches)] * 2
    assert not _host_threads()


class _FailingSource:
    """Yields ``batches`` and raises at ``fail_at`` in epoch 0 only."""

    def __init__(self, batches, fail_at):
        self.batches, self.fail_at, self.epoch = batches, fail_at, 0

    def __len__(self):
        return len(self.batches)

    def __iter__(self):
        epoch, self.epoch = self.epoch, self.epoch + 1
        for k, b in enumerate(self.batches):
            if epoch == 0 and k == self.fail_at:
                raise OSError("source failed at batch %d" % k)
            yield b


def test_a_source_error_comes_after_the_batches_before_it_naming_the_fetch():
    batches = _batches()
    with prefetch.Prefetcher(_FailingSource(batches, 4), device="cpu", transform=_Summing()) as p:
        got = []
        with pytest.raises(OSError, match="source failed at batch 4") as info:
            for b in p:
                got.append(b)
        assert len(got) == 4
        assert any("while fetching batch 4 of the epoch" in note
                   for note in getattr(info.value, "__notes__", []))
        assert len(list(p)) == len(batches)
    assert not _host_threads()


def test_a_break_and_close_leave_no_host_stage_thread():
    batches = _batches(n=12)
    p = prefetch.Prefetcher(batches, device="cpu", transform=_Summing())
    for k, _ in enumerate(p):
        if k == 1:
            break
    assert len(list(p)) == len(batches)  # a new epoch after the break is whole
    it = iter(p)
    next(it)
    p.close()
    assert not _host_threads()


def test_the_producers_shares_still_sum_to_one():
    with prefetch.Prefetcher(_batches(), device="cpu", transform=_Summing()) as p:
        for _ in range(2):
            list(p)
        stats = p.stats()
    shares = [stats[k] for k in ("source_share", "collate_share", "slot_wait_share",
                                 "blocked_share", "transform_share", "handoff_share")]
    assert all(0.0 <= s <= 1.0 for s in shares)
    assert sum(shares) == pytest.approx(1.0, abs=1e-6)


def test_resuming_after_a_consumed_batch_gives_the_rest_of_the_epoch():
    from torch.utils.data import DataLoader, TensorDataset

    images = torch.randint(0, 256, (24, 5, 5, 3), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(2))
    dataset = TensorDataset(images, torch.arange(24))

    def loader():
        from torchdata.stateful_dataloader import StatefulDataLoader
        return StatefulDataLoader(dataset, batch_size=4)

    pytest.importorskip("torchdata.stateful_dataloader")
    with prefetch.Prefetcher(loader(), device="cpu", transform=_Summing()) as p:
        whole = list(p)
    with prefetch.Prefetcher(loader(), device="cpu", transform=_Summing()) as p:
        it = iter(p)
        first = [next(it), next(it)]
        state = p.state_dict()
    with prefetch.Prefetcher(loader(), device="cpu", transform=_Summing()) as p:
        p.load_state_dict(state)
        rest = list(p)
    assert len(first) + len(rest) == len(whole)
    for (a_images, a_labels), (b_images, b_labels) in zip(first + rest, whole):
        assert torch.equal(a_images, b_images) and torch.equal(a_labels, b_labels)
