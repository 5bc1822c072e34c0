"""ArrayLoader against a DataLoader over the same arrays, and device-resident batches against a
device copy of as many bytes.

Workload (the fast-sources issue): CIFAR-size uint8 images ``[N, 32, 32, 3]`` and int64 labels.
- host: batches delivered on the device by ArrayLoader(resident="host") on N threads
  (``--workers``) vs DataLoader(TensorDataset, shuffle=True, pin_memory on CUDA) +
  ``.to(device)`` with 0 workers (the main process) and with N workers; plain uint8 batches, no
  augmentation, so the comparison is the loaders alone.
- device: ArrayLoader(resident="device") with FusedAugment (crop 32, padding 4, random flips,
  float32): batches per second through the loader; and the fused gather kernel alone over one
  epoch's order (one call), its bytes moved (uint8 read + float32 written) per second over a
  device-to-device copy moving as many bytes — the kernel's efficiency, apart from the per-batch
  launches that bound small batches.
The loaders are timed in interleaved rounds (``timing.interleaved``: each round a fresh iterator
of each, warmed up by a few batches outside the timed part, so DataLoader worker start-up is
excluded), the kernel and the copy likewise; ``repeats`` rounds (at least 5) after a warm-up
round; medians (ranges) over the rounds, ratios medians of per-round ratios.
"""
import torch

import prefetch

from . import text, timing
from .kernel_rounds import interleaved_kernels
from .section import Section, SectionResult, resources

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261)
WARMUP_BATCHES = 3  # untimed batches of each fresh iterator
HOST = "ArrayLoader host"
DEVICE = "ArrayLoader device + FusedAugment"


def dataloader_name(workers):
    return "DataLoader %d workers" % workers


def _timed_loader(make_iter, batches):
    """(setup, fn) for ``timing.interleaved``: a fresh iterator warmed up by WARMUP_BATCHES
    batches (untimed), then ``batches`` batches (timed). Every loader here drops the last partial
    batch, so each batch holds the batch size's images."""
    def warmed_up():
        it = make_iter()
        for _ in range(WARMUP_BATCHES):
            next(it)
        return it

    def consume(it):
        for _ in range(batches):
            next(it)
    return warmed_up, consume


def _dataloader_iter(images, labels, batch_size, workers, device):
    dataset = torch.utils.data.TensorDataset(images, labels)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=batch_size, shuffle=True, num_workers=workers,
        pin_memory=device.type == "cuda", persistent_workers=False, drop_last=True)

    def gen():
        for x, y in loader:
            yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)

    return gen()


def _rate(batch_size, batches, seconds):
    s = timing.Summary.of([batch_size * batches / t for t in seconds])
    return s.median, [s.low, s.high]


def measure(device, n=50000, size=32, batch_size=256, batches=40, workers=2, threads=2,
            progress=print, repeats=5):
    """The section's row; ``workers`` and ``threads``: N (the DataLoader's workers, the
    ArrayLoaders' threads)."""
    device = torch.device(device)
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, size, size, 3), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, 10, (n,), generator=g)
    batches = min(batches, n // batch_size - WARMUP_BATCHES - 1)
    device_batches = min(n // batch_size - WARMUP_BATCHES - 1, batches * 4)
    row = {"num_images": n, "image_size": size, "batch_size": batch_size, "batches_timed": batches,
           "device_batches_timed": device_batches, "repeats": repeats, "workers": workers,
           "threads": threads}
    aug = prefetch.FusedAugment(MEAN, STD, crop=size, padding=4, hflip=0.5, seed=0)
    host = prefetch.ArrayLoader((images, labels), batch_size, drop_last=True, resident="host",
                                device=device, num_threads=threads)
    on_device = prefetch.ArrayLoader((images, labels), batch_size, drop_last=True,
                                     resident="device", device=device, transform=aug,
                                     num_threads=threads)
    calls = {HOST: _timed_loader(lambda: iter(host), batches)}
    for w in (0, workers):
        calls[dataloader_name(w)] = _timed_loader(
            lambda w=w: _dataloader_iter(images, labels, batch_size, w, device), batches)
    calls[DEVICE] = _timed_loader(lambda: iter(on_device), device_batches)
    progress("arrays: %s (%d threads), DataLoader(TensorDataset) with 0 and %d workers, %s; %d x "
             "%dx%dx3 uint8, %d interleaved rounds" % (HOST, threads, workers, DEVICE, n, size,
                                                       size, repeats))
    try:
        seconds = timing.interleaved(calls, repeats, device=device, warmup=1)
    finally:
        host.close()
        on_device.close()
    row["rounds_s"] = seconds  # pipeline -> seconds of each round (the ratios' source)
    row["pipelines"] = {HOST: resources(threads=threads), DEVICE: resources(threads=threads),
                        dataloader_name(0): resources(threads=threads),
                        dataloader_name(workers): resources(workers=workers, threads=threads)}
    row["host_img_per_s"], row["host_img_per_s_range"] = _rate(batch_size, batches, seconds[HOST])
    ranges = {}
    for w in (0, workers):
        row["dataloader_%dw_img_per_s" % w], ranges["dataloader_%dw" % w] = _rate(
            batch_size, batches, seconds[dataloader_name(w)])
    row["dataloader_img_per_s_ranges"] = ranges
    # ArrayLoader host over the better DataLoader of each round (the same batches: seconds alone).
    best = [min(a, b) for a, b in zip(seconds[dataloader_name(0)], seconds[dataloader_name(workers)])]
    vs = timing.Summary.of([b / h for b, h in zip(best, seconds[HOST])])
    row["arrays_vs_dataloader"], row["arrays_vs_dataloader_range"] = vs.median, [vs.low, vs.high]
    rate, row["device_img_per_s_range"] = _rate(batch_size, device_batches, seconds[DEVICE])
    row["device_img_per_s"] = rate
    row["device_batches_per_s"] = rate / batch_size

    # The kernel alone: one gather + crop + flip + normalize over the whole epoch's order, bytes
    # moved (uint8 read + float32 written) per second, over a copy moving as many bytes.
    progress("arrays: the fused gather kernel over one epoch vs a device copy, interleaved")
    images_dev = images.to(device)
    order = torch.randperm(n, generator=g).to(device)
    draws = aug.draws(n, size, size).to(device)

    def fused():
        return prefetch.ops.normalize_flip(images_dev, MEAN, STD, hflip=draws.hflip,
                                           crop=draws.crop, offsets=draws.offsets,
                                           indices=order)

    moved = n * size * size * 3 * (1 + 4)
    src = torch.empty(moved // 2, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    got = interleaved_kernels({"fused gather kernel": fused, "copy": lambda: dst.copy_(src)},
                              repeats, device)
    kernels, copies = got["fused gather kernel"], got["copy"]
    row["pipelines"].update({"fused gather kernel": resources(threads=threads),
                             "copy": resources(threads=threads)})
    row["kernel_s"], row["copy_s"] = timing.median(kernels), timing.median(copies)
    row["device_gbps_range"] = [moved / max(kernels) / 1e9, moved / min(kernels) / 1e9]
    row["copy_gbps_range"] = [moved / max(copies) / 1e9, moved / min(copies) / 1e9]
    row["kernel_repeats"] = len(kernels)
    row["device_gbps"] = moved / row["kernel_s"] / 1e9
    row["copy_gbps"] = moved / row["copy_s"] / 1e9
    fraction = timing.Summary.of([c / k for k, c in zip(kernels, copies)])
    row["arrays_device_fraction_of_copy"] = fraction.median
    row["arrays_device_fraction_of_copy_range"] = [fraction.low, fraction.high]
    # How much of the kernel's rate the per-batch loop keeps (launches, slicing, Python).
    row["device_loop_fraction_of_kernel"] = rate / (n / row["kernel_s"])
    return row


def table(r):
    lines = ["", "arrays (%d uint8 %dx%dx3 images, batch %d; N = %d workers / threads; median "
             "(range) of %d interleaved rounds)" % (r["num_images"], r["image_size"], r["image_size"],
                                                    r["batch_size"], r["workers"], r["repeats"])]
    ranges = r["dataloader_img_per_s_ranges"]
    loaders = [(HOST + " (%d threads)" % r["threads"], r["host_img_per_s"], r["host_img_per_s_range"])]
    loaders += [(dataloader_name(w) + (" (main process)" if w == 0 else ""),
                 r["dataloader_%dw_img_per_s" % w], ranges["dataloader_%dw" % w])
                for w in (0, r["workers"])]
    lines += text.columns(["loader", "images/s", "batches/s"], [
        [name, text.spread(rate, *rng, fmt="%.0f"), "%.1f" % (rate / r["batch_size"])]
        for name, rate, rng in loaders])
    lines.append("  ArrayLoader host / the round's better DataLoader: %s" % text.spread(
        r["arrays_vs_dataloader"], *r["arrays_vs_dataloader_range"], fmt="%.1f"))
    lines.append("  %s: %s images/s (%.1f batches/s); this loop / the fused gather kernel alone "
                 "over the epoch: %.2f" % (
                     DEVICE, text.spread(r["device_img_per_s"], *r["device_img_per_s_range"], fmt="%.0f"),
                     r["device_batches_per_s"], r["device_loop_fraction_of_kernel"]))
    lines.append("  fused gather kernel, one epoch: %s GB/s moved | a device copy of as many bytes %s "
                 "GB/s | kernel / copy %s (%d interleaved rounds)" % (
                     text.spread(r["device_gbps"], *r["device_gbps_range"]),
                     text.spread(r["copy_gbps"], *r["copy_gbps_range"]),
                     text.spread(r["arrays_device_fraction_of_copy"],
                                 *r["arrays_device_fraction_of_copy_range"]), r["kernel_repeats"]))
    return "\n".join(lines)


def run(config):
    n = 10000 if config.quick else 50000
    row = measure(config.device, n=n, batches=8 if config.quick else n // 256,
                  workers=config.workers, threads=config.workers, progress=config.progress,
                  repeats=5 if config.quick else 7)
    metrics = {k: row[k] for k in ("arrays_vs_dataloader", "device_batches_per_s",
                                   "arrays_device_fraction_of_copy")}
    return SectionResult(row, metrics, table(row), resources=row["pipelines"])


SECTION = Section("arrays", "ArrayLoader vs DataLoader (0 and N workers) over the same uint8 "
                            "arrays; device-resident batches vs copy", run)
