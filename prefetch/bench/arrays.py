"""ArrayLoader against a DataLoader over the same arrays, and device-resident batches against
the device's copy limit.

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
import statistics
import time

import torch

import prefetch

from .ops import _median_seconds, _sync

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261)


def _images_per_second(make_iter, device, batches, warmup=3, repeats=3):
    """Median images/s over `batches` batches after `warmup`, a fresh iterator per repeat, after
    one untimed pass (first touches of the dataset's pages and of the loader's buffers)."""
    for _ in zip(range(batches + warmup), make_iter()):
        pass
    rates = []
    for _ in range(repeats):
        it = make_iter()
        for _ in range(warmup):
            next(it)
        _sync(device)
        t0 = time.perf_counter()
        images = 0
        for _ in range(batches):
            batch = next(it)
            images += batch[0].shape[0]
        _sync(device)
        rates.append(images / (time.perf_counter() - t0))
        del it, batch
    return statistics.median(rates)


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
    row = {"num_images": n, "image_size": size, "batch_size": batch_size, "batches_timed": batches}

    progress("arrays: ArrayLoader(resident='host'), %d x %dx%dx3 uint8" % (n, size, size))
    with prefetch.ArrayLoader((images, labels), batch_size, drop_last=True, resident="host",
                              device=device, num_threads=threads) as loader:
        row["host_img_per_s"] = _images_per_second(lambda: iter(loader), device, batches,
                                                   repeats=repeats)
    for w in workers:
        progress("arrays: DataLoader(TensorDataset) with %d workers" % w)
        row["dataloader_%dw_img_per_s" % w] = _images_per_second(
            lambda: _dataloader_iter(images, labels, batch_size, w, device), device, batches,
            repeats=repeats)
    best = max(row["dataloader_%dw_img_per_s" % w] for w in workers)
    row["arrays_vs_dataloader"] = row["host_img_per_s"] / best

    progress("arrays: ArrayLoader(resident='device') + FusedAugment (crop %d, padding 4, flips)" % size)
    aug = prefetch.FusedAugment(MEAN, STD, crop=size, padding=4, hflip=0.5, seed=0)
    with prefetch.ArrayLoader((images, labels), batch_size, drop_last=True, resident="device",
                              device=device, transform=aug) as loader:
        device_batches = min(n // batch_size - 4, batches * 4)
        rate = _images_per_second(lambda: iter(loader), device, device_batches, repeats=repeats)
    row["device_img_per_s"] = rate
    row["device_batches_per_s"] = rate / batch_size

    # The kernel alone: one gather + crop + flip + normalize over the whole epoch's order, bytes
    # moved (uint8 read + float32 written) per second, over a copy moving as many bytes.
    progress("arrays: the fused gather kernel over one epoch vs a device copy")
    images_dev = images.to(device)
    order = torch.randperm(n, generator=g).to(device)
    draws = aug.draws(n, size, size)
    draws = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in draws.items()}

    def fused():
        return prefetch.ops.normalize_flip(images_dev, MEAN, STD, hflip=draws["hflip"],
                                           crop=draws["crop"], offsets=draws["offsets"],
                                           indices=order)

    moved = n * size * size * 3 * (1 + 4)
    src = torch.empty(moved // 2, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    row["kernel_s"] = _median_seconds(fused, device, max(3, repeats))
    row["copy_s"] = _median_seconds(lambda: dst.copy_(src), device, max(3, repeats))
    row["device_gbps"] = moved / row["kernel_s"] / 1e9
    row["copy_gbps"] = moved / row["copy_s"] / 1e9
    row["arrays_device_fraction_of_copy"] = row["device_gbps"] / row["copy_gbps"]
    # How much of the kernel's rate the per-batch loop keeps (launches, slicing, Python).
    row["device_loop_fraction_of_kernel"] = rate / (n / row["kernel_s"])
    return row

