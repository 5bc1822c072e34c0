"""How much of an image lies outside the union of its views' windows (issue 47 item 2: decode the
union's bounding box instead of the whole image), by drawing the recipes' RandomResizedCrop
windows with prefetch's own draw of torchvision's rule (``prefetch.transforms.crop_boxes.
random_resized_boxes``) on ImageNet's common 4:3 and 3:4 shapes, and their union as MultiView's
shared decode takes it (``prefetch.transforms.multi_view.union_boxes``). No decoding: this says what a
union decode could skip, not what it would save (NOTES.md relates the two).

    python benchmarks/union_window_estimate.py [--draws 20000] [--seed 0]

Prints, per recipe and shape: the mean share of rows below the union (libjpeg never decodes them:
entropy decoding stops at the window's last row), the mean share of the area outside the union's
bounding box (no IDCT, upsampling or colour conversion there), and how often the union is under
half the image.
"""
import argparse

import torch

from prefetch.transforms.crop_boxes import random_resized_boxes
from prefetch.transforms.multi_view import union_boxes

RECIPES = {  # the views' RandomResizedCrop scales (SimCLR and BYOL: two views of (0.08, 1))
    "simclr/byol": [(0.08, 1.0)] * 2,
    "dino (2 global + 8 local)": [(0.4, 1.0)] * 2 + [(0.05, 0.4)] * 8,
}
SHAPES = [(500, 375), (375, 500)]  # (width, height)


def estimate(views, width, height, draws, generator):
    """(rows below the union, area outside its box, share of unions under half the image), the
    means over ``draws`` images, each with one window per view."""
    union = union_boxes([random_resized_boxes([height] * draws, [width] * draws, scale,
                                              generator=generator) for scale in views])
    top, _, h, w = union.double().unbind(-1)  # [draws] each
    share = h * w / (width * height)
    below = (height - (top + h)) / height
    return below.mean().item(), (1 - share).mean().item(), (share < 0.5).double().mean().item()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    g = torch.Generator().manual_seed(args.seed)
    for name, views in RECIPES.items():
        for width, height in SHAPES:
            below, outside, small = estimate(views, width, height, args.draws, g)
            print("%-26s %dx%d: rows below the union %.3f, area outside its box %.3f, "
                  "union under half the image %.3f" % (name, width, height, below, outside, small))


if __name__ == "__main__":
    main()
