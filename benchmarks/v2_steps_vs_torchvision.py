"""prefetch's v2 steps on a batch, each image its own draws, against torchvision's v2 transform of
the same name called on each image in a loop (what a DataLoader worker runs; torchvision called
on a batch draws once for all of it), on the CPU with the same threads (issue 46's per-op goal:
>= 10x torchvision's per-sample loop).

Steps: AugMix() (torchvision's defaults), RandomAffine(15, translate=(0.1, 0.1), scale=(0.9, 1.1),
shear=5), RandomRotation(30, bilinear), GaussianBlur(23, (0.1, 2.0)) (SimCLR's and BYOL's blur for
224-pixel views), and the self-supervised colour view
[RandomApply([ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8), RandomGrayscale(0.2),
RandomSolarize(128, p=0.2)], and the window RandomResizedCrop(224, BICUBIC) (DeiT's and timm's;
on --window-size images, antialias=True as torchvision's default; prefetch's side FusedAugment
with uint8 output, the same pixels as torchvision's). Both sides draw their own parameters from the same distributions, so
the work is the same in distribution, not draw for draw (each side's exactness: the tests). A
batch of uint8 [N, 3, S, S] images; rounds interleaved (prefetch, torchvision, prefetch, ...),
median (min-max) of --rounds. torchvision is a benchmark peer, never a dependency: its pure-Python
transforms are imported with torch.library.register_fake stubbed (its native ops are a CUDA build
that does not load next to a CPU torch); without it the script says so and stops.

Run: python benchmarks/v2_steps_vs_torchvision.py [--batch 64] [--size 176] [--threads N]
[--rounds 7] [--window-size 320] [--steps NAME,...] [--out FILE.json]
"""
import argparse
import os
import statistics
import time

import torch

from prefetch.bench.provenance import script_record, write_record
from prefetch.transforms import BatchPosition, v2 as P
from torchvision_peer import import_torchvision


def import_torchvision_v2():
    try:
        return import_torchvision("torchvision.transforms.v2")
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return None


def steps(lib):
    """name -> the steps, built from `lib` (prefetch.transforms.v2 or torchvision's v2)."""
    bilinear = "bilinear" if lib is P else lib.InterpolationMode.BILINEAR
    return {
        "AugMix": [lib.AugMix()],
        "RandomAffine": [lib.RandomAffine(15, translate=(0.1, 0.1), scale=(0.9, 1.1), shear=5)],
        "RandomRotation": [lib.RandomRotation(30, interpolation=bilinear)],
        "GaussianBlur": [lib.GaussianBlur(23, sigma=(0.1, 2.0))],
        "SSL colour view": [lib.RandomApply([lib.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
                            lib.RandomGrayscale(p=0.2), lib.RandomSolarize(128, p=0.2)],
    }


# The windows: a step that resizes, so its input is larger than its output.
WINDOWS = ("RandomResizedCrop bicubic",)


WINDOW_OUTPUT = 224


def window_calls(tv, window_size, batch):
    """prefetch's and torchvision's calls of a window row, on their own uint8 batch of ``batch``
    images of ``window_size``², resized to ``WINDOW_OUTPUT``²."""
    from prefetch import FusedAugment

    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 256, (batch, 3, window_size, window_size), dtype=torch.uint8, generator=g)
    nhwc = x.permute(0, 2, 3, 1).contiguous()
    ours = FusedAugment([0.0] * 3, [1 / 255] * 3, random_resized_crop=WINDOW_OUTPUT, interpolation="bicubic",
                        hflip=0.0, dtype=torch.uint8)
    calls = [0]

    def run():
        calls[0] += 1
        return ours.apply((nhwc,), BatchPosition(0, calls[0], 0))[0]
    theirs = tv.RandomResizedCrop(WINDOW_OUTPUT, interpolation=tv.InterpolationMode.BICUBIC,
                                  antialias=True)
    return x.shape[0], run, torchvision_call([theirs], x)


def prefetch_call(spec_steps, x):
    """The compiled stages of the steps, applied in turn to the batch (a new position a call)."""
    stages = [s.policy(k) for k, s in enumerate(spec_steps)]
    calls = [0]

    def run():
        calls[0] += 1
        out = x
        for stage in stages:
            out = stage.apply((out,), BatchPosition(0, calls[0], 0))[0]
        return out
    return run


def torchvision_call(tv_steps, x):
    compose = tv_steps[0] if len(tv_steps) == 1 else torch.nn.Sequential(*tv_steps)
    return lambda: torch.stack([compose(x[i]) for i in range(x.shape[0])])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--size", type=int, default=176)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--window-size", type=int, default=320,
                    help="the window rows' input side (the output is 224)")
    ap.add_argument("--steps", help="comma-separated step names (default: all)")
    ap.add_argument("--out")
    args = ap.parse_args()
    tv = import_torchvision_v2()
    if tv is None:
        raise SystemExit("torchvision is not importable here: nothing to compare with")
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (args.batch, 3, args.size, args.size), dtype=torch.uint8, generator=g)
    rows = {}
    chosen = dict(steps(P), **{name: None for name in WINDOWS})
    if args.steps:
        unknown = set(args.steps.split(",")) - set(chosen)
        if unknown:
            raise SystemExit("unknown steps %s; the steps: %s" % (sorted(unknown), ", ".join(chosen)))
        chosen = {k: v for k, v in chosen.items() if k in args.steps.split(",")}
    for name, ours in chosen.items():
        batch = args.batch
        if name in WINDOWS:
            batch, mine, theirs = window_calls(tv, args.window_size, args.batch)
            calls = {"prefetch": mine, "torchvision loop": theirs}
        else:
            calls = {"prefetch": prefetch_call(ours, x), "torchvision loop": torchvision_call(steps(tv)[name], x)}
        for fn in calls.values():  # warm-up
            fn()
        seconds = {k: [] for k in calls}
        for _ in range(args.rounds):
            for k, fn in calls.items():
                t0 = time.perf_counter()
                fn()
                seconds[k].append(time.perf_counter() - t0)
        ratios = [b / a for a, b in zip(seconds["prefetch"], seconds["torchvision loop"])]
        rows[name] = {k: {"images_per_s": batch / statistics.median(v),
                          "images_per_s_range": [batch / max(v), batch / min(v)]}
                      for k, v in seconds.items()}
        if name in WINDOWS:  # (its own input and output sizes, not --size)
            rows[name]["input"] = [batch, 3, args.window_size, args.window_size]
            rows[name]["output"] = [batch, 3, WINDOW_OUTPUT, WINDOW_OUTPUT]
        rows[name]["ratio"] = statistics.median(ratios)
        rows[name]["ratio_range"] = [min(ratios), max(ratios)]
        print("%-16s prefetch %8.0f img/s  torchvision loop %7.0f img/s  ratio %.1fx (%.1f-%.1f)" % (
            name, rows[name]["prefetch"]["images_per_s"], rows[name]["torchvision loop"]["images_per_s"],
            rows[name]["ratio"], *rows[name]["ratio_range"]), flush=True)
    result = script_record("benchmarks/v2_steps_vs_torchvision.py")
    result.update(rows=rows, batch=args.batch, size=args.size, window_size=args.window_size,
                  threads=args.threads, rounds=args.rounds,
                  torchvision=tv.__name__ and __import__("torchvision").__version__)
    if args.out:
        write_record(args.out, result)


if __name__ == "__main__":
    main()
