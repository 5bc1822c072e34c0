"""``decode_ahead`` off and on, the same code and files, interleaved in one run: does decoding on the
CPU a batch ahead of a recipe's later steps pay? (``prefetch/_engine/host_ahead.py``; issue 46.)

Two recipes from the same JPEG files, each through its loader with ``decode=True``, N DataLoader
workers reading bytes and N prefetch threads (N = the cores):

- ``deit``: timm's DeiT recipe through ``prefetch.timm.create_loader`` (bicubic RandomResizedCrop
  224, ``rand-m9-mstd0.5-inc1`` with Pillow's arithmetic, erasing 0.25 pixel), batch 32: the
  recipe of ``benchmarks/timm_recipe_bench.py``;
- ``resnet50_v2``: torchvision's ResNet-50 v2 recipe through ``prefetch.transforms.v2`` (crop 176,
  TrivialAugmentWide), batch 64: the ``recipes`` section's (``prefetch/bench/recipes.py``).

Rounds run the four loaders in the counterbalanced order (A, B, C, D, D, C, B, A, ...); the
figure is each recipe's per-round ratio on / off, median and range. Nothing else changes
between the two: the same draws, the same output (tested). Run:
``python benchmarks/decode_ahead_ab.py [--rounds 9] [--out results/....json]``.
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile

import torch
from torch.utils.data import DataLoader

import prefetch
from prefetch.bench.datasets import JpegBytes, write_jpegs
from prefetch.bench.provenance import script_record, write_record
from prefetch.bench.timing import interleaved, spread
from timm_recipe_bench import RECIPE, Files, counted

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def deit(paths, workers, ahead):
    from prefetch.timm import create_loader

    loader = create_loader(Files(paths, load_bytes=True), 224, 32, num_workers=workers,
                           device="cpu", persistent_workers=True, decode=True, seed=0,
                           decode_ahead=ahead, **RECIPE)
    return loader


def resnet50_v2(paths, workers, ahead):
    from prefetch.transforms import v2 as T

    recipe = T.Compose([T.RandomResizedCrop(176), T.RandomHorizontalFlip(),
                        T.TrivialAugmentWide(interpolation=T.InterpolationMode.BILINEAR),
                        T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)],
                       seed=0, decode=True, decode_ahead=ahead)
    loader = DataLoader(JpegBytes(paths), batch_size=64, num_workers=workers, drop_last=True,
                        persistent_workers=True, collate_fn=prefetch.collate.samples)
    return prefetch.Prefetcher(loader, device="cpu", transform=recipe, num_threads=workers)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if not prefetch.built_with_jpeg():
        print("decode_ahead_ab: prefetch was built without its JPEG decoder; skipped")
        return 0
    directory = tempfile.mkdtemp(prefix="prefetch-ahead-")
    paths = write_jpegs(directory, args.files)
    loaders = {}
    for recipe, make in (("deit", deit), ("resnet50_v2", resnet50_v2)):
        for ahead in (False, True):
            loaders["%s_%s" % (recipe, "on" if ahead else "off")] = make(paths, args.workers, ahead)
    seconds = interleaved({name: counted(loader) for name, loader in loaders.items()},
                          args.rounds, alternate=True)
    per_epoch = {"deit": (args.files // 32) * 32, "resnet50_v2": (args.files // 64) * 64}
    rates = {name: [per_epoch[name.rsplit("_", 1)[0]] / t for t in s] for name, s in seconds.items()}
    ratios = {}
    for recipe in per_epoch:
        on, off = rates[recipe + "_on"], rates[recipe + "_off"]
        ratios[recipe] = [a / b for a, b in zip(on, off)]
        print("%-12s off %.0f (%.0f-%.0f)  on %.0f (%.0f-%.0f) images/s  on/off %.3f (%.3f-%.3f)" % (
            recipe, statistics.median(off), min(off), max(off), statistics.median(on), min(on),
            max(on), statistics.median(ratios[recipe]), min(ratios[recipe]), max(ratios[recipe])))
    for loader in loaders.values():
        loader.close()
    shutil.rmtree(directory, ignore_errors=True)
    if args.out:
        record = script_record("benchmarks/decode_ahead_ab.py")
        record.update(files=args.files, rounds=args.rounds, order="ABCDDCBA (alternate)",
                      resources="%d DataLoader workers reading bytes + %d prefetch threads, each "
                                "loader" % (args.workers, args.workers),
                      images_per_s={k: dict(spread(v), rounds=v) for k, v in rates.items()},
                      on_over_off={k: dict(spread(v), rounds=v) for k, v in ratios.items()})
        write_record(args.out, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
