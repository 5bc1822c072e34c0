"""How far prefetch's bicubic resize is from torch's two bicubic kernels and from PIL's (timm's) on
natural photos: 8
RandomResizedCrop windows of each RGB photo scikit-image ships (its ``skimage/data``) resized to
224, uint8 output, with and without antialias.

prefetch computes in float32 and clamps once, at the end, as torch's float path (torchvision's
resize of a float image, and of a uint8 image on a GPU); torch's uint8 CPU kernel (torchvision's
CPU resize of a uint8 image) rounds to uint8 between its horizontal and vertical passes, so where
the first pass overshoots (edges) the two differ by more than 1. PIL's ``Image.resize(BICUBIC)``
(what timm's RandomResizedCropAndInterpolation calls; always antialiased) is compared with the
antialias rows. An accuracy figure, not a timing:
no repeats. scikit-image is a source of photos here, never a dependency.

Run: python benchmarks/bicubic_vs_torch.py --images DIR (default: skimage's data folder, found by
importing it) [--out FILE.json]
"""
import argparse
import glob
import os

import numpy as np
import torch
import torch.nn.functional as F

from prefetch.bench.provenance import script_record, write_record
from prefetch.ops import resized_crop
from prefetch.transforms.crop_boxes import random_resized_boxes


def photos(folder):
    from PIL import Image

    out = []
    for path in sorted(glob.glob(os.path.join(folder, "*.png")) + glob.glob(os.path.join(folder, "*.jpg"))):
        with Image.open(path) as im:
            if im.mode == "RGB" and min(im.size) >= 256:
                out.append((os.path.basename(path), torch.from_numpy(np.array(im))))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images")
    ap.add_argument("--out")
    args = ap.parse_args()
    folder = args.images
    if folder is None:
        import skimage

        folder = os.path.join(os.path.dirname(skimage.__file__), "data")
    imgs = photos(folder)
    if not imgs:
        raise SystemExit("no RGB photo of at least 256 pixels a side in %s" % folder)
    from PIL import Image

    g = torch.Generator().manual_seed(0)
    rows = {}
    for antialias in (True, False):
        to_uint8, to_float, to_pil = [], [], []
        for _, img in imgs:
            H, W = img.shape[:2]
            boxes = random_resized_boxes([H] * 8, [W] * 8, generator=g)
            ours = resized_crop([img] * 8, boxes, 224, [0.0] * 3, [1 / 255] * 3, dtype=torch.uint8,
                                antialias=antialias, interpolation="bicubic")
            for k, (t, l, h, w) in enumerate(boxes.tolist()):
                crop = img[t:t + h, l:l + w].permute(2, 0, 1)[None].contiguous()
                kw = dict(size=(224, 224), mode="bicubic", align_corners=False, antialias=antialias)
                uint8 = F.interpolate(crop, **kw)[0]
                flt = F.interpolate(crop.double(), **kw)[0].clamp(0, 255).round()
                to_uint8.append((ours[k].int() - uint8.int()).abs().flatten())
                to_float.append((ours[k].int() - flt.int()).abs().flatten())
                if antialias:
                    pil = np.array(Image.fromarray(crop[0].permute(1, 2, 0).numpy()).resize(
                        (224, 224), Image.BICUBIC))
                    to_pil.append((ours[k].int() - torch.from_numpy(pil).permute(2, 0, 1).int()).abs().flatten())
        du, df = torch.cat(to_uint8), torch.cat(to_float)
        rows["antialias=%s" % antialias] = {
            "windows": 8 * len(imgs), "values": du.numel(),
            "vs_torch_uint8_cpu_kernel": {
                "max": int(du.max()), "fraction_differing": float((du > 0).double().mean()),
                "fraction_more_than_1": float((du > 1).double().mean()),
                "mean_abs": float(du.double().mean())},
            "vs_torch_float64_clamped_rounded": {
                "max": int(df.max()), "fraction_differing": float((df > 0).double().mean())}}
        if to_pil:
            dp = torch.cat(to_pil)
            rows["antialias=%s" % antialias]["vs_pil_resize_bicubic"] = {
                "max": int(dp.max()), "fraction_differing": float((dp > 0).double().mean()),
                "fraction_more_than_1": float((dp > 1).double().mean()),
                "mean_abs": float(dp.double().mean())}
            print("  vs PIL's resize: max %d, %.2f%% differ, %.3f%% by more than 1" % (
                int(dp.max()), 100 * float((dp > 0).double().mean()), 100 * float((dp > 1).double().mean())))
        print("antialias=%s: vs torch's uint8 kernel max %d, %.2f%% differ, %.3f%% by more than 1; "
              "vs its float path max %d" % (antialias, int(du.max()), 100 * float((du > 0).double().mean()),
                                           100 * float((du > 1).double().mean()), int(df.max())))
    import PIL

    result = script_record("benchmarks/bicubic_vs_torch.py")
    result.update(rows=rows, images=[n for n, _ in imgs], pillow=PIL.__version__,
                  cpu_capability=torch.backends.cpu.get_cpu_capability())
    if args.out:
        write_record(args.out, result)


if __name__ == "__main__":
    main()
