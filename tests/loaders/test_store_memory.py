"""How a store's memory behaves (Linux): its images are file pages of the page cache, mapped,
not the process's own memory — an epoch over a store adds file-backed RSS (reclaimable, shared)
and little anonymous RSS, and two processes reading one store share its pages."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import prefetch

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/smaps"),
                                reason="reads /proc/self/smaps (Linux)")

MIB = 1 << 20


def store_of_large_samples(tmp_path, n=96, size=256 * 1024):
    """A store of ``n`` samples of ~``size`` bytes: a small JPEG each, followed by random bytes
    (the packer reads only headers; nothing here is decoded)."""
    PIL = pytest.importorskip("PIL.Image")
    import io

    buf = io.BytesIO()
    PIL.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(buf, "JPEG")
    rng = np.random.default_rng(0)
    samples = ((buf.getvalue() + rng.integers(0, 256, size, dtype=np.uint8).tobytes(), i)
               for i in range(n))
    return prefetch.pack(samples, tmp_path / "store", progress=False)


def mapping_kib(pid, filename, field):
    """``field`` (e.g. "Rss", "Shared_Clean") in kB summed over the mappings of ``filename``
    in /proc/<pid>/smaps."""
    total, inside = 0, False
    with open("/proc/%s/smaps" % pid) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 5 and "-" in parts[0] and ":" in parts[3]:  # a mapping's header line
                inside = line.rstrip().endswith(filename)
            elif inside and parts[0] == field + ":":
                total += int(parts[1])
    return total


def rss_anon_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise AssertionError("no RssAnon in /proc/self/status")


def test_an_epoch_maps_the_stores_pages_instead_of_copying_them(tmp_path):
    store = store_of_large_samples(tmp_path, n=192)
    values = os.path.join(store.path, "values.bin")
    size_kib = os.path.getsize(values) // 1024
    batch_kib = 8 * 256
    anon_before = rss_anon_kib()
    with prefetch.ArrayLoader(store, 8, seed=0, depth=2) as loader:
        seen = sum(len(images) for images, _ in loader)
        file_kib = mapping_kib(os.getpid(), "values.bin", "Rss")
        anon_after = rss_anon_kib()
    assert seen == store.count
    # Every page was read once, through the mapping: file-backed pages of this process's RSS
    # (the page cache's; the kernel reclaims them under pressure and shares them).
    assert file_kib >= 0.9 * size_kib, (file_kib, size_kib)
    # The process's own memory grew by the ring's few batches (its slots, the batch in hand), not
    # by the store (48 MiB here, 24 batches).
    assert anon_after - anon_before < 8 * batch_kib, (anon_before, anon_after, batch_kib)


def test_two_processes_reading_one_store_share_its_pages(tmp_path):
    store = store_of_large_samples(tmp_path)
    size_kib = os.path.getsize(os.path.join(store.path, "values.bin")) // 1024
    reader = textwrap.dedent("""
        import sys, torch, prefetch
        store = prefetch.open_store(sys.argv[1])
        total = int(store.values.sum())     # every page of values.bin, through the mapping
        print(total, flush=True)
        sys.stdin.readline()                # hold the mapping until the parent has looked
    """)
    total = int(store.values.sum())  # this process maps every page too
    child = subprocess.Popen([sys.executable, "-c", reader, str(store.path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert int(child.stdout.readline()) == total
        # The child's mapping is of pages that this process maps as well: shared, not copied.
        shared = mapping_kib(child.pid, "values.bin", "Shared_Clean")
    finally:
        child.stdin.write("\n")
        child.stdin.close()
        child.wait(timeout=60)
    assert shared >= 0.9 * size_kib, (shared, size_kib)
