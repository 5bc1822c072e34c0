"""Prefetcher.state_dict()/load_state_dict() over stateful sources: a run stopped after k batches
and resumed yields exactly the batches it had not consumed, with the same transform draws —
whatever the Prefetcher had prefetched beyond k."""
import pytest
import torch

from prefetch import FusedAugment, Prefetcher

from ..helpers import StatefulSource

MEAN, STD = [0.5, 0.4, 0.3], [0.2, 0.25, 0.3]


def _images_and_index(i):
    g = torch.Generator().manual_seed(i)
    return torch.randint(0, 256, (4, 9, 9, 3), dtype=torch.uint8, generator=g), torch.tensor([i] * 4)


def StatefulRange(batches=12):
    """Batch i is (images_i, i)."""
    return StatefulSource(_images_and_index, batches)


def run(prefetcher, epochs):
    out = []
    for _ in range(epochs):
        out.extend(prefetcher)
    return out


def assert_runs_equal(a, b):
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        assert torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]), i


def aug():
    return FusedAugment(MEAN, STD, crop=7, padding=1, hflip=0.5, seed=3)


@pytest.mark.parametrize("k", [0, 1, 2, 5, 11, 12])
def test_resume_with_a_stateful_source(k):
    full = run(Prefetcher(StatefulRange(), depth=4, transform=aug()), 1)
    first = Prefetcher(StatefulRange(), depth=4, transform=aug())
    it = iter(first)
    head = [next(it) for _ in range(k)]
    state = first.state_dict()
    assert state["batches_consumed"] == (k if k < 12 else 0)
    first.close()
    second = Prefetcher(StatefulRange(), depth=4, transform=aug())
    second.load_state_dict(state)
    rest = run(second, 1) if k < 12 else []
    assert second.state_dict()["epoch"] == 1
    # The epoch after: the same batches with the next epoch's draws.
    nxt = run(second, 1)
    second.close()
    assert_runs_equal(head + rest, full)
    assert [int(b[1][0]) for b in nxt] == list(range(12))
    with Prefetcher(StatefulRange(), depth=4, transform=aug()) as ref:
        ref.set_epoch(1)
        assert_runs_equal(nxt, run(ref, 1))


def test_state_before_any_batch_and_without_a_stateful_source():
    p = Prefetcher(StatefulRange())
    assert p.state_dict() == {"epoch": 0, "batches_consumed": 0, "source": {"pos": 0}}
    p.close()
    with pytest.raises(TypeError, match="needs a source with state_dict"):
        Prefetcher([torch.zeros(2)]).state_dict()
    with pytest.raises(KeyError, match="lacks"):
        Prefetcher(StatefulRange()).load_state_dict({"epoch": 0})


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_with_torchdata_stateful_dataloader(num_workers):
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    data = torch.randint(0, 256, (60, 8, 8, 3), dtype=torch.uint8)
    dataset = torch.utils.data.TensorDataset(data, torch.arange(60))

    def make():
        loader = sdl.StatefulDataLoader(dataset, batch_size=5, shuffle=True, num_workers=num_workers,
                                        generator=torch.Generator().manual_seed(0))
        return Prefetcher(loader, depth=3, transform=aug())

    with make() as p:
        full = run(p, 1)
    for k in (1, 3, 7):
        with make() as first:
            it = iter(first)
            head = [next(it) for _ in range(k)]
            state = first.state_dict()
        with make() as second:
            second.load_state_dict(state)
            rest = run(second, 1)
        assert_runs_equal(head + rest, full)
