"""The h2d section's parts that run without a GPU: the ring's stage counters, the copy timeline's
summary (against hand-computed intervals), and the ring on the host backend's model of a copy
engine (what it records and that its settings are interleaved). No speed is asserted: the
model's copy times are checked against the bound the model guarantees (a copy set to take t
seconds takes at least t)."""
import json

import pytest

from prefetch.bench import h2d
from prefetch.bench.__main__ import main


def test_ring_stages_time_the_slot_wait_apart_from_the_collation():
    before = {"bytes_collated": 1e9, "collate_s": 1.0, "slot_wait_s": 0.2, "allocate_s": 0.01,
              "produce_s": 2.0, "producer_blocked_s": 0.5, "source_s": 0.1, "transform_s": 0.0,
              "batches": 10, "wait_s": 1.0, "consumer_s": 2.0}
    after = dict(before, bytes_collated=5e9, collate_s=1.1, slot_wait_s=0.3, allocate_s=0.03,
                 produce_s=2.4, producer_blocked_s=0.6, source_s=0.14, batches=30, wait_s=1.3,
                 consumer_s=2.4)
    st = h2d.ring_stages(before, after)
    assert st["batches"] == 20
    assert st["collate_gbps"] == pytest.approx(40.0)            # 4 GB in 0.1 s
    assert st["collate_ms_per_batch"] == pytest.approx(5.0)     # 0.1 s over 20
    assert st["slot_wait_ms_per_batch"] == pytest.approx(5.0)
    assert st["allocate_ms_per_batch"] == pytest.approx(1.0)
    # Of the producer's 0.4 s: source 0.04, collate 0.1, slot wait 0.1, blocked 0.1, the rest 0.06.
    assert st["slot_wait_share"] == pytest.approx(0.25)
    assert st["collate_share"] == pytest.approx(0.25) and st["blocked_share"] == pytest.approx(0.25)
    assert st["handoff_share"] == pytest.approx(0.15)


def _record(batch, slot, wait, collate, copy, nbytes=1_000_000):
    return {"batch": batch, "slot": slot, "bytes": nbytes,
            "wait_start_s": wait, "collate_start_s": collate[0], "collate_end_s": collate[1],
            "enqueued_s": collate[1], "copy_start_s": copy[0], "copy_end_s": copy[1]}


def test_the_copy_timeline_summary_reads_the_intervals():
    # Two slots; copies of 2 ms with 1 ms gaps; each batch's collation 1.5 ms, the next one's
    # beginning 1 ms into the copy before it (so 1 ms of each 2 ms copy has a collation beside it,
    # but the last copy's, which has none after it).
    ms = 1e-3
    records = [
        _record(0, 0, 0.0, (0.0, 1.5 * ms), (1.5 * ms, 3.5 * ms)),
        _record(1, 1, 2.5 * ms, (2.5 * ms, 4.0 * ms), (4.5 * ms, 6.5 * ms)),
        _record(2, 0, 5.5 * ms, (5.5 * ms, 7.0 * ms), (7.5 * ms, 9.5 * ms)),
    ]
    tl = h2d.copy_timeline(records)
    assert tl["columns"][0] == "batch" and len(tl["columns"]) == 6
    assert tl["slots"] == {"0": [[0, 0.0, 0.0, 1.5, 1.5, 3.5], [2, 5.5, 5.5, 7.0, 7.5, 9.5]],
                           "1": [[1, 2.5, 2.5, 4.0, 4.5, 6.5]]}
    assert tl["batches"] == 3
    assert tl["copy_ms"] == pytest.approx(2.0)
    assert tl["copy_gbps"] == pytest.approx(0.5)                # 1 MB in 2 ms
    assert tl["dma_busy_fraction"] == pytest.approx(6.0 / 8.0)  # 6 ms of copies in 8 ms
    assert tl["gap_ms"] == pytest.approx(1.0)
    assert tl["copy_overlapped_by_collation"] == pytest.approx(2.0 / 6.0)
    assert tl["per_batch_ms"] == pytest.approx(3.0)              # ends at 3.5, 6.5, 9.5
    assert tl["wait_ms"] == pytest.approx(0.0) and tl["collate_ms"] == pytest.approx(1.5)
    assert h2d.copy_timeline([]) is None


def test_the_model_interleaves_its_settings_and_records_what_it_set():
    settings = {"copy_slower": 2.0, "collation_slower": 0.5, "balanced": 1.0}
    m = h2d.model(1, side=256, count=8, repeats=3, settings=settings, skip=2)
    names = list(settings)
    assert m["order"] == names * 3  # 3 timed rounds (after a warm-up one), A, B, C each round
    assert m["repeats"] == 3 and m["batches"] == 8 and m["threads"] == 1
    work = m["calibration_producer_work_ms"]
    assert work > 0
    for name, copy_over_work in settings.items():
        row = m["settings"][name]
        assert row["epochs"] == 3 and row["copy_over_work"] == copy_over_work
        # The copy was set to take copy_over_work x the calibrated work: the model's lower bound.
        assert row["copy_ms_range"][0] >= 0.999 * copy_over_work * work, name
        for key in ("per_batch_ms", "per_batch_mean_ms", "producer_work_ms", "collate_ms",
                    "first_batch_ms", "per_batch_vs_slower", "per_batch_vs_sum"):
            low, high = row[key + "_range"]
            assert 0 < low <= row[key] <= high, (name, key)
        # A ratio is its epoch's per-batch time over the larger (or the sum) of that epoch's stages.
        assert row["per_batch_vs_sum"] < row["per_batch_vs_slower"]
    with pytest.raises(ValueError, match="count >= skip"):
        h2d.model(1, side=64, count=4, skip=2)


def test_the_section_on_a_cpu_runs_the_model_and_says_what_it_skipped(tmp_path):
    rc = main(["--quick", "--allow-dirty", "--sections", "h2d", "--workers", "2",
               "--out", str(tmp_path)])
    assert rc == 0
    result = json.loads((tmp_path / "results.json").read_text())
    assert "no CUDA device" in result["skipped"]["h2d:copies"]
    assert "h2d_gbps" not in result["metrics"]  # absent, never a placeholder
    model = result["details"]["h2d"]["ring_model"]
    assert set(model["settings"]) == set(h2d.MODEL_SETTINGS) and model["threads"] == 2
    for name, row in model["settings"].items():
        assert result["metrics"]["ring_model_%s_vs_slower" % name] == row["per_batch_vs_slower"]
        assert row["epochs"] == 5  # five interleaved rounds after the warm-up, even --quick
    assert result["resources"]["h2d"] == {"ring model": {"workers": 0, "threads": 2}}


def test_epoch_start_collation_splits_an_epochs_first_batches_from_the_rest():
    ms = 1e-3
    # collations of 4, 3, 2 ms (the epoch's start), then 1, 1.5, 1 ms
    lengths = [4, 3, 2, 1, 1.5, 1]
    records, t = [], 0.0
    for i, n in enumerate(lengths):
        records.append(_record(i, i % 3, t, (t, t + n * ms), (t + n * ms, t + (n + 1) * ms)))
        t += (n + 1) * ms
    start, steady = h2d.epoch_start_collation(records)
    assert start == pytest.approx(3.0) and steady == pytest.approx(1.0)
    assert h2d.epoch_start_collation(records[:2]) == (pytest.approx(3.5), None)
    assert h2d.epoch_start_collation([]) == (None, None)


def test_the_rings_rounds_are_grouped_by_the_call_before_each():
    ms = 1e-3

    def epoch(first_ms):  # an epoch whose first 3 batches collate in first_ms, the rest in 1 ms
        out, t = [], 0.0
        for i, n in enumerate([first_ms] * 3 + [1.0] * 5):
            out.append(_record(i, i % 3, t, (t, t + n * ms), (t + n * ms, t + (n + 1) * ms)))
            t += (n + 1) * ms
        return out

    previous = ["pin", "ring", "pin", "ring", "pin"]
    seconds = [0.02, 0.01, 0.04, 0.01, 0.02]           # 1 GB a round: 50, 100, 25, 100, 50 GB/s
    rounds = [epoch(3.0), epoch(1.0), epoch(2.0), epoch(1.2), epoch(3.0)]
    got = h2d.by_previous_call(previous, seconds, rounds, 1e9)
    assert set(got) == {"pin", "ring"}
    assert got["pin"]["rounds"] == 3 and got["ring"]["rounds"] == 2
    assert got["pin"]["gbps"] == pytest.approx(50.0) and got["ring"]["gbps"] == pytest.approx(100.0)
    assert got["pin"]["epoch_start_collate_ms"] == pytest.approx(3.0)
    assert got["ring"]["epoch_start_collate_ms"] == pytest.approx(1.1)
    assert got["pin"]["steady_collate_ms"] == pytest.approx(1.0)
    # No timelines (a round without copy records): the speeds alone.
    bare = h2d.by_previous_call(["ring", None], [0.01, 0.02], [[], []], 1e9)
    assert bare == {"ring": {"rounds": 1, "gbps": pytest.approx(100.0)},
                    "None": {"rounds": 1, "gbps": pytest.approx(50.0)}}
