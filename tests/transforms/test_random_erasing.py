"""RandomErasing (prefetch/transforms/erasing.py): torchvision v2's box distribution per sample
(checked statistically: the probability, the area's and the aspect's ranges, positions inside the
image), the box written exactly (every pixel inside it the value, every other untouched), any
layout and dtype, and the draws a function of the batch position."""
import math

import pytest
import torch

import prefetch
from prefetch.transforms import RandomErasing


def test_boxes_follow_torchvisions_distribution():
    e = RandomErasing(p=0.4, scale=(0.02, 0.33), ratio=(0.3, 3.3), seed=1)
    n, h, w = 20000, 64, 48
    erase, boxes = e.boxes(n, h, w, 0, 0, 0)
    top, left, bh, bw = boxes.unbind(1)
    sel = erase
    # P(erased) = p * P(one of 10 tries fits); with these scales almost every try fits.
    rate = erase.double().mean().item()
    assert abs(rate - 0.4) < 5 * math.sqrt(0.4 * 0.6 / n) + 0.01
    assert bool((bh[sel] < h).all() and (bw[sel] < w).all())
    assert bool((top[sel] >= 0).all() and (left[sel] >= 0).all())
    assert bool((top[sel] + bh[sel] <= h).all() and (left[sel] + bw[sel] <= w).all())
    area = (bh[sel] * bw[sel]).double() / (h * w)
    aspect = bh[sel].double() / bw[sel].double()
    # rounding to whole pixels widens the ranges by about a pixel
    assert area.min() >= 0.02 * 0.7 and area.max() <= 0.33 * 1.3
    assert aspect.min() >= 0.3 * 0.6 and aspect.max() <= 3.3 / 0.6
    # log-uniform aspect: about as many boxes taller than wide as wider than tall
    taller, wider = int((aspect > 1.05).sum()), int((aspect < 1 / 1.05).sum())
    assert abs(taller - wider) < 5 * math.sqrt(taller + wider)
    # positions uniform: the mean offset is at the middle of the free range
    free = (h - bh[sel] + 1).double()
    assert abs((top[sel].double() / (free - 1).clamp(min=1)).mean().item() - 0.5) < 0.02


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8])
def test_the_box_is_written_exactly_and_nothing_else(layout, dtype):
    n, c, h, w = 16, 3, 20, 18
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(n, c, h, w, generator=g) * 200).to(dtype)
    value = (7.5, 8.0, 9.0)
    e = RandomErasing(p=0.7, value=value, seed=3)
    batch = (x if layout == "NCHW" else x.permute(0, 2, 3, 1).contiguous(), torch.arange(n))
    out = e.apply(batch, (2, 5, 1))
    got = out[0] if layout == "NCHW" else out[0].permute(0, 3, 1, 2)
    assert torch.equal(out[1], torch.arange(n)) and got.dtype == dtype
    erase, boxes = e.boxes(n, h, w, 2, 5, 1)
    assert 0 < int(erase.sum()) < n
    for i in range(n):
        want = x[i].clone()
        if erase[i]:
            t, l, bh, bw = boxes[i].tolist()
            want[:, t:t + bh, l:l + bw] = torch.tensor(value).view(3, 1, 1).to(dtype)
        assert torch.equal(got[i], want), i


def test_random_noise_is_reproducible_and_only_in_the_box():
    x = torch.zeros(8, 3, 16, 16)
    e = RandomErasing(p=1.0, value="random", seed=4)
    a, b = e.apply(x, (0, 1, 0)), e.apply(x, (0, 1, 0))
    assert torch.equal(a, b) and not torch.equal(a, e.apply(x, (0, 2, 0)))
    erase, boxes = e.boxes(8, 16, 16, 0, 1, 0)
    for i in range(8):
        t, l, bh, bw = boxes[i].tolist()
        outside = a[i].clone()
        inside = outside[:, t:t + bh, l:l + bw].clone()
        outside[:, t:t + bh, l:l + bw] = 0
        assert inside.std() > 0.3 and not bool(outside.any())


def test_through_a_loader_composed_after_fused_augment():
    g = torch.Generator().manual_seed(2)
    images = torch.randint(0, 256, (32, 3, 12, 12), dtype=torch.uint8, generator=g)
    fused = prefetch.FusedAugment(mean=(0.5,) * 3, std=(0.25,) * 3, hflip=0.5, seed=5)
    erase = RandomErasing(0.5, seed=6)
    loader = prefetch.ArrayLoader((images, torch.arange(32)), batch_size=8, device="cpu",
                                  transform=prefetch.transforms.Compose([fused, erase]))
    plain = prefetch.ArrayLoader((images, torch.arange(32)), batch_size=8, device="cpu",
                                 transform=fused)
    for index, ((got, y), (want, _)) in enumerate(zip(loader, plain)):
        erased, boxes = erase.boxes(8, 12, 12, 0, index, 0)
        expect = want.clone()
        for i in range(8):
            if erased[i]:
                t, l, bh, bw = boxes[i].tolist()
                expect[i, :, t:t + bh, l:l + bw] = 0
        assert torch.equal(got, expect)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"RandomErasing p must be a probability in \[0, 1\], got 1.5"):
        RandomErasing(p=1.5)
    with pytest.raises(ValueError, match="scale"):
        RandomErasing(scale=(0.5, 0.1))
    with pytest.raises(ValueError, match="ratio"):
        RandomErasing(ratio=(0, 1))
    with pytest.raises(ValueError, match="'random'"):
        RandomErasing(value="noise")
    with pytest.raises(ValueError, match="value has 2 numbers.*3 channels"):
        RandomErasing(value=(1, 2), seed=0).apply(torch.zeros(2, 3, 4, 4), (0, 0, 0))
    with pytest.raises(ValueError, match=r"image batch .* got a torch.float32 tensor of shape \[3, 4, 4\]"):
        RandomErasing(seed=0).apply(torch.zeros(3, 4, 4), (0, 0, 0))
