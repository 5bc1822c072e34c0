"""prefetch.transforms.timm.pil_ops (timm's RandAugment ops on a batch, each image its own
parameter) against Pillow itself, called as timm's ``auto_augment.py`` calls it on each PIL image:
byte for byte, on random images and on smooth ones with flat regions (where the means, extremes and
histograms matter), 1 and 3 channels, odd sizes down to 1x1."""
import random

import numpy as np
import pytest
import torch
from PIL import Image, ImageEnhance, ImageFilter, ImageOps

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


@pytest.mark.parametrize("name, images", BATCHES, ids=IDS)
def test_gaussian_blur_equals_pillows(name, images):
    """3-Augment's blur: Pillow's GaussianBlur (extended box blur, 3 passes a direction) at radii
    from 0 (the image) through timm's [0.1, 2] to wider than the image (the edges repeated)."""
    rng = random.Random(name)
    radii = [0.0, 0.1, rng.uniform(0.1, 2.0), 2.0, rng.uniform(2.0, 9.0), 60.0][:images.shape[0]]
    got = pil_ops.gaussian_blur(images, torch.tensor(radii, dtype=torch.float64))
    for k, r in enumerate(radii):
        expected = from_pil(to_pil(images[k]).filter(ImageFilter.GaussianBlur(r)))
        assert torch.equal(got[k], expected), (k, r, (got[k].int() - expected.int()).abs().max())
    assert torch.equal(pil_ops.gaussian_blur(images, torch.zeros(images.shape[0])), images)


def test_gaussian_box_radius_is_pillows_formula():
    """Pillow's _gaussian_blur_radius (Gwosdek et al. 2011, eq. 7, 11, 14) against a float64
    reference of the same formula, within float32 rounding; and what the formula is for: three
    passes of the extended box (weight 1 on its 2 l + 1 taps, a on the two beyond) have the
    Gaussian's variance, radius^2 (the box's variance: its taps' squared offsets, weighted)."""
    for radius in (0.1, 0.5, 1.0, 1.7, 2.0, 5.5, 30.0):
        sigma2 = radius * radius / 3
        big_l = (12 * sigma2 + 1) ** 0.5
        small_l = float(int((big_l - 1) / 2))
        a = (2 * small_l + 1) * (small_l * (small_l + 1) - 3 * sigma2) / (6 * (sigma2 - (small_l + 1) ** 2))
        got = pil_ops.gaussian_box_radius(radius)
        assert abs(got - (small_l + a)) < 1e-5 * max(1.0, radius), radius
        whole, frac = int(got), got - int(got)
        # the extended box of radius whole + frac: weights 1 on 2 whole + 1 taps, frac on the next two
        width = 2 * whole + 1 + 2 * frac
        variance = (sum(k * k for k in range(-whole, whole + 1)) + 2 * frac * (whole + 1) ** 2) / width
        assert abs(3 * variance - radius * radius) < 1e-3 * max(1.0, radius * radius), radius
