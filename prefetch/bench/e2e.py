"""End to end: a training loop fed by the pipelines a user would pick, on a synthetic uint8 image
dataset generated in memory, in the same run.

(a) baseline: DataLoader(pin_memory=True on CUDA) + ``.to(non_blocking=True)`` + flip and
    normalization with torch ops on the device — the usual pipeline;
(b) timm's PrefetchLoader (normalization on a side stream; no flips) when timm is installed;
(c) prefetch: Prefetcher over DataLoader(collate_fn=prefetch.collate.samples) with FusedAugment
    (flips + normalization in one kernel on the copy stream);
(d) cached (key ``ceiling``): a few batches preprocessed once with torch ops, already on the
    device, cycled — the step with no input work. Not a bound: on a CPU the model shares the cores
    with nothing else in it, but its input layout (torch-permuted NHWC) differs from
    FusedAugment's contiguous NCHW, so a pipeline can come out faster.

The table shows each step's time as median (range) over the timed steps, and says why when
prefetch is slower than the baseline.
"""
import os
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

import prefetch

from . import text, timing
from .section import Section, SectionResult

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class SyntheticImages(Dataset):
    """uint8 HWC images and integer labels, generated once in memory."""

    def __init__(self, n, size, classes, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.images = torch.randint(0, 256, (n, size, size, 3), dtype=torch.uint8, generator=g)
        self.labels = torch.randint(0, classes, (n,), generator=g)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.images[i], int(self.labels[i])


def small_cnn(classes):
    return nn.Sequential(
        nn.Conv2d(3, 16, 5, stride=4, padding=2), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, classes))


def heavy_cnn(classes):
    """Enough compute per image that a good pipeline hides all of its work behind it."""
    layers, c_in = [], 3
    for c_out, stride in ((64, 2), (128, 2), (128, 1), (256, 2), (256, 1), (256, 1)):
        layers += [nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1), nn.BatchNorm2d(c_out), nn.ReLU()]
        c_in = c_out
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, classes))


MODELS = {"small_cnn": small_cnn, "heavy_cnn": heavy_cnn}


def _torch_preprocess(images, device, generator):
    """The usual on-device preprocessing with torch ops: flip half the samples, normalize."""
    x = images.to(device, non_blocking=True).permute(0, 3, 1, 2).float().div_(255)
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)
    x = x.sub_(mean).div_(std)
    flip = (torch.rand(x.shape[0], generator=generator) < 0.5).to(device).view(-1, 1, 1, 1)
    return torch.where(flip, x.flip(3), x)


def baseline_batches(ds, batch_size, workers, device):
    loader = DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=workers,
                        pin_memory=device.type == "cuda", drop_last=True,
                        persistent_workers=workers > 0)
    g = torch.Generator().manual_seed(0)
    while True:
        for images, labels in loader:
            yield _torch_preprocess(images, device, g), labels.to(device, non_blocking=True)


def _chw_collate(batch):
    return (torch.stack([x.permute(2, 0, 1) for x, _ in batch]), torch.tensor([y for _, y in batch]))


def timm_batches(ds, batch_size, workers, device):
    from timm.data.loader import PrefetchLoader

    loader = DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=workers,
                        pin_memory=True, drop_last=True, collate_fn=_chw_collate,
                        persistent_workers=workers > 0)
    pl = PrefetchLoader(loader, mean=MEAN, std=STD, device=device)
    while True:
        yield from pl


def prefetch_batches(ds, batch_size, workers, device, threads=None):
    loader = DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=workers,
                        drop_last=True, collate_fn=prefetch.collate.samples,
                        persistent_workers=workers > 0)
    aug = prefetch.FusedAugment(MEAN, STD, hflip=0.5, seed=0)
    pf = prefetch.Prefetcher(loader, device=device, transform=aug, num_threads=threads)
    try:
        while True:
            yield from pf
    finally:
        pf.close()


def ceiling_batches(ds, batch_size, device, count=4):
    g = torch.Generator().manual_seed(0)
    ready = [(_torch_preprocess(ds.images[i * batch_size:(i + 1) * batch_size], device, g),
              ds.labels[i * batch_size:(i + 1) * batch_size].to(device)) for i in range(count)]
    while True:
        yield from ready


def train(batches, model, steps, device, warmup=2):
    """Runs `steps` training steps after `warmup`; returns images/s, step time and the fraction
    of the time the loop spent waiting for its next batch."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    it = iter(batches)
    wait, count, t_start = 0.0, 0, None
    step_times, t_prev = [], None
    for step in range(warmup + steps):
        if step == warmup:
            timing.sync(device)
            wait, t_start = 0.0, time.perf_counter()
            t_prev = t_start
        elif step > warmup:
            if device.type == "cuda":
                timing.sync(device)  # per-step times on a GPU need the step's kernels done
            now = time.perf_counter()
            step_times.append(now - t_prev)
            t_prev = now
        t0 = time.perf_counter()
        images, labels = next(it)
        wait += time.perf_counter() - t0
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        opt.step()
        count += images.shape[0] if step >= warmup else 0
    timing.sync(device)
    end = time.perf_counter()
    step_times.append(end - t_prev)
    total = end - t_start
    it.close()
    return {"img_per_s": count / total, "step_s": total / steps, "wait_fraction": wait / total,
            "step_s_median": timing.median(step_times), "step_s_range": [min(step_times), max(step_times)]}


def timm_available():
    try:
        import timm.data.loader  # noqa: F401
        return True
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return False


def measure(device, batch_size=256, image_size=224, images=None, classes=100, workers=2, steps=10,
             threads=None, progress=None):
    device = torch.device(device)
    # On a CPU the heavy model at full size takes tens of seconds per step and its timings are
    # dominated by GBs of activations, not by the pipeline: it runs at a quarter of the batch
    # and half the resolution there (recorded in the config).
    shapes = {"small_cnn": (batch_size, image_size)}
    shapes["heavy_cnn"] = ((max(8, batch_size // 4), max(32, image_size // 2))
                           if device.type == "cpu" else (batch_size, image_size))
    datasets = {}
    for bs, size in set(shapes.values()):
        timed = max(steps, 20) if device.type == "cuda" else steps  # as model_steps, below
        datasets[(bs, size)] = SyntheticImages(images or bs * (timed + 4), size, classes)

    def pipelines_for(bs, size):
        ds = datasets[(bs, size)]
        return {
            "baseline": lambda: baseline_batches(ds, bs, workers, device),
            "prefetch": lambda: prefetch_batches(ds, bs, workers, device, threads),
            "ceiling": lambda: ceiling_batches(ds, bs, device),
            "timm": lambda: timm_batches(ds, bs, workers, device),
        }

    names = ["baseline", "prefetch", "ceiling"]
    skipped = {}
    if device.type != "cuda":
        skipped["timm"] = "timm's PrefetchLoader needs a CUDA device"
    elif not timm_available():
        skipped["timm"] = "timm is not installed (pip install timm)"
    else:
        names.insert(1, "timm")
    # The heavy model only measures how well data hides behind compute; on a CPU one of its
    # steps takes seconds, so it runs a third of the steps. On a GPU a step takes tens of ms:
    # at least 20 each (the first H200 run timed 3, and one slow step set the mean).
    if device.type == "cuda":
        model_steps = {"small_cnn": max(steps, 20), "heavy_cnn": max(steps, 20)}
    else:
        model_steps = {"small_cnn": steps, "heavy_cnn": max(3, steps // 3)}
    results = {}
    for model_name, make in MODELS.items():
        results[model_name] = {}
        bs, size = shapes[model_name]
        pipelines = pipelines_for(bs, size)
        for name in names:
            make_batches = pipelines[name]
            n = model_steps[model_name]
            if progress:
                progress("e2e: %s with %s (%d steps of %d images %dx%d)"
                         % (model_name, name, n, bs, size, size))
            torch.manual_seed(0)
            model = make(classes).to(device)
            if device.type == "cuda":
                model = model.to(memory_format=torch.channels_last)
            results[model_name][name] = train(make_batches(), model, n, device,
                                              warmup=2 if model_name == "small_cnn" or device.type == "cuda" else 1)
    return {"results": results, "skipped": skipped,
            "config": {"batch_size": batch_size, "image_size": image_size, "classes": classes,
                       "workers": workers, "steps": model_steps,
                       "shapes": {m: {"batch_size": b, "image_size": z} for m, (b, z) in shapes.items()}}}


def metrics(e2e):
    """The flat metrics of results.json: small CNN for throughput, heavy CNN for overlap."""
    small, heavy = e2e["results"]["small_cnn"], e2e["results"]["heavy_cnn"]
    m = {
        "e2e_img_per_s": small["prefetch"]["img_per_s"],
        "e2e_vs_baseline": small["prefetch"]["img_per_s"] / small["baseline"]["img_per_s"],
        "e2e_wait_fraction": small["prefetch"]["wait_fraction"],
        "e2e_overlap_ratio": heavy["prefetch"]["step_s"] / heavy["ceiling"]["step_s"],
    }
    if "baseline" in heavy and "prefetch" in heavy:
        m["e2e_heavy_vs_baseline"] = heavy["prefetch"]["img_per_s"] / heavy["baseline"]["img_per_s"]
    if "timm" in small:
        m["e2e_vs_timm"] = small["prefetch"]["img_per_s"] / small["timm"]["img_per_s"]
    return m


LABELS = {"baseline": "baseline", "timm": "timm", "prefetch": "prefetch", "ceiling": "cached"}


def why_slower(model, rows, device_type, cores=None):
    """A line saying why prefetch was slower than the baseline for `model`, or None."""
    base, pf = rows.get("baseline"), rows.get("prefetch")
    if not base or not pf or pf["img_per_s"] >= base["img_per_s"]:
        return None
    ratio = pf["img_per_s"] / base["img_per_s"]
    if device_type == "cpu":
        why = ("on a CPU the model and the input pipeline share the same %s cores: the engine's "
               "threads and the DataLoader workers take cycles from the model's, and with "
               "%.1f%% / %.1f%% of the time waiting for data neither pipeline is what bounds the "
               "step (a GPU takes the model off those cores)"
               % (cores or "few", 100 * base["wait_fraction"], 100 * pf["wait_fraction"]))
    else:
        why = ("the step waits %.1f%% (prefetch) and %.1f%% (baseline) for data: the model's "
               "compute bounds both, and the difference is within the per-step range"
               % (100 * pf["wait_fraction"], 100 * base["wait_fraction"]))
    return "  %s: prefetch / baseline %.2f: %s" % (model, ratio, why)


def cached_beaten(model, rows):
    """A line when a pipeline beat the cached batches (which are not a bound), or None."""
    cached = rows.get("ceiling")
    if not cached:
        return None
    faster = [n for n, r in rows.items() if n != "ceiling" and r["img_per_s"] > cached["img_per_s"]]
    if not faster:
        return None
    return ("  %s: %s faster than the cached batches: those are not a bound (their input layout, "
            "torch-permuted NHWC, is not FusedAugment's contiguous NCHW, and a step's time varies "
            "as the range shows)" % (model, " and ".join(faster)))


def table(result, device_type="cpu"):
    c = result["config"]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    lines = ["", "e2e (uint8 images, %d DataLoader workers; step ms: median (range) over the timed "
             "steps; cached = the batches preprocessed once, on the device)" % c["workers"]]
    body, notes = [], []
    for model, rows in result["results"].items():
        shape = c["shapes"][model]
        for name, r in rows.items():
            step = ("%.1f (%.1f–%.1f)" % (1e3 * r["step_s_median"], 1e3 * r["step_s_range"][0],
                                          1e3 * r["step_s_range"][1]) if "step_s_median" in r
                    else "%.1f" % (1e3 * r["step_s"]))
            vs = ("%.2f" % (r["img_per_s"] / rows["baseline"]["img_per_s"])
                  if "baseline" in rows and name != "baseline" else "")
            body.append(["%s %d x %d" % (model, shape["batch_size"], shape["image_size"]),
                         LABELS.get(name, name), "%.0f" % r["img_per_s"], vs, step,
                         "%.1f%%" % (100 * r["wait_fraction"])])
        notes += [n for n in (why_slower(model, rows, device_type, cores), cached_beaten(model, rows))
                  if n]
    lines += text.columns(["model, batch x size", "pipeline", "images/s", "vs baseline",
                           "step ms", "waiting for data"], body)
    lines += notes
    return "\n".join(lines)


def run(config):
    result = measure(config.device, batch_size=64 if config.quick else max(config.batch_sizes),
                     image_size=112 if config.quick else config.image_size, workers=config.workers,
                     steps=config.steps or (4 if config.quick else 10), threads=config.threads,
                     progress=config.progress)
    return SectionResult(result, metrics(result), table(result, config.device.type),
                         skipped=result["skipped"])


SECTION = Section("e2e", "a training loop fed by each pipeline, vs the same batches already on the "
                         "device", run)
