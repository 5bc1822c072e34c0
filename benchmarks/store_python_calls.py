"""Python calls per image when reading a packed store (issue 28's "Python time per sample 0"):
every Python function call and every C function called from Python, in every thread of the
process (threading.setprofile + sys.setprofile), counted over one epoch at several batch sizes.
A constant count per batch, whatever the batch size, is no Python per sample.

    python benchmarks/store_python_calls.py [--files 256]

Rows: ArrayLoader(store, FusedAugment(decode=True)) and, for comparison, the same transform
on a DataLoader of the files' bytes in the main process (num_workers=0, so its per-sample
Python is in this process's profile; with workers it runs in the workers instead).
"""
import argparse
import collections
import os
import sys
import tempfile
import threading

import numpy as np

from torch.utils.data import DataLoader

import prefetch
from prefetch.bench.workers import JpegBytes, write_jpegs

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class Counter:
    def __init__(self):
        self.counts = collections.Counter()
        self.lock = threading.Lock()

    def __call__(self, frame, event, arg):
        if event in ("call", "c_call"):
            with self.lock:
                self.counts[event] += 1
        return None

    def __enter__(self):
        threading.setprofile(self)
        sys.setprofile(self)
        return self

    def __exit__(self, *exc):
        sys.setprofile(None)
        threading.setprofile(None)


def count(loader, images):
    for _ in loader:  # a warm epoch: threads started, pools filled
        pass
    with Counter() as c:
        n = sum(batch[0].shape[0] for batch in loader)
    assert n == images, (n, images)
    return c.counts


def measure(name, paths, store, bs):
    aug = prefetch.FusedAugment(MEAN, STD, random_resized_crop=176, decode=True, seed=0)
    if name.startswith("ArrayLoader"):
        loader = prefetch.ArrayLoader(store, bs, seed=0, transform=aug)
    else:
        loader = prefetch.Prefetcher(
            DataLoader(JpegBytes(paths), batch_size=bs, shuffle=True,
                       collate_fn=prefetch.collate.samples), transform=aug)
    with loader:
        return count(loader, len(paths))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=256)
    args = parser.parse_args()
    sources = ("ArrayLoader(store)", "DataLoader(bytes, 0 workers)")
    rows = {name: [] for name in sources}
    with tempfile.TemporaryDirectory() as d:
        all_paths = write_jpegs(d, args.files, scale=176 / 224)
        print("JPEGs, crop 176, FusedAugment(decode=True); calls over one epoch, all threads")
        print("%-30s %5s %5s %7s %12s %10s" % ("source", "files", "batch", "batches",
                                              "python calls", "C calls"))
        for files in (args.files // 2, args.files):
            paths = all_paths[:files]
            store = prefetch.pack(paths, os.path.join(d, "store-%d" % files),
                                  labels=list(range(files)), progress=False)
            for bs in (32, 64, 128):
                for name in sources:
                    c = measure(name, paths, store, bs)
                    batches = -(-files // bs)
                    rows[name].append((batches, files, c["call"], c["c_call"]))
                    print("%-30s %5d %5d %7d %12d %10d" % (name, files, bs, batches, c["call"],
                                                          c["c_call"]))
    # calls = per_epoch + per_batch * batches + per_image * images, fitted over the six epochs.
    print("\nleast-squares fit: calls = a + b * batches + c * images")
    print("%-30s %-8s %10s %10s %10s" % ("source", "calls", "a/epoch", "b/batch", "c/image"))
    for name in sources:
        x = np.array([[1.0, b, n] for b, n, _, _ in rows[name]])
        for k, kind in ((2, "python"), (3, "C")):
            coef = np.linalg.lstsq(x, np.array([r[k] for r in rows[name]], dtype=float), rcond=None)[0]
            print("%-30s %-8s %10.1f %10.1f %10.2f" % (name, kind, *coef))


if __name__ == "__main__":
    main()
