"""The harness's verdict on the user's pipeline, from its figures alone (no measuring here, so
the rules are tested on made-up numbers).

The question is the one users ask: does the training step wait for data? The answer is read off
the step fed by the loader as it is today (``plain_wait_fraction``: of the wall time of that
loop, the part spent in the loader's ``next()``):

- ``input-bound`` when at least ``INPUT_BOUND`` (20%) of each step waits for data;
- ``compute-bound`` when less than ``COMPUTE_BOUND`` (5%) does;
- ``balanced`` in between (the loader only just keeps up);
- ``loader-only`` without a step: the loader's rate alone, with and without the Prefetcher.

The advice names the slowest stage the Prefetcher's ``stats()`` saw (the source, collation, the
transform) and what the Prefetcher itself changed.
"""
from typing import NamedTuple

INPUT_BOUND = 0.20
COMPUTE_BOUND = 0.05
# A rate counts as changed by the Prefetcher when it moved by more than this factor.
GAIN = 1.05


class Verdict(NamedTuple):
    kind: str   # "input-bound", "compute-bound", "balanced" or "loader-only"
    line: str   # one line of plain words, starting with the kind


def rate(value):
    """A rate as it reads best: '1,234' above 100, '45.6' below, '0.123' below 1."""
    if value is None:
        return "?"
    if value >= 100:
        return "{:,.0f}".format(value)
    return "%.1f" % value if value >= 1 else "%.3g" % value


def percent(fraction):
    return "%.0f%%" % (100 * fraction) if fraction >= 0.01 or fraction == 0 else "%.1f%%" % (100 * fraction)


def slowest_stage(stages):
    """(name, batches/s) of the slowest producer stage, from {name: batches/s or None}."""
    known = [(r, name) for name, r in stages.items() if r]
    if not known:
        return None, None
    r, name = min(known)
    return name, r


# What to try when a stage is the slowest: (advice, what the advice needs the pipeline not to use
# already: "samples" for collate_fn=prefetch.collate.samples, "fused" for prefetch.FusedAugment).
STAGE_ADVICE = {
    "source": [("more DataLoader workers", None),
               ("collate_fn=prefetch.collate.samples (collation in the engine)", "samples"),
               ("less work per sample (e.g. flips and normalisation in prefetch.FusedAugment, on "
                "the device)", "fused"),
               ("less work per sample in the Dataset (decoding included: FusedAugment("
                "decode=True) decodes only each window)", "not fused")],
    "collation": [("more engine threads (Prefetcher(num_threads=...)) or smaller batches", None)],
    "transform": [("a cheaper transform, or a GPU to run it on", None)],
}


def _stage_advice(stage, stage_bps, uses=()):
    """The advice for ``stage``, leaving out what the pipeline ``uses`` already ("samples",
    "fused")."""
    name = stage or "source"
    alone = (", %s batches/s alone" % rate(stage_bps)) if stage_bps else ""
    uses = set(uses)
    tips = [tip for tip, needs in STAGE_ADVICE[name]
            if needs is None or (needs.startswith("not ") and needs[4:] in uses)
            or (not needs.startswith("not ") and needs not in uses)]
    return "the slowest stage is the %s%s: try %s" % (name, alone, ", or ".join(tips))


def judge(loader_bps, prefetch_bps, step_bps=None, plain_step_bps=None, prefetch_step_bps=None,
          plain_wait_fraction=None, prefetch_wait_fraction=None, stages=None, uses=()):
    """The Verdict for these figures (batches per second; fractions in [0, 1]; ``stages`` maps
    'source', 'collation', 'transform' to the batches/s each would allow alone, from
    ``stats()``; None or missing where unknown). ``uses``: what the pipeline uses already
    ("samples": collate_fn=prefetch.collate.samples, "fused": prefetch.FusedAugment), which the
    advice then does not suggest."""
    stage, stage_bps = slowest_stage(stages or {})

    def advice():
        return _stage_advice(stage, stage_bps, uses)

    if step_bps is None or plain_wait_fraction is None:
        return Verdict("loader-only", (
            "loader-only: the loader yields %s batches/s, %s/s through prefetch.Prefetcher "
            "(%.2fx)%s; pass --step module:function to find out whether training waits for it"
            % (rate(loader_bps), rate(prefetch_bps), prefetch_bps / loader_bps if loader_bps else 0.0,
               "; " + advice().split(": try")[0] if stage else "")))
    wait = plain_wait_fraction
    pf_wait = prefetch_wait_fraction if prefetch_wait_fraction is not None else wait
    head = "%s of each step waits for data; the loader yields %s batches/s, the step alone runs %s/s" % (
        percent(wait), rate(loader_bps), rate(step_bps))
    speedup = (prefetch_step_bps / plain_step_bps
               if prefetch_step_bps is not None and plain_step_bps else None)
    helped = speedup is not None and speedup > GAIN
    with_pf = None
    if speedup is not None:
        with_pf = "%s%s of each step waits and it runs %.2fx the steps/s (%s/s)" % (
            "with prefetch.Prefetcher " if not helped else "", percent(pf_wait), speedup,
            rate(prefetch_step_bps))
    if wait >= INPUT_BOUND:
        if helped and pf_wait < COMPUTE_BOUND:
            return Verdict("input-bound", "input-bound: %s; try prefetch.Prefetcher: %s"
                           % (head, with_pf.replace("of each step", "of each step then", 1)))
        tail = advice()
        if with_pf:
            tail = (with_pf if not helped else "prefetch.Prefetcher helps (%s)" % with_pf) \
                + "; " + tail
        return Verdict("input-bound", "input-bound: %s; %s" % (head, tail))
    if wait < COMPUTE_BOUND:
        return Verdict("compute-bound", (
            "compute-bound: %s; a faster loader will not speed training up, a faster step will "
            "(up to the %s batches/s the loader delivers)" % (head, rate(max(loader_bps, prefetch_bps or 0.0)))))
    tail = "the loader only just keeps up"
    if helped:
        tail += "; try prefetch.Prefetcher: %s" % with_pf.replace("of each step", "of each step then", 1)
    tail += "; for a faster step, " + advice()
    return Verdict("balanced", "balanced: %s; %s" % (head, tail))
