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

- dali_cpu (where NVIDIA DALI imports: ``pip install nvidia-dali-cuda130``): DALI's CPU pipeline
  (``device_id=None``, N threads) of the same recipe as far as DALI expresses it: its file reader,
  one full decode an image (``decoders.image``, libjpeg-turbo), then per view
  ``random_resized_crop`` (cubic, antialiased), with DALI's conditionals ColorJitter as
  ``color_twist`` (brightness, contrast, saturation and hue drawn as torchvision's ranges; DALI
  applies them in its one fixed order, torchvision in a random one), grayscale as ``hsv`` with
  saturation 0, ``gaussian_blur`` (sigma uniform in [0.1, 2.0]; SimCLR's window 23), DINO's
  solarize in DALI's arithmetic, then ``crop_mirror_normalize`` (random mirror, float CHW); each
  view's batch copied into a torch tensor, as DALI's PyTorch iterator does. The same work, not
  the same draws.

N = the usable cores (``--workers``, default ``os.cpu_count()``) on every side. Interleaved rounds
in the counterbalanced order (usual, prefetch, dali_cpu, dali_cpu, prefetch, usual, ...: no row
always follows the same one), images/s per round, each ratio the median of per-round ratios.
DALI's queue depth is 1 and its batches are copied into torch on the main thread, so its copy
does not overlap its compute (as :class:`prefetch.bench.pipelines.DaliPipeline`, which keeps it
from computing during another row's epoch): a small handicap to DALI, stated with its figures.
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
from prefetch.bench.pipelines import dali_available
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


def prefetch_views(recipe, size, local):
    """The recipe's MultiView, decoding (``decode=True``), seed 0."""
    if recipe == "dino":
        return ssl.dino_views(size, local, decode=True, seed=0)
    return ssl.simclr_views(size, blur_kernel=23, decode=True, seed=0)


def with_prefetch(paths, batch, workers, recipe, size, local, mv=None):
    """The prefetch row: ``(epoch, close)``; ``mv`` the transform (default: :func:`prefetch_views`)."""
    mv = prefetch_views(recipe, size, local) if mv is None else mv
    loader = DataLoader(JpegBytes(paths), batch_size=batch, shuffle=True, num_workers=workers,
                        persistent_workers=True, collate_fn=prefetch.collate.samples)
    pf = prefetch.Prefetcher(loader, device="cpu", transform=mv, num_threads=workers)

    def epoch():
        n = 0
        for views, _ in pf:
            n += views[0].shape[0]
        return n
    return epoch, pf.close


class DaliViews:
    """DALI's CPU pipeline of the recipe's views (the module docstring's ``dali_cpu``); ``epoch()``
    runs one epoch and returns its images. Each epoch schedules its own batches and no more (as
    :class:`prefetch.bench.pipelines.DaliPipeline`: a batch DALI computed past an epoch's end would
    run during the next pipeline's timed epoch)."""

    def __init__(self, paths, batch, threads, recipe, size, local):
        from nvidia.dali import fn, pipeline_def, types

        from prefetch.bench.pipelines import DALI_QUEUE

        def jitter(v, b, c, s, h):
            return fn.color_twist(v, brightness=fn.random.uniform(range=(1 - b, 1 + b)),
                                  contrast=fn.random.uniform(range=(1 - c, 1 + c)),
                                  saturation=fn.random.uniform(range=(1 - s, 1 + s)),
                                  hue=fn.random.uniform(range=(-360 * h, 360 * h)))  # degrees

        def view(images, side, scale, jitter_args, blur_p, solarize_p, window=None):
            v = fn.random_resized_crop(images, size=(side, side), random_area=scale,
                                       interp_type=types.INTERP_CUBIC, antialias=True)
            if fn.random.coin_flip(probability=0.8):
                v = jitter(v, *jitter_args)
            if fn.random.coin_flip(probability=0.2):
                v = fn.hsv(v, saturation=0.0)
            if blur_p > 0 and fn.random.coin_flip(probability=blur_p):
                sigma = fn.random.uniform(range=(0.1, 2.0))
                v = (fn.gaussian_blur(v, sigma=sigma, window_size=window) if window
                     else fn.gaussian_blur(v, sigma=sigma))
            if solarize_p > 0 and fn.random.coin_flip(probability=solarize_p):
                w = fn.cast(v, dtype=types.INT16)
                v = fn.cast(w + (w >= 128) * (255 - 2 * w), dtype=types.UINT8)
            return fn.crop_mirror_normalize(v, dtype=types.FLOAT, output_layout="CHW",
                                            mirror=fn.random.coin_flip(),
                                            mean=[m * 255 for m in MEAN], std=[s * 255 for s in STD])

        @pipeline_def(batch_size=batch, num_threads=threads, device_id=None, seed=0,
                      prefetch_queue_depth=DALI_QUEUE, enable_conditionals=True)
        def pipe():
            jpegs, labels = fn.readers.file(files=paths, labels=[i % 1000 for i in range(len(paths))],
                                            random_shuffle=True, name="reader")
            images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
            if recipe == "dino":
                dino = (0.4, 0.4, 0.2, 0.1)
                views = [view(images, size, (0.4, 1.0), dino, 1.0, 0.0),
                         view(images, size, (0.4, 1.0), dino, 0.1, 0.2)]
                views += [view(images, local, (0.05, 0.4), dino, 0.5, 0.0) for _ in range(8)]
            else:
                views = [view(images, size, (0.08, 1.0), (0.8, 0.8, 0.8, 0.2), 0.5, 0.0, window=23)
                         for _ in range(2)]
            return tuple(views) + (labels,)

        self._pipe = pipe()
        self._pipe.build()
        self._iterations = -(-len(paths) // batch)

    def epoch(self):
        import numpy as np
        import torch

        from prefetch.bench.pipelines import dali_epoch_outputs

        def views(out):  # copied out of DALI's buffers, as a training step would take them
            return [torch.from_numpy(np.array(v.as_tensor())) for v in out[:-1]]

        return sum(v[0].shape[0] for v in dali_epoch_outputs(self._pipe, self._iterations, views))

    def close(self):
        self._pipe = None


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
    dali_skipped = None if dali_available() else "DALI is not installed (pip install nvidia-dali-cuda130)"
    if dali_skipped is None:
        try:
            dali = DaliViews(paths, *common)
            pipelines["dali_cpu"] = (dali.epoch, dali.close)
        except Exception as exc:  # noqa: BLE001 - an optional peer that cannot run here
            dali_skipped = "DALI could not build its pipeline: %s" % str(exc).splitlines()[0][:200]
    # One warm-up epoch each (workers started, blocks made), then interleaved rounds.
    seconds = interleaved({name: epoch for name, (epoch, _) in pipelines.items()}, args.rounds,
                          alternate=True)
    times = {name: [args.files / t for t in values] for name, values in seconds.items()}
    ratios = [p / u for p, u in zip(times["prefetch"], times["usual"])]
    dali_ratios = ([p / d for p, d in zip(times["prefetch"], times["dali_cpu"])]
                   if "dali_cpu" in times else None)
    for name, values in times.items():
        print("%-9s images/s median %.1f (%.1f-%.1f)" % (name, statistics.median(values),
                                                        min(values), max(values)))
    print("prefetch / usual: %.2fx (%.2f-%.2f), %s, %d rounds, %d files, batch %d, %d workers = "
          "threads" % (statistics.median(ratios), min(ratios), max(ratios), args.recipe,
                       args.rounds, args.files, args.batch, args.workers))
    if dali_ratios:
        print("prefetch / dali_cpu: %.2fx (%.2f-%.2f)" % (statistics.median(dali_ratios),
                                                         min(dali_ratios), max(dali_ratios)))
    else:
        print("(dali_cpu: %s)" % dali_skipped)
    for _, close in pipelines.values():
        close()
    if args.out:
        record = script_record("benchmarks/ssl_views_bench.py")
        record.update(recipe=args.recipe,
                      views="2 x %d + 8 x %d" % (args.size, args.local) if args.recipe == "dino"
                      else "2 x %d" % args.size,
                      torchvision=__import__("torchvision").__version__,
                      resources="%d DataLoader workers (usual) = %d DataLoader workers reading "
                                "bytes + %d prefetch threads = %d DALI threads (dali_cpu)"
                                % (args.workers, args.workers, args.workers, args.workers),
                      files=args.files, batch=args.batch, rounds=args.rounds,
                      order="counterbalanced (ABCCBA...)",
                      images_per_s={k: dict(spread(v), rounds=v) for k, v in times.items()},
                      ratio=spread(ratios),
                      ratio_vs_dali_cpu=spread(dali_ratios) if dali_ratios else None,
                      dali=__import__("nvidia.dali").dali.__version__ if dali_ratios else None,
                      dali_skipped=dali_skipped)
        write_record(args.out, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
