"""Issue 47 item 2: does DCT-scaled decoding pay for DINO's local views, and how far are its pixels
from the exact path?

DINO's local crops are 96x96 from windows of 5-40% of the image (``RandomResizedCrop(96,
scale=(0.05, 0.4))``). Where a window is at least twice the output in both sides, libjpeg could
decode it at 1/2 scale (its SIMD scaled IDCT) and the view be resampled from that smaller buffer.
On the bench's photo-like JPEGs (``prefetch.bench.datasets.write_jpegs``, ~530 x 430, quality
90), one thread, this measures:

- **which windows qualify**: the share of local-crop windows (8 an image, torchvision's draws) at
  least 192 x 192;
- **what a decode costs** at full size and at 1/2 and 1/4 scale (Pillow's ``draft``, libjpeg-turbo's
  scaled IDCT; µs an image, best of ``--repeats``): a second, scaled decode must cost less than
  what it saves;
- **what it would save**: prefetch's bicubic ``resized_crop`` of the qualifying windows to 96x96
  from the full buffer against from the 1/2 buffer (µs a window);
- **its accuracy**: the 96x96 view from the 1/2-scale decode against the exact path (the full
  decode's window), both resampled by the same float64 reference (torch's bicubic with
  antialias), in levels of 255: mean and max absolute difference, per window.

Run: ``python benchmarks/dct_scaled_decode.py [--files 64] [--out results/....json]``.
"""
import argparse
import io
import statistics
import sys
import tempfile
import time

import torch

import prefetch
from prefetch.bench.datasets import write_jpegs
from prefetch.bench.provenance import script_record, write_record
from prefetch.ops import resized_crop
from prefetch.transforms.crop_boxes import random_resized_boxes

LOCAL, SCALE, VIEWS = 96, (0.05, 0.4), 8


def pil_decode(data, factor):
    """The image decoded by Pillow at 1/factor scale (1: full size), HWC uint8."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        if factor > 1:
            w, h = im.size
            # (Pillow scales by min(W // w, H // h) of the size asked: floors, so odd sides scale.)
            im.draft("RGB", (w // factor, h // factor))
        return torch.frombuffer(bytearray(im.convert("RGB").tobytes()), dtype=torch.uint8).reshape(
            im.size[1], im.size[0], 3)


def best_us(fn, repeats):
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return min(out) * 1e6


def reference_view(image, box):
    """The window of ``image`` (HWC uint8) resampled to LOCAL x LOCAL, float64 in [0, 255]."""
    t, l, h, w = box
    x = image[t:t + h, l:l + w].permute(2, 0, 1)[None].double()
    return torch.nn.functional.interpolate(x, size=(LOCAL, LOCAL), mode="bicubic",
                                           antialias=True, align_corners=False)[0].clamp(0, 255)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    try:
        import PIL  # noqa: F401
    except ImportError:
        print("dct_scaled_decode: Pillow is not installed; skipped")
        return 0
    torch.set_num_threads(1)
    paths = write_jpegs(tempfile.mkdtemp(prefix="prefetch-dct-"), args.files)
    files = [open(p, "rb").read() for p in paths]
    full = [pil_decode(f, 1) for f in files]
    half = [pil_decode(f, 2) for f in files]
    g = torch.Generator().manual_seed(0)
    windows = []  # (image index, box) of the qualifying local windows
    drawn = 0
    for n, image in enumerate(full):
        h, w = image.shape[:2]
        boxes = random_resized_boxes([h] * VIEWS, [w] * VIEWS, scale=SCALE, generator=g)
        drawn += VIEWS
        # Each window moved to even coordinates (at most one pixel), so that its 1/2-scale
        # twin covers exactly the same part of the image: the difference measured is the scaled
        # decode's, not a half-pixel shift of the window.
        windows += [(n, [v - v % 2 for v in b.tolist()]) for b in boxes
                    if b[2] >= 2 * LOCAL and b[3] >= 2 * LOCAL]
    decode_us = {}
    for factor in (1, 2, 4):
        decode_us["1/%d" % factor] = statistics.median(
            best_us(lambda f=f: pil_decode(f, factor), args.repeats) for f in files[:16])

    # The saving: resampling the qualifying windows from the full buffer or from the 1/2 one.
    def halved(box):
        return [v // 2 for v in box]  # (even: exact)

    # (Packed once, outside the timing: the kernel's time, not the packing of whole images.)
    images_full = prefetch.Ragged.from_tensors([full[n] for n, _ in windows])
    images_half = prefetch.Ragged.from_tensors([half[n] for n, _ in windows])
    boxes_full = [b for _, b in windows]
    boxes_half = [halved(b) for _, b in windows]
    zero, unit = (0.0,) * 3, (1.0 / 255,) * 3
    resample_us = {}
    for name, imgs, boxes in (("full", images_full, boxes_full), ("half", images_half, boxes_half)):
        def run(imgs=imgs, boxes=boxes):
            resized_crop(imgs, boxes, LOCAL, zero, unit, dtype=torch.uint8, interpolation="bicubic")
        resample_us[name] = best_us(run, args.repeats) / max(len(windows), 1)
    diffs = []
    for (n, box), hbox in zip(windows, boxes_half):
        d = (reference_view(full[n], box) - reference_view(half[n], hbox)).abs()
        diffs.append((d.mean().item(), d.max().item()))
    share = len(windows) / drawn
    mean_abs = statistics.mean(d[0] for d in diffs) if diffs else 0.0
    max_abs = max((d[1] for d in diffs), default=0.0)
    print("local windows >= %dx%d: %d of %d (%.0f%%)" % (2 * LOCAL, 2 * LOCAL, len(windows), drawn,
                                                       100 * share))
    print("Pillow decode, us an image (median of 16 files, best of %d): %s" % (
        args.repeats, ", ".join("%s %.0f" % kv for kv in decode_us.items())))
    print("resized_crop to %d, us a qualifying window: from full %.1f, from 1/2 %.1f" % (
        LOCAL, resample_us["full"], resample_us["half"]))
    print("1/2-scale view against the exact one, levels of 255: mean |d| %.2f (per window), "
          "max |d| %.1f" % (mean_abs, max_abs))
    if args.out:
        record = script_record("benchmarks/dct_scaled_decode.py")
        record.update(files=args.files, repeats=args.repeats, threads=1,
                      local_size=LOCAL, local_scale=list(SCALE), views_per_image=VIEWS,
                      qualifying_windows=len(windows), drawn_windows=drawn,
                      decode_us_per_image=decode_us, resample_us_per_window=resample_us,
                      accuracy_levels={"mean_abs_per_window_mean": mean_abs,
                                       "mean_abs_per_window_max": max((d[0] for d in diffs),
                                                                      default=0.0),
                                       "max_abs": max_abs},
                      pillow=__import__("PIL").__version__, prefetch_jpeg=prefetch.built_with_jpeg())
        write_record(args.out, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
