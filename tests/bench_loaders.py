"""Loaders and steps for tests/bench/test_bench_loader.py, named on the command line as
``tests.bench_loaders:<function>`` (``python -m prefetch.bench --loader ...`` from the repo root)."""
import time

import torch
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    """Each sample takes `delay` seconds, as a decode would."""

    def __init__(self, n=4000, delay=0.003):
        self.n, self.delay = n, delay

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.delay)
        return torch.full((8, 8), i % 256, dtype=torch.uint8), i


class Batches:
    """A re-iterable of `n` small batches, each taking `delay` seconds to make."""

    def __init__(self, n=10000, delay=0.0):
        self.n, self.delay = n, delay

    def __iter__(self):
        for i in range(self.n):
            if self.delay:
                time.sleep(self.delay)
            yield torch.full((4, 16), i % 256, dtype=torch.uint8)


def slow_loader():
    """A DataLoader (no workers) whose samples sleep: 4 x 3 ms a batch."""
    return DataLoader(SlowDataset(), batch_size=4)


def fast_loader():
    return Batches()


def short_loader():
    return Batches(n=2)


def fast_step(batch):
    tensor = batch[0] if isinstance(batch, (list, tuple)) else batch
    return int(tensor.sum())


def slow_step(batch):
    time.sleep(0.015)
    return fast_step(batch)


def make_slow_step():
    """A step factory (no arguments): returns the step."""
    return slow_step


def returns_int():
    return 5


def returns_iterator():
    return iter(Batches(n=10))


def raises():
    raise RuntimeError("no data here")


NOT_CALLABLE = 3


class Images:
    """A re-iterable of uint8 NHWC image batches (for a transform)."""

    def __init__(self, n=10000, batch=8, size=32):
        self.n, self.batch, self.size = n, batch, size
        self.images = torch.randint(0, 256, (batch, size, size, 3), dtype=torch.uint8)

    def __iter__(self):
        for _ in range(self.n):
            yield self.images


def image_loader():
    return Images()


def make_transform():
    import prefetch
    return prefetch.FusedAugment(mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25), crop=32,
                                 padding=4, hflip=0.5, seed=0)


def samples_loader():
    """A DataLoader with collate_fn=prefetch.collate.samples: its batches are Samples."""
    import prefetch
    return DataLoader(SlowDataset(n=2000, delay=0.0), batch_size=8,
                      collate_fn=prefetch.collate.samples)


def samples_step(batch):
    images, labels = batch
    assert isinstance(images, torch.Tensor), type(images)  # a Prefetcher's batch
    time.sleep(0.01)
