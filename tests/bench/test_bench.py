"""python -m prefetch.bench: the results.json contract, and the rules every comparison keeps
(every pipeline built with the same N, every comparison timed in interleaved rounds) — structure,
never speed: no timing is asserted."""
import inspect
import json
import numbers
import os
import sys

import numpy as np
import pytest
import torch

import prefetch

from prefetch.bench import __main__ as bench_main
from prefetch.bench import timing
from prefetch.bench.__main__ import main
from prefetch.bench.section import Section

N = 3  # not the cores here (2), not the library's default threads, not the old 2 workers
OWN = ("collate", "ops", "arrays", "workers", "recipes")  # the sections this file checks


class Spy:
    """What a run built and how it timed, section by section: every DataLoader's num_workers,
    every Prefetcher's and ArrayLoader's num_threads (as passed, defaults applied), every
    timing.interleaved call (names, repeats, warm-up, the order it timed), and every timing
    sample taken outside an interleaved call."""

    def __init__(self):
        self.section = None
        self.built = {"DataLoader": [], "Prefetcher": [], "ArrayLoader": []}
        self.rounds = []     # (section, names, repeats, warmup, order)
        self.outside = []    # (section, function): a sample outside any interleaved call
        self.depth = 0

    def install(self, mp):
        for cls, arg in ((torch.utils.data.DataLoader, "num_workers"),
                         (prefetch.Prefetcher, "num_threads"), (prefetch.ArrayLoader, "num_threads")):
            self._record_init(mp, cls, arg)
        interleaved, samples, kernel_samples = (timing.interleaved, timing.samples,
                                                timing.kernel_samples)

        def spied_interleaved(calls, repeats, **kw):
            order = []
            self.depth += 1
            try:
                out = interleaved(calls, repeats, **dict(kw, order=order))
            finally:
                self.depth -= 1
            self.rounds.append((self.section, list(calls), repeats, kw.get("warmup", 1), order))
            return out

        def outside(fn, label):
            def spied(*a, **k):
                if self.depth == 0:
                    self.outside.append((self.section, label))
                return fn(*a, **k)
            return spied

        mp.setattr(timing, "interleaved", spied_interleaved)
        mp.setattr(timing, "samples", outside(samples, "samples"))
        mp.setattr(timing, "kernel_samples", outside(kernel_samples, "kernel_samples"))
        for name, section in list(bench_main.BY_NAME.items()):
            mp.setitem(bench_main.BY_NAME, name, Section(section.name, section.description,
                                                         self._tracked(section)))

    def _record_init(self, mp, cls, arg):
        init, sig = cls.__init__, inspect.signature(cls.__init__)
        record = self.built[cls.__name__]

        def spied(obj, *a, **k):
            bound = sig.bind(obj, *a, **k)
            bound.apply_defaults()
            record.append((self.section, bound.arguments[arg]))
            init(obj, *a, **k)
        mp.setattr(cls, "__init__", spied)

    def _tracked(self, section):
        def run(config):
            self.section = section.name
            try:
                return section.run(config)
            finally:
                self.section = None
        return run


@pytest.fixture(scope="module")
def fair_run(tmp_path_factory):
    """One --quick run of this file's sections at N = 3, tiny sizes, with a Spy installed:
    (results.json, spy)."""
    out = tmp_path_factory.mktemp("bench")
    spy = Spy()
    with pytest.MonkeyPatch.context() as mp:
        spy.install(mp)
        rc = main(["--quick", "--allow-dirty", "--sections", ",".join(OWN), "--batch-size", "8",
                   "--image-size", "32", "--device", "cpu", "--workers", str(N), "--out", str(out)])
    assert rc == 0
    return json.loads((out / "results.json").read_text()), spy


def _ran(result):
    return [s for s in OWN if s not in result["skipped"]]


def test_every_pipeline_of_every_section_is_built_with_the_same_n(fair_run):
    result, spy = fair_run
    assert result["workers"] == result["config"]["workers"] == N
    assert result["torch_threads"] == N
    assert {"collate", "ops", "arrays", "workers"} <= set(_ran(result))  # (recipes: JPEG + PIL)
    for section in _ran(result):
        pipelines = result["resources"][section]
        assert len(pipelines) >= 2, section
        for name, r in pipelines.items():
            if "1 thread" in name:  # a baseline single-threaded by nature, and named so
                assert (r["workers"], r["threads"]) == (0, 1), (section, name, r)
            else:
                assert r["workers"] in (0, N) and r["threads"] in (0, N), (section, name, r)
                assert N in (r["workers"], r["threads"]), (section, name, r)
    # Only collate's two references run on one thread, and their names say so.
    single = sorted("%s: %s" % (s, n) for s in _ran(result) for n in result["resources"][s]
                    if "1 thread" in n)
    assert single == ["collate: default_collate, 1 thread (main process)",
                      "collate: plain copy, 1 thread"]
    # What the constructors were given, apart from what the sections recorded: no pipeline
    # fell back to a default (None) or to a count of its own.
    for cls, values in spy.built.items():
        assert values, cls
        for section, value in values:
            allowed = (0, N) if cls == "DataLoader" else (N,)
            assert section in OWN and value in allowed, (cls, section, value)
    workers_of = {s for s, w in spy.built["DataLoader"] if w == N}
    assert {"arrays", "workers"} <= workers_of
    if "recipes" in _ran(result):
        assert "recipes" in workers_of


def test_every_comparison_is_timed_in_interleaved_rounds(fair_run):
    result, spy = fair_run
    timed = {section for section, *_ in spy.rounds}
    assert set(_ran(result)) <= timed
    for section, names, repeats, warmup, order in spy.rounds:
        assert len(names) >= 2, (section, names)           # a comparison, not a lone figure
        assert repeats >= 5 and warmup >= 1, (section, names, repeats, warmup)
        assert order == names * repeats, (section, order)  # A, B, A, B...
    assert spy.outside == []  # no figure timed on its own, outside a round


def test_results_json_names_the_code_measured_and_the_machine(fair_run):
    from prefetch.bench import provenance

    result, _ = fair_run
    state = provenance.checkout_state()
    assert result["commit"] == state["commit"] and result["source"] == state["source"]
    if state["source"] == "git":
        assert len(result["commit"]) == 40 and isinstance(result["dirty"], bool)
        assert len(result["changed"]) <= provenance.MAX_NAMES <= 20
        assert result["changed_files"] >= len(result["changed"])
    assert result["cores"] >= 1 and result["torch"] == torch.__version__
    assert result["cuda"] == torch.version.cuda and "cpu" in result["device"]


def test_results_json_has_numbers_and_says_what_it_skipped(tmp_path, monkeypatch):
    from prefetch.bench.section import Skipped

    def skipped(config):
        raise Skipped("nothing to measure here")
    monkeypatch.setitem(bench_main.BY_NAME, "skipper", Section("skipper", "skips", skipped))
    rc = main(["--quick", "--allow-dirty", "--sections", "collate,h2d,ops,skipper", "--batch-size",
               "8", "--image-size", "32", "--out", str(tmp_path)])
    assert rc == 0
    result = json.loads((tmp_path / "results.json").read_text())
    for key in ("device", "torch", "date", "config", "metrics"):
        assert key in result, key
    assert result["torch"] == torch.__version__
    metrics = result["metrics"]
    for key in ("collate_gbps", "copy_gbps", "collate_vs_default_collate", "ops_gbps",
                "ops_fraction_of_copy", "ops_vs_torch_chain", "ragged_vs_fixed_collate",
                "ragged_vs_fixed_pipeline", "numpy_vs_tensor_pipeline"):
        assert isinstance(metrics[key], numbers.Number) and metrics[key] > 0, key
    # The numpy row is the same images as the tensor row: its ratio is its pairs' median.
    (row,) = result["details"]["collate"]
    assert row["numpy"]["batch_size"] == 8 and row["numpy"]["pairs"] >= 1
    assert metrics["numpy_vs_tensor_pipeline"] == row["numpy"]["numpy_vs_tensor_pipeline"]["median"]
    # A section that does not apply says why, and leaves nothing else behind.
    assert result["skipped"]["skipper"] == "nothing to measure here"
    assert "skipper" not in result["details"] and "skipper" not in result["resources"]
    if not torch.cuda.is_available():
        assert "h2d_gbps" not in metrics  # absent, never a placeholder
    assert result["config"]["batch_sizes"] == [8] and result["config"]["image_size"] == 32
    # The policies' kernels, each timed against a copy (the GPU predictions' check).
    policy = result["details"]["policy_kernels"]
    assert [r["kernel"] for r in policy] == ["affine_warp bilinear", "pil_affine bicubic", "sharpness",
                                             "sharpness pillow", "lookup", "color_jitter b/s/h",
                                             "color_jitter pillow", "histograms"]
    assert all(r["us_per_image"] > 0 and r["fraction_of_copy"] > 0 for r in policy)


@pytest.mark.parametrize("argv, says", [
    (["--sections", "nope"], "--sections 'nope': unknown section(s) nope"),
    (["--sections", ","], "--sections ',': no section named"),
    (["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
    (["--image-size", "-2"], "--image-size must be >= 1, got -2"),
    (["--steps", "0"], "--steps must be >= 1, got 0"),
    (["--device", "foo"], "--device 'foo' is no torch device"),
    (["--device", "meta"], "--device 'meta': the bench measures cpu or cuda devices"),
    (["--out", "FILE"], "exists and is not a directory"),
])
def test_bad_arguments_are_refused_before_anything_runs(argv, says, tmp_path, capsys, monkeypatch):
    # Before any measurement: argparse's exit status 2 and the argument named, no traceback.
    import prefetch.bench.__main__ as bench_main

    monkeypatch.setattr(bench_main, "_run_sections", lambda *a: pytest.fail("a section ran"))
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    argv = [str(a_file) if a == "FILE" else a for a in argv]
    with pytest.raises(SystemExit) as e:
        main(["--allow-dirty"] + argv + ([] if "--out" in argv else ["--out", str(tmp_path / "o")]))
    assert e.value.code == 2
    assert says in capsys.readouterr().err


def test_a_device_without_cuda_is_refused_where_torch_has_none(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this torch has a CUDA device")
    with pytest.raises(SystemExit) as e:
        main(["--device", "cuda", "--out", str(tmp_path)])
    assert e.value.code == 2 and "sees no CUDA device" in capsys.readouterr().err


def test_arrays_section_reports_its_metrics(fair_run):
    result, _ = fair_run
    metrics = result["metrics"]
    for key in ("arrays_vs_dataloader", "device_batches_per_s", "arrays_device_fraction_of_copy"):
        assert isinstance(metrics[key], numbers.Number) and metrics[key] > 0, key
    row = result["details"]["arrays"]
    for key in ("host_img_per_s", "dataloader_0w_img_per_s", "dataloader_%dw_img_per_s" % N):
        assert row[key] > 0, key
    # The ratio is what it says: per round, the better DataLoader's seconds over the
    # ArrayLoader's for the same batches; its median over the rounds.
    import statistics

    rounds = row["rounds_s"]
    best = [min(a, b) for a, b in zip(rounds["DataLoader 0 workers"], rounds["DataLoader %d workers" % N])]
    expected = statistics.median(b / h for b, h in zip(best, rounds["ArrayLoader host"]))
    assert abs(metrics["arrays_vs_dataloader"] - expected) < 1e-9 * expected
    assert len(rounds["ArrayLoader host"]) == row["repeats"] >= 5


def test_every_section_is_registered_once_and_listed_in_the_help(capsys):
    import pytest

    from prefetch.bench.__main__ import SECTIONS

    names = [s.name for s in SECTIONS]
    assert len(set(names)) == len(names)
    # The default order (a section added later may come between them).
    known = ["collate", "h2d", "ops", "arrays", "e2e", "workers", "recipes"]
    assert [n for n in names if n in known] == known
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


def test_workers_section_runs_every_pipeline_over_the_same_images(fair_run):
    import statistics

    pytest.importorskip("PIL")  # the JPEG pipelines (the [test] and [bench] extras bring Pillow)

    result, _ = fair_run
    metrics, details = result["metrics"], result["details"]["workers"]
    for key in ("prefetch_vs_usual_b8", "prefetch_default_collate_vs_usual_b8", "handoff_gbps_b8",
                "engine_collate_gbps_b8", "handoff_vs_engine_collate_b8", "handoff_only_gbps_b8",
                "handoff_only_vs_engine_collate_b8", "handoff_stored_gbps_b8",
                "handoff_stored_vs_engine_collate_b8", "jpeg_prefetch_vs_usual",
                "jpeg_prefetch_default_collate_vs_usual", "jpeg_prefetch_resized_vs_usual"):
        assert isinstance(metrics[key], numbers.Number) and metrics[key] > 0, key

    (synthetic,) = details["synthetic"]
    rows = synthetic["pipelines"]
    assert set(rows) == {"usual", "prefetch", "prefetch_default_collate", "handoff",
                         "handoff_stored", "engine"}
    # --quick: 2 batches of 8 per synthetic epoch, raised to one batch for each of the N workers
    # (4 times that for handoff_stored), every round of every pipeline all of them.
    batches = max(2, N)
    for name, row in rows.items():
        want = batches * 8 * (4 if name == "handoff_stored" else 1)
        assert row["rounds"]["images"] == [want] * result["details"]["workers"]["config"]["repeats"], name
    jpeg = details["jpeg"]
    from prefetch.bench.pipelines import dali_available, webdataset_available

    assert set(jpeg["pipelines"]) == {"usual", "usual_float", "prefetch", "prefetch_default_collate",
                                      "prefetch_resized"} | (
        {"prefetch_decode", "prefetch_decode_workers", "prefetch_store"}
        if prefetch.built_with_jpeg() else set()) | (
        {"dali_cpu"} if dali_available() and not jpeg["dali_skipped"] else set()) | (
        {"webdataset"} if webdataset_available() else set())
    # An optional peer that did not run is named in results.json's skipped, with why.
    for peer in ("webdataset", "dali_cpu"):
        assert (peer in jpeg["pipelines"]) != ("workers:jpeg %s" % peer in result["skipped"]), peer
    if prefetch.built_with_jpeg():
        assert metrics["jpeg_prefetch_decode_vs_usual"] > 0
        assert metrics["jpeg_prefetch_store_vs_prefetch_decode_workers"] > 0
        # The store holds the files' bytes and small tables (their size is the full run's figure).
        store = jpeg["store"]
        assert store["files"] == jpeg["files"] and store["files_bytes"] < store["store_bytes"]
        assert metrics["jpeg_store_overhead"] > 0 and metrics["jpeg_store_pack_files_per_s"] > 0
    for name, row in jpeg["pipelines"].items():
        assert set(row["rounds"]["images"]) == {jpeg["files"]}, name
    # 16 files written; an epoch repeats them up to a batch of 8 for each of the N workers.
    assert jpeg["distinct_files"] == 16 and jpeg["files"] == max(16, N * 8)
    assert jpeg["image_size"] == 32

    # Each ratio is what its name says: per round, the first pipeline's images/s over the second's.
    def speed(row):
        return [n / s for n, s in zip(row["rounds"]["images"], row["rounds"]["s"])]

    expected = statistics.median(a / b for a, b in zip(speed(rows["prefetch"]), speed(rows["usual"])))
    assert abs(metrics["prefetch_vs_usual_b8"] - expected) < 1e-9 * expected
    expected = statistics.median(a / b for a, b in zip(speed(jpeg["pipelines"]["prefetch"]),
                                                       speed(jpeg["pipelines"]["usual"])))
    assert abs(metrics["jpeg_prefetch_vs_usual"] - expected) < 1e-9 * expected
    # The hand-off is the prefetch run's uint8 image bytes per second.
    for key, name in (("handoff_gbps_b8", "prefetch"), ("handoff_only_gbps_b8", "handoff"),
                      ("handoff_stored_gbps_b8", "handoff_stored")):
        handoff = statistics.median(v * 32 * 32 * 3 / 1e9 for v in speed(rows[name]))
        assert abs(metrics[key] - handoff) < 1e-9 * handoff, key
    shares = jpeg["prefetch_worker_shares"]
    assert abs(sum(shares.values()) - 1) < 1e-9 and all(v > 0 for v in shares.values())


def test_workers_pipelines_deliver_the_same_normalized_images():
    """usual (flips in the worker, normalize after) and prefetch (FusedAugment) yield NCHW float32
    batches whose samples are each dataset image, normalized, as it is or mirrored."""
    from torch.utils.data import default_collate

    from prefetch.bench.constants import MEAN, STD
    from prefetch.bench.datasets import FreshImages
    from prefetch.bench.pipelines import prefetch_pipeline, usual_pipeline

    ds = FreshImages(6, 5, flip=False, pool=6)
    mean = torch.tensor(MEAN).view(3, 1, 1)
    std = torch.tensor(STD).view(3, 1, 1)
    for pipeline in (usual_pipeline("usual", FreshImages(6, 5, flip=True, pool=6), 3, 0,
                                    torch.device("cpu")),
                     prefetch_pipeline("prefetch", ds, 3, 0, torch.device("cpu"),
                                       prefetch.collate.samples, 2),
                     prefetch_pipeline("prefetch_default_collate", ds, 3, 0, torch.device("cpu"),
                                       default_collate, 2)):
        try:
            batches = list(pipeline._batches())
        finally:
            pipeline.close()
        out = torch.cat(batches)
        assert out.shape == (6, 3, 5, 5) and out.dtype == torch.float32, pipeline.name
        refs = [(ds.pool[i].permute(2, 0, 1).float() / 255 - mean) / std for i in range(6)]
        # The loaders shuffle: every sample once, each as it is or mirrored.
        matched = sorted(i for x in out for i, ref in enumerate(refs)
                         if torch.allclose(x, ref, atol=1e-5) or torch.allclose(x, ref.flip(2), atol=1e-5))
        assert matched == list(range(6)), pipeline.name


def test_workers_section_without_pillow_skips_only_the_jpeg_pipelines(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)  # import PIL now raises ImportError
    rc = main(["--quick", "--allow-dirty", "--sections", "workers", "--batch-size", "8", "--image-size", "32",
               "--device", "cpu", "--out", str(tmp_path)])
    assert rc == 0
    result = json.loads((tmp_path / "results.json").read_text())
    details = result["details"]["workers"]
    assert details["jpeg"] is None and "Pillow" in details["jpeg_skipped"]
    assert result["metrics"]["prefetch_vs_usual_b8"] > 0
    assert not [k for k in result["metrics"] if k.startswith("jpeg_")]


def test_pil_random_resized_crop_follows_torchvision_get_params():
    pytest.importorskip("PIL")
    from prefetch.bench.datasets import PilRandomResizedCrop

    crop = PilRandomResizedCrop(8)
    torch.manual_seed(0)
    for width, height in ((500, 375), (375, 500), (64, 64)):
        for _ in range(200):
            i, j, h, w = crop.params(width, height)
            assert 0 <= i and i + h <= height and 0 <= j and j + w <= width
            if (h, w) != (height, width):  # a drawn window (not the fallback): within the bounds
                assert 0.08 * width * height * 0.9 <= h * w <= width * height
                assert 3 / 4 * 0.9 <= w / h <= 4 / 3 * 1.1
    # No window fits in 10 attempts: torchvision's fallback, the centred crop clamped to ratio 4/3.
    assert crop.params(1000, 10) == (0, (1000 - 13) // 2, 10, 13)
    assert crop.params(10, 1000) == ((1000 - 13) // 2, 0, 13, 10)
    from PIL import Image

    assert crop(Image.new("RGB", (50, 40))).size == (8, 8)


def test_recipes_section_compares_the_v2_recipe_with_the_usual_one(fair_run):
    if not prefetch.built_with_jpeg():
        pytest.skip("built without the JPEG decoder")
    pytest.importorskip("PIL")
    result, _ = fair_run
    m = result["metrics"]
    assert m["recipe_prefetch_vs_usual"] > 0 and m["recipe_usual_img_per_s"] > 0
    assert m["recipe_prefetch_store_vs_usual"] > 0
    rows = result["details"]["recipes"]
    from prefetch.bench.pipelines import dali_available
    assert set(rows["pipelines"]) == {"usual", "prefetch", "prefetch_store"} | (
        {"dali_cpu"} if dali_available() and not rows["dali_skipped"] else set())
    if "dali_cpu" in rows["pipelines"]:
        assert m["recipe_prefetch_vs_dali_cpu"] > 0
    # Every pipeline delivered every file in every round.
    assert all(row["images_per_epoch"] == rows["files"] and row["images_per_epoch_all_equal"]
               for row in rows["pipelines"].values())
    assert rows["workers"] == rows["threads"] == N and rows["rounds"] >= 5
    from prefetch.bench.summary import comparisons

    assert "recipe_prefetch_vs_usual" in [key for key, _, _ in comparisons(m)]  # in the verdict


def test_the_pil_trivial_augment_applies_every_op(monkeypatch):
    pil = pytest.importorskip("PIL.Image")
    from prefetch.bench import recipes
    from prefetch.transforms import policies

    img = pil.fromarray(np.random.default_rng(0).integers(60, 200, (20, 30, 3), dtype=np.uint8))
    seen = set()
    for code, name in enumerate(policies.OPS[:14]):
        table = policies.OpTable(torch.tensor([[code]]), torch.tensor([[0.4 if code != 10 else 4.0]]))
        monkeypatch.setattr(policies, "trivial_augment_wide", lambda *a, **k: table)
        out = recipes.PilTrivialAugmentWide()(img)
        assert out.size == img.size and out.mode == "RGB", name
        seen.add(name if name == "Identity" else (name, np.array(out).tobytes() != np.array(img).tobytes()))
    # Every op but Identity changed the image at these magnitudes.
    unchanged = sorted(x[0] for x in seen if x != "Identity" and not x[1])
    assert not unchanged, unchanged


def test_h2d_ring_stages_are_the_deltas_of_two_stats():
    from prefetch.bench.h2d import ring_stages

    before = {"bytes_collated": 1e9, "collate_s": 1.0, "produce_s": 2.0, "producer_blocked_s": 0.5,
              "source_s": 0.1, "transform_s": 0.0, "batches": 10, "wait_s": 1.0, "consumer_s": 2.0}
    after = {"bytes_collated": 5e9, "collate_s": 1.1, "produce_s": 2.4, "producer_blocked_s": 0.6,
             "source_s": 0.14, "transform_s": 0.0, "batches": 30, "wait_s": 1.3, "consumer_s": 2.4}
    st = ring_stages(before, after)
    assert st["batches"] == 20
    assert abs(st["collate_gbps"] - 40.0) < 1e-9            # 4 GB in 0.1 s
    assert abs(st["produce_ms_per_batch"] - 20.0) < 1e-9    # 0.4 s over 20 batches
    assert abs(st["collate_share"] - 0.25) < 1e-9 and abs(st["blocked_share"] - 0.25) < 1e-9
    assert abs(st["source_share"] - 0.1) < 1e-9 and abs(st["handoff_share"] - 0.4) < 1e-9
    assert abs(st["consumer_wait_fraction"] - 0.75) < 1e-9
    assert ring_stages(before, before)["collate_gbps"] == 0.0  # nothing ran: no division by zero


def test_interleaved_times_every_call_once_a_round_in_order_after_their_warm_ups():
    """timing.interleaved: A, B, A, B... (each call's warm-ups first), one sample a call a round,
    setup outside the sample, as the bench's comparisons promise."""
    from prefetch.bench import timing

    calls, order = [], []

    def call(name):
        return lambda *arg: calls.append((name, arg))

    got = timing.interleaved({"a": call("a"), "b": (lambda: "made", call("b"))}, 3, warmup=2,
                             order=order)
    assert order == ["a", "b"] * 3
    assert calls == [("a", ())] * 2 + [("b", ("made",))] * 2 + [("a", ()), ("b", ("made",))] * 3
    assert sorted(got) == ["a", "b"] and all(len(v) == 3 and min(v) >= 0 for v in got.values())
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        timing.interleaved({"a": call("a")}, 0)


def test_alternate_rounds_run_in_reverse_so_no_call_always_follows_the_same_one():
    """timing.interleaved(alternate=True): A, B, C, then C, B, A, ... (each round still times each
    call once, so round r's samples pair up), and previous_calls names what ran before each."""
    from prefetch.bench import timing

    order, calls = [], []
    got = timing.interleaved({n: (lambda n=n: calls.append(n)) for n in "abc"}, 4, warmup=0,
                             order=order, alternate=True)
    assert order == list("abc" "cba" "abc" "cba") and calls == order
    assert all(len(v) == 4 for v in got.values())
    # c follows b in the even rounds and itself (the round before ended with it) in the odd ones;
    # a's first timing follows what the caller says ran before.
    assert timing.previous_calls(order, "c", before="w") == ["b", "c", "b", "c"]
    assert timing.previous_calls(order, "a", before="w") == ["w", "b", "a", "b"]
    assert timing.previous_calls(order, "b") == ["a", "c", "a", "c"]
    # Without alternate, c always follows b: the order the h2d section used before.
    plain = []
    timing.interleaved({n: (lambda: None) for n in "abc"}, 4, warmup=0, order=plain)
    assert set(timing.previous_calls(plain, "c")) == {"b"}


def test_settle_pauses_before_every_timed_call_outside_its_sample(monkeypatch):
    """timing.interleaved(settle=s): a pause of s before each timed call (not the warm-ups), on
    the host clock but outside the call's sample; refused when negative."""
    from prefetch.bench import timing

    events = []
    monkeypatch.setattr(timing.time, "sleep", lambda s: events.append(("sleep", s)))
    got = timing.interleaved({n: (lambda n=n: events.append(n)) for n in "ab"}, 2, warmup=1,
                             alternate=True, settle=0.25)
    assert events == ["a", "b"] + [("sleep", 0.25), "a", ("sleep", 0.25), "b",
                                   ("sleep", 0.25), "b", ("sleep", 0.25), "a"]
    assert all(len(v) == 2 for v in got.values())
    events.clear()
    timing.interleaved({"a": lambda: events.append("a")}, 2, warmup=0)
    assert events == ["a", "a"]  # no settle: no pause
    with pytest.raises(ValueError, match="settle must be >= 0"):
        timing.interleaved({"a": lambda: None}, 1, settle=-1)


def test_the_h2d_section_lets_each_call_start_on_idle_cores():
    """The h2d section's rounds pause longer than libgomp's threads spin (milliseconds) before
    each call (the ring's epochs after pin_memory() 36.9 GB/s against 45.9 after itself, on the
    H200), and say so in their details. (The section needs a GPU: its source is what CI can read.)"""
    import inspect

    from prefetch.bench import h2d

    assert 0.01 <= h2d.SETTLE_S <= 0.2
    assert "settle=SETTLE_S" in inspect.getsource(h2d._measure)
    assert '"settle_s": SETTLE_S' in inspect.getsource(h2d._measure)


def test_one_n_for_every_pipeline_from_the_command_line(capsys):
    from prefetch.bench.__main__ import parse_args
    from prefetch.bench.section import Config, usable_cores

    cores = len(os.sched_getaffinity(0))
    assert usable_cores() == cores and parse_args([]).n == cores  # the default: the usable cores
    assert Config(torch.device("cpu")).workers == cores
    assert parse_args(["--workers", "5"]).n == 5
    # --threads survives as an alias of the same N, never a second number.
    assert parse_args(["--threads", "5"]).n == 5
    assert "--threads is deprecated; it is --workers 5" in capsys.readouterr().err
    assert parse_args(["--threads", "5", "--workers", "5"]).n == 5
    with pytest.raises(SystemExit):
        parse_args(["--threads", "8", "--workers", "2"])
    assert "--threads 8 differs from --workers 2" in capsys.readouterr().err
    for bad in (["--workers", "0"], ["--threads", "-1"]):
        with pytest.raises(SystemExit):
            parse_args(bad)
        assert "must be >= 1" in capsys.readouterr().err
    # Sections read N from the config: threads is the same number, not a default of its own.
    config = Config(torch.device("cpu"), workers=7)
    assert config.threads == config.workers == 7
    for bad in (0, True, 2.0, None):
        with pytest.raises(ValueError, match="Config.workers"):
            Config(torch.device("cpu"), workers=bad)


def test_unequal_resources_names_each_pipeline_that_breaks_the_rule():
    from prefetch.bench.section import resources, unequal_resources

    ok = {"usual": resources(workers=4, threads=4), "engine": resources(threads=4),
          "prefetch with workers": resources(workers=4, threads=4),
          "default_collate, 1 thread": resources(threads=1)}
    assert unequal_resources(ok, 4) == []
    bad = {"usual, 2 workers": resources(workers=2, threads=4),
           "engine": resources(threads=8), "nothing": resources(),
           "copy, 1 thread": resources(threads=4)}
    got = dict(unequal_resources(bad, 4))
    assert sorted(got) == sorted(bad)
    assert "got 2 workers and 4 threads" in got["usual, 2 workers"]
    assert "so 0 workers and 1 thread, got 0 workers and 4" in got["copy, 1 thread"]


def test_a_section_that_builds_a_pipeline_without_n_fails_the_run(tmp_path, monkeypatch):
    from prefetch.bench.section import SectionResult, resources

    def run(config):
        return SectionResult({}, {}, resources={"usual": resources(workers=2, threads=config.workers),
                                                 "prefetch": resources(threads=config.workers)})
    monkeypatch.setitem(bench_main.BY_NAME, "fake", Section("fake", "a fake", run))
    with pytest.raises(RuntimeError, match=r"section fake built pipelines without N = 3: usual: "):
        main(["--allow-dirty", "--sections", "fake", "--workers", "3", "--out", str(tmp_path)])
    assert not (tmp_path / "results.json").exists()
