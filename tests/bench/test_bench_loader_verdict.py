"""The harness's verdict on a user's loader (``python -m prefetch.bench --loader``) as a pure
function of the figures it prints: every kind on figures made from a model of the pipeline, the
contradictory figures a user reported (the step alone at 84 batches/s, the loader at 15.7/s), ranges
that cross a threshold, contention for the cores, advice that fits the pipeline, the PIL probe,
and one short command-line run whose printed verdict must agree with its printed figures.

The figures are made the way the harness makes them (``per_round_ratios`` over per-round lists),
from a model written here: a loader taking ``a`` s a batch and a step taking ``b`` s, overlapped
(workers: the loop runs at ``1 / max(a, b)`` and waits ``max(0, a - b)`` a batch) or in series
(``a + b``), the step slowed ``k``-fold beside the loader when they contend."""
import json
import os
import random
import re
import subprocess
import sys

import pytest
import torch

from prefetch.bench import verdict as V
from prefetch.bench.loader import per_round_ratios
from prefetch.bench.loader_pipeline import describe, watch_pil
from prefetch.bench.timing import Summary

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = "tests.bench.test_bench_loader_verdict"


def fed(loader_bps, step_bps, overlapped=True, slowdown=1.0):
    """(batches/s, wait fraction) of a step fed by a loader, from the model in the docstring."""
    a, b = 1.0 / loader_bps, slowdown / step_bps
    per_batch = max(a, b) if overlapped else a + b
    wait = max(0.0, a - b) if overlapped else a
    return 1.0 / per_batch, wait / per_batch


def figures(loader, step, overlapped=True, slowdown=1.0, device="cpu", prefetch_gain=None,
            fed_override=None):
    """The figures the harness would print for rounds of (loader_bps, step_bps) pairs."""
    rounds = {"loader_bps": list(loader), "prefetch_bps": list(loader), "step_bps": list(step)}
    loops = [fed(l, s, overlapped, slowdown) for l, s in zip(loader, step)]
    if fed_override is not None:
        loops = fed_override
    rounds["plain_step_bps"] = [r for r, _ in loops]
    rounds["plain_step_wait_fraction"] = [w for _, w in loops]
    if prefetch_gain is not None:
        rounds["prefetch_step_bps"] = [r * prefetch_gain for r, _ in loops]
        rounds["prefetch_step_wait_fraction"] = [0.01 for _ in loops]
    rounds.update(per_round_ratios(rounds, "plain", device))
    return {k: Summary.of(v) for k, v in rounds.items()}


def pipeline(**kw):
    base = dict(device="cpu", loader="DataLoader", workers=2, cores=8, threads=4)
    base.update(kw)
    return V.Pipeline(**base)


STAGES = {"source": 400.0, "collation": 9000.0}


# --- the ratios, per round -------------------------------------------------------------------


def test_per_round_ratios_are_the_rounds_own_arithmetic():
    rounds = {"loader_bps": [20.0, 10.0], "prefetch_bps": [22.0, 12.0], "step_bps": [40.0, 50.0],
              "plain_step_bps": [10.0, 8.0], "plain_step_wait_fraction": [0.5, 0.2],
              "prefetch_step_bps": [15.0, 4.0], "prefetch_step_wait_fraction": [0.1, 0.1]}
    r = per_round_ratios(rounds, "plain", "cpu")
    assert r["capacity"] == pytest.approx([0.5, 0.2])
    # The step's own time fed: (1 - 0.5) / 10 = 50 ms against 25 ms alone; 100 ms against 20 ms.
    assert r["step_slowdown"] == pytest.approx([2.0, 5.0])
    # The wait per batch fed: 0.5 / 10 = 50 ms against the loader's 50 ms alone; 25 against 100.
    assert r["loader_slowdown"] == pytest.approx([1.0, 0.25])
    # The fed loop against the two one after the other: 10 x (1/20 + 1/40); 8 x (1/10 + 1/50).
    assert r["fed_vs_serial"] == pytest.approx([0.75, 0.96])
    assert r["prefetch_vs_loader"] == pytest.approx([1.1, 1.2])
    assert r["prefetch_step_vs_plain_step"] == pytest.approx([1.5, 0.5])
    # The Prefetcher's loop (a Samples loader) reads the Prefetcher's rate; no slowdowns off the CPU.
    r = per_round_ratios(rounds, "prefetch", "cuda")
    assert r["capacity"] == pytest.approx([22 / 40, 12 / 50])
    assert not {"step_slowdown", "loader_slowdown", "fed_vs_serial"} & set(r)


@pytest.mark.parametrize("wait, kind", [
    (0.0, "compute-bound"), (0.05 - 1e-9, "compute-bound"), (0.05, "balanced"),
    (0.20 - 1e-9, "balanced"), (0.20, "input-bound"), (1.0, "input-bound"),
])
def test_the_wait_thresholds(wait, kind):
    f = {"loader_bps": Summary(400, 400, 400), "prefetch_bps": Summary(400, 400, 400),
         "step_bps": Summary(100, 100, 100), "plain_step_bps": Summary(90, 90, 90),
         "plain_step_wait_fraction": Summary(wait, wait, wait), "capacity": Summary(4, 4, 4)}
    v = V.judge(f, STAGES, pipeline(device="cuda"))
    assert v.kind == kind and v.line.startswith(kind + ": "), v.line
    assert "%s (%s–%s) of each step waits for data" % ((V.percent(wait),) * 3) in v.line


@pytest.mark.parametrize("capacity, kind", [
    (0.5, "input-bound"), (0.8, "input-bound"), (0.8 + 1e-9, "balanced"), (0.95, "balanced"),
    (0.95 + 1e-9, "compute-bound"), (5.0, "compute-bound"),
])
def test_the_capacity_thresholds(capacity, kind):
    # A wait that agrees with each: the step waits 1 - capacity (at least 20% when input-bound).
    wait = 0.3 if kind == "input-bound" else 0.1 if kind == "balanced" else 0.0
    f = {"loader_bps": Summary(100 * capacity, 100 * capacity, 100 * capacity),
         "prefetch_bps": Summary(100, 100, 100), "step_bps": Summary(100, 100, 100),
         "plain_step_bps": Summary(90, 90, 90), "plain_step_wait_fraction": Summary(wait, wait, wait),
         "capacity": Summary(capacity, capacity, capacity)}
    assert V.judge(f, STAGES, pipeline(device="cuda")).kind == kind


# --- a user's figures that contradicted "compute-bound" ---------------------------------------


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("wait", [0.0, 0.03, 0.049, 0.1, 0.19])
def test_the_issues_figures_never_read_compute_bound(device, wait):
    # The step alone at 84 batches/s, the loader alone at 15.7/s, the fed loop waiting 0-19%:
    # in 3 of 6 runs the old verdict read "compute-bound" (it read the wait alone).
    rate = 15.0  # what the fed loop ran at: the step slowed ~5x beside the loader
    f = figures([15.7, 15.2, 16.1], [84.0, 80.0, 86.0], device=device,
                fed_override=[(rate, wait)] * 3)
    v = V.judge(f, STAGES, pipeline(device=device))
    assert v.kind not in ("compute-bound", "balanced"), v.line
    if device == "cpu":
        # The step's own time fed, (1 - w) / 15, is 5x its time alone: they share the cores.
        assert v.kind == "contended", v.line
        assert "compete for the same 8 CPU cores" in v.line
    else:
        # On a GPU the slowdown is not read (the fed step also copies): the figures disagree.
        assert v.kind == "inconclusive" and "the figures disagree" in v.line, v.line
    assert "15.7" in v.line and "84.0" in v.line


def test_the_old_rule_on_the_issues_figures_was_compute_bound_and_check_refuses_it():
    f = figures([15.7, 15.2, 16.1], [84.0, 80.0, 86.0], fed_override=[(15.0, 0.03)] * 3)
    old = V.Verdict("compute-bound", "compute-bound: 3% of each step waits for data")
    with pytest.raises(AssertionError, match="contradicts its figures"):
        V.check(old, f, pipeline())
    with pytest.raises(AssertionError, match="contradicts its figures"):
        V.check(old, f, pipeline(device="cuda"))


# --- each kind --------------------------------------------------------------------------------


def test_input_bound_when_the_loader_is_slower_than_the_step():
    f = figures([200, 210, 190], [1000, 1100, 950])
    v = V.judge(f, STAGES, pipeline(workers=2, cores=8))
    assert v.kind == "input-bound", v.line
    assert v.line.startswith("input-bound: 80% (")
    assert "more DataLoader workers (num_workers=2 now, 8 usable cores)" in v.line


def test_input_bound_names_the_prefetcher_when_it_helps_in_every_round():
    f = figures([200, 210, 190], [1000, 1100, 950], overlapped=False, prefetch_gain=1.5)
    v = V.judge(f, STAGES, pipeline())
    assert v.kind == "input-bound"
    assert "try prefetch.Prefetcher (fed by it, 1% of each step waits and the loop runs 1.50x" in v.line
    f = figures([200, 210, 190], [1000, 1100, 950], prefetch_gain=1.02)  # not beyond GAIN
    assert "prefetch.Prefetcher (fed by it" not in V.judge(f, STAGES, pipeline()).line


def test_input_bound_in_series_says_to_overlap():
    # A loader 3x the step, but with no workers: the step waits 25% of each step.
    f = figures([300, 310, 290], [100, 101, 99], overlapped=False, prefetch_gain=1.3)
    v = V.judge(f, STAGES, pipeline(workers=0))
    assert v.kind == "input-bound", v.line
    assert ("the loader alone is fast enough, but it runs in series with the step (no workers): "
            "overlap it with prefetch.Prefetcher (fed by it") in v.line
    assert "slowest stage" not in v.line


def test_compute_bound_needs_both_the_wait_and_the_capacity():
    f = figures([400, 410, 390], [100, 104, 98])
    v = V.judge(f, STAGES, pipeline())
    assert v.kind == "compute-bound", v.line
    assert "a faster step will speed training up (up to the 400 batches/s" in v.line


def test_balanced_when_the_loader_only_just_keeps_up():
    # The loader at 0.88-0.9x the step, overlapped: the step waits 10-12%.
    f = figures([88, 89, 90], [100, 100, 100])
    v = V.judge(f, STAGES, pipeline())
    assert v.kind == "balanced", v.line
    assert "the loader only just keeps up" in v.line


def test_balanced_in_series_says_to_overlap():
    f = figures([900, 1000, 950], [100, 100, 100], overlapped=False)  # waits 9-10%
    v = V.judge(f, STAGES, pipeline(workers=0))
    assert v.kind == "balanced" and "runs in series" in v.line, v.line
    # With workers the part in series is read off the wait: the median wait / the median rate,
    # 0.0952 / 90.5 = 1.05 ms (the median round: all of the loader's 1 / 950 s, in series).
    v = V.judge(f, STAGES, pipeline(workers=2))
    assert "part of each batch's loading runs in series with the step, in next() (1.05 ms" in v.line


def test_in_series_the_prefetcher_is_not_advised_where_it_was_measured_without_gain():
    """The trial's run: balanced, part of the loading in series, and the step fed by the
    Prefetcher at 0.89x the plain loop: the advice may not be "overlap it with
    prefetch.Prefetcher"; it says what the Prefetcher did and names another way."""
    f = figures([900, 1000, 950], [100, 100, 100], overlapped=False, prefetch_gain=0.89)
    for workers, other in ((2, "collate_fn=prefetch.collate.samples"),
                           (0, "give the DataLoader workers"),
                           (None, "a faster source")):  # (None: not a DataLoader)
        v = V.judge(f, STAGES, pipeline(workers=workers))
        assert v.kind == "balanced", v.line
        assert "overlap it with prefetch.Prefetcher" not in v.line, v.line
        assert "did not overlap it here (fed by it the loop ran 0.89x" in v.line and other in v.line
        V.check(v, f)


@pytest.mark.parametrize("loader, step, crossing", [
    ([60, 100, 300], [100, 100, 100], "of each step waits for data (thresholds 5% and 20%)"),
    ([85, 92, 200], [100, 100, 100], "the loader alone / the step alone is"),
])
def test_a_range_across_a_threshold_is_inconclusive_and_says_run_longer(loader, step, crossing):
    f = figures(loader, step)
    v = V.judge(f, STAGES, pipeline(seconds=0.5))
    assert v.kind == "inconclusive", v.line
    assert crossing in v.line
    assert "run longer passes (--seconds 6, or seconds= of measure_loader)" in v.line


def test_a_wait_below_what_the_capacity_allows_is_inconclusive():
    # The loader alone at half the step, yet the fed loop ran at the step's pace waiting 3%:
    # the loader's passes ran under other conditions (no slowdown of the step to explain it).
    f = figures([50, 52, 48], [100, 100, 100], fed_override=[(97.0, 0.03)] * 3)
    v = V.judge(f, STAGES, pipeline())
    assert v.kind == "inconclusive" and "the figures disagree" in v.line, v.line


def test_contended_when_the_step_runs_slower_beside_the_loader():
    # 5x slower: the two together at about half the rate of the two one after the other.
    f = figures([25, 24, 26], [40, 38, 46], slowdown=5.0)
    v = V.judge(f, STAGES, pipeline(workers=2, cores=2, threads=2))
    assert v.kind == "contended", v.line
    assert "fed by the loader the step takes 5.00x (5.00x–5.00x) its time alone" in v.line
    assert "the threads and workers oversubscribe the cores" in v.line
    # 2 workers on 2 cores: fewer workers, not more; no thread count left to give the step.
    assert "fewer workers (num_workers=1, leaving a core to the step)" in v.line
    assert "more DataLoader workers" not in v.line


def test_contended_stages_sharing_the_cores_well_are_told_to_need_less_cpu():
    # Issue 43's figures: the fed loop (15/s) is faster than the loader and the step one after the
    # other (1 / (1/15.7 + 1/84) = 13.2/s): the step lost the loader's CPU time, no more, so
    # fewer threads or workers would not help; a PIL decode that needs less CPU would.
    f = figures([15.7, 15.2, 16.1], [84.0, 80.0, 86.0], fed_override=[(15.0, 0.03)] * 3)
    assert f["fed_vs_serial"].low > 1
    v = V.judge(f, STAGES, pipeline(workers=2, cores=2, threads=2, pil="PIL.ImageFile.load from "
                                                                       "Images.__getitem__"))
    assert v.kind == "contended", v.line
    assert "about what sharing the cores allows" in v.line
    assert "fewer threads or workers would not" in v.line and "set_num_threads" not in v.line
    assert "FusedAugment(decode=True)" in v.line and "prefetch.pack" in v.line
    assert "more DataLoader workers" not in v.line


def test_contended_when_the_loader_runs_slower_beside_the_step():
    # 2 workers make a batch in 10 ms alone, 25 ms beside a 2 ms step: the fed loop runs at 40/s
    # and waits 23 ms a batch, 2.3x the loader's whole time alone.
    f = figures([100, 100, 100], [500, 500, 500], fed_override=[(40.0, 0.92)] * 3)
    assert f["loader_slowdown"].low == pytest.approx(2.3)
    v = V.judge(f, STAGES, pipeline(workers=2, cores=4, threads=4))
    assert v.kind == "contended", v.line
    assert "it waits 2.30x (2.30x–2.30x) the loader's own time per batch" in v.line


def test_a_dataloader_without_workers_is_never_contended():
    # It runs between the steps, in the same thread: a step of 26 us alone that took 2.2x that in
    # the loop (measured: the loop's bookkeeping and noise) is not contention, nor is a slower
    # loader; neither is a step under 1 ms beside workers.
    f = figures([6132, 5603, 8612], [38489, 20662, 165261],
                fed_override=[(4452, 0.52), (4350, 0.26), (7306, 0.8)])
    assert f["step_slowdown"].low > 1.25
    for p in (pipeline(workers=0), pipeline(workers=2)):
        assert V.judge(f, STAGES, p).kind != "contended"
    f = figures([25, 24, 26], [40, 38, 46], slowdown=5.0)
    assert V.judge(f, STAGES, pipeline(workers=0)).kind != "contended"
    assert V.judge(f, STAGES, pipeline(workers=None, loader="list")).kind != "contended"
    assert V.judge(f, STAGES, pipeline(workers=1)).kind == "contended"
    assert V.judge(f, STAGES, pipeline(workers=None, own_threads=True)).kind == "contended"


def test_a_slowdown_across_the_threshold_is_inconclusive_and_one_below_it_is_not_contention():
    f = figures([400, 410, 390], [100, 104, 98], slowdown=1.0)
    f["step_slowdown"] = Summary(1.5, 1.2, 1.6)  # 1.2x in one round: contention is not certain
    v = V.judge(f, STAGES, pipeline())
    assert v.kind == "inconclusive", v.line
    assert "its time alone is 1.50x (1.20x–1.60x) (contention from 1.25x)" in v.line
    f["step_slowdown"] = Summary(1.1, 1.0, 1.24)
    assert V.judge(f, STAGES, pipeline()).kind == "compute-bound"
    # The same figures on a GPU, or for a DataLoader without workers: the slowdown is not read.
    f["step_slowdown"] = Summary(1.5, 1.2, 1.6)
    assert V.judge(f, STAGES, pipeline(device="cuda")).kind == "compute-bound"
    assert V.judge(f, STAGES, pipeline(workers=0)).kind == "compute-bound"


def test_a_microsecond_step_slowed_by_the_loops_bookkeeping_is_not_contention():
    # Measured: a step of 4 us alone (265,945/s) took 17x that in the loop fed by a 71/s loader
    # (the timer calls around next()), but was 0.01% of the loop: the verdict is input-bound.
    f = figures([71.1, 70.0, 72.0], [265945.0, 250000.0, 270000.0],
                fed_override=[(73.3, 0.9953), (70.5, 0.9950), (72.0, 0.9955)])
    assert f["step_slowdown"].low > 10
    v = V.judge(f, STAGES, pipeline(workers=0, cores=2, threads=2))
    assert v.kind == "input-bound", v.line


def test_loader_only_without_a_step():
    f = {"loader_bps": Summary(400, 380, 420), "prefetch_bps": Summary(500, 480, 510)}
    v = V.judge(f, STAGES, pipeline())
    assert v.kind == "loader-only"
    assert v.line.startswith("loader-only: the loader yields 400 (380–420) batches/s, 500/s "
                             "through prefetch.Prefetcher (1.25x)")
    assert "the slowest stage is the source, 400 batches/s alone" in v.line and "--step" in v.line


# --- the advice fits the pipeline ------------------------------------------------------------


def input_bound(**kw):
    f = figures([200, 210, 190], [1000, 1100, 950])
    return V.judge(f, dict(STAGES), pipeline(**kw))


def test_no_more_workers_when_the_workers_already_use_every_core():
    v = input_bound(workers=8, cores=8)
    assert "more DataLoader workers" not in v.line
    assert "the 8 workers already use every one of the 8 usable cores, so more will not help" in v.line
    v = input_bound(workers=3, cores=8)
    assert "more DataLoader workers (num_workers=3 now, 8 usable cores)" in v.line
    v = input_bound(workers=None, cores=8, loader="list")
    assert "loading in parallel (a DataLoader with workers" in v.line


def test_a_pil_decoding_loader_is_told_decode_true_transforms_v2_and_pack():
    v = input_bound(pil="PIL.ImageFile.load from Images.__getitem__")
    for name in ("FusedAugment(decode=True)", "prefetch.transforms.v2", "decode=True)",
                 "prefetch.pack", "prefetch.ArrayLoader", "PIL.ImageFile.load from Images.__getitem__"):
        assert name in v.line, name
    assert "PIL" not in input_bound(pil=None).line


def test_what_the_pipeline_uses_already_is_not_advised():
    v = input_bound(uses=("samples", "fused"))
    assert "collate.samples" not in v.line and "flips and normalisation" not in v.line
    assert "decode=True" in v.line
    v = input_bound()
    assert "collate_fn=prefetch.collate.samples" in v.line and "prefetch.FusedAugment" in v.line


@pytest.mark.parametrize("threads, workers, cores, expect", [
    (4, 2, 4, "torch.set_num_threads(2) in the training process (4 threads now beside 2 workers on "
              "4 usable cores)"),
    (2, 2, 2, "fewer workers (num_workers=1, leaving a core to the step) with torch.set_num_threads(1)"),
    (1, 4, 4, "fewer workers (num_workers=3"),
    (2, 2, 8, "2 torch threads and 2 workers fit the 8 usable cores"),
])
def test_contention_advice_fits_the_threads_workers_and_cores(threads, workers, cores, expect):
    f = figures([25, 24, 26], [40, 38, 46], slowdown=5.0)
    v = V.judge(f, STAGES, pipeline(workers=workers, cores=cores, threads=threads))
    assert v.kind == "contended"
    assert expect in v.line, v.line
    assert "os.sched_setaffinity" in v.line


# --- the verdict never contradicts the printed medians ------------------------------------------


def test_no_verdict_contradicts_the_printed_medians_over_random_pipelines():
    rng = random.Random(43)
    seen = set()
    for _ in range(3000):
        rounds = rng.choice([1, 3, 5])
        base_l, base_s = 10 ** rng.uniform(0, 3), 10 ** rng.uniform(0, 3)
        noise = rng.choice([0.0, 0.05, 0.3, 1.0])
        loader = [base_l * (1 + noise * rng.uniform(-0.5, 0.5)) for _ in range(rounds)]
        step = [base_s * (1 + noise * rng.uniform(-0.5, 0.5)) for _ in range(rounds)]
        device = rng.choice(["cpu", "cuda"])
        f = figures(loader, step, overlapped=rng.random() < 0.6,
                    slowdown=rng.choice([1.0, 1.0, 1.3, 3.0]) * rng.uniform(0.9, 1.1),
                    device=device, prefetch_gain=rng.choice([None, 0.9, 1.5]))
        v = V.judge(f, STAGES, pipeline(device=device))  # judge's own check raises if it must
        seen.add(v.kind)
        # What a reader checks on the table: the medians printed beside the verdict.
        X, S = f["loader_bps"].median, f["step_bps"].median
        W = f["plain_step_wait_fraction"].median
        if v.kind == "compute-bound":
            assert W < 0.05 and X > 0.95 * S, (v.line, X, S, W)
        elif v.kind == "balanced":
            assert 0.05 <= W < 0.20 and X > 0.8 * S, (v.line, X, S, W)
        elif v.kind == "input-bound":
            assert W >= 0.20 or X <= 0.8 * S, (v.line, X, S, W)
        elif v.kind == "contended":
            assert device == "cpu" and (f["step_slowdown"].low >= 1.25
                                        or f["loader_slowdown"].low >= 1.25), v.line
    assert seen == {"input-bound", "compute-bound", "balanced", "contended", "inconclusive"}


# --- the PIL probe ------------------------------------------------------------------------------


class PilImages(torch.utils.data.Dataset):
    """Decodes a PNG with PIL in __getitem__, as a torchvision-style Dataset does."""

    def __init__(self, n=4, lazy=False):
        import io
        from PIL import Image
        buf = io.BytesIO()
        Image.new("RGB", (8, 8), (10, 20, 30)).save(buf, "PNG")
        self.data, self.n, self.lazy = buf.getvalue(), n, lazy

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import io
        import numpy as np
        from PIL import Image
        img = Image.open(io.BytesIO(self.data))
        if self.lazy:
            return img, i
        return torch.from_numpy(np.array(img.convert("RGB"))), i


class Tensors(torch.utils.data.Dataset):
    def __init__(self, n=4):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.full((8, 8, 3), i, dtype=torch.uint8), i


class Failing(Tensors):
    def __getitem__(self, i):
        raise RuntimeError("broken sample")


def test_the_pil_probe_sees_a_decode_in_getitem_through_wrappers():
    pytest.importorskip("PIL")
    seen = watch_pil(lambda: PilImages()[0])
    assert seen == "PIL.ImageFile.load from PilImages.__getitem__"
    subset = torch.utils.data.Subset(PilImages(), [1, 2])
    p = describe(torch.utils.data.DataLoader(subset, batch_size=2, num_workers=2), "cpu")
    assert p.pil == "PIL.ImageFile.load from PilImages.__getitem__"
    assert p.workers == 2 and p.loader == "DataLoader" and p.device == "cpu"
    assert p.cores == len(os.sched_getaffinity(0)) and p.threads == torch.get_num_threads()
    assert watch_pil(lambda: PilImages(lazy=True)[0]) == \
        "the samples are PIL images (decoded when first used)"


def test_the_pil_probe_sees_nothing_where_there_is_no_pil():
    assert watch_pil(lambda: Tensors()[0]) is None
    assert watch_pil(lambda: Failing()[0]) is None  # the timed passes report the failure
    assert describe(torch.utils.data.DataLoader(Tensors(), batch_size=2), "cpu").pil is None
    p = describe([torch.ones(2)], "cpu")
    assert p.pil is None and p.workers is None and p.loader == "list" and not p.own_threads
    import prefetch
    arrays = prefetch.ArrayLoader(torch.zeros(8, 4, 4, 3, dtype=torch.uint8), 4, device="cpu")
    assert describe(arrays, "cpu").own_threads


# --- one short run: what it prints and what it concludes agree ----------------------------------


def tiny_loader():
    return torch.utils.data.DataLoader(Tensors(400), batch_size=2)


def tiny_step(batch):
    images, _ = batch
    return float(images.float().mean())


def _parse(text):
    """{row label: (median, low, high)} of the printed table, and the verdict (last line)."""
    rows = {}
    num = r"([0-9][0-9,]*\.?[0-9]*(?:e-?\d+)?)"
    for line in text.splitlines():
        m = re.match(r"\s+(.+?)\s+\|\s+%sx? \(%sx?–%sx?\)\s+\|\s*(.*)$" % (num, num, num), line)
        if m:
            label = m.group(1)
            rows[label] = tuple(float(m.group(i).replace(",", "")) for i in (2, 3, 4))
            w = re.match(r"([0-9.]+)% \(([0-9.]+)%–([0-9.]+)%\)", m.group(5))
            if w:
                rows[label + " waits"] = tuple(float(x) / 100 for x in w.groups())
    return rows, text.strip().splitlines()[-1]


def test_cli_prints_a_verdict_that_agrees_with_its_printed_figures(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-m", "prefetch.bench", "--loader", HERE + ":tiny_loader",
                        "--step", HERE + ":tiny_step", "--device", "cpu", "--seconds", "0.2",
                        "--rounds", "3", "--warmup", "1", "--batches", "30", "--out", str(tmp_path)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows, line = _parse(r.stdout)
    kind = line.split(":")[0]
    assert kind in V.KINDS and kind != "loader-only", line
    L = rows["the loader alone"]
    S = rows["the step alone, on one batch kept in memory"]
    W = rows["the step fed by the loader waits"]
    c = rows["the loader alone / the step alone (capacity)"]
    if kind != "inconclusive":  # the loader's rate it quotes is the table's
        assert "yields %s batches/s" % V.rate(L[0]) in line, (rows, line)
    # What each kind means, checked on the printed figures (rounded as printed: 1% slack).
    if kind == "compute-bound":
        assert W[2] < 0.05 + 0.005 and c[1] >= 0.95 - 0.01 and L[0] > 0.95 * S[0] * 0.99
    elif kind == "balanced":
        assert 0.05 - 0.005 <= W[1] and W[2] < 0.2 + 0.005 and c[1] >= 0.8 - 0.01
    elif kind == "input-bound":
        assert W[1] >= 0.2 - 0.005 or (c[2] <= 0.8 + 0.01 and W[2] >= 0.2 - 0.005)
    elif kind == "contended":
        slowed = [rows.get("the step's own time per batch, fed / alone"),
                  rows.get("the wait per batch fed / the loader's time alone")]
        assert any(s and s[1] >= 1.25 - 0.01 for s in slowed), rows
    else:  # inconclusive: some range crosses a threshold, or the wait is below the capacity's
        crosses = (W[1] < 0.05 <= W[2] or W[1] < 0.2 <= W[2] or c[1] <= 0.8 < c[2]
                   or c[1] <= 0.95 < c[2])
        assert crosses or "the figures disagree" in line, (rows, line)
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["verdict"] == line
    details = data["details"]["loader"]
    assert details["pipeline"]["workers"] == 0 and details["pipeline"]["pil"] is None
    # The printed verdict is the verdict of the figures results.json holds, and nothing else.
    again = V.judge({k: Summary(v["median"], v["min"], v["max"]) for k, v in details["figures"].items()},
                    details["stages"]["rates"],
                    V.Pipeline(**dict(details["pipeline"], uses=tuple(details["pipeline"]["uses"]))))
    assert again.line == line
