"""Crop boxes (prefetch/transforms/crop_boxes.py) against torchvision's RandomResizedCrop algorithm, written
here from its definition (torchvision does not load next to the CPU torch on the CI machine),
and against the two-step Resize + CenterCrop they stand for."""
import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from prefetch.transforms.crop_boxes import center_boxes, random_resized_boxes


def torchvision_get_params(height, width, scale, ratio, rng):
    """RandomResizedCrop.get_params, one image, with Python's random for the draws."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect_ratio = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, height - h), rng.randint(0, width - w), h, w
    in_ratio = float(width) / float(height)
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def ks_statistic(a, b):
    """The two-sample Kolmogorov-Smirnov statistic of two lists of numbers."""
    a, b = sorted(a), sorted(b)
    i = j = 0
    d = 0.0
    while i < len(a) and j < len(b):
        x = min(a[i], b[j])
        while i < len(a) and a[i] <= x:
            i += 1
        while j < len(b) and b[j] <= x:
            j += 1
        d = max(d, abs(i / len(a) - j / len(b)))
    return d


@pytest.mark.parametrize("height,width,scale,ratio", [
    (375, 500, (0.08, 1.0), (3 / 4, 4 / 3)),
    (500, 333, (0.08, 1.0), (3 / 4, 4 / 3)),
    (64, 640, (0.5, 1.0), (3 / 4, 4 / 3)),   # a wide image: the fallback is frequent
    (224, 224, (0.25, 0.25), (1.0, 1.0)),
])
def test_the_draws_follow_torchvisions_distribution(height, width, scale, ratio):
    n = 6000
    boxes = random_resized_boxes([height] * n, [width] * n, scale, ratio,
                                 generator=torch.Generator().manual_seed(0))
    rng = random.Random(1)
    ref = [torchvision_get_params(height, width, scale, ratio, rng) for _ in range(n)]
    ours = [tuple(b) for b in boxes.tolist()]
    # 6000 draws each: two samples of one distribution stay under ~0.03 (p = 0.001 at 0.0357)
    for k, what in enumerate(("top", "left", "height", "width")):
        d = ks_statistic([b[k] for b in ours], [b[k] for b in ref])
        assert d < 0.036, "%s: KS statistic %.4f" % (what, d)
    d = ks_statistic([b[2] * b[3] / (height * width) for b in ours],
                     [b[2] * b[3] / (height * width) for b in ref])
    assert d < 0.036, "area fraction: KS statistic %.4f" % d


@pytest.mark.parametrize("height,width,ratio,want", [
    (100, 400, (3 / 4, 4 / 3), (0, 133, 100, 133)),  # wider than 4/3: the height, narrowed
    (400, 100, (3 / 4, 4 / 3), (133, 0, 133, 100)),  # taller than 3/4: the width, shortened
    (90, 100, (3 / 4, 4 / 3), (0, 0, 90, 100)),      # within the ratios: the whole image
])
def test_the_fallback_is_torchvisions(height, width, ratio, want):
    # A scale no window can reach: every attempt fails, as in torchvision.
    boxes = random_resized_boxes([height] * 3, [width] * 3, (5.0, 6.0), ratio,
                                 generator=torch.Generator().manual_seed(0))
    assert boxes.tolist() == [list(want)] * 3
    rng = random.Random(0)
    assert torchvision_get_params(height, width, (5.0, 6.0), ratio, rng) == want


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.tuples(st.integers(1, 300), st.integers(1, 300)), min_size=1, max_size=8),
       seed=st.integers(0, 2**31), lo=st.floats(0.01, 1.0))
def test_every_box_lies_inside_its_image(sizes, seed, lo):
    h, w = zip(*sizes)
    for boxes in (random_resized_boxes(h, w, (lo, 1.0), generator=torch.Generator().manual_seed(seed)),
                  center_boxes(h, w, 7, 8), center_boxes(h, w, (5, 9))):
        for (top, left, bh, bw), H, W in zip(boxes.tolist(), h, w):
            assert bh >= 1 and bw >= 1 and top >= 0 and left >= 0
            assert top + bh <= H and left + bw <= W


def test_draws_are_a_function_of_the_generator_and_each_image_its_own():
    h, w = [300, 40, 500], [200, 500, 500]
    a = random_resized_boxes(h, w, generator=torch.Generator().manual_seed(5))
    b = random_resized_boxes(h, w, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a, b)
    c = random_resized_boxes(h, w, generator=torch.Generator().manual_seed(6))
    assert not torch.equal(a, c)


def test_center_boxes_keep_what_resize_then_center_crop_keep():
    # Resize(256) + CenterCrop(224) of a 375x500 image, by torchvision's formulas: 256 x
    # int(256 * 500 / 375) = 256 x 341, the crop at (round(16), round(58.5)) = (16, 58) (half to
    # even); in the original rows [16, 240) * 375 / 256 = [23.44, 351.56) and columns
    # [58, 282) * 500 / 341 = [85.04, 413.49), to the nearest pixel. (The grid:
    # test_torchvision_geometry.py.)
    boxes = center_boxes([375, 500], [500, 375], 224, 256)
    assert boxes.tolist() == [[23, 85, 329, 328], [85, 23, 328, 329]]
    # Without a resize: the largest centred window of the output's ratio.
    assert center_boxes([100], [300], (50, 100)).tolist() == [[0, 50, 100, 200]]


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="scale must be finite with 0 < lo <= hi"):
        random_resized_boxes([4], [4], scale=(0.5, 0.1))
    with pytest.raises(ValueError, match="ratio must be a pair"):
        random_resized_boxes([4], [4], ratio=3)
    with pytest.raises(ValueError, match="2 heights but 1 widths"):
        random_resized_boxes([4, 5], [4])
    with pytest.raises(ValueError, match="height and width >= 1"):
        center_boxes([0], [4], 2)
    with pytest.raises(ValueError, match="resize .* must be >= the crop"):
        center_boxes([10], [10], 8, 4)
