"""Self-supervised views from JPEG files: the repositories' own augmentation in DataLoader workers
against :mod:`prefetch.transforms.ssl` (issue 47's goals: DINO multi-crop >= 3x, SimCLR's two
views >= 2.5x the usual pipeline, equal cores).

- usual: DataLoader(N workers), each worker PIL-decodes a file once and makes every view with
  torchvision's PIL transforms as the repository writes them (DINO's ``DataAugmentationDINO``:
  its ``GaussianBlur`` and ``Solarization`` are PIL's ``ImageFilter.GaussianBlur`` and
  ``ImageOps.solarize``; SimCLR as its PyTorch ports write it), ToTensor, Normalize; the
  DataLoader's default_collate stacks each view.
- prefetch: DataLoader(N workers) of the files' bytes with ``collate.samples`` (the workers read
  files only) and a Prefetcher of N threads whose transform is ``ssl.dino_views`` /
  ``ssl.simclr_views`` with ``decode=True`` views: each image decoded once for all its views
  (MultiView's shared decode), each view fused in C++ threads.

N = the usable cores (``--workers``, default ``os.cpu_count()``) on both sides. Interleaved rounds
(usual, prefetch, usual, ...), images/s per round, the ratio the median of per-round ratios.
torchvision is a benchmark peer, never a dependency: its pure-Python transforms import with
``torch.library.register_fake`` stubbed (its native ops are a CUDA build). Writes a JSON result
with ``--out``. Run: ``python benchmarks/ssl_views_bench.py [--recipe dino|simclr] [--files 96]``.
"""
import argparse
import os
import statistics
import sys
import tempfile

from torch.utils.data import DataLoader, Dataset

import prefetch
from prefetch.bench.datasets import JpegBytes, write_jpegs
from prefetch.bench.provenance import script_record, write_record
from prefetch.bench.timing import interleaved, spread
from prefetch.transforms import ssl
from torchvision_peer import import_torchvision

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class _PilBlur:
    """DINO's ``utils.GaussianBlur``: with probability p, PIL's GaussianBlur of a radius uniform
    in [0.1, 2.0]."""

    def __init__(self, p):
        self.p = p

    def __call__(self, img):
        import random

        from PIL import ImageFilter

        if random.random() > self.p:
            return img
        return img.filter(ImageFilter.GaussianBlur(radius=random.uniform(0.1, 2.0)))


class _PilSolarize:
    """DINO's ``utils.Solarization``: with probability p, PIL's ImageOps.solarize (threshold 128)."""

    def __init__(self, p):
        self.p = p

    def __call__(self, img):
        import random

        from PIL import ImageOps

        return ImageOps.solarize(img) if random.random() < self.p else img


def usual_views(recipe, size, local):
    """The repository's list of per-view transforms on a PIL image (torchvision's classic API, as
    DINO and the SimCLR ports use)."""
    T = import_torchvision()
    bicubic = T.InterpolationMode.BICUBIC
    normalize = T.Compose([T.ToTensor(), T.Normalize(MEAN, STD)])
    if recipe == "dino":
        flip_color = T.Compose([T.RandomHorizontalFlip(p=0.5),
                                T.RandomApply([T.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
                                T.RandomGrayscale(p=0.2)])
        g1 = T.Compose([T.RandomResizedCrop(size, scale=(0.4, 1.0), interpolation=bicubic),
                        flip_color, _PilBlur(1.0), normalize])
        g2 = T.Compose([T.RandomResizedCrop(size, scale=(0.4, 1.0), interpolation=bicubic),
                        flip_color, _PilBlur(0.1), _PilSolarize(0.2), normalize])
        loc = T.Compose([T.RandomResizedCrop(local, scale=(0.05, 0.4), interpolation=bicubic),
                         flip_color, _PilBlur(0.5), normalize])
        return [g1, g2] + [loc] * 8
    view = T.Compose([T.RandomResizedCrop(size, interpolation=bicubic), T.RandomHorizontalFlip(),
                      T.RandomApply([T.ColorJitter(0.8, 0.8, 0.8, 0.2)], p=0.8),
                      T.RandomGrayscale(p=0.2),
                      T.RandomApply([T.GaussianBlur(23, (0.1, 2.0))], p=0.5), normalize])
    return [view, view]


class ViewsInWorkers(Dataset):
    """What the repositories write: one PIL decode, then every view, in the worker."""

    def __init__(self, paths, recipe, size, local):
        self.paths, self.args, self.views = paths, (recipe, size, local), None

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        from PIL import Image

        if self.views is None:
            self.views = usual_views(*self.args)
        with Image.open(self.paths[i]) as f:
            img = f.convert("RGB")
        return [v(img) for v in self.views], i % 1000


def usual(paths, batch, workers, recipe, size, local):
    loader = DataLoader(ViewsInWorkers(paths, recipe, size, local), batch_size=batch, shuffle=True,
                        num_workers=workers, persistent_workers=True)

    def epoch():
        n = 0
        for views, _ in loader:
            n += views[0].shape[0]
        return n
    return epoch, lambda: None


def with_prefetch(paths, batch, workers, recipe, size, local):
    if recipe == "dino":
        mv = ssl.dino_views(size, local, decode=True, seed=0)
    else:
        mv = ssl.simclr_views(size, blur_kernel=23, decode=True, seed=0)
    loader = DataLoader(JpegBytes(paths), batch_size=batch, shuffle=True, num_workers=workers,
                        persistent_workers=True, collate_fn=prefetch.collate.samples)
    pf = prefetch.Prefetcher(loader, device="cpu", transform=mv, num_threads=workers)

    def epoch():
        n = 0
        for views, _ in pf:
            n += views[0].shape[0]
        return n
    return epoch, pf.close


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe", choices=["dino", "simclr"], default="dino")
    ap.add_argument("--files", type=int, default=96)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--local", type=int, default=96)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    try:
        import_torchvision()
    except Exception as exc:  # not installed: nothing to compare with
        print("ssl_views_bench: torchvision's transforms do not import (%s); skipped" % exc)
        return 0
    directory = tempfile.mkdtemp(prefix="prefetch-ssl-")
    paths = write_jpegs(directory, args.files)
    common = (args.batch, args.workers, args.recipe, args.size, args.local)
    pipelines = {"usual": usual(paths, *common), "prefetch": with_prefetch(paths, *common)}
    # One warm-up epoch each (workers started, blocks made), then interleaved rounds.
    seconds = interleaved({name: epoch for name, (epoch, _) in pipelines.items()}, args.rounds)
    times = {name: [args.files / t for t in values] for name, values in seconds.items()}
    ratios = [p / u for p, u in zip(times["prefetch"], times["usual"])]
    for name, values in times.items():
        print("%-9s images/s median %.1f (%.1f-%.1f)" % (name, statistics.median(values),
                                                        min(values), max(values)))
    print("prefetch / usual: %.2fx (%.2f-%.2f), %s, %d rounds, %d files, batch %d, %d workers = "
          "threads" % (statistics.median(ratios), min(ratios), max(ratios), args.recipe,
                       args.rounds, args.files, args.batch, args.workers))
    for _, close in pipelines.values():
        close()
    if args.out:
        record = script_record("benchmarks/ssl_views_bench.py")
        record.update(recipe=args.recipe,
                      views="2 x %d + 8 x %d" % (args.size, args.local) if args.recipe == "dino"
                      else "2 x %d" % args.size,
                      torchvision=__import__("torchvision").__version__,
                      resources="%d DataLoader workers (usual) = %d DataLoader workers reading "
                                "bytes + %d prefetch threads" % (args.workers, args.workers,
                                                                 args.workers),
                      files=args.files, batch=args.batch, rounds=args.rounds,
                      images_per_s={k: dict(spread(v), rounds=v) for k, v in times.items()},
                      ratio=spread(ratios))
        write_record(args.out, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
