"""Memory over many epochs: nothing may grow once the pipelines are warm.

Each scenario runs `--warmup` epochs, then `--epochs` measured ones, and after every epoch
records the device's allocated and reserved bytes (torch.cuda.memory_allocated/reserved), the
process's resident memory (VmRSS; pinned pages are resident), the DataLoader workers' resident
memory, torch's pinned host allocator (torch.cuda.host_memory_stats) and the engine's ring growths.
A value grows when the largest of the last five epochs exceeds the largest of the first five by
more than its tolerance (a leak of one batch per epoch adds twenty batches by the end). The
device's reserved bytes are judged on the last ten epochs only (the last five against the five
before): the caching allocator may take one more segment once, with the allocated bytes flat (the
worker ring's scenario on the H200, 2026-11-27: +16 MiB at the fourth measured epoch, then flat
for sixteen), which is no leak; reserved memory that keeps growing still is, and a leak of what
the pipeline holds shows in the allocated bytes over the whole run.

Scenarios (the paths timm #2781 and PyTorch #97432/#124456 leaked on):
  prefetcher           Prefetcher over a DataLoader (0 workers) + FusedAugment
  array_loader_host    ArrayLoader(resident="host") + FusedAugment
  array_loader_device  ArrayLoader(resident="device") + FusedAugment
  worker_ring          DataLoader(num_workers=2, collate_fn=prefetch.collate.samples), persistent
  ragged               images of their own sizes, FusedAugment(random_resized_crop=...)

Then, in a subprocess under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, a Prefetcher that
allocated on its copy stream is closed and torch.cuda.empty_cache() is called: it must not crash
(issue 24 item 7: a destroyed stream that the allocator still knows).

    python benchmarks/gpu/memory.py --device cuda --out memory.json
    python benchmarks/gpu/memory.py --device cpu --epochs 20      # CI: the same code on the CPU
Exit status 1 when something grew or a scenario failed.
"""
import argparse
import gc
import os
import sys
import time
import traceback

import _common  # noqa: F401  (puts the checkout's prefetch first on sys.path)
from _common import (MEAN, STD, Images, children, proc_status, resolve_device, run_limited, sync,
                     write_json)

SCENARIOS = ("prefetcher", "array_loader_host", "array_loader_device", "worker_ring", "ragged")
MIB = 2 ** 20
# Growth allowed between the first and the last five epochs. Device memory comes back exactly
# when nothing leaks (blocks of 2 MiB and up); host RSS moves with malloc's arenas and the
# interpreter (about 1 MiB over 20 epochs on the CPU), so it gets more room, still under four of
# the GPU run's batches (128 x 112 x 112 x 3 bytes each).
TOLERANCE = {"cuda_allocated": 1 * MIB, "cuda_reserved": 4 * MIB, "rss": 16 * MIB,
             "workers_rss": 32 * MIB, "pinned_host": 1 * MIB, "ring_growths": 0,
             "worker_ring_bytes": 0}


def parse_args(argv=None):
    p = _common.parser(__doc__)
    _common.device_argument(p)
    p.add_argument("--epochs", type=int, default=20, help="measured epochs (default 20)")
    p.add_argument("--warmup", type=int, default=2, help="epochs before measuring (default 2)")
    p.add_argument("--scenarios", default=",".join(SCENARIOS),
                   help="comma-separated, from: %s" % ", ".join(SCENARIOS))
    p.add_argument("--batch-size", type=int, default=None, help="default 128 on CUDA, 16 on the CPU")
    p.add_argument("--image-size", type=int, default=None, help="default 112 on CUDA, 48 on the CPU")
    p.add_argument("--batches", type=int, default=8, help="batches per epoch (default 8)")
    p.add_argument("--out", default=None, help="write the per-epoch figures and verdicts here")
    p.add_argument("--no-empty-cache-check", action="store_true",
                   help="skip the expandable_segments subprocess")
    p.add_argument("--empty-cache-check", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    unknown = [s for s in args.scenarios.split(",") if s and s not in SCENARIOS]
    if unknown:
        p.error("unknown scenario(s) %s; choose from %s" % (unknown, ", ".join(SCENARIOS)))
    if args.epochs < 5:
        p.error("--epochs must be at least 5 (growth compares the first and last five), got %d"
                % args.epochs)
    return args


# -- the sources --------------------------------------------------------------------------


def make_scenario(name, device, batch, size, batches):
    """(iterable of one epoch per iter(), closer) for scenario `name`."""
    import torch
    from torch.utils.data import DataLoader

    import prefetch

    n = batch * batches
    crop = size - 8
    aug = prefetch.FusedAugment(MEAN, STD, crop=crop, padding=4, hflip=0.5, seed=0)
    if name == "prefetcher":
        loader = DataLoader(Images(n, size), batch_size=batch)
        pf = prefetch.Prefetcher(loader, device=device, transform=aug)
        return pf, pf.close
    if name in ("array_loader_host", "array_loader_device"):
        g = torch.Generator().manual_seed(0)
        images = torch.randint(0, 256, (n, size, size, 3), dtype=torch.uint8, generator=g)
        labels = torch.arange(n)
        al = prefetch.ArrayLoader((images, labels), batch, resident=name.rsplit("_", 1)[1],
                                  device=device, transform=aug)
        return al, al.close
    if name == "worker_ring":
        loader = DataLoader(Images(n, size), batch_size=batch, num_workers=2,
                            collate_fn=prefetch.collate.samples, persistent_workers=True)
        pf = prefetch.Prefetcher(loader, device=device, transform=aug)
        return pf, pf.close
    if name == "ragged":
        loader = DataLoader(Images(n, size, ragged=True), batch_size=batch,
                            collate_fn=prefetch.collate.samples)
        rrc = prefetch.FusedAugment(MEAN, STD, random_resized_crop=crop, hflip=0.5, seed=0)
        pf = prefetch.Prefetcher(loader, device=device, transform=rrc)
        return pf, pf.close
    raise ValueError("unknown scenario %r" % name)


# -- measuring ----------------------------------------------------------------------------


def snapshot(device, source):
    import torch

    gc.collect()
    sync(device)
    out = {}
    status = proc_status()
    out["rss"] = status.get("VmRSS")
    for key in ("VmLck", "VmPin"):
        if key in status:
            out[key.lower()] = status[key]
    out["workers_rss"] = sum(proc_status(pid).get("VmRSS", 0) for pid in children())
    if device.type == "cuda":
        out["cuda_allocated"] = torch.cuda.memory_allocated(device)
        out["cuda_reserved"] = torch.cuda.memory_reserved(device)
        stats = getattr(torch.cuda, "host_memory_stats", None)
        if stats is not None:
            try:
                host = stats()
                if "allocated_bytes.current" in host:
                    out["pinned_host"] = int(host["allocated_bytes.current"])
            except Exception:  # noqa: BLE001 - a torch without these counters: left out
                pass
    stats = getattr(source, "stats", None)
    if stats is not None:
        s = stats()
        if "ring_growths" in s:
            out["ring_growths"] = int(s["ring_growths"])
        # Present only with the worker ring: its shared block (pinned in this process) must
        # not grow, and its batch count proves the scenario measured the ring, not the
        # per-sample hand-off.
        for key in ("worker_ring_bytes", "worker_ring_batches", "worker_ring_fallbacks"):
            if key in s:
                out[key] = int(s[key])
    return out


def growth(series):
    """max(last five) - max(first five) of the values that were recorded."""
    values = [v for v in series if v is not None]
    if len(values) < 5:
        return None
    return max(values[-5:]) - max(values[:5])


def settled_growth(series):
    """max(last five) - max(the five before them): growth that goes on after a one-time step."""
    values = [v for v in series if v is not None]
    if len(values) < 10:
        return growth(values)
    return max(values[-5:]) - max(values[-10:-5])


# Judged by settled_growth (see the module's docstring); everything else by growth.
SETTLED = ("cuda_reserved",)


def judged_growth(key, series):
    return settled_growth(series) if key in SETTLED else growth(series)


def run_epoch(source, device):
    count = 0
    for batch in source:
        images = batch[0]
        count += images.shape[0]
        del batch, images
    sync(device)
    return count


def run_scenario(name, device, args, batch, size):
    t0 = time.perf_counter()
    source, close = make_scenario(name, device, batch, size, args.batches)
    epochs = []
    try:
        for _ in range(args.warmup):
            run_epoch(source, device)
        for _ in range(args.epochs):
            images = run_epoch(source, device)
            epochs.append(dict(snapshot(device, source), images=images))
    finally:
        close()
    if name == "worker_ring" and not epochs[-1].get("worker_ring_batches"):
        raise AssertionError("the worker_ring scenario delivered no batch through the worker "
                             "ring (stats: %s)" % epochs[-1])
    counts = ("images", "worker_ring_batches", "worker_ring_fallbacks")
    keys = sorted({k for e in epochs for k in e if k not in counts})
    grew = {}
    for key in keys:
        g = judged_growth(key, [e.get(key) for e in epochs])
        if g is not None and key in TOLERANCE and g > TOLERANCE[key]:
            grew[key] = g
    return {
        "scenario": name, "ok": not grew, "seconds": round(time.perf_counter() - t0, 2),
        "growth": {k: judged_growth(k, [e.get(k) for e in epochs]) for k in keys},
        "growth_whole_run": {k: growth([e.get(k) for e in epochs]) for k in keys},
        "grew": grew, "epochs": epochs,
    }


def empty_cache_check(device):
    """In a process started with expandable_segments: a Prefetcher whose transform allocated on
    its copy stream, closed, then empty_cache(). A crash is the failure."""
    import torch

    import prefetch

    aug = prefetch.FusedAugment(MEAN, STD, crop=24, padding=2, seed=0)
    batches = [torch.randint(0, 256, (8, 32, 32, 3), dtype=torch.uint8) for _ in range(6)]
    pf = prefetch.Prefetcher(batches, device=device, transform=aug)
    kept = None
    for _ in range(2):
        for out in pf:
            kept = out  # a block allocated on the copy stream, alive past close()
    pf.close()
    del pf
    gc.collect()
    sync(device)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    del kept
    gc.collect()
    sync(device)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.empty(MIB, device=device)  # the allocator still works afterwards
        torch.cuda.synchronize(device)
    print("empty_cache after close: ok (%s, PYTORCH_CUDA_ALLOC_CONF=%s)"
          % (device, os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")))


def run_empty_cache_subprocess(device):
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    cmd = [sys.executable, os.path.abspath(__file__), "--empty-cache-check", "--device", str(device)]
    t0 = time.perf_counter()
    rc, output = run_limited(cmd, 120, env=env)
    print(output.rstrip())
    return {"ok": rc == 0, "returncode": rc, "seconds": round(time.perf_counter() - t0, 2),
            "env": "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
            "output_tail": output[-2000:]}


def main(argv=None):
    args = parse_args(argv)
    import torch

    device = resolve_device(args.device)
    if args.empty_cache_check:
        empty_cache_check(device)
        return 0
    cuda = device.type == "cuda"
    batch = args.batch_size or (128 if cuda else 16)
    size = args.image_size or (112 if cuda else 48)
    result = {"device": str(device), "torch": torch.__version__, "epochs": args.epochs,
              "warmup": args.warmup, "batch_size": batch, "image_size": size,
              "batches_per_epoch": args.batches, "tolerance_bytes": TOLERANCE, "scenarios": {}}
    ok = True
    for name in [s for s in args.scenarios.split(",") if s]:
        print("memory: %s (%d + %d epochs of %d x %dx%d on %s)"
              % (name, args.warmup, args.epochs, batch, size, size, device), flush=True)
        try:
            r = run_scenario(name, device, args, batch, size)
        except Exception:  # noqa: BLE001 - one scenario's failure must not hide the others'
            r = {"scenario": name, "ok": False, "error": traceback.format_exc()}
            print(r["error"], flush=True)
        result["scenarios"][name] = r
        ok = ok and r["ok"]
        if "growth" in r:
            print("  %s in %.1f s; growth first->last five epochs (cuda_reserved: over the last ten): %s%s" % (
                "ok" if r["ok"] else "GREW", r["seconds"],
                ", ".join("%s %+.1f MiB" % (k, v / MIB) if k != "ring_growths" else "%s %+d" % (k, v)
                          for k, v in r["growth"].items() if v is not None),
                "" if r["ok"] else " (over tolerance: %s)" % sorted(r["grew"])), flush=True)
        write_json(args.out, result)  # after each scenario: a timeout keeps what was measured
    if not args.no_empty_cache_check:
        print("memory: a closed Prefetcher, then empty_cache() under expandable_segments", flush=True)
        result["empty_cache_after_close"] = r = run_empty_cache_subprocess(device)
        ok = ok and r["ok"]
    result["ok"] = ok
    write_json(args.out, result)
    print("memory: %s" % ("ok: nothing grew" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
