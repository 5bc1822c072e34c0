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


def measure_zero_copy(device, n=256, size=224, crop=224, padding=4, repeats=5):
    """The zero-copy variant against copy-then-op, in the same run: the fused op reading the
    uint8 batch straight from pinned host memory across the bus (one pass), against a copy of
    the batch to the device followed by the op (two passes, the Prefetcher's path), for float16
    output in both memory formats. >1 in `zero_copy_vs_copy_then_op` means zero-copy wins."""
    from .ops import MEAN, STD, _median_seconds

    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError("the zero-copy variant needs a CUDA device")
    g = torch.Generator().manual_seed(0)
    pinned = torch.randint(0, 256, (n, size, size, 3), dtype=torch.uint8, generator=g).pin_memory()
    index = device.index if device.index is not None else torch.cuda.current_device()
    view = prefetch._C.cuda_view_of_pinned(pinned, index)
    staged = torch.empty(pinned.shape, dtype=torch.uint8, device=device)
    aug = prefetch.FusedAugment(MEAN, STD, crop=crop, padding=padding, hflip=0.5, seed=1)
    draws = {k: v.to(device) if isinstance(v, torch.Tensor) else v
             for k, v in aug.draws(n, size, size).items()}
    rows = []
    for channels_last in (False, True):
        def op(images):
            return prefetch.ops.normalize_flip(images, MEAN, STD, hflip=draws["hflip"], crop=draws["crop"],
                                               offsets=draws["offsets"], dtype=torch.float16,
                                               channels_last=channels_last)

        def copy_then_op():
            staged.copy_(pinned, non_blocking=True)
            return op(staged)

        if not torch.equal(op(view), copy_then_op()):
            raise AssertionError("zero-copy and copy-then-op outputs differ")
        zero_s = _median_seconds(lambda: op(view), device, repeats)
        two_s = _median_seconds(copy_then_op, device, repeats)
        rows.append({
            "dtype": "float16", "channels_last": channels_last, "images": n,
            "zero_copy_s": zero_s, "copy_then_op_s": two_s,
            "zero_copy_vs_copy_then_op": two_s / zero_s,
        })
    return rows
