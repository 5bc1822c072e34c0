"""Resources stay flat: over 100 epochs neither the thread count nor the open file descriptors
grow, and resident memory moves by less than 16 MiB, for the Prefetcher and the ArrayLoader (both
residencies, with FusedAugment)."""
import gc
import os
import time

import pytest
import torch

import prefetch

from ..conftest import SANITIZED, thread_count


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def assert_flat_over_epochs(loader, warmup=10, epochs=90):
    """Threads and file descriptors must not grow at all (they may shrink: threads left by
    earlier tests finish meanwhile); resident memory may move by the allocator's noise, bounded
    at 16 MiB (the loaders here move ~3 MiB an epoch, so leaking one batch per epoch would
    exceed it over 90 epochs)."""
    for _ in range(warmup):
        for _ in loader:
            pass
    threads, fds, rss = thread_count(), len(os.listdir("/proc/self/fd")), _rss_bytes()
    for _ in range(epochs):
        for _ in loader:
            pass
    # A CPU op run on an epoch's producer thread starts an OpenMP team owned by that thread; the
    # team's workers exit shortly after the (joined) producer does, not at once. Give them 5 s:
    # a leak never settles, a team being torn down does.
    deadline = time.monotonic() + 5.0
    while thread_count() > threads and time.monotonic() < deadline:
        time.sleep(0.02)
    assert thread_count() <= threads
    assert len(os.listdir("/proc/self/fd")) <= fds
    # Under ASan freed memory waits in its quarantine (256 MiB) before reuse, so resident memory
    # grows by design there; the regular run checks it.
    if not SANITIZED:
        assert _rss_bytes() - rss < 16 * 2**20, "RSS grew by %d bytes" % (_rss_bytes() - rss)


def test_hundred_epochs_stay_flat():
    batches = [torch.full((256 * 1024,), i, dtype=torch.uint8) for i in range(12)]
    gc.collect()
    with prefetch.Prefetcher(batches, device="cpu", depth=3) as pf:
        assert_flat_over_epochs(pf)


@pytest.mark.parametrize("resident", ["host", "device"])
def test_array_loader_hundred_epochs_stay_flat(resident):
    images = torch.randint(0, 256, (1000, 32, 32, 3), dtype=torch.uint8)
    aug = prefetch.FusedAugment([0.5] * 3, [0.2] * 3, crop=32, padding=4, seed=0)
    gc.collect()
    with prefetch.ArrayLoader((images, torch.arange(1000)), 100, resident=resident,
                              transform=aug) as loader:
        assert_flat_over_epochs(loader)
