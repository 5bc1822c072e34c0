"""python -m prefetch.bench: the results.json contract (no timing is asserted)."""
import json
import numbers

import torch

from prefetch.bench.__main__ import main


def test_results_json_has_numbers_and_says_what_it_skipped(tmp_path):
    rc = main(["--quick", "--sections", "collate,h2d,ops", "--batch-size", "8",
               "--image-size", "32", "--out", str(tmp_path)])
    assert rc == 0
    result = json.loads((tmp_path / "results.json").read_text())
    for key in ("device", "torch", "date", "config", "metrics"):
        assert key in result, key
    assert result["torch"] == torch.__version__
    metrics = result["metrics"]
    for key in ("collate_gbps", "copy_gbps", "collate_vs_default_collate", "ops_gbps",
                "ops_fraction_of_copy", "ops_vs_torch_chain"):
        assert isinstance(metrics[key], numbers.Number) and metrics[key] > 0, key
    if not torch.cuda.is_available():
        assert "h2d_gbps" not in metrics  # absent, never a placeholder
        assert "no CUDA device" in result["skipped"]["h2d"]
    assert result["config"]["batch_sizes"] == [8] and result["config"]["image_size"] == 32


def test_unknown_section_is_refused(tmp_path, capsys):
    import pytest

    with pytest.raises(SystemExit, match="unknown section"):
        main(["--sections", "nope", "--out", str(tmp_path)])


def test_arrays_section_reports_its_metrics(tmp_path):
    rc = main(["--quick", "--sections", "arrays", "--out", str(tmp_path)])
    assert rc == 0
    result = json.loads((tmp_path / "results.json").read_text())
    metrics = result["metrics"]
    for key in ("arrays_vs_dataloader", "device_batches_per_s", "arrays_device_fraction_of_copy"):
        assert isinstance(metrics[key], numbers.Number) and metrics[key] > 0, key
    row = result["details"]["arrays"]
    for key in ("host_img_per_s", "dataloader_0w_img_per_s", "dataloader_2w_img_per_s"):
        assert row[key] > 0, key
    # The ratio is what it says: the ArrayLoader over the best DataLoader of the same run.
    best = max(row["dataloader_0w_img_per_s"], row["dataloader_2w_img_per_s"])
    assert abs(metrics["arrays_vs_dataloader"] - row["host_img_per_s"] / best) < 1e-9


def test_every_section_is_registered_once_and_listed_in_the_help(capsys):
    import pytest

    from prefetch.bench.__main__ import SECTIONS

    names = [s.name for s in SECTIONS]
    assert names == ["collate", "h2d", "ops", "arrays", "e2e"]  # the default --sections order
    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = capsys.readouterr().out
    for s in SECTIONS:
        assert s.description and callable(s.run)
        assert s.description in help_text


def test_timing_samples_warm_up_then_time_each_repetition():
    from prefetch.bench import timing

    calls = []
    times = timing.samples(lambda: calls.append("fn"), 3, warmup=2)
    assert calls == ["fn"] * 5 and len(times) == 3 and all(t >= 0 for t in times)

    # With setup: setup's result is fn's argument, one fresh setup per timed repetition.
    made, seen = [], []

    def setup():
        made.append(len(made))
        return made[-1]

    times = timing.samples(seen.append, 2, warmup=1, setup=setup)
    assert made == [0, 1, 2] and seen == [0, 1, 2] and len(times) == 2

    calls.clear()
    assert len(timing.kernel_samples(lambda: calls.append(1), 4, "cpu", warmup=1)) == 4
    assert len(calls) == 5  # on the CPU one call per sample, whatever `inner` says


def test_summary_is_the_median_and_range():
    from prefetch.bench.timing import Summary

    s = Summary.of([3.0, 1.0, 2.0, 10.0])
    assert (s.median, s.low, s.high) == (2.5, 1.0, 10.0)
    assert s.spread == (10.0 - 1.0) / 2.5
    assert s.format("%.1f") == "2.5 (1.0–10.0)"
