"""One copy path, a few batches: small enough to run under compute-sanitizer.

    python benchmarks/gpu/sanitize_copy.py prefetcher|array_loader_host|array_loader_device|worker_ring|ragged|all [--device cuda]
    python benchmarks/gpu/sanitize_copy.py prefetcher,ragged --device cpu     # several, by commas

Each path delivers two epochs of three batches on the device, and every batch is compared with
what the same pipeline delivers on the CPU (the draws are a function of the seed and the batch's
position, not of the device). The paths:

  prefetcher           Prefetcher over a DataLoader: image, mask (FusedAugment's mask path) and a
                       label that is already on the device in the batch (a "move")
  array_loader_host    ArrayLoader(resident="host"): gather in C++ threads, copy, FusedAugment
  array_loader_device  ArrayLoader(resident="device"): the gather fused into the kernel
  worker_ring          DataLoader(num_workers=2, collate_fn=prefetch.collate.samples): workers
                       write into the Prefetcher's shared ring (run under
                       compute-sanitizer --target-processes all)
  ragged               images of their own sizes, FusedAugment(random_resized_crop=...)

Exit 0 when every batch matched, 1 otherwise.
"""
import sys
import time

import _common  # noqa: F401  (puts the checkout's prefetch first on sys.path)
from _common import MEAN, STD, Images, require_built_for, resolve_device, sync

PATHS = ("prefetcher", "array_loader_host", "array_loader_device", "worker_ring", "ragged")
TOLERANCE = 1e-4  # float32 outputs; see sanitize_ops.py


def make(path, device, mp_context):
    """(pipeline, close) delivering two epochs of three batches of 8 on `device`."""
    import torch
    from torch.utils.data import DataLoader

    import prefetch

    batch, size, n = 8, 40, 24
    if path == "prefetcher":
        aug = prefetch.FusedAugment(MEAN, STD, crop=32, padding=4, hflip=0.5, vflip=0.3, seed=5,
                                    image_key=0, mask_key=1)

        def with_device_labels(loader):
            # A tensor already on the device inside the batch: the copy stream must wait for it.
            for image, mask, label in loader:
                yield image, mask, label.to(device, non_blocking=True)

        class Source:
            def __init__(self):
                self.loader = DataLoader(Images(n, size, masks=True), batch_size=batch)

            def __iter__(self):
                return with_device_labels(self.loader)

            def __len__(self):
                return len(self.loader)

        pf = prefetch.Prefetcher(Source(), device=device, transform=aug)
        return pf, pf.close
    if path in ("array_loader_host", "array_loader_device"):
        data = Images(n, size)
        images = torch.stack([data[i][0] for i in range(n)])
        labels = torch.arange(n)
        aug = prefetch.FusedAugment(MEAN, STD, crop=32, padding=4, hflip=0.5, seed=6)
        al = prefetch.ArrayLoader((images, labels), batch, resident=path.rsplit("_", 1)[1],
                                  device=device, transform=aug, seed=3)
        return al, al.close
    if path == "worker_ring":
        aug = prefetch.FusedAugment(MEAN, STD, crop=32, padding=4, hflip=0.5, seed=7,
                                    image_key=0, mask_key=1)
        loader = DataLoader(Images(n, size, masks=True), batch_size=batch, num_workers=2,
                            collate_fn=prefetch.collate.samples, persistent_workers=True,
                            multiprocessing_context=mp_context)
        pf = prefetch.Prefetcher(loader, device=device, transform=aug)
        return pf, pf.close
    if path == "ragged":
        aug = prefetch.FusedAugment(MEAN, STD, random_resized_crop=28, hflip=0.5, seed=8)
        loader = DataLoader(Images(n, size, ragged=True), batch_size=batch,
                            collate_fn=prefetch.collate.samples)
        pf = prefetch.Prefetcher(loader, device=device, transform=aug)
        return pf, pf.close
    raise ValueError("unknown path %r" % path)


def epochs(path, device, mp_context, count=2):
    """Every batch of `count` epochs, moved to the CPU, and the pipeline's stats."""
    pipeline, close = make(path, device, mp_context)
    out = []
    try:
        for _ in range(count):
            for batch in pipeline:
                leaves = batch if isinstance(batch, (list, tuple)) else [batch]
                for t in leaves:
                    if t.device.type != device.type:
                        raise AssertionError("%s delivered a leaf on %s, not on %s"
                                             % (path, t.device, device))
                out.append([t.cpu() for t in leaves])
            sync(device)
        stats = pipeline.stats() if hasattr(pipeline, "stats") else {}
    finally:
        close()
    return out, stats


def check(path, device, mp_context):
    got, stats = epochs(path, device, mp_context)
    expected, _ = epochs(path, __import__("torch").device("cpu"), mp_context)
    if len(got) != len(expected):
        raise AssertionError("%s: %d batches on %s, %d on the CPU" % (path, len(got), device, len(expected)))
    worst = 0.0
    for b, (g, e) in enumerate(zip(got, expected)):
        for k, (x, y) in enumerate(zip(g, e)):
            if x.shape != y.shape or x.dtype != y.dtype:
                raise AssertionError("%s batch %d leaf %d: %s %s on the device, %s %s on the CPU"
                                     % (path, b, k, tuple(x.shape), x.dtype, tuple(y.shape), y.dtype))
            diff = (x.double() - y.double()).abs().max().item() if x.numel() else 0.0
            worst = max(worst, diff)
            if diff > (TOLERANCE if x.is_floating_point() else 0):
                raise AssertionError("%s batch %d leaf %d: max difference %g from the CPU's"
                                     % (path, b, k, diff))
    if path == "worker_ring" and not stats.get("worker_ring_batches"):
        raise AssertionError("worker_ring: no batch came through the worker ring (stats %s)" % stats)
    print("  %d batches, max |device - cpu| = %g; ring growths %s%s" % (
        len(got), worst, stats.get("ring_growths", "-"),
        ", worker ring batches %s" % stats["worker_ring_batches"]
        if "worker_ring_batches" in stats else ""), flush=True)


def main(argv=None):
    p = _common.parser(__doc__)
    _common.names_argument(p, "path", PATHS, "copy path")
    _common.device_argument(p)
    p.add_argument("--mp-context", default="fork", choices=("fork", "spawn", "forkserver"),
                   help="the DataLoader workers' start method in worker_ring (default fork, "
                        "what a DataLoader uses on Linux)")
    args = p.parse_args(argv)
    import torch

    device = resolve_device(args.device)
    if require_built_for(device, "sanitize_copy"):
        return 1
    print("sanitize_copy: %s on %s (torch %s)" % (",".join(args.path), device, torch.__version__),
          flush=True)
    failed = []
    for path in args.path:
        t0 = time.perf_counter()
        print("%s:" % path, flush=True)
        try:
            check(path, device, args.mp_context)
            print("%s: ok in %.1f s" % (path, time.perf_counter() - t0), flush=True)
        except Exception:  # noqa: BLE001 - report every path, then fail
            import traceback

            traceback.print_exc()
            print("%s: FAILED" % path, flush=True)
            failed.append(path)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
