"""The harness on the user's own loader: ``measure_loader(make_loader, step=...)``.

Passes of the loader are timed in rounds, interleaved so every configuration sees the same
machine state, each pass bounded by ``seconds`` or ``batches`` (whichever comes first), after
``warmup`` untimed batches of a fresh iterator (a DataLoader's workers start there):

- ``loader``: the loader alone (batches/s);
- ``prefetch``: the loader wrapped in a ``prefetch.Prefetcher`` (with ``transform``), as it is:
  a DataLoader's own ``collate_fn`` still runs in its workers;
- with a step: ``step``, the step alone on one batch kept in memory (on the CPU the loader's
  own batch, so the step's time alone and fed compare; on a device the Prefetcher's, already
  there: the compute bound); ``plain_step``, the step fed by the loader; ``prefetch_step``, fed by the Prefetcher;
  for the two fed loops, the fraction of the loop's wall time spent in the loader's ``next()``.

Each figure is the median over the rounds with its range, and so are the ratios the verdict reads,
each taken within a round (``per_round_ratios``: the loader's capacity against the step, and on
the CPU how much each slowed the other); the Prefetcher's ``stats()`` counters, summed over its
passes feeding the step (without a step: its passes alone), give each stage's time per batch.
``LoaderReport.pipeline`` is what the advice fits (workers, usable cores, threads, a Dataset
decoding with PIL: :mod:`prefetch.bench.loader_pipeline`), and ``LoaderReport.verdict`` the
one-line answer, a function of the printed figures alone (:mod:`prefetch.bench.verdict`).
"""
import gc
import inspect
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List

import torch

import prefetch
from prefetch._engine.pipeline import derived_fractions

from . import timing
from .target import TargetError
from .loader_pipeline import describe
from .verdict import Pipeline, Verdict, judge

_END = object()


@dataclass
class Pass:
    """One timed pass: batches, wall seconds, seconds inside the loader's next()."""

    batches: int
    wall_s: float
    wait_s: float

    @property
    def rate(self):
        return self.batches / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def wait_fraction(self):
        return self.wait_s / self.wall_s if self.wall_s > 0 else 0.0


@dataclass
class LoaderReport:
    """What ``measure_loader`` found; ``as_dict()`` is what results.json holds."""

    figures: Dict[str, timing.Summary]         # name -> Summary over the rounds
    stages: Dict[str, Any]                     # per-batch stage times and shares from stats()
    verdict: Verdict
    config: Dict[str, Any]
    notes: List[str] = field(default_factory=list)
    rounds: Dict[str, List[float]] = field(default_factory=dict)
    pipeline: Pipeline = Pipeline()             # what the advice fits (workers, cores, PIL)

    def as_dict(self):
        return {
            "verdict": self.verdict.kind,
            "verdict_line": self.verdict.line,
            "figures": {k: {"median": s.median, "min": s.low, "max": s.high}
                        for k, s in self.figures.items()},
            "stages": self.stages,
            "config": self.config,
            "notes": self.notes,
            "rounds": self.rounds,
            "pipeline": self.pipeline._asdict(),
        }


def _sync(device):
    timing.sync(device)


def _timed_pass(make_iter, step, seconds, batches, warmup, device):
    """One pass over a fresh iterator: `warmup` untimed batches, then up to `batches` batches or
    `seconds` of them. Returns a Pass, or None if the iterator ended before a timed batch."""
    it = make_iter()
    b = None
    try:
        for _ in range(warmup):
            b = next(it, _END)
            if b is _END:
                return None
            if step is not None:
                step(b)
        b = None
        _sync(device)
        n, wait = 0, 0.0
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while n < batches:
            t = time.perf_counter()
            b = next(it, _END)
            wait += time.perf_counter() - t
            if b is _END:
                break
            if step is not None:
                step(b)
            b = None
            n += 1
            if time.perf_counter() >= deadline:
                break
        _sync(device)
        wall = time.perf_counter() - t0
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
        del it
        gc.collect()  # a DataLoader iterator's workers stop before the next pass starts
    return Pass(n, wall, wait) if n else None


def _step_alone(step, batch, seconds, batches, warmup, device):
    """The step on the same batch again and again: the rate of the step with free data."""
    for _ in range(warmup):
        step(batch)
    _sync(device)
    n = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while n < batches:
        step(batch)
        n += 1
        if time.perf_counter() >= deadline:
            break
    _sync(device)
    return Pass(n, time.perf_counter() - t0, 0.0)


def _check_iterable(loader, what="make_loader()"):
    # Not iter(loader): a DataLoader with workers would start them.
    kind = type(loader)
    if not (hasattr(kind, "__iter__") or hasattr(kind, "__getitem__")):
        raise TargetError("%s returned a %s, which is not iterable; it must return the loader "
                          "(a DataLoader or any iterable of batches)" % (what, kind.__name__))
    if hasattr(kind, "__next__"):
        raise TargetError("%s returned an iterator (%s), which can be iterated only once; the "
                          "harness iterates the loader several times: return the DataLoader (or "
                          "any re-iterable) itself" % (what, kind.__name__))


def _stage_figures(s, submitted, with_transform):
    """Per-batch seconds, shares of the producer's time and the batches/s each stage alone
    would allow, from the Prefetcher's stats() counters summed over the passes counted."""
    n = max(1, submitted)
    stages = {
        "batches_produced": submitted,
        "source_ms": 1e3 * s["source_s"] / n,
        "collate_ms": 1e3 * s.get("collate_s", 0.0) / n,
        "transform_ms": 1e3 * s["transform_s"] / n,
        "producer_blocked_ms": 1e3 * s.get("producer_blocked_s", 0.0) / n,
        "handoff_ms": 1e3 * max(0.0, s["produce_s"] - s["source_s"] - s["transform_s"]
                                - s.get("collate_s", 0.0) - s.get("producer_blocked_s", 0.0)) / n,
        "consumer_wait_ms": 1e3 * s["wait_s"] / max(1, s["batches"]),
        "wait_fraction": s["wait_fraction"],
    }
    for key in ("source_share", "collate_share", "transform_share", "blocked_share", "handoff_share"):
        stages[key] = s.get(key, 0.0)
    # The transform's rate only when there is one (without, transform_s is the batch's
    # rebuilding, part of the hand-off).
    names = (("source", "source_ms"), ("collation", "collate_ms")) + (
        (("transform", "transform_ms"),) if with_transform else ())
    stages["rates"] = {name: (1e3 / stages[key] if stages[key] > 0 else None)
                       for name, key in names}
    return stages


def per_round_ratios(rounds_of, loop, device_type):
    """The ratios the verdict reads, each taken within a round (the passes of one round ran
    seconds apart, on the same machine state), from the rates and waits of ``rounds_of``:

    - ``capacity``: the loader's rate alone (for the "prefetch" loop, the Prefetcher's) over the
      step's rate alone;
    - ``step_slowdown``: the step's own time per batch in the fed loop, ``(1 - wait) / rate``,
      over its time alone, ``1 / step_bps``;
    - ``loader_slowdown``: the fed loop's wait per batch, ``wait / rate``, over the loader's time
      per batch alone (above 1 only when the loader ran slower beside the step);
    - ``fed_vs_serial``: the fed loop's rate over the rate of the two one after the other,
      ``1 / (1 / loader + 1 / step)`` (below 1 only when they slowed each other);
    - ``prefetch_vs_loader`` and ``prefetch_step_vs_plain_step``: the Prefetcher's gains.

    The slowdowns only on a CPU device (``device_type``), where the step alone ran on the same
    kind of batch as the fed step. Returns {name: [one value per round]}."""
    out = {}
    L, P = rounds_of.get("loader_bps"), rounds_of.get("prefetch_bps")
    if L and P:
        out["prefetch_vs_loader"] = [p / l for l, p in zip(L, P)]
    S = rounds_of.get("step_bps")
    F, W = rounds_of.get(loop + "_step_bps"), rounds_of.get(loop + "_step_wait_fraction")
    if not (S and F and W):
        return out
    X = L if loop == "plain" else P
    out["capacity"] = [x / st for x, st in zip(X, S)]
    if device_type == "cpu":
        out["step_slowdown"] = [st * (1.0 - w) / fed for st, fed, w in zip(S, F, W)]
        out["loader_slowdown"] = [x * w / fed for x, fed, w in zip(X, F, W)]
        out["fed_vs_serial"] = [fed * (1.0 / x + 1.0 / st) for x, st, fed in zip(X, S, F)]
    plain, pf = rounds_of.get("plain_step_bps"), rounds_of.get("prefetch_step_bps")
    if plain and pf:
        out["prefetch_step_vs_plain_step"] = [b / a for a, b in zip(plain, pf)]
    return out


def check_step(step, what="step"):
    """``step`` if it can be called with one batch; TargetError saying what it is otherwise (a
    function of two arguments used to fail inside the first timed pass, with a traceback)."""
    if step is None:
        return None
    if not callable(step):
        raise TargetError("%s must be a callable taking one batch, got a %s" % (what, type(step).__name__))
    try:
        inspect.signature(step).bind(object())
    except TypeError as exc:
        raise TargetError("%s must be a callable taking one batch; %s has the signature %s (%s)"
                          % (what, getattr(step, "__name__", type(step).__name__),
                             inspect.signature(step), exc)) from None
    except ValueError:  # no signature to read (a builtin): it will say so when called
        pass
    return step


def is_step_factory(fn):
    """True when ``fn`` takes no required argument (it returns the step), False when it takes
    one (it is the step)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    required = [p for p in params if p.default is p.empty
                and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return not required


def measure_loader(make_loader, step=None, *, transform=None, device=None, seconds=2.0,
                   batches=500, rounds=3, warmup=2, depth=3, num_threads=None, progress=None):
    """Measures the user's loader (and step) and says whether training is input-bound.

    Args:
        make_loader: a function of no arguments returning the loader (a DataLoader or any
            re-iterable of batches), or the loader itself.
        step: the training step, a callable taking one batch (optional). Fed by the plain loader
            it receives the loader's batches; fed by the Prefetcher, batches on ``device``
            (move with ``.to(device)``, a no-op for the latter).
        transform: a prefetch transform (e.g. ``prefetch.FusedAugment``) the Prefetcher applies;
            the plain loader's batches do not get it.
        device: the Prefetcher's device (default: CUDA when available, else the CPU).
        seconds, batches: each timed pass stops after this many seconds or batches.
        rounds: repetitions of every pass, interleaved; figures are medians with their range.
        warmup: untimed batches at the start of each pass.
        depth, num_threads: the Prefetcher's.
        progress: a function taking one line of progress (default: silent).

    Returns a :class:`LoaderReport`; ``report.verdict.line`` is the answer in one line.
    Raises :class:`prefetch.bench.target.TargetError` for a loader or step it cannot use.
    """
    for name, value, least in (("seconds", seconds, 0), ("batches", batches, 1), ("rounds", rounds, 1),
                               ("warmup", warmup, 0)):
        kinds = (int, float) if name == "seconds" else (int,)
        if isinstance(value, bool) or not isinstance(value, kinds) or \
                (value <= least if name == "seconds" else value < least):
            raise ValueError("prefetch: measure_loader's %s must be %s %s %d, got %r"
                             % (name, "a number" if name == "seconds" else "an int",
                                ">" if name == "seconds" else ">=", least, value))
    say = progress or (lambda msg: None)
    loader = make_loader() if callable(make_loader) and not hasattr(make_loader, "__iter__") \
        else make_loader
    _check_iterable(loader)
    step = check_step(step)
    pf = prefetch.Prefetcher(loader, device=device, depth=depth, num_threads=num_threads,
                             transform=transform)
    device = pf.device
    rounds_of = {}
    notes = []
    # Batches of prefetch.Samples (collate_fn=prefetch.collate.samples) become tensors only in a
    # Prefetcher: the step is then fed by the Prefetcher alone.
    samples_loader = getattr(loader, "collate_fn", None) is prefetch.collate.samples
    if samples_loader and step is not None:
        notes.append("the loader's collate_fn is prefetch.collate.samples, whose batches only a "
                     "Prefetcher turns into tensors: the step is fed by the Prefetcher alone and "
                     "the verdict reads that loop")
    if isinstance(loader, torch.utils.data.DataLoader) and not samples_loader:
        notes.append("the Prefetcher wraps the DataLoader as it is: its collate_fn still runs %s "
                     "(collate_fn=prefetch.collate.samples lets the engine collate into its "
                     "pinned ring instead)" % ("in the workers" if loader.num_workers else
                                               "in the loader's next()"))
    if transform is not None and step is not None:
        notes.append("the transform runs only in the Prefetcher: the step fed by the plain "
                     "loader gets untransformed batches")

    def add(name, p):
        if p is None:
            raise TargetError("the loader yielded no batch after %d warm-up batches in pass %r; "
                              "give it more batches per epoch or lower warmup" % (warmup, name))
        rounds_of.setdefault(name + "_bps", []).append(p.rate)
        if name in ("plain_step", "prefetch_step"):
            rounds_of.setdefault(name + "_wait_fraction", []).append(p.wait_fraction)
        rounds_of.setdefault(name + "_batches", []).append(p.batches)

    # The stage figures come from stats() over the Prefetcher passes that answer the question:
    # those feeding the step when there is one (the consumer's wait is the step's), else all.
    counted = "prefetch_step" if step is not None else "prefetch"
    totals = {}

    def pf_pass(name, with_step):
        before = pf.stats()
        p = _timed_pass(lambda: iter(pf), with_step, seconds, batches, warmup, device)
        if name == counted:  # the pass's run is stopped and joined: its counters are final
            after = pf.stats()
            for k, v in after.items():
                if isinstance(v, (int, float)) and k in before and not k.endswith(
                        ("_share", "_fraction", "_gbps")):
                    totals[k] = totals.get(k, 0) + v - before[k]
        return p

    cached = None
    try:
        for r in range(rounds):
            say("round %d/%d: the loader alone" % (r + 1, rounds))
            add("loader", _timed_pass(lambda: iter(loader), None, seconds, batches, warmup, device))
            say("round %d/%d: the loader through the Prefetcher" % (r + 1, rounds))
            add("prefetch", pf_pass("prefetch", None))
            if step is None:
                continue
            if cached is None:
                # On the CPU the batch the fed loop reads (the loader's own, untransformed; its
                # Prefetcher's for a Samples loader), so the step's time alone and fed compare;
                # on a device the Prefetcher's, already there: the step with free data.
                it = iter(loader if device.type == "cpu" and not samples_loader else pf)
                cached = next(it, None)
                del it
                gc.collect()  # a DataLoader iterator's workers stop before the next pass
                if cached is None:
                    raise TargetError("the loader yielded no batch")
            say("round %d/%d: the step alone on one batch" % (r + 1, rounds))
            add("step", _step_alone(step, cached, seconds, batches, warmup, device))
            if not samples_loader:
                say("round %d/%d: the step fed by the loader" % (r + 1, rounds))
                add("plain_step", _timed_pass(lambda: iter(loader), step, seconds, batches,
                                              warmup, device))
            say("round %d/%d: the step fed by the Prefetcher" % (r + 1, rounds))
            add("prefetch_step", pf_pass("prefetch_step", step))
        cached = None
    finally:
        pf.close()
    s = dict(totals, **derived_fractions(totals))
    loop = "prefetch" if samples_loader else "plain"  # the loop as it runs is the Prefetcher's
    rounds_of.update(per_round_ratios(rounds_of, loop, torch.device(device).type))
    figures = {k: timing.Summary.of(v) for k, v in rounds_of.items() if not k.endswith("_batches")}
    stages = _stage_figures(s, s.get("submitted", s["batches"]), transform is not None)
    uses = (("samples",) if samples_loader else ()) + (
        ("fused",) if isinstance(transform, prefetch.FusedAugment) else ())
    pipeline = describe(loader, device, uses=uses, loop=loop, seconds=seconds,
                        probe=step is not None)
    verdict = judge(figures, stages["rates"], pipeline)
    config = {"device": str(device), "seconds": seconds, "batches": batches, "rounds": rounds,
              "warmup": warmup, "depth": depth, "num_threads": num_threads,
              "loader": type(loader).__name__, "step": step is not None,
              "transform": type(transform).__name__ if transform is not None else None,
              "batches_per_pass": {k[:-len("_batches")]: v for k, v in rounds_of.items()
                                   if k.endswith("_batches")}}
    return LoaderReport(figures, stages, verdict, config, notes,
                        {k: v for k, v in rounds_of.items() if not k.endswith("_batches")}, pipeline)
