"""timm's DeiT/ConvNeXt training recipe from JPEG files as timm users run it, against the same
recipe through ``prefetch.timm`` (issue 46's goal: >= 2x timm's own pipeline at equal cores).

The recipe: ``create_transform(224, is_training=True, interpolation="bicubic",
auto_augment="rand-m9-mstd0.5-inc1", re_prob=0.25, re_mode="pixel", re_count=1)`` with
ImageNet's mean and std, hflip 0.5 (timm's ColorJitter is off under RandAugment, as timm does).

- timm: ``timm.data.create_loader(dataset, ..., num_workers=N, device=cpu)`` with timm's defaults
  (``use_prefetcher=True``): each worker PIL-decodes a file and runs timm's transforms
  (RandomResizedCropAndInterpolation, flip, RandAugment on the PIL image), timm's fast_collate
  stacks uint8, and timm's PrefetchLoader normalizes and erases the batch.
- prefetch: ``prefetch.timm.create_loader`` with the same arguments and ``decode=True``: the workers
  read each file's bytes (timm's ``ImageDataset(load_bytes=True)``), and a Prefetcher of N threads
  decodes each random window, resamples it (bicubic), flips, runs timm's RandAugment per image
  (Pillow's arithmetic, :mod:`prefetch.transforms.timm.pil_ops`), normalizes and erases, batched.

N = the usable cores (``--workers``, default ``os.cpu_count()``) on both sides. An epoch is 256
files by default, 8 batches of 32: as many for each of timm's 2 workers, where 96 files (3
batches) left one worker idle for the last batch of every epoch, a cost of the bench's short
epochs that timm's side paid and prefetch's (its threads share each batch) did not. Interleaved rounds
(timm, prefetch, timm, ...) after a warm-up epoch each; images/s per round; the ratio is the median
of per-round ratios. timm (and torchvision, which timm imports) are benchmark peers, never
dependencies: torchvision's pure-Python modules import with ``torch.library.register_fake``
stubbed (its native ops are a CUDA build). timm's posterize is given Pillow 12's 0-bit result
(Pillow 13 raises there, inside timm's PosterizeIncreasing). DALI's CPU pipeline is not a row: its RandAugment is
torchvision's op set and magnitudes, not timm's (not the same work). Writes a JSON result with
``--out``. Run: ``python benchmarks/timm_recipe_bench.py [--files 256] [--rounds 5]``.
"""
import argparse
import os
import statistics
import sys
import tempfile

import torch
from torch.utils.data import Dataset

from prefetch.bench.datasets import write_jpegs
from prefetch.bench.provenance import script_record, write_record
from prefetch.bench.timing import interleaved, spread
from torchvision_peer import import_torchvision

RECIPE = dict(is_training=True, interpolation="bicubic", auto_augment="rand-m9-mstd0.5-inc1",
              re_prob=0.25, re_mode="pixel", re_count=1, hflip=0.5)
CLASSES = 1000


class Files(Dataset):
    """timm's ImageDataset's shape: ``(transform(image), target)``; the image is the PIL image
    (timm's default) or the file's bytes (``load_bytes=True``)."""

    def __init__(self, paths, load_bytes):
        self.paths, self.load_bytes, self.transform = paths, load_bytes, None

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        if self.load_bytes:
            with open(self.paths[i], "rb") as f:
                image = f.read()
        else:
            from PIL import Image

            with Image.open(self.paths[i]) as f:
                image = f.convert("RGB")
        return self.transform(image), i % CLASSES


def _posterize_zero_bits(img, bits_to_keep, **__):
    """timm's ``posterize`` with 0 bits as Pillow before 13 computed it (every value 0). timm
    1.0.31's PosterizeIncreasing asks for 0 bits at magnitude 10 (rand-m9-mstd0.5 reaches it), and
    Pillow 13's ImageOps.posterize raises there, which would end timm's epoch; the work is the
    same table lookup either way."""
    if bits_to_keep >= 8:
        return img
    mask = ~(2 ** (8 - bits_to_keep) - 1)
    return img.point([i & mask for i in range(256)] * len(img.getbands()))


def timm_loader(paths, batch, workers, size):
    from timm.data import auto_augment, create_loader

    for name in ("Posterize", "PosterizeIncreasing", "PosterizeOriginal"):
        auto_augment.NAME_TO_OP[name] = _posterize_zero_bits

    loader = create_loader(Files(paths, load_bytes=False), size, batch, num_workers=workers,
                           device=torch.device("cpu"), persistent_workers=True, **RECIPE)
    return loader, lambda: None


def prefetch_loader(paths, batch, workers, size):
    from prefetch.timm import create_loader

    loader = create_loader(Files(paths, load_bytes=True), size, batch, num_workers=workers,
                           device="cpu", persistent_workers=True, decode=True, seed=0, **RECIPE)
    return loader, loader.close


def counted(loader):
    def epoch():
        n = 0
        for images, _ in loader:
            n += images.shape[0]
        return n
    return epoch


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    try:
        import_torchvision()
        import timm
    except Exception as exc:  # not installed: nothing to compare with
        print("timm_recipe_bench: timm (with torchvision's transforms) does not import (%s); "
              "skipped" % exc)
        return 0
    directory = tempfile.mkdtemp(prefix="prefetch-timm-")
    paths = write_jpegs(directory, args.files)
    common = (args.batch, args.workers, args.size)
    loaders = {"timm": timm_loader(paths, *common), "prefetch": prefetch_loader(paths, *common)}
    seconds = interleaved({name: counted(loader) for name, (loader, _) in loaders.items()},
                          args.rounds)
    # (training drops the last partial batch on both sides: the images an epoch yields)
    per_epoch = (args.files // args.batch) * args.batch
    times = {name: [per_epoch / t for t in values] for name, values in seconds.items()}
    ratios = [p / u for p, u in zip(times["prefetch"], times["timm"])]
    for name, values in times.items():
        print("%-9s images/s median %.1f (%.1f-%.1f)" % (name, statistics.median(values),
                                                        min(values), max(values)))
    print("prefetch / timm: %.2fx (%.2f-%.2f), %d rounds, %d files, batch %d, %d workers = "
          "threads" % (statistics.median(ratios), min(ratios), max(ratios), args.rounds,
                       args.files, args.batch, args.workers))
    for _, close in loaders.values():
        close()
    if args.out:
        record = script_record("benchmarks/timm_recipe_bench.py")
        record.update(recipe=RECIPE, size=args.size, timm=timm.__version__,
                      pillow=__import__("PIL").__version__,
                      resources="%d DataLoader workers (timm) = %d DataLoader workers reading bytes "
                                "+ %d prefetch threads" % (args.workers, args.workers, args.workers),
                      files=args.files, batch=args.batch, rounds=args.rounds,
                      images_per_s={k: dict(spread(v), rounds=v) for k, v in times.items()},
                      ratio=spread(ratios))
        write_record(args.out, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
