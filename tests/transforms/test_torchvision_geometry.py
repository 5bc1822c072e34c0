"""Every integer a geometric step derives equals torchvision's own computation (issue 43, item 2):
CenterCrop's corner and padding on every path (the ops, FusedAugment, v2, masks), Resize's output
size from one side (with max_size), the Resize + CenterCrop window (to half a pixel of the
original: the one-resample design crops whole pixels of the original), RandomCrop's padding and
draw range (pad_if_needed too) and RandomResizedCrop's fallback. The references below are written
from torchvision's source (each cites its function); where torchvision is importable it is asked
too."""
import math

import pytest
import torch

import prefetch
from prefetch import FusedAugment
from prefetch.ops import flip_crop, normalize_flip
from prefetch.transforms import v2 as T
from prefetch.transforms.crop_boxes import (center_anchor, center_boxes, random_resized_boxes,
                                            resized_output_size)


# ---- references, from torchvision's source ------------------------------------------------------

def tv_center_crop(x, crop_h, crop_w):
    """torchvision/transforms/v2/functional/_geometry.py ``center_crop_image`` on ``[..., H, W]``,
    step by step: ``_center_crop_compute_padding`` (left, top, right, bottom) = ((c - W) // 2,
    (c - H) // 2, (c - W + 1) // 2, (c - H + 1) // 2) of zeros when the crop is larger, then
    ``_center_crop_compute_crop_anchor``: ``int(round((H - c) / 2.0))`` of the padded image."""
    H, W = x.shape[-2:]
    if crop_h > H or crop_w > W:
        pad = [(crop_w - W) // 2 if crop_w > W else 0, (crop_w - W + 1) // 2 if crop_w > W else 0,
               (crop_h - H) // 2 if crop_h > H else 0, (crop_h - H + 1) // 2 if crop_h > H else 0]
        x = torch.nn.functional.pad(x, pad, value=0)
        H, W = x.shape[-2:]
    top = int(round((H - crop_h) / 2.0))
    left = int(round((W - crop_w) / 2.0))
    return x[..., top:top + crop_h, left:left + crop_w]


def tv_resized_output_size(h, w, size, max_size=None):
    """torchvision/transforms/functional.py ``_compute_resized_output_size`` for an int size."""
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = size, int(size * long / short)
    if max_size is not None:
        if max_size <= size:
            raise ValueError("max_size must be strictly greater than the requested size")
        if new_long > max_size:
            new_short, new_long = int(max_size * new_short / new_long), max_size
    new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    return new_h, new_w


def tv_resize_center_crop_window(h, w, resize, crop, max_size=None):
    """The continuous window of the original (float64 edges: top, bottom, left, right) that
    torchvision's ``Resize(resize, max_size)`` then ``CenterCrop(crop)`` keep: the crop's whole
    pixels of the resized image, through the resize's scale (``interpolate``'s
    align_corners=False maps resized pixel edge ``y`` to original ``y * h / new_h``)."""
    nh, nw = tv_resized_output_size(h, w, resize, max_size)
    top, left = int(round((nh - crop) / 2.0)), int(round((nw - crop) / 2.0))
    return top * h / nh, (top + crop) * h / nh, left * w / nw, (left + crop) * w / nw, nh, nw


def tv_random_crop_range(H, W, crop, padding, pad_if_needed):
    """torchvision/transforms/v2/_geometry.py ``RandomCrop`` (``_parse_pad_padding`` then
    ``make_params``): the first and last window top and left, in the original's pixels, or None
    where torchvision raises."""
    if padding is None:
        pl = pr = pt = pb = 0
    elif isinstance(padding, int):
        pl = pr = pt = pb = padding
    elif len(padding) == 2:
        pl, pt = padding
        pr, pb = padding
    else:
        pl, pt, pr, pb = padding
    ph, pw = H + pt + pb, W + pl + pr
    ch, cw = crop
    if pad_if_needed:
        if ph < ch:
            diff = ch - ph
            pt, pb, ph = pt + diff, pb + diff, ph + 2 * diff
        if pw < cw:
            diff = cw - pw
            pl, pr, pw = pl + diff, pr + diff, pw + 2 * diff
    if ph < ch or pw < cw:
        return None
    return (-pt, ph - ch - pt), (-pl, pw - cw - pl)


def tv_rrc_fallback(height, width, ratio):
    """torchvision/transforms/v2/_geometry.py ``RandomResizedCrop.make_params``' fallback (no
    attempt fits): the whole image narrowed to the nearest ratio with ``int(round())``, placed at
    ``(height - h) // 2`` (floor division there, unlike CenterCrop's round)."""
    in_ratio = float(width) / float(height)
    if in_ratio < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        h, w = height, int(round(height * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


SIZES = [1, 2, 5, 20, 23, 24, 25, 31, 32, 35, 37, 39, 40]


# ---- CenterCrop ------------------------------------------------------------------------------------

def test_center_anchor_is_torchvisions_on_a_grid():
    for extent in range(1, 48):
        for crop in range(1, 48):
            ref = tv_center_crop(torch.arange(extent).view(1, extent), 1, crop)
            # where the image's first pixel lands, or which pixel the window starts at
            start = center_anchor(extent, crop)
            if start >= 0:
                assert ref[0, 0].item() == start, (extent, crop)
            else:
                assert ref[0, -start].item() == 0 and (crop - extent) // 2 == -start, (extent, crop)
    # the two cases
    assert (center_anchor(35, 24), center_anchor(39, 24)) == (6, 8)
    assert center_anchor(32, 37) == -2


def images(n, H, W, C=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, 256, (n, H, W, C), dtype=torch.uint8, generator=g)  # 0 only in fill


def centre_paths(x, crop):
    """Every path that takes a centred window, on NHWC uint8 ``x``, as NCHW uint8 pixels."""
    pixels = dict(mean=(0.0,) * 3, std=(1 / 255,) * 3, dtype=torch.uint8)
    op = normalize_flip(x, pixels["mean"], pixels["std"], crop=crop, dtype=torch.uint8)
    fused = FusedAugment(crop=crop, center_crop=True, seed=0, **pixels)(x, epoch=0, index=0)
    v2 = T.Compose([T.CenterCrop(crop), T.ToDtype(torch.float32, scale=True)], seed=0)
    compiled = v2(x, epoch=0, index=0)
    masks = flip_crop(x[..., 0].to(torch.int32), crop=crop).unsqueeze(1)
    fused_masks = FusedAugment((0.0,) * 3, (1.0,) * 3, crop=crop, center_crop=True, mask_key=1,
                               seed=0)((x, x[..., 0].to(torch.int16)), epoch=0, index=0)[1]
    return {"normalize_flip": op, "FusedAugment": fused,
            "v2.CenterCrop": (compiled * 255).round().to(torch.uint8),
            "flip_crop": masks.to(torch.uint8), "FusedAugment mask": fused_masks.unsqueeze(1).to(torch.uint8)}


@pytest.mark.parametrize("H,W", [(35, 39), (32, 32), (24, 25), (5, 40), (23, 20)])
@pytest.mark.parametrize("crop", [24, 37, (24, 37), (31, 20), (1, 2)])
def test_every_centre_crop_path_takes_torchvisions_window(H, W, crop):
    x = images(2, H, W)
    ch, cw = (crop, crop) if isinstance(crop, int) else crop
    want = tv_center_crop(x.permute(0, 3, 1, 2), ch, cw)
    for path, got in centre_paths(x, crop).items():
        ref = want if got.shape[1] == 3 else want[:, :1]
        assert torch.equal(got, ref), "%s: %dx%d CenterCrop%s" % (path, H, W, crop)


def test_centre_crop_equals_torchvision_itself():
    F = pytest.importorskip("torchvision.transforms.v2.functional")
    for H in (1, 20, 23, 24, 35):
        for W in (2, 24, 39):
            x = images(1, H, W)
            for crop in (24, 37, (24, 37)):
                want = F.center_crop(x.permute(0, 3, 1, 2), list(crop) if isinstance(crop, tuple) else [crop])
                for path, got in centre_paths(x, crop).items():
                    assert torch.equal(got, want if got.shape[1] == 3 else want[:, :1]), path


# ---- Resize + CenterCrop -------------------------------------------------------------------------

def test_resized_output_size_is_torchvisions():
    for h in list(range(1, 60)) + [224, 225, 256, 333, 375, 500, 1333, 4000]:
        for w in (1, 3, 32, 59, 224, 231, 232, 500, 4001):
            for size, max_size in ((232, None), (256, None), (32, 33), (32, 64), (800, 1333), (7, None)):
                assert resized_output_size(h, w, size, max_size) == \
                    tv_resized_output_size(h, w, size, max_size), (h, w, size, max_size)


def test_resized_output_size_equals_torchvision_itself():
    functional = pytest.importorskip("torchvision.transforms.functional")
    for h in (1, 23, 224, 375, 500, 4000):
        for w in (3, 232, 500, 4001):
            for size, max_size in ((232, None), (32, 64), (800, 1333)):
                want = functional._compute_resized_output_size((h, w), [size], max_size)
                assert list(resized_output_size(h, w, size, max_size)) == list(want)


def window_grid():
    """(H, W, resize, crop, max_size): odd and even differences, smaller and larger than the
    crop, upscaled small images and downscaled large ones."""
    for resize, crop, max_size in ((256, 224, None), (232, 224, None), (36, 32, None), (20, 17, None),
                                   (160, 128, None), (40, 32, 90)):
        for H in list(range(2, 90)) + [223, 224, 225, 231, 232, 233, 255, 256, 257, 333, 375, 500, 801]:
            for W in sorted({H, H + 1, H + 37, int(H * 4 / 3) + 1, max(2, H // 2), 500}):
                yield H, W, resize, crop, max_size


def output_pixel_errors(H, W, resize, crop, max_size):
    """Each edge's distance from torchvision's window, in original and in output pixels."""
    t0, t1, l0, l1, nh, nw = tv_resize_center_crop_window(H, W, resize, crop, max_size)
    top, left, bh, bw = center_boxes([H], [W], crop, resize, max_size)[0].tolist()
    original = [abs(top - t0), abs(top + bh - t1), abs(left - l0), abs(left + bw - l1)]
    output = [original[0] * nh / H, original[1] * nh / H, original[2] * nw / W, original[3] * nw / W]
    return original, output, (t1 - t0, l1 - l0), (top, left, bh, bw), (nh, nw)


def test_resize_center_crop_window_lies_within_half_an_original_pixel_of_torchvisions():
    worst_downscaled = worst_half = 0.0
    exact = 0
    for H, W, resize, crop, max_size in window_grid():
        if tv_resized_output_size(H, W, resize, max_size)[0] < crop or \
                tv_resized_output_size(H, W, resize, max_size)[1] < crop:
            with pytest.raises(ValueError, match="torchvision would pad it"):
                center_boxes([H], [W], crop, resize, max_size)
            continue
        original, output, extent, box, (nh, nw) = output_pixel_errors(H, W, resize, crop, max_size)
        if min(extent) >= 1:  # a window of at least a pixel: each edge to its nearest pixel
            assert max(original) <= 0.5 + 1e-9, (H, W, resize, crop, box)
        if (nh, nw) == (H, W):  # torchvision does not resample: its crop, exactly
            assert max(original) == 0, (H, W, resize, crop, box)
            exact += 1
        if min(H, W) >= resize:
            worst_downscaled = max(worst_downscaled, max(output))
        if 2 * min(H, W) >= resize:
            worst_half = max(worst_half, max(output))
    assert exact > 0
    # The bounds docs/reliability.md and the README state (measured here: 0.49 and 1.0).
    assert worst_downscaled <= 0.5
    assert worst_half <= 1.0


def test_every_resize_center_crop_path_takes_the_same_windows():
    sizes = [(375, 500), (500, 375), (37, 41), (224, 300), (99, 100), (232, 232)]
    boxes = center_boxes([h for h, _ in sizes], [w for _, w in sizes], 224, 232)
    for h, w in sizes:  # the box tracks torchvision's window
        assert max(output_pixel_errors(h, w, 232, 224, None)[0]) <= 0.5
    aug = FusedAugment((0.5,) * 3, (0.2,) * 3, crop=224, resize=232, center_crop=True, seed=0)
    batch = [torch.zeros(h, w, 3, dtype=torch.uint8) for h, w in sizes]
    assert torch.equal(aug.draws_for((batch,), (0, 0)).boxes, boxes)
    compiled = T.Compose([T.Resize(232), T.CenterCrop(224), T.ToDtype(torch.float32, scale=True)])
    fused = compiled.transforms[0]
    assert isinstance(fused, FusedAugment)
    assert torch.equal(fused.draws_for((batch,), (0, 0)).boxes, boxes)


def test_max_size_follows_torchvision_and_a_padded_crop_is_refused():
    aug = FusedAugment((0.5,) * 3, (0.2,) * 3, crop=32, resize=40, max_size=90, center_crop=True)
    box = aug.draws_for(([torch.zeros(100, 200, 3, dtype=torch.uint8)],), (0, 0)).boxes[0].tolist()
    t0, t1, l0, l1, nh, nw = tv_resize_center_crop_window(100, 200, 40, 32, 90)
    assert (nh, nw) == (40, 80)  # 40 x 80 fits max_size 90
    assert abs(box[0] - t0) <= 0.5 and abs(box[0] + box[2] - t1) <= 0.5
    # 30 x 300: 40 x 400 exceeds 90, so 9 x 90, smaller than the crop: torchvision pads it
    with pytest.raises(ValueError, match=r"image 0 \(30x300\) is 9x90 after Resize\(40, max_size=90\)"):
        aug.draws_for(([torch.zeros(30, 300, 3, dtype=torch.uint8)],), (0, 0))
    assert T.Compose([T.Resize(40, max_size=90), T.CenterCrop(32),
                      T.ToDtype(torch.float32, scale=True)]) is not None


# ---- RandomCrop ------------------------------------------------------------------------------

@pytest.mark.parametrize("padding", [None, 0, 3, (1, 2), (0, 1, 2, 3)])
@pytest.mark.parametrize("pad_if_needed", [False, True])
@pytest.mark.parametrize("H,W,crop", [(10, 8, (6, 6)), (5, 9, (7, 7)), (6, 6, (6, 6)), (4, 3, (9, 5))])
def test_random_crop_draws_torchvisions_range(padding, pad_if_needed, H, W, crop):
    want = tv_random_crop_range(H, W, crop, padding, pad_if_needed)
    aug = FusedAugment((0.5,) * 3, (0.2,) * 3, crop=crop, padding=padding or 0,
                       pad_if_needed=pad_if_needed, hflip=0.0, seed=3)
    if want is None:
        with pytest.raises(ValueError, match="larger than the image"):
            aug.draws(400, H, W)
        return
    d = aug.draws(400, H, W)
    offsets = d.offsets if d.offsets is not None else torch.zeros(400, 2, dtype=torch.int64)
    for axis, (lo, hi) in enumerate(want):
        got = offsets[:, axis]
        # every position in torchvision's range is drawn (at most 11 of them, 400 draws), no other
        assert sorted(set(got.tolist())) == list(range(lo, hi + 1)), (axis, want)
    # v2's RandomCrop compiles to the same transform
    compiled = T.Compose([T.RandomCrop(crop, padding=padding, pad_if_needed=pad_if_needed),
                          T.ToDtype(torch.float32, scale=True)], seed=3)
    fused = compiled.transforms[0]
    assert fused.pads == aug.pads and fused.pad_if_needed == pad_if_needed


def test_random_crop_range_equals_torchvision_itself():
    v2 = pytest.importorskip("torchvision.transforms.v2")
    for padding, pad_if_needed, (H, W, crop) in ((3, False, (10, 8, (6, 6))), ((1, 2), True, (5, 9, (7, 7))),
                                                 ((0, 1, 2, 3), True, (4, 3, (9, 5)))):
        t = v2.RandomCrop(crop, padding=padding, pad_if_needed=pad_if_needed)
        params = getattr(t, "make_params", None) or t._get_params
        x = torch.zeros(3, H, W, dtype=torch.uint8)
        tops, lefts = set(), set()
        for _ in range(400):
            p = params([x])
            pad_left, pad_top = p["padding"][0], p["padding"][1]
            tops.add(p["top"] - pad_top)
            lefts.add(p["left"] - pad_left)
        (lo_t, hi_t), (lo_l, hi_l) = tv_random_crop_range(H, W, crop, padding, pad_if_needed)
        assert sorted(tops) == list(range(lo_t, hi_t + 1))
        assert sorted(lefts) == list(range(lo_l, hi_l + 1))


# ---- RandomResizedCrop ---------------------------------------------------------------------------

def test_random_resized_crop_fallback_is_torchvisions_on_a_grid():
    heights = [h for h in SIZES for _ in SIZES] + [375, 500, 64, 640, 333, 1, 7]
    widths = [w for _ in SIZES for w in SIZES] + [500, 375, 640, 64, 500, 7, 1]
    for ratio in ((3 / 4, 4 / 3), (1.0, 1.0), (0.5, 3.0), (1.7, 2.1)):
        # a scale no window reaches: every image takes the fallback, as in torchvision
        boxes = random_resized_boxes(heights, widths, (5.0, 6.0), ratio,
                                     generator=torch.Generator().manual_seed(0))
        for (h, w), box in zip(zip(heights, widths), boxes.tolist()):
            want = tv_rrc_fallback(h, w, ratio)
            want = (want[0], want[1], max(want[2], 1), max(want[3], 1))  # a 0-pixel side: 1
            assert tuple(box) == want, (h, w, ratio)


def test_random_resized_crop_fallback_equals_torchvision_itself():
    transforms = pytest.importorskip("torchvision.transforms")
    for h, w in ((375, 500), (64, 640), (640, 64), (35, 39), (23, 24)):
        for ratio in ((3 / 4, 4 / 3), (0.5, 3.0)):
            x = torch.zeros(3, h, w)
            want = transforms.RandomResizedCrop.get_params(x, [5.0, 6.0], list(ratio))
            got = random_resized_boxes([h], [w], (5.0, 6.0), ratio)[0].tolist()
            assert tuple(got) == tuple(want)


# ---- Pad ---------------------------------------------------------------------------------------

def tv_pad(x, padding, fill):
    """torchvision's ``Pad`` of ``[..., H, W]`` in constant mode: ``_parse_pad_padding`` (an int:
    every side; 2 values: left/right, top/bottom; 4: left, top, right, bottom), then
    ``torch.nn.functional.pad`` with (left, right, top, bottom) and the fill."""
    p = list(padding) if isinstance(padding, (list, tuple)) else [padding]
    left, top, right, bottom = p * 4 if len(p) == 1 else (p * 2 if len(p) == 2 else p)
    return torch.nn.functional.pad(x, [left, right, top, bottom], value=fill)


def _windows(padded, h, w):
    """Every h x w window of ``padded`` [C, H, W], by its corner."""
    H, W = padded.shape[-2:]
    return {(t, l): padded[:, t:t + h, l:l + w] for t in range(H - h + 1) for l in range(W - w + 1)}


@pytest.mark.parametrize("pad, crop_padding, fill", [
    (4, None, 0), ((1, 2), None, 7), ((0, 1, 2, 3), 1, 9), (2, (1, 0, 0, 2), 255)])
def test_pad_then_random_crop_is_a_window_of_torchvisions_padded_image(pad, crop_padding, fill):
    # torchvision pads twice (Pad, then RandomCrop's padding): every output image is one window of
    # that twice-padded image, and the windows drawn cover every corner it allows.
    from prefetch.transforms import BatchPosition

    g = torch.Generator().manual_seed(5)
    x = torch.randint(0, 256, (64, 3, 6, 5), dtype=torch.uint8, generator=g)
    recipe = T.Compose([T.Pad(pad, fill=fill), T.RandomCrop((5, 4), padding=crop_padding, fill=fill),
                        T.ToDtype(torch.float32, scale=True)], seed=1)
    got = recipe.apply((x, 0), BatchPosition(0, 0, 0))[0]
    assert got.shape == (64, 3, 5, 4)
    corners = set()
    assert torch.allclose(got * 255, (got * 255).round(), atol=1e-4)  # a crop: no resampling
    for image, out in zip(x, got):
        out = (out.double() * 255).round().to(torch.uint8)
        padded = tv_pad(image, pad, fill)
        if crop_padding is not None:
            padded = tv_pad(padded, crop_padding, fill)
        matches = [c for c, win in _windows(padded, 5, 4).items()
                   if torch.equal(win, out)]
        assert matches, "output is no window of the padded image"
        corners.update(matches)
    H, W = padded.shape[-2:]
    assert len(corners) > (H - 4) * (W - 3) // 2  # the draws spread over torchvision's range
    fused = recipe.transforms[0]
    assert fused.fill == fill


def test_pad_is_torchvisions_padding_order():
    v2 = pytest.importorskip("torchvision.transforms.v2")
    x = torch.randint(0, 256, (3, 4, 5), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    for padding in (3, (1, 2), (0, 1, 2, 3)):
        assert torch.equal(v2.Pad(padding, fill=5)(x), tv_pad(x, padding, 5))


@pytest.mark.parametrize("steps, match", [
    ([T.Pad(4)], r"Pad is compiled as the padding of the RandomCrop that must follow it"),
    ([T.Pad(4), T.CenterCrop(8)], r"step 1 \(CenterCrop\) sets FusedAugment's window, which step 0"),
    ([T.Pad(4), T.RandomResizedCrop(8)], r"step 1 \(RandomResizedCrop\) sets FusedAugment's window"),
    ([T.Pad(4, fill=3), T.RandomCrop(8, padding=1)], r"step 1 \(RandomCrop\) pads with fill=0 after "
                                                     r"Pad's fill=3"),
    ([T.Pad(4, fill=3), T.RandomCrop(8, pad_if_needed=True)], r"pads with fill=0 after Pad's fill=3"),
    ([T.RandomCrop(8), T.Pad(4)], r"step 1 \(Pad\) sets FusedAugment's window, which step 0"),
])
def test_a_pad_the_window_cannot_take_is_refused_naming_it(steps, match):
    with pytest.raises(ValueError, match=match):
        T.Compose(steps + [T.ToDtype(torch.float32, scale=True)])


def test_pad_with_a_different_fill_and_no_padding_of_the_crop_keeps_pads_fill():
    for crop in (T.RandomCrop(8), T.RandomCrop(8, padding=(0, 0)), T.RandomCrop(8, padding=0)):
        recipe = T.Compose([T.Pad((1, 2), fill=3), crop, T.ToDtype(torch.float32, scale=True)])
        fused = recipe.transforms[0]
        assert fused.pads == (1, 2, 1, 2) and fused.fill == 3
