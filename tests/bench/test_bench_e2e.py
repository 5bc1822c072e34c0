"""The e2e section (python -m prefetch.bench --sections e2e): its structure — every pipeline built
with the same N, whole passes interleaved one at a time, the rows and metrics it reports, the
models it picks — and a tiny run on the CPU from end to end. No speed is asserted."""
import json
import sys
import types

import pytest
import torch

import prefetch
from prefetch.bench import e2e as E2E
from prefetch.bench import e2e_loop as L
from prefetch.bench import e2e_models as M
from prefetch.bench import timing
from prefetch.bench.section import Config


# --- the loop and its interleaving --------------------------------------------------------------

def test_passes_are_whole_interleaved_and_open_one_at_a_time(device):
    log = []

    class FakePass:
        """A pipeline's pass: random batches on the device, counting what was taken."""

        def __init__(self, name):
            self.name, self.taken = name, 0
            log.append(("open", name))

            def batches():
                while True:
                    self.taken += 1
                    yield (torch.rand(2, 3, 8, 8, device=device),
                           torch.zeros(2, dtype=torch.int64, device=device))
            self.batches = batches()

        def close(self):
            log.append(("close", self.name, self.taken))

    builders = {name: (lambda name=name: FakePass(name)) for name in ("a", "b", "c")}
    passes = L.Passes(L.Trainer(M.tiny_cnn(4), device), builders, warmup=3, steps=5)
    order = []
    seconds = timing.interleaved({name: (passes.opener(name), passes.timed) for name in builders},
                                 2, device=device, warmup=0, order=order)
    passes.close()
    assert order == ["a", "b", "c", "a", "b", "c"]
    # Each pass is built, warmed up (3 steps), timed (5 steps) and closed before the next opens.
    assert log == [event for name in order for event in (("open", name), ("close", name, 8))]
    for name in builders:
        assert len(seconds[name]) == 2 and len(passes.records[name]) == 2
        for record in passes.records[name]:
            r = record.result()
            assert record.images == 10
            assert len(r["step_s"]) == len(r["wait_s"]) == len(r["host_wait_s"]) == 5
            assert all(0 <= w <= s for w, s in zip(r["wait_s"], r["step_s"]))


def test_trainer_steps_a_channels_last_model_and_changes_its_weights(device):
    trainer = L.Trainer(M.tiny_cnn(4), device)
    conv = trainer.model[0].weight
    assert conv.is_contiguous(memory_format=torch.channels_last)
    assert trainer.autocast == (device.type == "cuda")
    before = conv.detach().clone()
    trainer.step(torch.rand(4, 3, 16, 16, device=device), torch.tensor([0, 1, 2, 3], device=device))
    assert not torch.equal(before, conv.detach())


# --- sizes, rows, ratios and metrics --------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 3, 16])
@pytest.mark.parametrize("steps", [None, 10, 120])
def test_a_gpu_run_times_at_least_50_steps_in_whole_bursts_of_n(n, steps):
    s = E2E.sizes(Config(device=torch.device("cuda"), workers=n, steps=steps, quick=True))
    assert s["rounds"] >= 3
    assert s["rounds"] * s["steps_per_pass"] >= max(50, steps or 0)
    assert s["steps_per_pass"] % n == 0
    assert s["warmup"] == n + 2
    assert s["image_size"] == 176 and s["batch_size"] == 256


def test_a_cpu_run_is_tiny_and_quick_says_it_times_fewer_steps():
    quick = E2E.sizes(Config(device=torch.device("cpu"), workers=2, quick=True))
    assert quick["rounds"] * quick["steps_per_pass"] < E2E.MIN_GPU_STEPS
    full = E2E.sizes(Config(device=torch.device("cpu"), workers=2))
    assert full["rounds"] * full["steps_per_pass"] >= E2E.MIN_GPU_STEPS
    assert full["image_size"] <= 64 and quick["image_size"] <= 64


class FakeRecord:
    def __init__(self, images, step_s, wait_s, host_wait_s):
        self.images = images
        self._r = {"step_s": step_s, "wait_s": wait_s, "host_wait_s": host_wait_s}

    def result(self):
        return self._r


def fake_rows():
    """Two rounds of three pipelines, 100 images a pass."""
    def rec(step):
        return FakeRecord(100, [step, step], [step / 4, step / 4], [step / 8, step / 8])
    return {"baseline": E2E.row([2.0, 4.0], [rec(1.0), rec(2.0)]),
            "prefetch": E2E.row([1.0, 1.0], [rec(0.5), rec(0.5)]),
            "ceiling": E2E.row([0.8, 0.8], [rec(0.4), rec(0.4)])}


def test_a_row_is_its_passes_pooled_and_ratios_are_per_round():
    rows = fake_rows()
    base = rows["baseline"]
    assert base["img_per_s"] == pytest.approx(200 / 6.0)
    assert base["img_per_s_rounds"] == {"median": 37.5, "low": 25.0, "high": 50.0}
    assert base["step_s_mean"] == base["step_s"] == pytest.approx(6.0 / 4)
    assert base["step_s_median"] == pytest.approx(1.5) and base["step_s_range"] == [1.0, 2.0]
    assert base["wait_fraction"] == pytest.approx(0.25)
    assert base["host_wait_fraction"] == pytest.approx((0.25 + 0.5) / 6.0)
    assert base["timed_steps"] == 4
    r = E2E.ratios(rows)
    # round 1: (100/1) / (100/2) = 2; round 2: (100/1) / (100/4) = 4
    assert r["prefetch_vs_baseline"] == {"median": 3.0, "low": 2.0, "high": 4.0}
    assert r["prefetch_vs_ceiling"]["median"] == pytest.approx(0.8)
    assert "prefetch_vs_timm" not in r


def test_metrics_are_named_by_model_and_by_role():
    one = {"results": {"m18": fake_rows()}, "ratios": {"m18": E2E.ratios(fake_rows())},
           "config": {"roles": {"input_bound": "m18"}}}
    m = E2E.metrics(one)
    assert m["e2e_vs_baseline"] == m["e2e_m18_prefetch_vs_baseline"] == 3.0
    assert m["e2e_img_per_s"] == m["e2e_m18_img_per_s"] == pytest.approx(100.0)
    assert m["e2e_wait_fraction"] == pytest.approx(0.25)
    assert "e2e_heavy_vs_baseline" not in m and "e2e_vs_timm" not in m
    two = {"results": {"m18": fake_rows(), "m50": fake_rows()},
           "ratios": {"m18": E2E.ratios(fake_rows()), "m50": E2E.ratios(fake_rows())},
           "config": {"roles": {"input_bound": "m18", "compute_bound": "m50"}}}
    m = E2E.metrics(two)
    assert m["e2e_heavy_vs_baseline"] == m["e2e_m50_prefetch_vs_baseline"] == 3.0
    assert m["e2e_overlap_ratio"] == pytest.approx(0.5 / 0.4)
    assert m["e2e_m50_prefetch_vs_ceiling"] == pytest.approx(0.8)
    # A tiny CNN's figures stay under its own name: the role metrics feed the bench's verdict.
    one["config"]["models"] = {"m18": {"role": "input_bound", "source": "tiny"}}
    m = E2E.metrics(one)
    assert m["e2e_m18_prefetch_vs_baseline"] == 3.0 and "e2e_vs_baseline" not in m


# --- the models -----------------------------------------------------------------------------

def _fake_library(calls):
    def resnet(name):
        def build(**kw):
            calls.append((name, kw))
            return torch.nn.Identity()
        return build
    models = types.SimpleNamespace(resnet18=resnet("resnet18"), resnet50=resnet("resnet50"))
    timm = types.SimpleNamespace(create_model=lambda name, **kw: resnet(name)(**kw))
    return models, timm


def test_models_come_from_torchvision_then_timm_then_a_tiny_cnn(monkeypatch):
    calls = []
    models, timm = _fake_library(calls)
    monkeypatch.setattr(M, "_torchvision_models", lambda: models)
    monkeypatch.setattr(M, "_timm", lambda: timm)
    plan = M.plan("cuda")
    assert [(p.key, p.role, p.source) for p in plan] == [
        ("resnet18", "input_bound", "torchvision"), ("resnet50", "compute_bound", "torchvision")]
    plan[1].build(1000)
    assert calls == [("resnet50", {"weights": None, "num_classes": 1000})]  # random init
    monkeypatch.setattr(M, "_torchvision_models", lambda: None)
    plan = M.plan("cuda")
    assert [p.source for p in plan] == ["timm", "timm"]
    plan[0].build(10)
    assert calls[-1] == ("resnet18", {"pretrained": False, "num_classes": 10})
    monkeypatch.setattr(M, "_timm", lambda: None)
    assert [(p.key, p.source) for p in M.plan("cuda")] == [("tiny_cnn", "tiny")]
    # A CPU run trains the tiny CNN whatever is installed.
    monkeypatch.setattr(M, "_torchvision_models", lambda: models)
    assert [(p.key, p.role) for p in M.plan("cpu")] == [("tiny_cnn", "input_bound")]
    with pytest.raises(ValueError, match="resnet34"):
        M.architecture("resnet34")


# --- equal N ---------------------------------------------------------------------------------

@pytest.fixture
def built(monkeypatch):
    """Every DataLoader and Prefetcher the e2e pipelines build, with the N each was given (and
    torch's intra-op threads when a Prefetcher was built)."""
    from torch.utils.data import DataLoader

    from prefetch.bench import e2e_pipelines, pipelines

    made = []

    class SpyLoader(DataLoader):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(("DataLoader", self.num_workers, self.pin_memory))

    class SpyPrefetcher(prefetch.Prefetcher):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(("Prefetcher", kwargs.get("num_threads"), torch.get_num_threads()))

    monkeypatch.setattr(pipelines, "DataLoader", SpyLoader)
    monkeypatch.setattr(e2e_pipelines, "DataLoader", SpyLoader)
    monkeypatch.setattr(prefetch, "Prefetcher", SpyPrefetcher)
    return made


@pytest.fixture
def fake_timm(monkeypatch):
    """timm's PrefetchLoader as a stand-in that records what it was given (timm needs CUDA)."""
    given = []

    class PrefetchLoader:
        def __init__(self, loader, mean, std, device):
            given.append({"loader": loader, "mean": mean, "std": std, "device": device})
            self.loader = loader

        def __iter__(self):
            yield from self.loader

    loader_module = types.ModuleType("timm.data.loader")
    loader_module.PrefetchLoader = PrefetchLoader
    for name, module in (("timm", types.ModuleType("timm")),
                         ("timm.data", types.ModuleType("timm.data")),
                         ("timm.data.loader", loader_module)):
        monkeypatch.setitem(sys.modules, name, module)
    return given


@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # N = 3 on a 2-core machine
def test_every_pipeline_is_built_with_the_same_n(tmp_path, built, fake_timm):
    pytest.importorskip("PIL")
    from prefetch.bench import e2e_pipelines as P
    from prefetch.bench.constants import MEAN
    from prefetch.bench.datasets import write_jpegs

    n, device = 3, torch.device("cpu")
    paths = write_jpegs(str(tmp_path), 4, scale=0.1)
    assert P.timm_available()
    for name, build in P.BUILDERS.items():
        build(paths, 16, 2, n, device).close()  # built and closed, not iterated
    loaders = [m for m in built if m[0] == "DataLoader"]
    assert len(loaders) == 3 and {w for _, w, _ in loaders} == {n}
    assert [m[1] for m in built if m[0] == "Prefetcher"] == [n]
    assert [g["mean"] for g in fake_timm] == [MEAN]
    # timm's loader and the usual one on CUDA pin their batches; on the CPU only timm's asks.
    assert [pin for _, _, pin in loaders] == [False, True, False]
    resources = P.pipeline_resources(n)
    assert set(resources) == set(E2E.ORDER)
    assert all(r == {"workers": n, "threads": n} for k, r in resources.items() if k != "ceiling")
    assert resources["ceiling"] == {"workers": 0, "threads": n}


# --- a tiny run, end to end ------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_a_tiny_cpu_run_trains_every_pipeline_interleaved_and_records_it(tmp_path, built, capsys):
    pytest.importorskip("PIL")
    if not prefetch.built_with_jpeg():
        pytest.skip("built without the JPEG decoder")
    from prefetch.bench.__main__ import main

    n = 3
    rc = main(["--quick", "--allow-dirty", "--sections", "e2e", "--device", "cpu",
               "--workers", str(n), "--out", str(tmp_path)])
    assert rc == 0
    out = capsys.readouterr().out
    result = json.loads((tmp_path / "results.json").read_text())
    e2e = result["details"]["e2e"]
    c = e2e["config"]
    names = ["baseline", "prefetch", "ceiling"]  # no timm on a CPU
    assert c["pipelines"] == names and c["workers"] == n
    assert e2e["order"] == {"tiny_cnn": names * c["rounds"]}
    assert result["resources"]["e2e"] == {"baseline": {"workers": n, "threads": n},
                                          "prefetch": {"workers": n, "threads": n},
                                          "ceiling": {"workers": 0, "threads": n}}
    # The ceiling's batches come from one usual DataLoader, then each pass builds its pipeline.
    loaders = [m[1] for m in built if m[0] == "DataLoader"]
    prefetchers = [m[1:] for m in built if m[0] == "Prefetcher"]
    assert loaders == [n] * (1 + 2 * c["rounds"])
    assert prefetchers == [(n, n)] * c["rounds"]  # N engine threads and N intra-op threads
    rows = e2e["results"]["tiny_cnn"]
    assert list(rows) == names
    timed = c["rounds"] * c["steps_per_pass"]
    assert c["timed_steps"] == timed and c["fewer_than_min_steps"] == (timed < 50)
    for name, r in rows.items():
        assert r["timed_steps"] == timed and len(r["rounds_s"]) == c["rounds"], name
        assert r["rounds_images"] == [c["steps_per_pass"] * c["batch_size"]] * c["rounds"]
        assert r["img_per_s"] > 0 and r["step_s_mean"] > 0 and 0 <= r["wait_fraction"] <= 1
        low, high = r["step_s_range"]
        assert low <= r["step_s_median"] <= high
    assert c["models"] == {"tiny_cnn": {"role": "input_bound", "source": "tiny"}}
    m = result["metrics"]
    for key in ("e2e_tiny_cnn_img_per_s", "e2e_tiny_cnn_wait_fraction",
                "e2e_tiny_cnn_prefetch_vs_baseline", "e2e_tiny_cnn_prefetch_vs_ceiling"):
        assert m[key] > 0 or key.endswith("wait_fraction"), key
    assert (m["e2e_tiny_cnn_prefetch_vs_baseline"]
            == e2e["ratios"]["tiny_cnn"]["prefetch_vs_baseline"]["median"])
    # The tiny CNN compares no training: nothing under the names the verdict reads.
    assert not {"e2e_vs_baseline", "e2e_img_per_s", "e2e_vs_timm", "e2e_heavy_vs_baseline"} & set(m)
    assert "timm's PrefetchLoader needs a CUDA device" in result["skipped"]["e2e:timm"]
    assert "fewer than the 50 a GPU run times" in out
    assert "N = 3 for every pipeline" in out
