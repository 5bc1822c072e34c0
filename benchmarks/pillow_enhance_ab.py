"""timm's RandAugment Sharpness and Color, each as one fused kernel in Pillow's arithmetic
(``prefetch.ops.sharpness(..., pillow=True)``; ``prefetch.ops.color_jitter``'s ``"pillow_color"``
step), against the float32 torch passes each replaced, measured twice:

- the op alone: ``pil_ops.sharpness`` or ``pil_ops.color`` on a batch of k uint8 images of 224²,
  k = 2, 8, 32 (a DeiT batch of 32 gives each of RandAugment's ops ~2 images a layer), best of 5
  repeats of 20 calls, old and new alternating;
- the DeiT recipe's loader, as ``timm_recipe_bench.py`` builds prefetch's side (256 files, batch
  32, N workers and N threads), in one process, RandAugment's op switched between the two
  before each round; rounds interleaved in the counterbalanced order (fused, passes, passes,
  fused, ...), two epochs a round, images/s, the ratio the median of per-round ratios.

Both produce Pillow's bytes (checked here on each batch size). The "passes" side is the code the
kernel replaced, kept here as the reference of this comparison: for Sharpness the float32 SMOOTH
filter in nine passes, then Pillow's blend in torch ops (``_torch_passes_sharpness``); for Color
``pil_ops.grayscale`` (Pillow's integer grey in int32 passes) then ``pil_ops.blend``. Writes a JSON
result with ``--out``. Run: ``python benchmarks/pillow_enhance_ab.py --op sharpness|color
[--rounds 10] [--out FILE]``.
"""
import argparse
import os
import statistics
import sys
import tempfile
import timeit

import torch

from prefetch.bench.datasets import write_jpegs
from prefetch.bench.provenance import script_record, write_record
from prefetch.bench.timing import interleaved, spread
from prefetch.transforms.timm import augment_ops, pil_ops
from timm_recipe_bench import prefetch_loader

_SIDE = float(torch.tensor(1.0, dtype=torch.float32) / torch.tensor(13.0, dtype=torch.float32))
_CENTRE = float(torch.tensor(5.0, dtype=torch.float32) / torch.tensor(13.0, dtype=torch.float32))


def _torch_passes_sharpness(images, factor):
    """The replaced implementation: ImageFilter.SMOOTH in float32 torch passes (each product
    once, the rows' sums in Pillow's order), then ``pil_ops.blend`` (Pillow's float32 blend)."""
    h, w = images.shape[2], images.shape[3]
    if h < 3 or w < 3:
        return pil_ops.blend(images, images, factor)
    x = images.to(torch.float32)
    edge = x * torch.tensor(_SIDE, dtype=torch.float32)
    centre = x[:, :, 1:-1, 1:-1] * torch.tensor(_CENTRE, dtype=torch.float32)
    outer = (edge[:, :, :, :-2] + edge[:, :, :, 1:-1]).add_(edge[:, :, :, 2:])
    middle = (edge[:, :, 1:-1, :-2] + centre).add_(edge[:, :, 1:-1, 2:])
    inner = (outer[:, :, 2:] + 0.5).add_(middle).add_(outer[:, :, :-2])
    smooth = images.clone()
    smooth[:, :, 1:-1, 1:-1] = inner.clamp_(0.0, 255.0).to(torch.uint8)
    return pil_ops.blend(smooth, images, factor)


def _torch_passes_color(images, factor):
    """The replaced implementation: Pillow's grey in int32 torch passes, then Pillow's blend."""
    return pil_ops.blend(pil_ops.grayscale(images), images, factor)


# {op: ({"fused": ..., "passes": ...}, the names timm's RandAugment and AugMix look it up by)}
OPS = {
    "sharpness": ({"fused": pil_ops.sharpness, "passes": _torch_passes_sharpness},
                  ("Sharpness", "SharpnessIncreasing")),
    "color": ({"fused": pil_ops.color, "passes": _torch_passes_color},
              ("Color", "ColorIncreasing", "Desaturate")),
}


def use(op, name):
    implementations, timm_names = OPS[op]
    for timm_name in timm_names:
        augment_ops._ENHANCE[timm_name] = implementations[name]


def op_alone(op, sizes=(2, 8, 32), repeats=5, number=20):
    """{k: {name: ms a call}}: each implementation on k images, best of ``repeats``."""
    implementations = OPS[op][0]
    g = torch.Generator().manual_seed(0)
    out = {}
    for k in sizes:
        x = torch.randint(0, 256, (k, 3, 224, 224), dtype=torch.uint8, generator=g)
        f = torch.rand(k, generator=g, dtype=torch.float64) * 1.8 + 0.1
        if not torch.equal(implementations["fused"](x, f), implementations["passes"](x, f)):
            raise AssertionError("the fused kernel and the torch passes differ on %d images" % k)
        best = {name: [] for name in implementations}
        for _ in range(repeats):
            for name, fn in implementations.items():
                best[name].append(timeit.timeit(lambda: fn(x, f), number=number) / number * 1e3)
        out[k] = {name: min(v) for name, v in best.items()}
        print("op alone, %2d images: fused %.3f ms, passes %.3f ms (%.1fx)"
              % (k, out[k]["fused"], out[k]["passes"], out[k]["passes"] / out[k]["fused"]))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--op", choices=sorted(OPS), required=True)
    ap.add_argument("--files", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    alone = op_alone(args.op)
    paths = write_jpegs(tempfile.mkdtemp(prefix="prefetch-%s-" % args.op), args.files)
    loader, close = prefetch_loader(paths, args.batch, args.workers, 224)

    def two_epochs(_unused=None):
        n = 0
        for _ in range(2):
            for images, _ in loader:
                n += images.shape[0]
        return n

    per_round = 2 * (args.files // args.batch) * args.batch
    calls = {name: ((lambda name=name: use(args.op, name)), two_epochs) for name in OPS[args.op][0]}
    seconds = interleaved(calls, args.rounds, alternate=True)
    close()
    use(args.op, "fused")
    rates = {name: [per_round / t for t in v] for name, v in seconds.items()}
    ratios = [a / b for a, b in zip(rates["fused"], rates["passes"])]
    for name, v in rates.items():
        print("%-6s images/s median %.0f (%.0f-%.0f)" % (name, statistics.median(v), min(v), max(v)))
    print("%s fused / passes: %.3fx (%.3f-%.3f), %d rounds" % (args.op, statistics.median(ratios),
                                                                min(ratios), max(ratios), args.rounds))
    if args.out:
        record = script_record("benchmarks/pillow_enhance_ab.py")
        record.update(op=args.op, files=args.files, batch=args.batch, rounds=args.rounds,
                      resources="%d DataLoader workers reading bytes + %d prefetch threads"
                                % (args.workers, args.workers),
                      op_alone_ms={str(k): v for k, v in alone.items()},
                      images_per_s={k: dict(spread(v), rounds=v) for k, v in rates.items()},
                      ratio=spread(ratios))
        write_record(args.out, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
