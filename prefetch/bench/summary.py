"""The closing line of ``python -m prefetch.bench``: prefetch against the usual PyTorch path,
over every comparison the run made, in one sentence."""
import os
import statistics

# metric -> what it compares (prefetch's figure / the usual path's; above 1: prefetch is faster)
COMPARISONS = [
    # default_collate in the main process runs on one thread by nature (as in one DataLoader
    # worker); the engine on N: the label says so (the workers rows compare at equal N).
    ("collate_vs_default_collate", "collation (N threads) vs default_collate (1 thread)"),
    ("h2d_vs_pin_memory", "host-to-device vs pin_memory().to()"),
    ("ops_vs_torch_chain", "fused op vs the torch op chain"),
    ("arrays_vs_dataloader", "ArrayLoader vs the better DataLoader (0 or N workers)"),
    ("e2e_vs_baseline", "training loop (ResNet-18) vs the usual DataLoader pipeline"),
    ("e2e_heavy_vs_baseline", "training loop (ResNet-50) vs the usual DataLoader pipeline"),
    ("e2e_vs_timm", "training loop (ResNet-18) vs timm's PrefetchLoader"),
    ("jpeg_prefetch_vs_usual", "JPEG pipeline with workers vs the usual one"),
    ("jpeg_prefetch_decode_vs_usual", "JPEG decode by prefetch vs the usual pipeline"),
    ("recipe_prefetch_vs_usual", "ResNet-50 v2 recipe via prefetch.transforms.v2 vs the usual one"),
]
# Where a prefetch row can trail and the reason is known: the model (or the consumer) and the
# pipeline run on the same cores.
SHARED_CORES = ("e2e_", "jpeg_", "recipe_", "prefetch_vs_usual_b")


def comparisons(metrics):
    """[(metric, label, ratio)] of the comparisons present, the workers' at their largest batch."""
    out = [(k, label, metrics[k]) for k, label in COMPARISONS if k in metrics]
    sizes = sorted(int(k.rsplit("_b", 1)[1]) for k in metrics
                   if k.startswith("prefetch_vs_usual_b") and k.rsplit("_b", 1)[1].isdigit())
    if sizes:
        k = "prefetch_vs_usual_b%d" % sizes[-1]
        out.append((k, "whole epochs with workers, batch %d, vs the usual pipeline" % sizes[-1], metrics[k]))
    return out


def verdict(metrics, device_type="cpu", cores=None):
    """One line: in how many comparisons prefetch was faster, the range of the ratios, and for
    each where it was slower, why when that is known."""
    found = comparisons(metrics)
    if not found:
        return "verdict: no comparison of prefetch against the usual path ran (see the sections above)"
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    ratios = [r for _, _, r in found]
    faster = [f for f in found if f[2] > 1]
    line = ("verdict: prefetch was faster than the usual PyTorch path in %d of %d comparisons "
            "(ratios %.2fx to %.1fx, median %.2fx)" % (len(faster), len(found), min(ratios),
                                                       max(ratios), statistics.median(ratios)))
    slower = [f for f in found if f[2] <= 1]
    if slower:
        parts = []
        for key, label, ratio in slower:
            why = ("on a CPU the model or consumer and the pipeline share the same %s cores"
                   % cores if device_type == "cpu" and key.startswith(SHARED_CORES)
                   else "see its section's table")
            parts.append("%s %.2fx (%s)" % (label, ratio, why))
        line += "; not faster: " + "; ".join(parts)
    return line
