"""ArrayLoader against a DataLoader over the same arrays, and device-resident batches against a
device copy of as many bytes.

Workload (the fast-sources issue): CIFAR-size uint8 images ``[N, 32, 32, 3]`` and int64 labels.
- host: batches delivered on the device by ArrayLoader(resident="host") vs
  DataLoader(TensorDataset, shuffle=True, pin_memory on CUDA) + ``.to(device)`` with 0 and 2
  workers; plain uint8 batches, no augmentation, so the comparison is the loaders alone.
- device: ArrayLoader(resident="device") with FusedAugment (crop 32, padding 4, random flips,
  float32): batches per second through the loader; and the fused gather kernel alone over one
  epoch's order (one call), its bytes moved (uint8 read + float32 written) per second over a
  device-to-device copy moving as many bytes — the kernel's efficiency, apart from the per-batch
  launches that bound small batches.
Timed after one untimed pass and a warm-up of a few batches (DataLoader worker start-up excluded),
median of repeats.
"""
import torch

import prefetch

from . import text, timing
from .section import Section, SectionResult

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261)


def _images_per_second(make_iter, device, batch_size, batches, warmup=3, repeats=3):
    """Median images/s over `batches` batches after `warmup`, a fresh iterator per repeat, after
    one untimed pass (first touches of the dataset's pages and of the loader's buffers). Every
    loader here drops the last partial batch, so each batch holds `batch_size` images."""
    for _ in zip(range(batches + warmup), make_iter()):
        pass

    def warmed_up():
        it = make_iter()
        for _ in range(warmup):
            next(it)
        return it

    def consume(it):
        for _ in range(batches):
            next(it)

    seconds = timing.samples(consume, repeats, device=device, warmup=0, setup=warmed_up)
    return timing.Summary.of([batch_size * batches / s for s in seconds])


def _dataloader_iter(images, labels, batch_size, workers, device):
    dataset = torch.utils.data.TensorDataset(images, labels)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=batch_size, shuffle=True, num_workers=workers,
        pin_memory=device.type == "cuda", persistent_workers=False, drop_last=True)

    def gen():
        for x, y in loader:
            yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)

    return gen()


def measure(device, n=50000, size=32, batch_size=256, batches=40, workers=(0, 2), threads=None,
            progress=print, repeats=3):
    device = torch.device(device)
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, size, size, 3), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, 10, (n,), generator=g)
    batches = min(batches, n // batch_size - 4)
    row = {"num_images": n, "image_size": size, "batch_size": batch_size, "batches_timed": batches,
           "repeats": repeats}
    ranges = {}

    progress("arrays: ArrayLoader(resident='host'), %d x %dx%dx3 uint8" % (n, size, size))
    with prefetch.ArrayLoader((images, labels), batch_size, drop_last=True, resident="host",
                              device=device, num_threads=threads) as loader:
        rate = _images_per_second(lambda: iter(loader), device, batch_size, batches,
                                  repeats=repeats)
        row["host_img_per_s"], row["host_img_per_s_range"] = rate.median, [rate.low, rate.high]
    for w in workers:
        progress("arrays: DataLoader(TensorDataset) with %d workers" % w)
        rate = _images_per_second(
            lambda: _dataloader_iter(images, labels, batch_size, w, device), device, batch_size,
            batches, repeats=repeats)
        row["dataloader_%dw_img_per_s" % w] = rate.median
        ranges["dataloader_%dw" % w] = [rate.low, rate.high]
    row["dataloader_img_per_s_ranges"] = ranges
    best = max(row["dataloader_%dw_img_per_s" % w] for w in workers)
    row["arrays_vs_dataloader"] = row["host_img_per_s"] / best

    progress("arrays: ArrayLoader(resident='device') + FusedAugment (crop %d, padding 4, flips)" % size)
    aug = prefetch.FusedAugment(MEAN, STD, crop=size, padding=4, hflip=0.5, seed=0)
    with prefetch.ArrayLoader((images, labels), batch_size, drop_last=True, resident="device",
                              device=device, transform=aug) as loader:
        device_batches = min(n // batch_size - 4, batches * 4)
        summary = _images_per_second(lambda: iter(loader), device, batch_size, device_batches,
                                     repeats=repeats)
    rate = summary.median
    row["device_img_per_s"] = rate
    row["device_img_per_s_range"] = [summary.low, summary.high]
    row["device_batches_per_s"] = rate / batch_size

    # The kernel alone: one gather + crop + flip + normalize over the whole epoch's order, bytes
    # moved (uint8 read + float32 written) per second, over a copy moving as many bytes.
    progress("arrays: the fused gather kernel over one epoch vs a device copy")
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
    kernels = timing.kernel_samples(fused, max(3, repeats), device)
    copies = timing.kernel_samples(lambda: dst.copy_(src), max(3, repeats), device)
    row["kernel_s"], row["copy_s"] = timing.median(kernels), timing.median(copies)
    row["device_gbps_range"] = [moved / max(kernels) / 1e9, moved / min(kernels) / 1e9]
    row["copy_gbps_range"] = [moved / max(copies) / 1e9, moved / min(copies) / 1e9]
    row["kernel_repeats"] = len(kernels)
    row["device_gbps"] = moved / row["kernel_s"] / 1e9
    row["copy_gbps"] = moved / row["copy_s"] / 1e9
    row["arrays_device_fraction_of_copy"] = row["device_gbps"] / row["copy_gbps"]
    # How much of the kernel's rate the per-batch loop keeps (launches, slicing, Python).
    row["device_loop_fraction_of_kernel"] = rate / (n / row["kernel_s"])
    return row



def table(r):
    lines = ["", "arrays (%d uint8 %dx%dx3 images, batch %d; median (range) of %d repetitions)" % (
        r["num_images"], r["image_size"], r["image_size"], r["batch_size"], r["repeats"])]
    ranges = r.get("dataloader_img_per_s_ranges", {})
    loaders = [("ArrayLoader host", r["host_img_per_s"], r["host_img_per_s_range"])] + [
        ("DataLoader %s workers" % k.split("_")[1][:-1], v, ranges.get(k[:-len("_img_per_s")]))
        for k, v in r.items() if k.startswith("dataloader_") and k.endswith("_img_per_s")]
    lines += text.columns(["loader", "images/s", "batches/s"], [
        [name, text.spread(rate, *(rng or (rate, rate)), fmt="%.0f"), "%.1f" % (rate / r["batch_size"])]
        for name, rate, rng in loaders])
    lines.append("  ArrayLoader host / best DataLoader: %.1fx" % r["arrays_vs_dataloader"])
    lines.append("  ArrayLoader device + FusedAugment: %s images/s (%.1f batches/s); this loop / the "
                 "fused gather kernel alone over the epoch: %.2f" % (
                     text.spread(r["device_img_per_s"], *r["device_img_per_s_range"], fmt="%.0f"),
                     r["device_batches_per_s"], r["device_loop_fraction_of_kernel"]))
    lines.append("  fused gather kernel, one epoch: %s GB/s moved | a device copy of as many bytes %s "
                 "GB/s | kernel / copy %.2f (%d repetitions)" % (
                     text.spread(r["device_gbps"], *r["device_gbps_range"]),
                     text.spread(r["copy_gbps"], *r["copy_gbps_range"]),
                     r["arrays_device_fraction_of_copy"], r["kernel_repeats"]))
    return "\n".join(lines)


def run(config):
    n = 10000 if config.quick else 50000
    row = measure(config.device, n=n, batches=8 if config.quick else n // 256, threads=config.threads,
                  progress=config.progress, repeats=2 if config.quick else 5)
    metrics = {k: row[k] for k in ("arrays_vs_dataloader", "device_batches_per_s",
                                   "arrays_device_fraction_of_copy")}
    return SectionResult(row, metrics, table(row))


SECTION = Section("arrays", "ArrayLoader vs DataLoader over the same uint8 arrays; device-resident "
                            "batches vs copy", run)
