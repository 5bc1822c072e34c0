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
