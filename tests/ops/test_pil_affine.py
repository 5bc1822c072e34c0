"""prefetch.ops.pil_affine (each uint8 image through its own affine map with Pillow's conventions,
bilinear or bicubic) against Pillow's ``Image.transform`` itself (Pillow is a test dependency):
byte for byte, over sizes down to 1x1 and odd ones, 1 and 3 channels, any strides, maps that keep
the image, leave it partly or wholly, and land on exact pixel centres and half pixels."""
import math
import random
import re

import pytest
import torch
import numpy as np
from PIL import Image

from prefetch.ops import pil_affine
from prefetch.transforms.timm.pil_ops import rotate_matrix

from ..pil_images import from_pil, to_pil

RESAMPLE = {"bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC}


def pillow(image, m, mode, fill):
    """One uint8 image ``[C, H, W]`` through Pillow's transform: the reference."""
    c, h, w = image.shape
    color = fill[0] if c == 1 else tuple(fill[k % len(fill)] for k in range(3))
    return from_pil(to_pil(image).transform((w, h), Image.Transform.AFFINE, tuple(m), RESAMPLE[mode],
                                            fillcolor=color))


def maps_for(n, h, w, rng):
    """Maps of every kind timm draws (rotations about the centre, shears and translations, signed)
    and a few more (an identity, half-pixel shifts, a general map, one wholly outside)."""
    kinds = []
    for k in range(n):
        kind = k % 8
        if kind == 0:
            m = rotate_matrix(rng.uniform(-30, 30), w, h)
        elif kind == 1:
            m = [1.0, rng.uniform(-0.3, 0.3), 0.0, 0.0, 1.0, 0.0]
        elif kind == 2:
            m = [1.0, 0.0, 0.0, rng.uniform(-0.3, 0.3), 1.0, 0.0]
        elif kind == 3:
            m = [1.0, 0.0, rng.uniform(-0.45, 0.45) * w, 0.0, 1.0, 0.0]
        elif kind == 4:
            m = [1.0, 0.0, 0.0, 0.0, 1.0, rng.uniform(-0.45, 0.45) * h]
        elif kind == 5:
            m = [1.0, 0.0, 0.5 * rng.choice([-1, 1]), 0.0, 1.0, 0.5]  # on half pixels
        elif kind == 6:
            m = [rng.uniform(0.5, 1.5), rng.uniform(-0.5, 0.5), rng.uniform(-3, 3),
                 rng.uniform(-0.5, 0.5), rng.uniform(0.5, 1.5), rng.uniform(-3, 3)]
        else:
            m = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0] if k % 16 == 7 else [1.0, 0.0, w + 2.0, 0.0, 1.0, 0.0]
        kinds.append(m)
    return torch.tensor(kinds, dtype=torch.float64)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("size", [(1, 1), (2, 3), (7, 5), (31, 24), (64, 64)])
def test_equals_pillows_transform(mode, channels, size):
    h, w = size
    rng = random.Random("%s %d %s" % (mode, channels, size))  # (str seeds are stable; hash() is not)
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    n = 16
    images = torch.randint(0, 256, (n, channels, h, w), dtype=torch.uint8, generator=g)
    maps = maps_for(n, h, w, rng)
    fill = [124, 116, 104][:channels]
    got = pil_affine(images, maps, interpolation=mode, fill=fill)
    for k in range(n):
        expected = pillow(images[k], maps[k].tolist(), mode, fill)
        assert torch.equal(got[k], expected), (k, maps[k].tolist(), (got[k].int() - expected.int()).abs().max())


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_a_photo_like_image_any_strides(mode):
    # A smooth image with edges (bicubic overshoots there and is clipped), read through a
    # channels-last view and a cropped view.
    h, w = 40, 53
    ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    base = torch.stack([(xs * 5) % 256, (ys * 7) % 256, ((xs > 20) ^ (ys > 15)) * 255]).to(torch.uint8)
    images = torch.stack([base, base.flip(2), base.roll(5, 1)])
    maps = torch.tensor([rotate_matrix(a, w, h) for a in (13.7, -29.0, 0.0)], dtype=torch.float64)
    views = [images.contiguous(memory_format=torch.channels_last),
             torch.cat([images, images], dim=3)[:, :, :, :w]]
    for view in views:
        got = pil_affine(view, maps, interpolation=mode, fill=0)
        for k in range(3):
            assert torch.equal(got[k], pillow(images[k], maps[k].tolist(), mode, [0]))


def test_a_map_that_is_not_finite_fills():
    images = torch.full((1, 3, 4, 4), 9, dtype=torch.uint8)
    maps = torch.tensor([[math.nan, 0, 0, 0, 1, 0]], dtype=torch.float64)
    assert torch.equal(pil_affine(images, maps, fill=[1, 2, 3]),
                       torch.tensor([1, 2, 3], dtype=torch.uint8).view(1, 3, 1, 1).expand(1, 3, 4, 4))
    # one value is every channel's (not Pillow's red-only int on RGB); NumPy integers are whole
    assert torch.equal(pil_affine(images, maps, fill=np.int64(5)), torch.full((1, 3, 4, 4), 5, dtype=torch.uint8))


def test_an_empty_batch():
    out = pil_affine(torch.zeros(0, 3, 5, 5, dtype=torch.uint8), torch.zeros(0, 6, dtype=torch.float64))
    assert out.shape == (0, 3, 5, 5)


@pytest.mark.parametrize("call, kind, words", [
    (lambda x, m: pil_affine(x, m.float()), RuntimeError, "matrices must be float64"),
    (lambda x, m: pil_affine(x, m[:1]), RuntimeError, "[2, 6]"),
    (lambda x, m: pil_affine(x.float(), m), RuntimeError, "uint8"),
    (lambda x, m: pil_affine(x, m, interpolation="nearest"), ValueError, "'bilinear' or 'bicubic'"),
    (lambda x, m: pil_affine(x, m, fill=[1, 2]), RuntimeError, "1 value or one per channel (3)"),
    (lambda x, m: pil_affine(x, m, fill=256), RuntimeError, "fill[0] must lie in [0, 255]"),
    (lambda x, m: pil_affine(x, m, fill=1.5), TypeError, "whole number"),
])
def test_bad_arguments_are_named(call, kind, words):
    x = torch.zeros(2, 3, 4, 4, dtype=torch.uint8)
    m = torch.zeros(2, 6, dtype=torch.float64)
    with pytest.raises(kind, match=re.escape(words)):
        call(x, m)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_cuda_writes_the_cpu_bytes(mode):
    g = torch.Generator().manual_seed(3)
    images = torch.randint(0, 256, (8, 3, 33, 29), dtype=torch.uint8, generator=g)
    maps = maps_for(8, 33, 29, random.Random(3))
    expected = pil_affine(images, maps, interpolation=mode, fill=[5, 6, 7])
    got = pil_affine(images.cuda(), maps.cuda(), interpolation=mode, fill=[5, 6, 7])
    assert torch.equal(got.cpu(), expected)
