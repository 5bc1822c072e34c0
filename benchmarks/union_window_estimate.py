"""How much of an image lies outside the union of its views' windows (issue 47 item 2: decode the
union's bounding box instead of the whole image), by drawing the recipes' RandomResizedCrop
windows with torchvision's rule (10 tries of a uniform area in `scale` and a log-uniform ratio in
(3/4, 4/3), then the whole image) on ImageNet's common 4:3 and 3:4 shapes. No decoding: this says
what a union decode could skip, not what it would save (NOTES.md relates the two).

    python benchmarks/union_window_estimate.py [--draws 20000] [--seed 0]

Prints, per recipe and shape: the mean share of rows below the union (libjpeg never decodes them:
entropy decoding stops at the window's last row), the mean share of the area outside the union's
bounding box (no IDCT, upsampling or colour conversion there), and how often the union is under
half the image.
"""
import argparse
import math
import random

RECIPES = {  # the views' RandomResizedCrop scales (SimCLR and BYOL: two views of (0.08, 1))
    "simclr/byol": [(0.08, 1.0)] * 2,
    "dino (2 global + 8 local)": [(0.4, 1.0)] * 2 + [(0.05, 0.4)] * 8,
}
SHAPES = [(500, 375), (375, 500)]  # (width, height)


def rrc_window(rng, width, height, scale, ratio=(3 / 4, 4 / 3)):
    """(left, top, w, h): torchvision's RandomResizedCrop.get_params."""
    area = width * height
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(*log_ratio))
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, width - w), rng.randint(0, height - h), w, h
    return 0, 0, width, height  # torchvision's fallback is a centred crop of a clamped ratio;
    # the whole image is the same for these shapes' ratios (within (3/4, 4/3))


def estimate(views, width, height, draws, rng):
    below = outside = small = 0.0
    for _ in range(draws):
        boxes = [rrc_window(rng, width, height, s) for s in views]
        x0, y0 = min(b[0] for b in boxes), min(b[1] for b in boxes)
        x1, y1 = max(b[0] + b[2] for b in boxes), max(b[1] + b[3] for b in boxes)
        below += (height - y1) / height
        share = (x1 - x0) * (y1 - y0) / (width * height)
        outside += 1 - share
        small += share < 0.5
    return below / draws, outside / draws, small / draws


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    for name, views in RECIPES.items():
        for width, height in SHAPES:
            below, outside, small = estimate(views, width, height, args.draws, rng)
            print("%-26s %dx%d: rows below the union %.3f, area outside its box %.3f, "
                  "union under half the image %.3f" % (name, width, height, below, outside, small))


if __name__ == "__main__":
    main()
