"""The harness on the user's loader (python -m prefetch.bench --loader ...), its verdict, and the
fractions Prefetcher.stats() derives for it."""
import json
import os
import subprocess
import sys
import time

import pytest
import torch

import prefetch
from prefetch.bench import verdict as V
from prefetch.bench import measure_loader
from prefetch.bench.loader import is_step_factory
from prefetch.bench.target import TargetError, resolve
from tests import bench_loaders

from ..helpers import ROOT

QUICK = ["--seconds", "0.3", "--rounds", "2", "--warmup", "1", "--batches", "40"]


# --- stats() fractions --------------------------------------------------------------------


def test_stats_fractions_are_the_counters_arithmetic():
    def source():
        for i in range(6):
            time.sleep(0.01)
            yield torch.full((64,), i)

    with prefetch.Prefetcher(source(), device="cpu") as pf:
        for _ in pf:
            time.sleep(0.005)
        s = pf.stats()
    assert s["wait_fraction"] == pytest.approx(s["wait_s"] / s["consumer_s"])
    assert 0 < s["wait_fraction"] <= 1 and s["wait_s"] <= s["consumer_s"]
    # The consumer's wall time covers its 6 steps of 5 ms and the source's 6 x 10 ms.
    assert s["consumer_s"] >= 0.06
    p = s["produce_s"]
    assert s["source_share"] == pytest.approx(s["source_s"] / p)
    assert s["collate_share"] == pytest.approx(s["collate_s"] / p)
    assert s["blocked_share"] == pytest.approx(s["producer_blocked_s"] / p)
    assert s["transform_share"] == pytest.approx(s["transform_s"] / p)
    rest = p - s["source_s"] - s["collate_s"] - s["producer_blocked_s"] - s["transform_s"]
    assert s["handoff_share"] == pytest.approx(max(0.0, rest) / p)
    assert sum(s[k] for k in ("source_share", "collate_share", "blocked_share", "transform_share",
                              "handoff_share")) == pytest.approx(1.0)
    assert s["source_share"] > 0.5  # the sleeping source is the producer's time


def test_wait_fraction_separates_a_slow_consumer_from_a_slow_source():
    with prefetch.Prefetcher([torch.ones(8)] * 8, device="cpu") as pf:
        for _ in pf:
            time.sleep(0.02)  # the consumer is the slower side
        slow_consumer = pf.stats()
    assert slow_consumer["wait_fraction"] < 0.2
    assert slow_consumer["blocked_share"] > 0.5  # the producer waited for free slots

    with prefetch.Prefetcher(bench_loaders.Batches(n=8, delay=0.02), device="cpu") as pf:
        for _ in pf:
            pass
        slow_source = pf.stats()
    assert slow_source["wait_fraction"] > 0.8


def test_stats_fractions_before_any_batch_are_zero():
    with prefetch.Prefetcher([], device="cpu") as pf:
        s = pf.stats()
    assert s["wait_fraction"] == 0.0 and s["source_share"] == 0.0 and s["handoff_share"] == 0.0


# --- the verdict's formatting (its rules: test_bench_loader_verdict.py) -----------------


def test_rate_and_percent_formatting():
    assert V.rate(1234.4) == "1,234" and V.rate(45.61) == "45.6" and V.rate(0.1234) == "0.123"
    assert V.percent(0.634) == "63%" and V.percent(0.004) == "0.4%" and V.percent(0) == "0%"


# --- the Python API -----------------------------------------------------------------------

API_QUICK = dict(seconds=0.3, rounds=2, warmup=1, batches=40, device="cpu")


def test_api_slow_loader_is_input_bound():
    report = measure_loader(bench_loaders.slow_loader, bench_loaders.fast_step, **API_QUICK)
    assert report.verdict.kind == "input-bound", report.verdict.line
    f = report.figures
    assert f["plain_step_wait_fraction"].median > 0.8
    assert f["loader_bps"].low <= f["loader_bps"].median <= f["loader_bps"].high
    assert f["step_bps"].median > 10 * f["loader_bps"].median
    assert report.stages["source_share"] > 0.5
    assert any("collate_fn" in n for n in report.notes)  # the DataLoader caveat


def test_api_slow_step_is_compute_bound():
    report = measure_loader(bench_loaders.fast_loader, bench_loaders.slow_step, **API_QUICK)
    assert report.verdict.kind == "compute-bound", report.verdict.line
    assert report.figures["step_bps"].median < 80  # 15 ms a step
    assert report.stages["wait_fraction"] < 0.2


def test_api_without_a_step_measures_the_loader():
    report = measure_loader(bench_loaders.fast_loader, None, **API_QUICK)
    assert report.verdict.kind == "loader-only"
    assert set(report.figures) == {"loader_bps", "prefetch_bps", "prefetch_vs_loader"}
    assert json.loads(json.dumps(report.as_dict()))["verdict"] == "loader-only"


@pytest.mark.parametrize("make, message", [
    (bench_loaders.returns_int, "returned a int, which is not iterable"),
    (bench_loaders.returns_iterator, "returned an iterator"),
    (bench_loaders.short_loader, "yielded no batch after 2 warm-up batches"),
])
def test_api_refuses_what_it_cannot_measure(make, message):
    with pytest.raises(TargetError, match=message):
        measure_loader(make, None, **dict(API_QUICK, warmup=2))


def test_api_refuses_a_step_that_is_not_callable():
    with pytest.raises(TargetError, match="step must be a callable"):
        measure_loader(bench_loaders.fast_loader, 3, **API_QUICK)


@pytest.mark.parametrize("spec, message", [
    ("tests.bench_loaders", "expected module:function"),
    ("a:b:c", "expected module:function"),
    (":fast_loader", "empty module"),
    ("tests.bench_loaders:", "empty function"),
    ("no_such_module_xyz:f", "no module named 'no_such_module_xyz'"),
    ("tests.bench_loaders:missing", "has no attribute 'missing'"),
    ("tests.bench_loaders:NOT_CALLABLE", "is a int, not a function"),
    ("tests/bench_loaders.py:fast_loader", "name the module, not its file: tests.bench_loaders:fast_loader"),
])
def test_resolve_names_what_was_wrong(spec, message):
    with pytest.raises(TargetError, match=message):
        resolve(spec)


def test_resolve_finds_the_function_and_step_factories_are_told_apart():
    assert resolve("tests.bench_loaders:fast_loader") is bench_loaders.fast_loader
    assert is_step_factory(bench_loaders.make_slow_step)
    assert not is_step_factory(bench_loaders.slow_step)


# --- the command line ---------------------------------------------------------------------


def bench(*args, cwd=ROOT, env_extra=None):
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "prefetch.bench", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def last_line(text):
    return text.strip().splitlines()[-1]


def test_cli_slow_loader_is_input_bound_in_the_last_line(tmp_path):
    r = bench("--loader", "tests.bench_loaders:slow_loader", "--step",
              "tests.bench_loaders:fast_step", "--device", "cpu", "--out", str(tmp_path), *QUICK)
    assert r.returncode == 0, r.stderr
    assert last_line(r.stdout).startswith("input-bound: "), r.stdout
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["mode"] == "loader" and data["verdict"] == last_line(r.stdout)
    assert data["details"]["loader"]["verdict"] == "input-bound"
    for key in ("loader_bps", "prefetch_bps", "step_bps", "plain_step_bps", "prefetch_step_bps",
                "plain_step_wait_fraction", "prefetch_step_wait_fraction", "prefetch_vs_loader"):
        assert key in data["metrics"], key
    assert data["details"]["loader"]["figures"]["loader_bps"]["min"] <= data["metrics"]["loader_bps"]


def test_cli_slow_step_is_compute_bound_in_the_last_line(tmp_path):
    # The step named by a factory of no arguments (returns the step).
    r = bench("--loader", "tests.bench_loaders:fast_loader", "--step",
              "tests.bench_loaders:make_slow_step", "--device", "cpu", "--out", str(tmp_path), *QUICK)
    assert r.returncode == 0, r.stderr
    assert last_line(r.stdout).startswith("compute-bound: "), r.stdout


def test_cli_finds_a_module_in_the_current_directory(tmp_path):
    (tmp_path / "my_train.py").write_text(
        "import torch\n"
        "def make_loader():\n"
        "    return [torch.ones(4, 4) for _ in range(30)]\n")
    # PYTHONPATH holds the repository only (for prefetch itself): my_train is found in the cwd.
    r = bench("--loader", "my_train:make_loader", "--device", "cpu", "--out", str(tmp_path / "o"),
              *QUICK, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert last_line(r.stdout).startswith("loader-only: ")
    assert (tmp_path / "o" / "results.json").exists()


@pytest.mark.parametrize("args, message", [
    (["--loader", "tests.bench_loaders"], "expected module:function"),
    (["--loader", "no_such_module_xyz:f"], "no module named 'no_such_module_xyz'"),
    (["--loader", "tests.bench_loaders:missing"], "has no attribute 'missing'"),
    (["--loader", "tests.bench_loaders:NOT_CALLABLE"], "not a function"),
    (["--loader", "tests.bench_loaders:returns_int"], "which is not iterable"),
    (["--loader", "tests.bench_loaders:raises"], "raised RuntimeError: no data here"),
    (["--loader", "tests.bench_loaders:fast_loader", "--step", "tests.bench_loaders:nope"],
     "--step 'tests.bench_loaders:nope': module 'tests.bench_loaders'"),
])
def test_cli_bad_module_function_is_one_clear_line(args, message, tmp_path):
    r = bench(*args, "--device", "cpu", "--out", str(tmp_path), *QUICK)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "results.json").exists()


def test_cli_step_needs_a_loader():
    r = bench("--step", "tests.bench_loaders:fast_step")
    assert r.returncode == 2 and "--step needs --loader" in r.stderr


def test_cli_with_a_transform(tmp_path):
    r = bench("--loader", "tests.bench_loaders:image_loader", "--step",
              "tests.bench_loaders:fast_step", "--transform", "tests.bench_loaders:make_transform",
              "--device", "cpu", "--out", str(tmp_path), *QUICK)
    assert r.returncode == 0, r.stderr
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["config"]["transform"] == "FusedAugment"
    stages = data["details"]["loader"]["stages"]
    assert stages["transform_ms"] > 0 and stages["rates"]["transform"] > 0
    assert any(n.startswith("the transform runs only in the Prefetcher")
               for n in data["details"]["loader"]["notes"])
    assert last_line(r.stdout).split(":")[0] in set(V.KINDS) - {"loader-only"}


# --- the bench's readable output ----------------------------------------------------------------

from prefetch.bench import e2e as E2E  # noqa: E402
from prefetch.bench import summary as S  # noqa: E402
from prefetch.bench import text as T  # noqa: E402


def test_summary_verdict_counts_comparisons_and_says_why_one_trails():
    line = S.verdict({"collate_vs_default_collate": 13.2, "ops_vs_torch_chain": 96.9,
                      "e2e_vs_baseline": 1.89, "e2e_heavy_vs_baseline": 0.94,
                      "prefetch_vs_usual_b64": 4.6, "prefetch_vs_usual_b256": 6.2,
                      "collate_gbps": 20.0}, "cpu", 2)
    assert line.startswith("verdict: prefetch was faster than the usual PyTorch path in 4 of 5 "
                           "comparisons (ratios 0.94x to 96.9x, median 6.20x)")
    assert "training loop (ResNet-50) vs the usual DataLoader pipeline 0.94x (on a CPU the model " \
           "or consumer and the pipeline share the same 2 cores)" in line
    assert "batch 256" in S.comparisons({"prefetch_vs_usual_b64": 4.6, "prefetch_vs_usual_b256": 6.2})[0][1]
    assert S.verdict({}).startswith("verdict: no comparison")
    assert "see its section's table" in S.verdict({"ops_vs_torch_chain": 0.5}, "cuda", 8)


def test_e2e_table_says_why_prefetch_is_slower_and_that_cached_is_not_a_bound():
    def row(ips, wait):
        return {"img_per_s": ips, "step_s": 64 / ips, "wait_fraction": wait,
                "step_s_median": 64 / ips, "step_s_range": [0.9 * 64 / ips, 1.1 * 64 / ips]}
    result = {"config": {"workers": 2, "shapes": {"heavy_cnn": {"batch_size": 64, "image_size": 112}}},
              "results": {"heavy_cnn": {"baseline": row(64, 0.01), "prefetch": row(60, 0.003),
                                        "ceiling": row(58, 0.0)}}}
    out = E2E.table(result, "cpu")
    assert "heavy_cnn: prefetch / baseline 0.94: on a CPU the model and the input pipeline " \
           "share the same" in out
    assert "baseline and prefetch faster than the cached batches: those are not a bound" in out
    assert "ceiling" not in out and "cached" in out
    assert E2E.why_slower("m", {"baseline": row(64, 0.01), "prefetch": row(70, 0.0)}, "cpu") is None
    assert "compute bounds both" in E2E.why_slower(
        "m", {"baseline": row(64, 0.01), "prefetch": row(60, 0.0)}, "cuda")


def test_text_columns_and_spread():
    lines = T.columns(["a", "bb"], [["xyz", "1"], ["q", "22222"]])
    assert lines == ["  a   |    bb", "  xyz |     1", "  q   | 22222"]
    assert T.spread(2.5, 1.0, 10.0, "%.1f") == "2.5 (1.0–10.0)"


def test_bench_closes_with_the_verdict_and_names_its_ratios(tmp_path):
    r = bench("--quick", "--allow-dirty", "--sections", "collate,ops", "--batch-size", "8",
              "--image-size", "32", "--device", "cpu", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert last_line(out).startswith("verdict: prefetch was faster than the usual PyTorch path in ")
    assert "plain copy, 1 thread" in out and "engine / plain copy" in out
    assert "whole epochs" in out  # pipeline_gbps, which the h2d skip message points to
    assert "limit" not in out
    assert "fused / torch chain" in out and "copy of as many bytes" in out
    data = json.loads((tmp_path / "results.json").read_text())
    m = data["metrics"]
    assert m["collate_vs_plain_copy"] == m["collate_fraction_of_copy"] > 0  # old key kept
    assert m["pipeline_gbps"] > 0
    assert data["verdict"] == last_line(out)
    row = data["details"]["collate"][0]
    lo, hi = row["collate_gbps_range"]
    assert lo <= row["collate_gbps"] <= hi


def test_api_a_samples_loader_feeds_the_step_through_the_prefetcher_only():
    report = measure_loader(bench_loaders.samples_loader, bench_loaders.samples_step, **API_QUICK)
    assert "plain_step_bps" not in report.figures
    # The verdict reads the Prefetcher's loop (which kind it reads is timing's: not asserted).
    assert report.pipeline.loop == "prefetch" and report.verdict.kind != "loader-only"
    assert "the loader through prefetch.Prefetcher" in report.verdict.line or \
        report.verdict.kind == "inconclusive", report.verdict.line
    assert any("prefetch.collate.samples" in n for n in report.notes)
