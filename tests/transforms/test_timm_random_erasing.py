"""prefetch.transforms.timm.RandomErasing against timm's RandomErasing (timm/data/random_erasing.py)
written out here in plain Python (``timm_erase_boxes``: its _erase's draws, from Python's random,
one image at a time): the distributions of the count, the boxes' sizes and corners, the fills;
and the writing of each drawn box, checked element by element. timm itself is not needed."""
import math
import random

import pytest
import torch

from prefetch.transforms import BatchPosition
from prefetch.transforms.timm import RandomErasing


def timm_erase_boxes(rng, p, H, W, min_area=0.02, max_area=1 / 3, min_aspect=0.3, min_count=1,
                     max_count=1):
    """The boxes timm's _erase writes in one image (its code, without the writing)."""
    if rng.random() > p:
        return []
    log_ratio = (math.log(min_aspect), math.log(1 / min_aspect))
    count = min_count if min_count == max_count else rng.randint(min_count, max_count)
    boxes = []
    for _ in range(count):
        for _attempt in range(10):
            target = rng.uniform(min_area, max_area) * H * W / count
            aspect = math.exp(rng.uniform(*log_ratio))
            h, w = int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))
            if w < W and h < H:
                boxes.append((rng.randint(0, H - h), rng.randint(0, W - w), h, w))
                break
    return boxes


def ours_boxes(t, n, H, W, batches):
    out = []
    for k in range(batches):
        drawn = t.boxes(n, H, W, 0, k)
        for i in range(n):
            out.append([tuple(int(v) for v in b[1:]) for b in drawn[i] if int(b[0])])
    return out


def summary(per_image, H, W):
    """Fraction erased, mean box count of erased images, mean area fraction and log aspect of a
    box, mean corner position as a fraction of its range."""
    erased = [b for b in per_image if b]
    boxes = [x for b in erased for x in b]
    return {
        "erased": len(erased) / len(per_image),
        "count": sum(len(b) for b in erased) / len(erased),
        "area": sum(h * w for _, _, h, w in boxes) / len(boxes) / (H * W),
        "log_aspect": sum(math.log(h / w) for _, _, h, w in boxes if w) / len(boxes),
        "top": sum(t / max(1, H - h) for t, _, h, _ in boxes) / len(boxes),
        "left": sum(l / max(1, W - w) for _, l, _, w in boxes) / len(boxes),
    }


@pytest.mark.parametrize("kw,H,W", [
    (dict(probability=0.5), 24, 32),
    (dict(probability=0.8, max_count=3), 20, 20),
    (dict(probability=1.0, min_count=2, max_count=4, min_area=0.1, max_area=0.4, min_aspect=0.5), 16, 40),
])
def test_draws_follow_timms_distributions(kw, H, W):
    t = RandomErasing(seed=3, **kw)
    ours = summary(ours_boxes(t, 256, H, W, 24), H, W)
    rng = random.Random(5)
    args = dict(min_area=kw.get("min_area", 0.02), max_area=kw.get("max_area", 1 / 3),
                min_aspect=kw.get("min_aspect", 0.3), min_count=kw.get("min_count", 1),
                max_count=kw.get("max_count", kw.get("min_count", 1)))
    theirs = summary([timm_erase_boxes(rng, kw["probability"], H, W, **args) for _ in range(256 * 24)], H, W)
    # 6144 images each: the sampling error of these means is below 0.01 (area, corners) and 0.03
    # (count, log aspect); 4 of those.
    for key, tol in (("erased", 0.03), ("count", 0.1), ("area", 0.02), ("log_aspect", 0.1),
                     ("top", 0.03), ("left", 0.03)):
        assert abs(ours[key] - theirs[key]) < tol, (key, ours, theirs)


def test_each_box_lies_inside_and_follows_the_rules():
    t = RandomErasing(probability=0.9, min_count=1, max_count=3, seed=1)
    drawn = t.boxes(500, 30, 22, 1, 2)
    assert drawn.shape == (500, 3, 5) and drawn.dtype == torch.int64
    erase, top, left, h, w = drawn.unbind(2)
    e = erase.bool()
    assert bool((h[e] < 30).all() and (w[e] < 22).all() and (h[e] >= 0).all())
    assert bool((top[e] >= 0).all() and (top[e] + h[e] <= 30).all())
    assert bool((left[e] >= 0).all() and (left[e] + w[e] <= 22).all())
    # an image's boxes are its first `count`: never a later box without an earlier one (a try
    # that fits nothing can skip one, rarely, at these sizes never)
    assert bool((e[:, 1] <= e[:, 0]).all() and (e[:, 2] <= e[:, 1]).all())
    assert torch.equal(t.boxes(500, 30, 22, 1, 2), drawn)  # a function of the position
    assert not torch.equal(t.boxes(500, 30, 22, 1, 3), drawn)


def test_num_splits_leaves_the_clean_split_alone():
    t = RandomErasing(probability=1.0, num_splits=4, seed=2)
    erase = t.boxes(40, 16, 16)[:, 0, 0]
    assert not bool(erase[:10].any()) and bool(erase[10:].all())


def _mask(drawn, n, H, W):
    masks = []
    for j in range(drawn.shape[1]):
        m = torch.zeros(n, H, W, dtype=torch.bool)
        for i in range(n):
            e, t, l, h, w = drawn[i, j].tolist()
            if e:
                m[i, t:t + h, l:l + w] = True
        masks.append(m)
    return masks


@pytest.mark.parametrize("mode", ["const", "rand", "pixel"])
def test_apply_writes_exactly_the_drawn_boxes(mode, device):
    t = RandomErasing(probability=0.7, mode=mode, max_count=3, seed=4)
    x = torch.rand(64, 3, 20, 24, generator=torch.Generator().manual_seed(0)) + 10.0  # never a fill
    pos = BatchPosition(3, 1, 0)
    out = t.apply((x.to(device), 0), pos)[0].cpu()
    masks = _mask(t.boxes(64, 20, 24, *pos), 64, 20, 24)
    union = torch.stack(masks).any(0).unsqueeze(1).expand_as(x)
    assert torch.equal(out[~union], x[~union])
    changed = out[union]
    assert bool((changed < 9.0).all())  # every erased value is a fill
    if mode == "const":
        assert bool((changed == 0).all())
    elif mode == "rand":
        # the last box over a pixel decides it: one value per box and channel
        last = torch.full((64, 20, 24), -1)
        for j, m in enumerate(masks):
            last[m] = j
        for i in range(64):
            for j in range(3):
                sel = last[i] == j
                if bool(sel.any()):
                    vals = out[i][:, sel]
                    assert bool((vals == vals[:, :1]).all())
    else:
        # standard normal per pixel: mean 0, std 1 within 5 standard errors
        n = changed.numel()
        assert n > 1000
        assert abs(float(changed.mean())) < 5 / math.sqrt(n)
        assert abs(float(changed.std()) - 1.0) < 5 * math.sqrt(2 / n)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("mode", ["const", "rand", "pixel"])
def test_inplace_erases_the_leaf_itself_with_the_same_values(mode, layout, device):
    """inplace=True writes the copy's values into the leaf itself on the CPU (timm's in-place
    erasing); inplace=False never writes the leaf; a device erases out of place either way."""
    x = torch.rand(32, 3, 20, 24, generator=torch.Generator().manual_seed(1)).to(device)
    if layout == "NHWC":
        x = x.permute(0, 2, 3, 1).contiguous()
    kept = x.clone()
    pos = BatchPosition(2, 5, 0)
    copied = RandomErasing(probability=0.8, mode=mode, max_count=2, seed=9, layout=layout).apply(
        (x, 0), pos)[0]
    assert torch.equal(x, kept)  # inplace=False: the leaf is not written
    assert not torch.equal(copied, kept)
    erased = RandomErasing(probability=0.8, mode=mode, max_count=2, seed=9, layout=layout,
                           inplace=True).apply((x, 0), pos)[0]
    assert torch.equal(erased, copied)
    if x.device.type == "cpu":
        assert erased.data_ptr() == x.data_ptr() and torch.equal(x, copied)


def test_const_erases_uint8_and_noise_needs_floats():
    x = torch.full((4, 3, 16, 16), 200, dtype=torch.uint8)
    out = RandomErasing(probability=1.0, seed=0).apply((x, 0), BatchPosition(0, 0, 0))[0]
    assert out.dtype == torch.uint8 and bool((out == 0).any())
    with pytest.raises(ValueError, match=r"mode='pixel'\) fills with normal noise, which needs float images"):
        RandomErasing(probability=1.0, mode="pixel", seed=0).apply((x, 0), BatchPosition(0, 0, 0))


@pytest.mark.parametrize("kwargs,match", [
    (dict(probability=1.5), "probability must be"),
    (dict(min_area=0.5, max_area=0.2), r"max_area must be a number in \[min_area, 1\]"),
    (dict(min_aspect=0.0), "min_aspect must be"),
    (dict(mode="noise"), "mode must be 'const', 'rand' or 'pixel', got 'noise'"),
    (dict(min_count=2, max_count=1), r"max_count must be an int >= min_count \(2\)"),
    (dict(num_splits=-1), "num_splits must be"),
])
def test_bad_arguments_are_refused_naming_them(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RandomErasing(**kwargs)


def test_timm_itself_where_installed_takes_the_same_arguments():
    timm_erasing = pytest.importorskip("timm.data.random_erasing")
    theirs = timm_erasing.RandomErasing(0.25, mode="pixel", max_count=3, num_splits=2, device="cpu")
    ours = RandomErasing(0.25, mode="pixel", max_count=3, num_splits=2, device="cpu")
    assert (ours.probability, ours.mode, ours.min_count, ours.max_count, ours.num_splits) == (
        theirs.probability, theirs.mode, theirs.min_count, theirs.max_count, theirs.num_splits)
    assert ours.log_aspect_ratio == pytest.approx(theirs.log_aspect_ratio)
