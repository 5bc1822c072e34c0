"""End to end: real training loops fed by the pipelines a user would pick, from JPEG files, in one
run.

torchvision's ResNet-18 and ResNet-50 architectures (random init, channels_last, bf16 autocast,
SGD; ``e2e_models``) train on photo-like JPEG files with torchvision's v2 recipe
(RandomResizedCrop(176), horizontal flip, TrivialAugmentWide, ToDtype + Normalize), fed by
(``e2e_pipelines``):

- ``baseline``, the usual pipeline: a DataLoader with N workers running the recipe with PIL
  (torchvision's transforms when it imports), ``pin_memory=True``, ``non_blocking=True``;
- ``timm``: timm's PrefetchLoader over the same workers (CUDA, timm installed);
- ``prefetch``: ``prefetch.transforms.v2``'s Compose of the recipe with ``decode=True`` in a
  Prefetcher with N threads, the files' bytes read by N workers;
- ``ceiling`` (shown as ``cached``): the same loop fed by a few batches already on the device.

Every pipeline has the same N (``Config.workers``). ResNet-50 shows whether a pipeline costs
anything when the model bounds the step; ResNet-18 what it gives when the input does. Each row
gives images/s, the step time (median over every timed step, and the mean: the pass's time over
its steps, what images/s is made of) and the share of the step time the GPU waited for data
(``e2e_loop``: from CUDA events; on a CPU the step's time in ``next()``).

On a CPU (CI) the section trains a tiny CNN on tiny images for a few steps: it exercises the loop
and measures nothing a user would train (``e2e_models``). On a GPU every pipeline runs at least
50 timed steps after its warm-up.
"""
import itertools
import math
import os
import shutil
import tempfile

import torch

import prefetch

from . import e2e_pipelines as P
from . import text, timing
from .constants import CLASSES
from .datasets import write_jpegs
from .e2e_loop import Passes, Trainer, run_steps
from .e2e_models import ROLES, plan
from .section import Section, SectionResult, Skipped

ORDER = ("baseline", "timm", "prefetch", "ceiling")  # the order of every round
LABELS = {"ceiling": "cached"}
MIN_GPU_STEPS = 50  # timed steps per pipeline on a GPU, at least (the section's goal for a GPU run)
RECIPE_SIZE = 176  # the v2 recipe's train crop
MODEL_WARMUP_STEPS = 3  # per model, on the cached batches: cuDNN's autotuning, the allocator


def sizes(config):
    """What a run does, from its config: ``rounds`` (interleaved passes per pipeline),
    ``steps_per_pass`` (timed), ``warmup`` (untimed steps at the start of each pass), the batch,
    the crop, the JPEG files (count and scale of their ~500x375 size) and the cached batches.

    On a GPU: 3 rounds and at least 50 timed steps per pipeline (``--steps`` asks for more), a
    pass's timed steps a multiple of N, batch ``max(--batch-size)``, crop 176, 256 files of
    ImageNet's size. A DataLoader's N workers each make a whole batch, so its batches arrive in
    bursts of about N; a timed stretch of whole bursts measures their rate, not where a burst
    happened to fall (and the warm-up, N + 2 steps, takes the first burst, which arrives with
    the workers' start-up). On a CPU: a tiny run (batch 16, 32x32 crops of ~75x56 files; with
    ``--quick`` batch 8 and 2 rounds of 2 timed steps, fewer than 50: the rows say so)."""
    n = config.workers
    if config.device.type == "cuda":
        rounds = 3
        wanted = max(MIN_GPU_STEPS, config.steps or MIN_GPU_STEPS)
        return {"rounds": rounds, "steps_per_pass": n * math.ceil(wanted / (rounds * n)),
                "warmup": n + 2, "batch_size": max(config.batch_sizes), "image_size": RECIPE_SIZE,
                "files": 256, "scale": 1.0, "ceiling_batches": 4}
    rounds = 2 if config.quick else 3
    wanted = config.steps or (4 if config.quick else MIN_GPU_STEPS)
    per_pass = (math.ceil(wanted / rounds) if config.quick
                else n * math.ceil(wanted / (rounds * n)))
    return {"rounds": rounds, "steps_per_pass": per_pass, "warmup": n + 2,
            "batch_size": 8 if config.quick else 16, "image_size": 32,
            "files": 16 if config.quick else 32, "scale": 0.15, "ceiling_batches": 2}


def _summary(values):
    s = timing.Summary.of(values)
    return {"median": s.median, "low": s.low, "high": s.high}


def row(seconds, records):
    """One pipeline's row from its passes: ``seconds`` (each timed pass, host clock, device
    synchronized around it) and their ``StepRecord``s."""
    per_step = [r.result() for r in records]
    step_s = [x for r in per_step for x in r["step_s"]]
    wait_s = [x for r in per_step for x in r["wait_s"]]
    host_wait_s = [x for r in per_step for x in r["host_wait_s"]]
    images = [r.images for r in records]
    total_s, steps = sum(seconds), len(step_s)
    return {
        "img_per_s": sum(images) / total_s,
        "img_per_s_rounds": _summary([i / s for i, s in zip(images, seconds)]),
        "step_s": total_s / steps,  # the mean (what images/s is made of)
        "step_s_mean": total_s / steps,
        "step_s_median": timing.median(step_s),
        "step_s_range": [min(step_s), max(step_s)],
        "wait_fraction": sum(wait_s) / sum(step_s),
        "host_wait_fraction": sum(host_wait_s) / total_s,
        "timed_steps": steps,
        "rounds_s": list(seconds),
        "rounds_images": images,
    }


def ratio(rows, a, b):
    """a's images/s over b's, per round (the same round's passes): median, low, high."""
    ra, rb = rows[a], rows[b]
    return _summary([(ia / sa) / (ib / sb) for ia, sa, ib, sb in
                     zip(ra["rounds_images"], ra["rounds_s"], rb["rounds_images"], rb["rounds_s"])])


def ratios(rows):
    out = {}
    for a, b in (("prefetch", "baseline"), ("prefetch", "timm"), ("prefetch", "ceiling"),
                 ("baseline", "ceiling"), ("timm", "ceiling")):
        if a in rows and b in rows:
            out["%s_vs_%s" % (a, b)] = ratio(rows, a, b)
    return out


def measure(config):
    """Trains every model of ``e2e_models.plan`` with every pipeline; returns the section's
    details (``results[model][pipeline]`` rows, ``ratios[model]``, the timed ``order``, what was
    ``skipped``, each pipeline's ``resources`` and the ``config``)."""
    device, n = config.device, config.workers
    s = sizes(config)
    bs, size = s["batch_size"], s["image_size"]
    models = plan(device.type)
    names, skipped = list(ORDER), {}
    if device.type != "cuda":
        skipped["timm"] = "timm's PrefetchLoader needs a CUDA device"
    elif not P.timm_available():
        skipped["timm"] = "timm is not installed (pip install timm)"
    if "timm" in skipped:
        names.remove("timm")
    if models[0].source == "tiny":
        skipped["resnet"] = ("a tiny CNN on tiny images instead of %s: %s" % (
            " and ".join(ROLES.values()),
            "neither torchvision nor timm imports" if device.type == "cuda" else
            "a CPU run exercises the loop (CI), it measures nothing a user would train"))
    directory = tempfile.mkdtemp(prefix="prefetch-bench-e2e-")
    cudnn_benchmark, torch_threads = torch.backends.cudnn.benchmark, torch.get_num_threads()
    # N intra-op threads in the main process (python -m prefetch.bench sets them for the whole
    # run; here too for a direct call): prefetch's decodes and transforms run on them.
    torch.set_num_threads(n)
    try:
        files = write_jpegs(directory, s["files"], scale=s["scale"])
        mean_kb = sum(os.path.getsize(p) for p in files) / len(files) / 1e3
        # Each pass reads at most its warm-up, its timed steps and what the workers make ahead
        # (2 batches each): the files repeated to that length, so no pass reaches an epoch's end.
        per_pass = (s["warmup"] + s["steps_per_pass"] + 2 * n + 1) * bs
        paths = files * math.ceil(per_pass / len(files))
        config.progress("e2e: %d JPEG files (%.0f kB on average), crop %d, batch %d, N = %d; "
                        "models %s; %d rounds of %s, each pass %d warm-up + %d timed steps" % (
                            len(files), mean_kb, size, bs, n, ", ".join(m.key for m in models),
                            s["rounds"], ", ".join(names), s["warmup"], s["steps_per_pass"]))
        torch.backends.cudnn.benchmark = True  # as a training script sets it
        ready = P.device_batches(paths, size, bs, n, device, s["ceiling_batches"])
        builders = {name: (lambda name=name: P.BUILDERS[name](paths, size, bs, n, device))
                    for name in names if name != "ceiling"}
        builders["ceiling"] = lambda: P.ceiling_pass(ready)
        builders = {name: builders[name] for name in names}
        results, model_ratios, order = {}, {}, {}
        for spec in models:
            torch.manual_seed(0)
            trainer = Trainer(spec.build(CLASSES), device)
            run_steps(trainer, itertools.cycle(ready), MODEL_WARMUP_STEPS)
            passes = Passes(trainer, builders, s["warmup"], s["steps_per_pass"], config.progress,
                            spec.key + " ")
            order[spec.key] = []
            # Whole passes interleaved (baseline, timm, prefetch, cached, then again), each
            # pipeline built for its pass and closed after it — not blocks of steps with every
            # iterator kept alive: a paused DataLoader's workers would go on making their 2N
            # outstanding batches during the next pipeline's block (its cores taken) and hand
            # them over at its own next block (steps with free data). A pass's warm-up steps
            # absorb its start-up; its timed steps see the steady state.
            try:
                seconds = timing.interleaved(
                    {name: (passes.opener(name), passes.timed) for name in names}, s["rounds"],
                    device=device, warmup=0, order=order[spec.key])
            finally:
                passes.close()
            rows = {name: row(seconds[name], passes.records[name]) for name in names}
            results[spec.key] = rows
            model_ratios[spec.key] = ratios(rows)
            del trainer, passes
        del ready
    finally:
        torch.backends.cudnn.benchmark = cudnn_benchmark
        torch.set_num_threads(torch_threads)
        shutil.rmtree(directory, ignore_errors=True)
    timed = s["rounds"] * s["steps_per_pass"]
    return {
        "results": results,
        "ratios": model_ratios,
        "order": order,
        "skipped": skipped,
        "resources": {k: v for k, v in P.pipeline_resources(n).items() if k in names},
        "config": {
            "workers": n, "batch_size": bs, "image_size": size, "files": len(files),
            "mean_file_kb": mean_kb, "rounds": s["rounds"], "steps_per_pass": s["steps_per_pass"],
            "warmup_steps": s["warmup"], "timed_steps": timed,
            "fewer_than_min_steps": timed < MIN_GPU_STEPS,
            "quick": config.quick, "pipelines": names,
            "models": {m.key: {"role": m.role, "source": m.source} for m in models},
            "roles": {m.role: m.key for m in models},
            "shapes": {m.key: {"batch_size": bs, "image_size": size} for m in models},
            "usual_transforms": P.RecipeImages(files, size).impl,
            "prefetch_recipe": repr(P.recipe(size)),
            "gpu_jpeg_decoder": (prefetch.ops.gpu_jpeg_decoder() if device.type == "cuda"
                                 else None),
            "autocast": "bfloat16" if device.type == "cuda" else None,
            "wait": ("the share of the timed steps' time the GPU waited for data (CUDA events "
                     "around next())" if device.type == "cuda" else
                     "the share of the timed steps' time spent in next()"),
            "scheme": "rounds of whole passes, interleaved in the order of 'pipelines'; each "
                      "pass builds its pipeline, runs warmup_steps untimed, then steps_per_pass "
                      "timed, and is closed before the next pass is built",
        },
    }


def metrics(e2e):
    """The flat metrics of results.json. Per model ``m``: ``e2e_<m>_img_per_s`` and
    ``e2e_<m>_wait_fraction`` (prefetch's) and ``e2e_<m>_<a>_vs_<b>`` (medians of per-round
    ratios of images/s). By role (the names the README and the verdict know): the input-bound
    model's (ResNet-18; the tiny CNN on a CPU) ``e2e_img_per_s``, ``e2e_vs_baseline``,
    ``e2e_vs_timm``, ``e2e_wait_fraction``; the compute-bound model's (ResNet-50)
    ``e2e_heavy_vs_baseline`` and ``e2e_overlap_ratio`` (prefetch's mean step over the cached
    batches'). The role metrics are absent when the model was the tiny CNN (a CPU run): they
    enter the bench's verdict, and a tiny CNN's loop on shared cores compares no training."""
    m = {}
    for key, rows in e2e["results"].items():
        m["e2e_%s_img_per_s" % key] = rows["prefetch"]["img_per_s"]
        m["e2e_%s_wait_fraction" % key] = rows["prefetch"]["wait_fraction"]
        for name, s in e2e["ratios"][key].items():
            m["e2e_%s_%s" % (key, name)] = s["median"]
    models = e2e["config"].get("models", {})
    roles = {role: key for role, key in e2e["config"]["roles"].items()
             if models.get(key, {}).get("source") != "tiny"}
    if "input_bound" in roles:
        key = roles["input_bound"]
        rows, r = e2e["results"][key], e2e["ratios"][key]
        m["e2e_img_per_s"] = rows["prefetch"]["img_per_s"]
        m["e2e_vs_baseline"] = r["prefetch_vs_baseline"]["median"]
        m["e2e_wait_fraction"] = rows["prefetch"]["wait_fraction"]
        if "prefetch_vs_timm" in r:
            m["e2e_vs_timm"] = r["prefetch_vs_timm"]["median"]
    if "compute_bound" in roles:
        key = roles["compute_bound"]
        rows, r = e2e["results"][key], e2e["ratios"][key]
        m["e2e_heavy_vs_baseline"] = r["prefetch_vs_baseline"]["median"]
        m["e2e_overlap_ratio"] = rows["prefetch"]["step_s_mean"] / rows["ceiling"]["step_s_mean"]
    return m


def why_slower(model, rows, device_type, cores=None):
    """A line saying why prefetch was slower than the baseline for `model`, or None."""
    base, pf = rows.get("baseline"), rows.get("prefetch")
    if not base or not pf or pf["img_per_s"] >= base["img_per_s"]:
        return None
    ratio_ = pf["img_per_s"] / base["img_per_s"]
    if device_type == "cpu":
        why = ("on a CPU the model and the input pipeline share the same %s cores: the engine's "
               "threads and the DataLoader workers take cycles from the model's, and with "
               "%.1f%% / %.1f%% of the time waiting for data neither pipeline is what bounds the "
               "step (a GPU takes the model off those cores)"
               % (cores or "few", 100 * base["wait_fraction"], 100 * pf["wait_fraction"]))
    elif pf["wait_fraction"] > base["wait_fraction"]:
        why = ("the GPU waited for prefetch's batches %.1f%% of the step time and for the "
               "baseline's %.1f%%: prefetch's input was the slower here"
               % (100 * pf["wait_fraction"], 100 * base["wait_fraction"]))
    else:
        why = ("the step waits %.1f%% (prefetch) and %.1f%% (baseline) for data: the model's "
               "compute bounds both, and the difference is within the per-step range"
               % (100 * pf["wait_fraction"], 100 * base["wait_fraction"]))
    return "  %s: prefetch / baseline %.2f: %s" % (model, ratio_, why)


def cached_beaten(model, rows):
    """A line when a pipeline beat the cached batches (which are not a bound), or None."""
    cached = rows.get("ceiling")
    if not cached:
        return None
    faster = [n for n, r in rows.items() if n != "ceiling" and r["img_per_s"] > cached["img_per_s"]]
    if not faster:
        return None
    return ("  %s: %s faster than the cached batches: those are not a bound (the same loop, but a "
            "step's time varies from pass to pass as the range shows, and on a CPU the model "
            "shares its cores with whatever else runs)" % (model, " and ".join(faster)))


def _ms(seconds):
    return "%.1f" % (1e3 * seconds)


def table(result, device_type="cpu"):
    c = result["config"]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    waits = "GPU" if device_type == "cuda" else "step"
    head = "e2e: a training loop (SGD, channels_last%s)" % (
        ", bf16 autocast" if device_type == "cuda" else "")
    if "files" in c:
        head += (" from %d JPEG files with the v2 recipe (RandomResizedCrop(%d), flip, "
                 "TrivialAugmentWide, normalize; the baseline's transforms: %s)"
                 % (c["files"], c["image_size"], c.get("usual_transforms", "?")))
    head += "; N = %d for every pipeline (DataLoader workers = prefetch's threads)" % c["workers"]
    if "rounds" in c:
        head += ("; %d interleaved passes each of %d warm-up + %d timed steps"
                 % (c["rounds"], c["warmup_steps"], c["steps_per_pass"]))
    lines = ["", head + ". images/s over the timed steps (range over the passes); step ms: "
             "median (range), and the mean; waiting: the share of step time the %s waited for "
             "data; cached = the same loop fed by batches already on the device" % waits]
    body, notes = [], []
    for model, rows in result["results"].items():
        shape = c["shapes"][model]
        source = c.get("models", {}).get(model, {}).get("source")
        r_model = result.get("ratios", {}).get(model, {})
        for name, r in rows.items():
            rounds = r.get("img_per_s_rounds")
            ips = "%.0f" % r["img_per_s"] + (" (%.0f–%.0f)" % (rounds["low"], rounds["high"])
                                             if rounds else "")
            vs = ""
            if name != "baseline" and "baseline" in rows:
                s = r_model.get("%s_vs_baseline" % name)
                vs = (text.spread(s["median"], s["low"], s["high"]) if s
                      else "%.2f" % (r["img_per_s"] / rows["baseline"]["img_per_s"]))
            step = "%s (%s–%s)" % (_ms(r["step_s_median"]), _ms(r["step_s_range"][0]),
                                   _ms(r["step_s_range"][1]))
            body.append(["%s%s %d x %d" % (model, " [%s]" % source if source else "",
                                           shape["batch_size"], shape["image_size"]),
                         LABELS.get(name, name), ips, vs, step, _ms(r["step_s"]),
                         "%.1f%%" % (100 * r["wait_fraction"]), str(r.get("timed_steps", ""))])
        notes += [x for x in (why_slower(model, rows, device_type, cores),
                              cached_beaten(model, rows)) if x]
    lines += text.columns(["model, batch x size", "pipeline", "images/s", "vs baseline",
                           "step ms median", "mean", "waiting", "timed steps"], body)
    if c.get("fewer_than_min_steps"):
        notes.append("  %d timed steps per pipeline, fewer than the %d a GPU run times (--quick "
                     "on a CPU: the loop exercised, no figure to read)" % (c["timed_steps"],
                                                                          MIN_GPU_STEPS))
    for part, why in result.get("skipped", {}).items():
        notes.append("  (%s: %s)" % (part, why))
    lines += notes
    return "\n".join(lines)


def run(config):
    if not prefetch.built_with_jpeg():
        raise Skipped("prefetch was built without its JPEG decoder (PREFETCH_JPEG=1)")
    try:
        import PIL  # noqa: F401 - the usual pipeline decodes with it; the files are made with it
    except ImportError:
        raise Skipped("Pillow is not installed: the usual pipeline decodes with it") from None
    result = measure(config)
    return SectionResult(result, metrics(result), table(result, config.device.type),
                         skipped=result["skipped"], resources=result["resources"])


SECTION = Section("e2e", "ResNet-18/50 training loops from JPEG files (v2 recipe), fed by the "
                         "usual pipeline, timm's PrefetchLoader and prefetch with the same N, vs "
                         "the same loop on data already on the device", run)
