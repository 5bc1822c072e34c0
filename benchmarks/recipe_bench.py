"""torchvision's training recipe as users run it against the same recipe through
prefetch.transforms.v2, on the same JPEG files (issue 27's goal, first measurement; not yet a
section of ``python -m prefetch.bench``).

- usual: DataLoader(2 workers), each worker PIL-decodes a file and applies torchvision v2's
  RandomResizedCrop(176), RandomHorizontalFlip, TrivialAugmentWide(bilinear), PILToTensor;
  default_collate; ToDtype + Normalize in the main process.
- prefetch: DataLoader(2 workers) of the files' bytes with ``collate.samples``, and a Prefetcher
  whose transform is ``prefetch.transforms.v2.Compose`` of the same recipe with ``decode=True``
  (only each window is decoded, in C++ threads).

torchvision is a benchmark peer here, never a dependency: its pure-Python transforms are imported
with ``torch.library.register_fake`` stubbed (its native ops are a CUDA build that does not load
next to a CPU torch). Run: ``python benchmarks/recipe_bench.py [--files 256] [--rounds 5]``.
"""
import argparse
import statistics
import sys
import tempfile
import time

import torch
from torch.utils.data import DataLoader, Dataset, default_collate

import prefetch
from prefetch.bench.workers import JpegBytes, write_jpegs
from prefetch.transforms import v2 as P
from torchvision_peer import import_torchvision

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
SIZE = 176


class RecipeInWorkers(Dataset):
    """What users write: PIL decode and the recipe's per-sample transforms in the worker."""

    def __init__(self, paths):
        self.paths = paths
        self.recipe = None

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        from PIL import Image

        if self.recipe is None:
            T = import_torchvision("torchvision.transforms.v2")
            self.recipe = T.Compose([T.RandomResizedCrop(SIZE), T.RandomHorizontalFlip(),
                                     T.TrivialAugmentWide(interpolation=T.InterpolationMode.BILINEAR),
                                     T.PILToTensor()])
        with Image.open(self.paths[i]) as f:
            img = f.convert("RGB")
        return self.recipe(img), i % 1000


def usual(paths, batch):
    loader = DataLoader(RecipeInWorkers(paths), batch_size=batch, shuffle=True, num_workers=2,
                        persistent_workers=True)
    mean, std = torch.tensor(MEAN).view(1, 3, 1, 1), torch.tensor(STD).view(1, 3, 1, 1)

    def epoch():
        n = 0
        for images, _ in loader:
            x = images.float().div_(255).sub_(mean).div_(std)
            n += x.shape[0]
        return n
    return epoch, lambda: None


def with_prefetch(paths, batch):
    recipe = P.Compose([P.RandomResizedCrop(SIZE), P.RandomHorizontalFlip(),
                        P.TrivialAugmentWide(interpolation=P.InterpolationMode.BILINEAR),
                        P.ToDtype(torch.float32, scale=True), P.Normalize(MEAN, STD)],
                       seed=0, decode=True)
    loader = DataLoader(JpegBytes(paths), batch_size=batch, shuffle=True, num_workers=2,
                        persistent_workers=True, collate_fn=prefetch.collate.samples)
    pf = prefetch.Prefetcher(loader, device="cpu", transform=recipe)

    def epoch():
        n = 0
        for images, _ in pf:
            n += images.shape[0]
        return n
    return epoch, pf.close


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    try:
        import_torchvision("torchvision.transforms.v2")
    except Exception as exc:  # not installed: nothing to compare with
        print("recipe_bench: torchvision's transforms do not import (%s); skipped" % exc)
        return 0
    directory = tempfile.mkdtemp(prefix="prefetch-recipe-")
    paths = write_jpegs(directory, args.files)
    pipelines = {"usual": usual(paths, args.batch), "prefetch": with_prefetch(paths, args.batch)}
    for epoch, _ in pipelines.values():
        epoch()  # warm-up: workers started, block made
    times = {name: [] for name in pipelines}
    for r in range(args.rounds):  # interleaved
        for name, (epoch, _) in pipelines.items():
            t0 = time.perf_counter()
            n = epoch()
            times[name].append(n / (time.perf_counter() - t0))
    ratios = [p / u for p, u in zip(times["prefetch"], times["usual"])]
    for name, values in times.items():
        print("%-9s images/s median %.0f (%.0f-%.0f)" % (name, statistics.median(values),
                                                        min(values), max(values)))
    print("prefetch / usual: %.2fx (%.2f-%.2f), %d rounds, %d files, batch %d, 2 workers"
          % (statistics.median(ratios), min(ratios), max(ratios), args.rounds, args.files,
             args.batch))
    for _, close in pipelines.values():
        close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
