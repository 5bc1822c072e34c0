"""prefetch.transforms.timm.pil_ops (timm's RandAugment ops on a batch, each image its own
parameter) against Pillow itself, called as timm's ``auto_augment.py`` calls it on each PIL image:
byte for byte, on random images and on smooth ones with flat regions (where the means, extremes and
histograms matter), 1 and 3 channels, odd sizes down to 1x1."""
import random

import numpy as np
import pytest
import torch
from PIL import Image, ImageEnhance, ImageOps

from prefetch.transforms.timm import pil_ops

from ..pil_images import from_pil, to_pil



def batches():
    """(name, images [N, C, H, W]) pairs: random values, and smooth gradients with flat patches
    and a narrow range (AutoContrast stretches it, Equalize spreads it)."""
    out = []
    g = torch.Generator().manual_seed(0)
    for c in (1, 3):
        for h, w in ((1, 1), (2, 5), (17, 23), (48, 40)):
            out.append(("random %dx%dx%d" % (c, h, w), torch.randint(0, 256, (6, c, h, w), dtype=torch.uint8, generator=g)))
        ys, xs = torch.meshgrid(torch.arange(30), torch.arange(37), indexing="ij")
        smooth = torch.stack([(60 + xs * 2 + ys) % 256, 100 + ys * 3, (xs > 18) * 90 + 80][:c]).to(torch.uint8)
        flat = torch.full_like(smooth, 77)
        out.append(("smooth %d" % c, torch.stack([smooth, smooth // 4 + 100, flat, smooth.flip(2), smooth // 2, smooth])))
    return out


def posterized(pil, bits):
    """timm's posterize: the image for 8 bits or more; Pillow's table ``i & ~(2 ** (8 - bits) - 1)``
    otherwise. Pillow 13's ImageOps.posterize refuses 0 bits (timm's PosterizeIncreasing at
    magnitude 10 asks for it), which older Pillows computed as this table (every value 0); for 1
    to 7 bits the table is checked against ImageOps.posterize itself."""
    if bits >= 8:
        return pil
    table = [i & ~(2 ** (8 - bits) - 1) for i in range(256)]
    out = pil.point(table * len(pil.getbands()))
    if bits >= 1:
        assert np.array_equal(np.asarray(out), np.asarray(ImageOps.posterize(pil, bits)))
    return out


BATCHES = batches()
IDS = [name for name, _ in BATCHES]


def factors(n, rng):
    # timm's range (0.1 .. 1.9) and beyond it, exact 0 and 1 (Pillow's copy shortcuts)
    return torch.tensor([0.0, 1.0] + [rng.uniform(0.1, 1.9) for _ in range(n - 3)] + [2.7],
                        dtype=torch.float64)[:n]


@pytest.mark.parametrize("name, images", BATCHES, ids=IDS)
@pytest.mark.parametrize("op, enhancer", [("color", ImageEnhance.Color), ("contrast", ImageEnhance.Contrast),
                                          ("brightness", ImageEnhance.Brightness),
                                          ("sharpness", ImageEnhance.Sharpness)])
def test_enhance_ops_equal_pillows(name, images, op, enhancer):
    f = factors(images.shape[0], random.Random(name + op))
    got = getattr(pil_ops, op)(images, f)
    for k in range(images.shape[0]):
        expected = from_pil(enhancer(to_pil(images[k])).enhance(float(f[k])))
        assert torch.equal(got[k], expected), (k, float(f[k]), (got[k].int() - expected.int()).abs().max())


@pytest.mark.parametrize("name, images", BATCHES, ids=IDS)
def test_value_ops_equal_pillows(name, images):
    n = images.shape[0]
    rng = random.Random(name)
    thresholds = torch.tensor([rng.choice([0, 1, 128, 200, 255, 256]) for _ in range(n)])
    adds = torch.tensor([rng.randrange(0, 129) for _ in range(n)])
    bits = torch.tensor([rng.randrange(0, 9) for _ in range(n)])
    got = {"autocontrast": pil_ops.autocontrast(images), "equalize": pil_ops.equalize(images),
           "invert": pil_ops.invert(images), "solarize": pil_ops.solarize(images, thresholds),
           "solarize_add": pil_ops.solarize_add(images, adds), "posterize": pil_ops.posterize(images, bits),
           "grayscale": pil_ops.grayscale(images)}
    for k in range(n):
        pil = to_pil(images[k])
        lut = [min(255, i + int(adds[k])) if i < 128 else i for i in range(256)]
        expected = {"autocontrast": ImageOps.autocontrast(pil), "equalize": ImageOps.equalize(pil),
                    "invert": ImageOps.invert(pil), "solarize": ImageOps.solarize(pil, int(thresholds[k])),
                    "solarize_add": pil.point(lut * (3 if pil.mode == "RGB" else 1)),
                    "posterize": posterized(pil, int(bits[k])),
                    "grayscale": pil.convert("L")}
        for op, reference in expected.items():
            assert torch.equal(got[op][k], from_pil(reference)), (op, k)


@pytest.mark.parametrize("degrees", [0.0, 12.5, -30.0, 29.9])
@pytest.mark.parametrize("size", [(224, 224), (31, 17)])
def test_rotate_matrix_is_pillows(degrees, size):
    # Pillow's rotate is its transform with this matrix: the same bytes.
    w, h = size
    image = torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    pil = to_pil(image)
    for resample in (Image.Resampling.BILINEAR, Image.Resampling.BICUBIC):
        a = pil.rotate(degrees, resample=resample, fillcolor=(1, 2, 3))
        b = pil.transform((w, h), Image.Transform.AFFINE, tuple(pil_ops.rotate_matrix(degrees, w, h)), resample,
                          fillcolor=(1, 2, 3))
        assert np.array_equal(np.asarray(a), np.asarray(b))
