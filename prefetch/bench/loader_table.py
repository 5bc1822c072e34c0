"""The printed form of a LoaderReport: the rates with their range, the per-round ratios the
verdict reads, the pipeline its advice fits, each Prefetcher stage, the notes, and the verdict as
the last line. Every figure the verdict quotes is printed here, formatted by the same functions."""
from .loader_pipeline import describe_line
from .verdict import percent, rate, ratio, spread

ROWS = [
    ("loader_bps", "the loader alone", None),
    ("prefetch_bps", "the loader through prefetch.Prefetcher", None),
    ("step_bps", "the step alone, on one batch kept in memory", None),
    ("plain_step_bps", "the step fed by the loader", "plain_step_wait_fraction"),
    ("prefetch_step_bps", "the step fed by the Prefetcher", "prefetch_step_wait_fraction"),
]

# Ratios taken within each round (prefetch.bench.loader.per_round_ratios), median (range).
RATIOS = [
    ("capacity", "the loader alone / the step alone (capacity)"),
    ("step_slowdown", "the step's own time per batch, fed / alone"),
    ("loader_slowdown", "the wait per batch fed / the loader's time alone"),
    ("fed_vs_serial", "the step fed / the two one after the other"),
    ("prefetch_vs_loader", "the Prefetcher / the loader alone"),
    ("prefetch_step_vs_plain_step", "the step fed by the Prefetcher / by the loader"),
]

STAGES = [
    ("source_ms", "source_share", "source: the loader's next()", "source"),
    ("collate_ms", "collate_share", "collation into the pinned ring (and, on the CPU, the copy)",
     "collation"),
    ("handoff_ms", "handoff_share", "hand-off: flattening, enqueuing the copy, publishing", None),
    ("transform_ms", "transform_share", "transform", "transform"),
    ("producer_blocked_ms", "blocked_share", "waiting for a free slot (the consumer is slower)",
     None),
]


def flat_metrics(report):
    """The flat ``metrics`` object of results.json (medians; the ratios are per-round ratios'
    medians)."""
    out = {k: s.median for k, s in report.figures.items()}
    out["stats_wait_fraction"] = report.stages["wait_fraction"]
    return out


def format_report(report):
    """Lines to print; the last one is the verdict."""
    c = report.config
    lines = ["", "your loader (%s) on %s: %d interleaved rounds, each pass <= %g s or %d batches "
             "after %d warm-up batches" % (c["loader"], c["device"], c["rounds"], c["seconds"],
                                            c["batches"], c["warmup"]),
             "  %-50s | %-26s | %s" % ("", "batches/s median (range)", "waits for data")]
    for key, label, wait_key in ROWS:
        s = report.figures.get(key)
        if s is None:
            continue
        cell = spread(s, rate)
        wait = spread(report.figures[wait_key], percent) if wait_key in report.figures else ""
        lines.append("  %-50s | %-26s | %s" % (label, cell, wait))
    for key, label in RATIOS:
        s = report.figures.get(key)
        if s is not None:
            label = label.replace("the loader alone", "the Prefetcher alone") \
                if key == "capacity" and report.pipeline.loop == "prefetch" else label
            lines.append("  %-50s | %-26s |" % (label, spread(s, ratio)))
    lines.append("  " + describe_line(report.pipeline))
    st = report.stages
    lines.append("  the Prefetcher's stages, per batch over the %d batches of its passes %s "
                 "(Prefetcher.stats()):" % (st["batches_produced"], "feeding the step"
                                            if c["step"] else "alone"))
    for ms, share, label, rate_name in STAGES:
        alone = st["rates"].get(rate_name) if rate_name else None
        lines.append("    %-62s %8.3f ms  %5s of the producer%s" % (
            label, st[ms], percent(st[share]),
            ("  (alone: %s batches/s)" % rate(alone)) if alone else ""))
    lines.append("    %-62s %8.3f ms  wait_fraction %s" % (
        "the consumer waiting in next()", st["consumer_wait_ms"], percent(st["wait_fraction"])))
    for note in report.notes:
        lines.append("  note: " + note)
    return lines
