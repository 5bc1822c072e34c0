"""The ring's copy on the host backend's model of a GPU's copy engine (issue 44 item 3), through the
Prefetcher: batches routed through the ring and a copy on the copy stream's thread
(``_C._testing.model_copy_engine``) arrive as the source gave them;
``stats()`` times the wait for a slot apart from the collation; the engine's copy timeline records
each copy after its collation, one at a time. No speed is asserted here but bounds the model
guarantees (a copy of b bytes at r bytes/s takes at least b / r); the ring's time per batch is the
bench's (``prefetch.bench.h2d.model``) and tests/cpp/engine_ring_model_test.cpp's."""
import pytest
import torch

import prefetch
from prefetch import _C

from ..helpers import engine_of


def _batches(n, seed=0):
    """Batches of several leaves: contiguous, strided (a transposed view), stacked samples and
    labels, each a different size."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        side = 64 + 8 * i
        out.append({
            "image": torch.randint(0, 256, (3, side, side), dtype=torch.uint8, generator=g),
            "strided": torch.randint(0, 256, (side, 2 * side), dtype=torch.uint8, generator=g).t(),
            "samples": prefetch.Samples([torch.randn(17, generator=g) for _ in range(5)]),
            "label": torch.tensor(i),
        })
    return out


def _expected(batch):
    return {"image": batch["image"], "strided": batch["strided"],
            "samples": torch.stack(list(batch["samples"])), "label": batch["label"]}


def test_batches_through_the_modelled_copy_engine_arrive_as_the_source_gave_them():
    source = _batches(9)
    with prefetch.Prefetcher(source, device="cpu", depth=2, num_threads=2) as pf:
        engine = engine_of(pf)
        assert _C._testing.slot_capacities(engine) == [0, 0]  # the CPU path skips the ring
        _C._testing.model_copy_engine(engine, 2e9)
        # Copies still queued when the slot comes round again: a missing wait shows as wrong bytes.
        _C._testing.set_debug_delay(engine, 300, 3)
        for epoch in range(2):
            got = list(pf)
            assert len(got) == len(source)
            for batch, want in zip(got, source):
                for key, value in _expected(want).items():
                    assert torch.equal(batch[key], value), (epoch, key)
        assert all(c > 0 for c in _C._testing.slot_capacities(engine)), "the ring was not used"


def test_the_slot_wait_is_timed_apart_from_the_collation():
    nbytes = 1 << 20
    source = [torch.full((nbytes,), i, dtype=torch.uint8) for i in range(3)]
    with prefetch.Prefetcher(source, device="cpu", depth=1, num_threads=1) as pf:
        _C._testing.model_copy_engine(engine_of(pf), 20e6)  # 1 MiB in ~52 ms: the slot stays busy
        for _ in pf:
            pass
        s = pf.stats()
    copy_s = nbytes / 20e6
    # Batches 1 and 2 each waited for the previous copy in the only slot; none of it is collation.
    assert s["slot_wait_s"] >= copy_s
    assert s["collate_s"] < copy_s, "the slot wait was counted as collation"
    assert s["slot_wait_share"] == pytest.approx(s["slot_wait_s"] / s["produce_s"])
    shares = ("source_share", "collate_share", "slot_wait_share", "blocked_share",
              "transform_share", "handoff_share")
    assert sum(s[k] for k in shares) == pytest.approx(1.0)
    assert s["allocate_s"] > 0


def test_the_copy_timeline_records_each_copy_after_its_collation_one_at_a_time():
    nbytes, rate = 300_000, 100e6  # 3 ms a copy
    source = [torch.full((nbytes,), i, dtype=torch.uint8) for i in range(10)]
    with prefetch.Prefetcher(source, device="cpu", depth=3, num_threads=2) as pf:
        engine = engine_of(pf)
        _C._testing.model_copy_engine(engine, rate)
        engine.record_copies(6)
        list(pf)
        timeline = engine.copy_timeline()
        engine.record_copies(0)
        assert engine.copy_timeline() == []
    assert [r["batch"] for r in timeline] == list(range(4, 10))  # the last 6
    previous_end = None
    for r in timeline:
        assert r["slot"] == r["batch"] % 3 and r["bytes"] >= nbytes
        assert r["wait_start_s"] <= r["collate_start_s"] <= r["collate_end_s"] <= r["enqueued_s"]
        assert r["copy_start_s"] >= r["collate_end_s"]  # one clock on the host backend
        assert r["copy_end_s"] - r["copy_start_s"] >= 0.999 * r["bytes"] / rate
        if previous_end is not None:
            assert r["copy_start_s"] >= previous_end
        previous_end = r["copy_end_s"]


def test_the_model_and_the_timeline_refuse_what_is_not_a_setting():
    with prefetch.Prefetcher([torch.zeros(4)], device="cpu") as pf:
        engine = engine_of(pf)
        for rate in (-1.0, float("nan"), float("inf")):
            with pytest.raises(ValueError, match="copy bandwidth"):
                _C._testing.model_copy_engine(engine, rate)
        with pytest.raises(ValueError, match="capacity must be >= 0"):
            engine.record_copies(-1)
