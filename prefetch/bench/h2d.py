"""Host -> device: batches through the Prefetcher's ring, against ``tensor.pin_memory().to(dev,
non_blocking=True)`` per batch, against a raw loop of pinned-memory copies of the same size
(the limit), in the same run. CUDA only."""
import time

import torch

import prefetch


def _rate(nbytes, count, fn, device):
    fn(1)  # warm-up: allocations, the ring's first growth
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    fn(count)
    torch.cuda.synchronize(device)
    return nbytes * count / (time.perf_counter() - t0) / 1e9


def measure(device, batch_bytes=256 * 224 * 224 * 3, count=20, threads=None):
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError("the h2d section needs a CUDA device")
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, 256, (batch_bytes,), dtype=torch.uint8, generator=g) for _ in range(4)]
    pinned = batches[0].pin_memory()
    dst = torch.empty(batch_bytes, dtype=torch.uint8, device=device)
    stream = torch.cuda.Stream(device)

    def raw(n):
        with torch.cuda.stream(stream):
            for _ in range(n):
                dst.copy_(pinned, non_blocking=True)
        stream.synchronize()

    def pin_each(n):
        for i in range(n):
            batches[i % 4].pin_memory().to(device, non_blocking=True)

    pf = prefetch.Prefetcher([], device=device, num_threads=threads)

    def ring(n):
        pf.source = [batches[i % 4] for i in range(n)]
        for _ in pf:
            pass

    try:
        out = {
            "batch_mib": batch_bytes / 2**20,
            "h2d_raw_gbps": _rate(batch_bytes, count, raw, device),
            "pin_memory_gbps": _rate(batch_bytes, count, pin_each, device),
            "h2d_gbps": _rate(batch_bytes, count, ring, device),
        }
    finally:
        pf.close()
    out["h2d_fraction_of_raw"] = out["h2d_gbps"] / out["h2d_raw_gbps"]
    out["h2d_vs_pin_memory"] = out["h2d_gbps"] / out["pin_memory_gbps"]
    return out
