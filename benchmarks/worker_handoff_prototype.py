"""Issue 15 premise, prototyped outside the library: what a worker->main hand-off costs when the
worker collates into (A) fresh shared memory per batch (default_collate), (B) one shared tensor
per sample (prefetch.collate.samples), (C) a slot of a shared block allocated once, reused through
a free-slot queue. The main process then copies each batch once into a reused buffer (what the
CPU Prefetcher does with it). 224x224x3 uint8, 2 workers (fork), prefetch_factor 2."""
import multiprocessing as mp
import statistics
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset, default_collate

import prefetch

SHAPE = (224, 224, 3)


class Images(Dataset):
    def __init__(self, n):
        self.data = torch.randint(0, 256, (64,) + SHAPE, dtype=torch.uint8)
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.data[i % 64].clone()  # a fresh sample, as a decode would make


class RingCollate:
    def __init__(self, ring, free):
        self.ring, self.free = ring, free

    def __call__(self, samples):
        slot = self.free.get()
        torch.stack(samples, out=self.ring[slot][:len(samples)])
        return slot, len(samples)


def run(kind, batch, batches, ctx):
    ds = Images(batch * batches)
    out = torch.empty((batch,) + SHAPE, dtype=torch.uint8)
    if kind == "ring":
        n_slots = 2 * 2 + 3 + 2
        ring = torch.empty((n_slots, batch) + SHAPE, dtype=torch.uint8).share_memory_()
        ring.fill_(0)  # fault it in once
        free = ctx.SimpleQueue()
        for s in range(n_slots):
            free.put(s)
        collate = RingCollate(ring, free)
    else:
        collate = default_collate if kind == "default_collate" else prefetch.collate.samples
    loader = DataLoader(ds, batch_size=batch, num_workers=2, collate_fn=collate,
                        multiprocessing_context=ctx, persistent_workers=True)
    for b in loader:  # start the workers
        if kind == "ring":
            free.put(b[0])
    t0 = time.perf_counter()
    n = 0
    for b in loader:
        if kind == "ring":
            slot, k = b
            out[:k].copy_(ring[slot][:k])
            free.put(slot)
        elif kind == "default_collate":
            out.copy_(b)
        else:
            torch.stack(b.tensors if hasattr(b, "tensors") else list(b), out=out)
        n += 1
    return n * batch * 224 * 224 * 3 / (time.perf_counter() - t0) / 1e9


if __name__ == "__main__":
    torch.set_num_threads(1)
    ctx = mp.get_context("fork")
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    res = {k: [] for k in ("default_collate", "samples", "ring")}
    for _ in range(rounds):
        for k in res:
            res[k].append(run(k, batch, 40, ctx))
    for k, v in res.items():
        print("batch %d %-16s GB/s median %.2f (min %.2f, max %.2f)" % (batch, k, statistics.median(v), min(v), max(v)))
