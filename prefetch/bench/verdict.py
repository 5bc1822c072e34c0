"""The harness's verdict on the user's pipeline, from the figures it prints alone (no measuring
here, so every rule is tested on made-up figures).

(Over 500 lines, one job: the rules, the advice each kind gives and :func:`check`, which restates
the rules, are read and changed together; about 300 of the lines are code, the rest this
docstring, the functions' docstrings and the comments that give each threshold's reason.)

The question is the one users ask: does the training step wait for data? Each figure is a
:class:`~prefetch.bench.timing.Summary` over the interleaved rounds (median, low, high), and a
rule concludes only when a figure's whole range lies on one side of its threshold. Three figures
decide, all printed beside the verdict:

- ``W``, the wait: of the wall time of the step fed by the loader as it runs today, the part spent
  in the loader's ``next()``;
- ``c``, the capacity: the loader's rate alone over the step's rate alone, per round. Even with
  the loading perfectly overlapped the step waits ``1 - c`` of its time, so ``c <= 0.8`` means
  at least ``INPUT_BOUND`` (20%) of waiting, ``c > 0.95`` less than ``COMPUTE_BOUND`` (5%);
- on a CPU device, the slowdowns the two cause each other: ``step_slowdown``, the step's own time
  per batch in the fed loop (its time outside ``next()``) over its time alone, and
  ``loader_slowdown``, the fed loop's wait per batch over the loader's time per batch alone (a
  wait longer than the whole batch takes the loader alone means the loader ran slower). Each
  counts only where the slowed stage takes ``CONTENTION_SHARE`` (20%) of the fed loop or more and
  1 ms a batch or more alone, and where the loader can run beside the step (workers, or threads
  of its own).

The kinds (the line's first word):

- ``contended`` (CPU device): in every round the step ran at least ``CONTENTION`` (1.25x) slower
  beside the loader, or waited that much longer than the loader alone takes: they share the cores.
  Why the issue's runs contradicted themselves (measured on 2 cores with a 2-worker PIL loader
  and a small CNN step): fed by the loader the step took 2.9-4.2x its time alone, so the fed loop
  waited 4% though the loader alone (25/s) was slower than the step alone (40/s), and the old
  rule, which read the wait alone, said "compute-bound". The advice then depends on
  ``fed_vs_serial``, the fed loop's rate over the two one after the other: under
  ``OVERSUBSCRIBED`` the threads and workers oversubscribe the cores (set the thread count, fewer
  workers, pin them); at it or above, the step loses the loader's CPU time (a loader needing less);
- ``input-bound``: ``W >= 20%`` in every round; or ``c <= 0.8`` in every round and some round
  waited ``>= 20%`` (a loader slower than the step; a fed loop that waited less than that in every
  round contradicts the capacity and is inconclusive);
- ``compute-bound``: ``W < 5%`` and ``c > 0.95`` in every round;
- ``balanced``: ``5% <= W < 20%`` and ``c > 0.8`` in every round;
- ``inconclusive``: otherwise: a range crosses a threshold (a slowdown's range crossing
  ``CONTENTION`` included, where it counts), or the wait and the capacity disagree; the line says
  which and how long to run instead;
- ``loader-only``: without a step, the loader's rate alone and through the Prefetcher.

A wait above what the capacity implies (``c > 0.95`` but the step waits 25%) is a loader that runs
in series with the step: the advice is then to overlap them. The advice fits the pipeline
(:class:`Pipeline`): no "more workers" when the workers already use every usable core, the
thread count to set when the step's threads and the workers oversubscribe the cores, and
prefetch's own decode (``decode=True``, ``prefetch.transforms.v2``, ``prefetch.pack``) when the
Dataset decodes with PIL.

:func:`judge` ends with :func:`check`, which restates the rules on the printed medians and ranges
independently of how :func:`judge` reaches its kind, and raises ``AssertionError`` if the verdict
contradicts them: a verdict that contradicts its own figures is a bug, never a printed line.
"""
from typing import Mapping, NamedTuple, Optional, Tuple

INPUT_BOUND = 0.20
COMPUTE_BOUND = 0.05
# The capacities (loader alone / step alone) at which the step would wait those fractions even
# with the loading perfectly overlapped: wait = 1 - capacity.
INPUT_CAPACITY = 1.0 - INPUT_BOUND
COMPUTE_CAPACITY = 1.0 - COMPUTE_BOUND
# A slowdown beside the other stage counts as contention from this factor on (in every round),
# when the slowed stage takes at least CONTENTION_SHARE of the fed loop's time in every round (a
# step of microseconds fed by a slow loader is "slower" by the loop's own bookkeeping alone).
CONTENTION = 1.25
CONTENTION_SHARE = 0.20
# ... and whose time alone is at least this many seconds a batch in every round: the loop's own
# bookkeeping around a fed step (timer calls, freeing the batch) is some 10-100 us a batch, noise
# against a step of 26 us (measured: such a step "slowed" 1.8-17x fed by a serial loader).
CONTENTION_MIN_S = 1e-3
# Contended stages that together run at this fraction of the two one after the other or more
# share the cores about as well as they can; below, threads and workers oversubscribe them.
OVERSUBSCRIBED = 1.0 / CONTENTION
# A rate counts as changed by the Prefetcher when it moved by more than this factor (every round).
GAIN = 1.05

KINDS = ("input-bound", "compute-bound", "balanced", "contended", "inconclusive", "loader-only")


class Verdict(NamedTuple):
    kind: str   # one of KINDS
    line: str   # one line of plain words, starting with "<kind>: "


class Pipeline(NamedTuple):
    """What the advice must fit, as the report prints it.

    device: "cpu" or "cuda" (the device type the step runs on); loader: the loader's type name;
    workers: a DataLoader's ``num_workers`` (None: not a DataLoader); own_threads: the loader
    makes its batches on threads of its own (a prefetch.Prefetcher or ArrayLoader; any other
    iterable runs in the training loop's thread, between steps); cores: the usable cores
    (``os.sched_getaffinity``); threads: ``torch.get_num_threads()`` of the training process;
    pil: where the Dataset decodes with PIL (e.g. "PIL.ImageFile.load from Images.__getitem__"),
    None when not seen; uses: what the pipeline uses already ("samples":
    collate_fn=prefetch.collate.samples, "fused": prefetch.FusedAugment); loop: the fed loop the
    verdict reads ("plain": the step fed by the loader, "prefetch": by the Prefetcher, when only a
    Prefetcher makes the loader's batches tensors); seconds: the run's, for the advice to run
    longer."""

    device: str = "cpu"
    loader: str = "DataLoader"
    workers: Optional[int] = None
    own_threads: bool = False
    cores: int = 1
    threads: int = 1
    pil: Optional[str] = None
    uses: Tuple[str, ...] = ()
    loop: str = "plain"
    seconds: float = 2.0


# --- formatting (the table prints the same figures with the same functions) ------------------


def rate(value):
    """A rate as it reads best: '1,234' above 100, '45.6' below, '0.123' below 1."""
    if value is None:
        return "?"
    if value >= 100:
        return "{:,.0f}".format(value)
    return "%.1f" % value if value >= 1 else "%.3g" % value


def percent(fraction):
    return "%.0f%%" % (100 * fraction) if fraction >= 0.01 or fraction == 0 else "%.1f%%" % (100 * fraction)


def ratio(value):
    """'0.63x', '12.5x', '0.00042x'."""
    return ("%.1fx" if value >= 10 else "%.2fx" if value >= 0.01 else "%.2gx") % value


def spread(s, fmt):
    """'25.2 (24.0–25.6)' for a Summary ``s`` in the format ``fmt`` (rate, percent, ratio)."""
    return "%s (%s–%s)" % (fmt(s.median), fmt(s.low), fmt(s.high))


# --- the classes of the deciding figures -----------------------------------------------------


def wait_class(w):
    """"input", "balanced" or "compute" when the whole range of the wait ``w`` (a Summary of
    fractions) lies in one band, else None (it crosses a threshold)."""
    if w.low >= INPUT_BOUND:
        return "input"
    if w.high < COMPUTE_BOUND:
        return "compute"
    if w.low >= COMPUTE_BOUND and w.high < INPUT_BOUND:
        return "balanced"
    return None


def capacity_class(c):
    """The same bands for the capacity ``c`` (loader alone / step alone, a Summary), through the
    wait it implies when overlapped: 1 - c."""
    if c.high <= INPUT_CAPACITY:
        return "input"
    if c.low > COMPUTE_CAPACITY:
        return "compute"
    if c.low > INPUT_CAPACITY and c.high <= COMPUTE_CAPACITY:
        return "balanced"
    return None


def contention(figures, pipeline, unsure=False):
    """[(figure name, Summary)] of the slowdowns at least CONTENTION in every round (with
    ``unsure``: those whose range crosses CONTENTION, which leave the verdict inconclusive); only
    on a CPU device, where the step and the loader share the cores (on a GPU the step alone runs on
    a batch already on the device, so the step fed by the loader is slower by the copy alone), for
    a loader that runs beside the step, and for a slowed stage that takes CONTENTION_SHARE of the
    loop and CONTENTION_MIN_S a batch alone in every round."""
    if pipeline.device != "cpu" or not concurrent(pipeline):
        return []
    w = figures[pipeline.loop + "_step_wait_fraction"]
    share = {"step_slowdown": 1.0 - w.high, "loader_slowdown": w.low}  # the least in a round
    fastest = {"step_slowdown": figures["step_bps"].high,
               "loader_slowdown": figures["loader_bps" if pipeline.loop == "plain"
                                          else "prefetch_bps"].high}
    out = []
    for name in ("step_slowdown", "loader_slowdown"):
        s = figures.get(name)
        if s is None or share[name] < CONTENTION_SHARE or fastest[name] * CONTENTION_MIN_S > 1.0:
            continue
        if (s.low < CONTENTION <= s.high) if unsure else (s.low >= CONTENTION):
            out.append((name, s))
    return out


def concurrent(pipeline):
    """Whether the loader can run beside the step: a DataLoader's workers, a Prefetcher's engine
    threads (its loop, or a loader with threads of its own); a DataLoader without workers or a
    plain iterable runs between the steps, in the same thread (measured: such a step of 26 us
    "slowed" 1.8-17x by the loop's bookkeeping and noise alone)."""
    return pipeline.loop == "prefetch" or bool(pipeline.workers) or pipeline.own_threads


def slowest_stage(stages):
    """(name, batches/s) of the slowest producer stage, from {name: batches/s or None}."""
    known = [(r, name) for name, r in (stages or {}).items() if r]
    if not known:
        return None, None
    r, name = min(known)
    return name, r


# --- advice ----------------------------------------------------------------------------------

PIL_ADVICE = ("decode with prefetch instead of PIL (seen: %s): the Dataset returns the files' bytes "
              "(collate_fn=prefetch.collate.samples) and prefetch.FusedAugment(decode=True) decodes "
              "only each crop's window, or the torchvision recipe ported to prefetch.transforms.v2 "
              "with T.Compose([...], decode=True) runs on whole batches, or prefetch.pack the files "
              "once and read the store with prefetch.ArrayLoader (no workers, no Python per sample)")


def _more_workers(p):
    """The tip about workers that fits the pipeline, or a statement that more will not help."""
    if p.workers is None:
        return ("loading in parallel (a DataLoader with workers, %d usable cores)" % p.cores
                if p.cores > 1 else None), None
    if p.workers < p.cores:
        return ("more DataLoader workers (num_workers=%d now, %d usable cores)"
                % (p.workers, p.cores)), None
    return None, ("the %d workers already use every one of the %d usable cores, so more will not "
                  "help" % (p.workers, p.cores))


def stage_phrase(stage, stage_bps):
    """'the slowest stage is the source, 415 batches/s alone'."""
    return "the slowest stage is the %s%s" % (
        stage or "source", (", %s batches/s alone" % rate(stage_bps)) if stage_bps else "")


def loader_advice(stage, stage_bps, p, workers_tip=True):
    """What makes the loader faster, fitted to the pipeline ``p`` (a Pipeline); without
    ``workers_tip``, what makes it need less CPU (no word about workers)."""
    name = stage or "source"
    uses = set(p.uses)
    fact = None
    if name == "source":
        workers, fact = _more_workers(p) if workers_tip else (None, None)
        tips = [workers] if workers else []
        if p.pil:
            tips.append(PIL_ADVICE % p.pil)
        if "samples" not in uses:
            tips.append("collate_fn=prefetch.collate.samples (collation in the engine)")
        if "fused" not in uses:
            tips.append("less work per sample (e.g. flips and normalisation in "
                        "prefetch.FusedAugment, on the device)")
        elif not p.pil:
            tips.append("less work per sample in the Dataset (decoding included: FusedAugment("
                        "decode=True) decodes only each window)")
    elif name == "collation":
        tips = ["more engine threads (Prefetcher(num_threads=...)) or smaller batches"]
    else:
        tips = ["a cheaper transform, or a GPU to run it on"]
    return "%s: %stry %s" % (stage_phrase(stage, stage_bps), fact + "; " if fact else "",
                             ", or ".join(tips))


def contention_advice(p, shared=None, stage=None, stage_bps=None):
    """How to stop the step and the loader competing for the cores.

    ``shared``: the fed loop's rate over the rate of the two one after the other (a Summary;
    ``fed_vs_serial``). When both stages use every core alone, one after the other is what
    sharing the cores perfectly gives: at OVERSUBSCRIBED of it or more (the median), the cores are
    shared about as well as they can be, and only a loader that needs less CPU (or a step off the
    CPU) helps; below, the threads and workers oversubscribe the cores, and the counts to set
    follow from them (each worker a process that keeps a core busy, each torch thread wanting one)."""
    workers = p.workers or 0
    if shared is not None and shared.median >= OVERSUBSCRIBED:
        line = ("the two together run at %s the rate of the two one after the other, about what "
                "sharing the cores allows: each batch's loading takes its CPU time from the step, "
                "so a loader that needs less CPU (or a step on a GPU) speeds training up, and fewer "
                "threads or workers would not; " % spread(shared, ratio))
        return line + loader_advice(stage, stage_bps, p, workers_tip=False)
    tips = []
    free = p.cores - workers
    if workers and free < 1:
        tips.append("fewer workers (num_workers=%d, leaving a core to the step) with "
                    "torch.set_num_threads(1)" % max(1, p.cores - 1))
    elif p.threads > max(1, free):
        tips.append("torch.set_num_threads(%d) in the training process (%d threads now beside %d "
                    "workers on %d usable cores)" % (max(1, free), p.threads, workers, p.cores))
        if workers > 1:
            tips.append("fewer workers (num_workers=%d)" % (workers - 1))
    else:
        tips.append("fewer threads or workers (%d torch threads and %d workers fit the %d usable "
                    "cores: other processes on the machine or the memory bandwidth are the likelier "
                    "cause)" % (p.threads, workers, p.cores))
    if workers:
        tips.append("pin the workers to cores of their own (a worker_init_fn calling "
                    "os.sched_setaffinity) and the training process to the others")
    line = ("the two together run at %s the rate of the two one after the other: the threads and "
            "workers oversubscribe the cores; " % spread(shared, ratio) if shared is not None else "")
    line += "try " + ", or ".join(tips)
    if p.pil:
        line += "; and " + PIL_ADVICE % p.pil + ", which spends less CPU per image"
    return line


def _run_longer(p):
    # Longer passes, not more rounds: a range is min to max, which each round can only widen
    # (measured: 5 rounds of 4 s read 1.05x-2.82x where 3 of 2 s read 1.00x-2.15x, one round
    # under a burst of other work each time), while a longer pass averages over more batches.
    return ("run longer passes (--seconds %g, or seconds= of measure_loader) with less else "
            "running on the machine" % max(6.0, 3 * p.seconds))


# --- the verdict -----------------------------------------------------------------------------


def judge(figures: Mapping, stages=None, pipeline: Pipeline = Pipeline()) -> Verdict:
    """The Verdict for these figures.

    ``figures`` maps names to Summaries over the rounds (batches/s; fractions in [0, 1]; ratios):
    "loader_bps" and "prefetch_bps" always; with a step, "step_bps", "<loop>_step_bps",
    "<loop>_step_wait_fraction" for ``pipeline.loop`` ("plain" or "prefetch"), "capacity" (the
    loader's rate alone over the step's, per round; for the "prefetch" loop, the Prefetcher's),
    and on a CPU device "step_slowdown", "loader_slowdown" and "fed_vs_serial" (see the
    module's docstring);
    optionally "prefetch_step_bps", "prefetch_step_wait_fraction" and
    "prefetch_step_vs_plain_step" (per round). ``stages`` maps 'source', 'collation',
    'transform' to the batches/s each would allow alone (``Prefetcher.stats()``; None where
    unknown). Raises AssertionError when the verdict would contradict the figures (a bug)."""
    verdict = _judge(figures, stages or {}, pipeline)
    check(verdict, figures, pipeline)
    return verdict


def _judge(f, stages, p):
    stage, stage_bps = slowest_stage(stages)
    loader_label = "the loader alone" if p.loop == "plain" else "the loader through prefetch.Prefetcher"
    loader_key = "loader_bps" if p.loop == "plain" else "prefetch_bps"
    if "step_bps" not in f:
        L, P = f["loader_bps"].median, f["prefetch_bps"].median
        return Verdict("loader-only", (
            "loader-only: the loader yields %s batches/s, %s/s through prefetch.Prefetcher (%s)%s; "
            "pass --step module:function to find out whether training waits for it"
            % (spread(f["loader_bps"], rate), rate(P), ratio(P / L) if L else "?",
               "; " + stage_phrase(stage, stage_bps) if stage else "")))
    W = f[p.loop + "_step_wait_fraction"]
    c = f["capacity"]
    X, S, fed = f[loader_key], f["step_bps"], f[p.loop + "_step_bps"]
    head = "%s of each step waits for data; %s yields %s batches/s, %s the step alone (%s/s)" % (
        spread(W, percent), loader_label, rate(X.median), spread(c, ratio), rate(S.median))

    contended = contention(f, p)
    if contended:
        parts = []
        for name, s in contended:
            parts.append("fed by the loader the step takes %s its time alone per batch"
                         % spread(s, ratio) if name == "step_slowdown" else
                         "it waits %s the loader's own time per batch" % spread(s, ratio))
        return Verdict("contended", (
            "contended: the step and the loader compete for the same %d CPU cores: %s (%s yields "
            "%s batches/s, the step alone runs %s/s, the two together %s/s with %s waiting); %s"
            % (p.cores, " and ".join(parts), loader_label, rate(X.median), rate(S.median),
               rate(fed.median), percent(W.median),
               contention_advice(p, f.get("fed_vs_serial"), stage, stage_bps))))

    if contention(f, p, unsure=True):
        return Verdict("inconclusive", "inconclusive: %s; %s" % (_why_inconclusive(f, W, c, p),
                                                               _run_longer(p)))
    wc, cc = wait_class(W), capacity_class(c)
    serial = c.low > COMPUTE_CAPACITY  # the loader alone outruns the step in every round
    pf_tip = _prefetcher_tip(f, p)
    if p.workers == 0:
        in_series = "it runs in series with the step (no workers)"
    else:  # e.g. a DataLoader's hand-off: unpickling each batch from the workers' queue
        in_series = ("part of each batch's loading runs in series with the step, in next() (%.3g "
                     "ms a batch)" % (1e3 * W.median / fed.median))
    no_gain = _prefetcher_no_gain(f, p)
    if pf_tip:
        overlap = "the loader alone is fast enough, but %s: overlap it with %s" % (in_series, pf_tip)
    elif no_gain:  # measured, and not faster in every round: advise something else
        overlap = ("the loader alone is fast enough, but %s; prefetch.Prefetcher as it is did not "
                   "overlap it here (%s): %s" % (in_series, no_gain, (
                       "give the DataLoader workers" if p.workers == 0 and p.cores > 1 else
                       "let the batches cross in shared slots instead of pickled "
                       "(collate_fn=prefetch.collate.samples under the Prefetcher)"
                       if (p.workers or 0) > 0 else "a faster source")))
    else:
        overlap = "the loader alone is fast enough, but %s: overlap it with %s" % (
            in_series, "prefetch.Prefetcher" + (", or DataLoader workers" if p.workers == 0
                                                 and p.cores > 1 else ""))
    if W.low >= INPUT_BOUND or (cc == "input" and W.high >= INPUT_BOUND):
        if serial:
            tail = overlap
        else:
            tail = ("try %s; " % pf_tip if pf_tip else "") + loader_advice(stage, stage_bps, p)
        return Verdict("input-bound", "input-bound: %s; %s" % (head, tail))
    if wc == "compute" and cc == "compute":
        return Verdict("compute-bound", (
            "compute-bound: %s; a faster step will speed training up (up to the %s batches/s the "
            "loader delivers), a faster loader will not" % (head, rate(X.median))))
    if wc == "balanced" and cc in ("balanced", "compute"):
        if serial:
            tail = overlap
        else:
            tail = ("the loader only just keeps up: a faster step alone gains little; "
                    + ("try %s; " % pf_tip if pf_tip else "") + loader_advice(stage, stage_bps, p))
        return Verdict("balanced", "balanced: %s; %s" % (head, tail))
    return Verdict("inconclusive", "inconclusive: %s; %s" % (_why_inconclusive(f, W, c, p),
                                                           _run_longer(p)))


def _prefetcher_tip(f, p):
    """'prefetch.Prefetcher (fed by it, 2% of each step waits and the loop runs 1.58x (...) the
    steps/s: 600/s)' when in every round the Prefetcher's loop ran faster than the loader's by
    more than GAIN, else None."""
    s = f.get("prefetch_step_vs_plain_step")
    if p.loop != "plain" or s is None or s.low <= GAIN:
        return None
    return ("prefetch.Prefetcher (fed by it, %s of each step waits and the loop runs %s the "
            "steps/s: %s/s)" % (percent(f["prefetch_step_wait_fraction"].median), spread(s, ratio),
                                rate(f["prefetch_step_bps"].median)))


def _prefetcher_no_gain(f, p):
    """'fed by it the loop ran 0.89x (0.81x-0.99x) the steps/s' when the Prefetcher's loop was
    measured and was not faster than the loader's by more than GAIN in every round, else None."""
    s = f.get("prefetch_step_vs_plain_step")
    if p.loop != "plain" or s is None or s.low > GAIN:
        return None
    return "fed by it the loop ran %s the steps/s" % spread(s, ratio)


def _why_inconclusive(f, W, c, p):
    """How the wait and the capacity disagree, or which figure crosses which threshold."""
    # In every round the step waited less than the capacity lets it (wait >= 1 - capacity).
    if (c.high <= INPUT_CAPACITY and W.high < INPUT_BOUND) or \
            (c.high <= COMPUTE_CAPACITY and W.high < COMPUTE_BOUND):
        X = f["loader_bps" if p.loop == "plain" else "prefetch_bps"].median
        why = ("the figures disagree: the step waited %s of each step, less than %s allows at "
               "%s batches/s, %s the step alone (%s/s): the step would wait %s even with the "
               "loading overlapped, so the passes ran under different conditions" % (
                   spread(W, percent), "the loader alone" if p.loop == "plain" else
                   "the loader through prefetch.Prefetcher", rate(X), spread(c, ratio),
                   rate(f["step_bps"].median), percent(max(0.0, 1 - c.high))))
        if p.device == "cpu" and "step_slowdown" in f:
            why += " (the step fed by the loader took %s its time alone)" % spread(
                f["step_slowdown"], ratio)
        return why
    crossing = []
    if wait_class(W) is None:
        crossing.append("%s of each step waits for data (thresholds %s and %s)"
                        % (spread(W, percent), percent(COMPUTE_BOUND), percent(INPUT_BOUND)))
    if capacity_class(c) is None:
        crossing.append("the loader alone / the step alone is %s (thresholds %s and %s)"
                        % (spread(c, ratio), ratio(INPUT_CAPACITY), ratio(COMPUTE_CAPACITY)))
    for name, s in contention(f, p, unsure=True):
        crossing.append("%s is %s (contention from %s)" % (
            "fed by the loader the step's time per batch over its time alone"
            if name == "step_slowdown" else
            "the wait per batch fed over the loader's time per batch alone",
            spread(s, ratio), ratio(CONTENTION)))
    return "the rounds' ranges cross the thresholds: " + "; ".join(crossing)


def check(verdict, figures, pipeline=Pipeline()):
    """Raises AssertionError when ``verdict`` contradicts ``figures``: the rules restated on what
    the table prints (medians and ranges), independently of how :func:`judge` reaches its kind.
    In particular "compute-bound" never comes with the loader's median rate below 0.95 of the
    step's or a median wait of 5% or more, "input-bound" never with a median wait under 20% and
    a loader as fast as 0.8 of the step."""
    f, kind = figures, verdict.kind

    def fail(why):
        raise AssertionError("prefetch.bench internal error: the verdict %r contradicts its "
                             "figures: %s" % (verdict.line, why))

    if kind not in KINDS or not verdict.line.startswith(kind + ": ") or "\n" in verdict.line:
        fail("not one line starting with one of %s" % (KINDS,))
    if kind == "loader-only":
        if "step_bps" in f:
            fail("a step was measured")
        return
    if "step_bps" not in f:
        fail("no step was measured")
    W = f[pipeline.loop + "_step_wait_fraction"]
    c = f["capacity"]
    X = f["loader_bps" if pipeline.loop == "plain" else "prefetch_bps"].median
    S = f["step_bps"].median
    # A slowdown that counts (on a CPU, beside a loader that runs beside the step): of a stage
    # that took CONTENTION_SHARE or more of the loop in every round (the step: 1 - W; the wait:
    # W) and CONTENTION_MIN_S or more a batch alone; its range against CONTENTION.
    Xs = f["loader_bps" if pipeline.loop == "plain" else "prefetch_bps"]
    counted = [] if pipeline.device != "cpu" or not concurrent(pipeline) else [
        f[k] for k, share, fastest in (("step_slowdown", 1 - W.high, f["step_bps"].high),
                                       ("loader_slowdown", W.low, Xs.high))
        if k in f and share >= CONTENTION_SHARE and fastest <= 1 / CONTENTION_MIN_S]
    slowed = any(s.low >= CONTENTION for s in counted)
    unsure = any(s.low < CONTENTION <= s.high for s in counted)
    if kind == "contended":
        if not slowed:
            fail("no slowdown of %s or more in every round on a CPU device" % CONTENTION)
        return
    if slowed:
        fail("the stages slowed each other by %s or more in every round" % CONTENTION)
    if unsure and kind != "inconclusive":
        fail("a slowdown's range crosses %s" % CONTENTION)
    if kind == "compute-bound":
        if not (W.high < COMPUTE_BOUND and W.median < COMPUTE_BOUND):
            fail("the step waited %s or more in a round" % percent(COMPUTE_BOUND))
        if not (c.low > COMPUTE_CAPACITY and X > COMPUTE_CAPACITY * S):
            fail("the loader (%s/s) is not faster than %s the step alone (%s/s) in every round"
                 % (rate(X), COMPUTE_CAPACITY, rate(S)))
    elif kind == "balanced":
        if not (COMPUTE_BOUND <= W.low and W.high < INPUT_BOUND):
            fail("the wait crosses %s or %s" % (percent(COMPUTE_BOUND), percent(INPUT_BOUND)))
        if not (c.low > INPUT_CAPACITY and X > INPUT_CAPACITY * S):
            fail("the loader (%s/s) is at most %s the step alone (%s/s) in a round"
                 % (rate(X), INPUT_CAPACITY, rate(S)))
    elif kind == "input-bound":
        if not (W.low >= INPUT_BOUND or (c.high <= INPUT_CAPACITY and X <= INPUT_CAPACITY * S
                                         and W.high >= INPUT_BOUND)):
            fail("the step waited under %s in a round and the loader is faster than %s the step "
                 "alone in a round" % (percent(INPUT_BOUND), INPUT_CAPACITY))
    elif kind == "inconclusive":
        conclusive = (W.low >= INPUT_BOUND or (W.high < COMPUTE_BOUND and c.low > COMPUTE_CAPACITY)
                      or (COMPUTE_BOUND <= W.low and W.high < INPUT_BOUND
                          and c.low > INPUT_CAPACITY)
                      or (c.high <= INPUT_CAPACITY and W.high >= INPUT_BOUND))
        if conclusive and not unsure:
            fail("the figures lie on one side of every threshold")
