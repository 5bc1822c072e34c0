"""The edges of the API a user trips on: defaults that agree with each other and with
torchvision, the README's snippets as written, arguments refused with a message instead of being
taken silently, the draws a batch was augmented with."""
import inspect
import io
import re
import pathlib

import numpy as np
import pytest
import torch

import prefetch
from prefetch import FusedAugment, Ragged
from prefetch.ops import decode_resized_crop, flip_crop, normalize_flip, resized_crop
from prefetch.transforms import BatchPosition
from prefetch.transforms.crop_boxes import center_boxes, random_resized_boxes

ROOT = pathlib.Path(__file__).resolve().parents[2]
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


# --- defaults -----------------------------------------------------------------------------------

def test_antialias_has_one_default_everywhere_torchvisions():
    for fn in (resized_crop, decode_resized_crop, FusedAugment.__init__):
        assert inspect.signature(fn).parameters["antialias"].default is True, fn
    # The ops' own schemas too, for torch.ops.prefetch.* callers.
    for op in (torch.ops.prefetch.resized_crop, torch.ops.prefetch.decode_resized_crop):
        (arg,) = [a for a in op.default._schema.arguments if a.name == "antialias"]
        assert arg.default_value is True, op


def test_evaluation_is_flip_free_by_default_and_training_flips_half():
    assert FusedAugment(MEAN, STD, crop=8).hflip == 0.5
    assert FusedAugment(MEAN, STD, crop=8, center_crop=True).hflip == 0.0
    assert FusedAugment(MEAN, STD, crop=8, resize=10, center_crop=True).hflip == 0.0
    assert FusedAugment(MEAN, STD, crop=8, center_crop=True, hflip=0.5).hflip == 0.5
    aug = FusedAugment(MEAN, STD, crop=8, resize=10, center_crop=True, seed=1)
    for index in range(8):
        assert not aug.draws(16, [12] * 16, [12] * 16, 0, index).hflip.any()


def readme_constructions():
    """Every ``FusedAugment(...)`` the README writes, as written."""
    text = (ROOT / "README.md").read_text()
    calls = []
    for start in [m.start() for m in re.finditer(r"FusedAugment\(", text)]:
        depth, end = 0, start
        for end in range(start + len("FusedAugment"), len(text)):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            if depth == 0:
                break
        call = " ".join(text[start:end + 1].split())
        if "..." not in call and "mean" in call:  # a call, not a mention of the class
            calls.append(call)
    return calls


def test_the_readmes_fused_augments_construct_and_its_evaluation_forms_do_not_flip():
    calls = readme_constructions()
    assert len(calls) >= 4, calls
    for call in calls:
        aug = eval(call, {"FusedAugment": FusedAugment, "mean": MEAN, "std": STD, "torch": torch,
                          "prefetch": prefetch})
        if aug.center_crop and "hflip" not in call:
            assert aug.hflip == 0.0, call


# --- arguments refused instead of taken silently ------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    (dict(random_resized_crop=8, center_crop=True), "random_resized_crop draws a random window"),
    (dict(crop=8, resize=float("inf"), center_crop=True), "resize must be a positive whole number"),
    (dict(crop=8, resize=float("nan"), center_crop=True), "resize must be a positive whole number"),
])
def test_contradictory_or_non_finite_resizing_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FusedAugment(MEAN, STD, **kwargs)


def test_a_2d_image_given_to_resized_crop_is_named():
    with pytest.raises(ValueError, match=r"image 1 has shape \[5, 6\]; add a channel dimension"):
        resized_crop([torch.zeros(4, 4, 3, dtype=torch.uint8), torch.zeros(5, 6, dtype=torch.uint8)],
                     [[0, 0, 2, 2]] * 2, 4, MEAN, STD)
    with pytest.raises(ValueError, match="a Ragged of rank 3, got rank 2"):
        resized_crop(Ragged.from_tensors([torch.zeros(4, 4, dtype=torch.uint8)]), [[0, 0, 2, 2]], 4, [0.5], [0.2])


def test_flips_as_lists_equal_flips_as_tensors():
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (3, 6, 7, 3), dtype=torch.uint8, generator=g)
    flips = [True, False, True]
    tensor = torch.tensor(flips)
    assert torch.equal(normalize_flip(images, MEAN, STD, hflip=flips, vflip=flips[::-1]),
                       normalize_flip(images, MEAN, STD, hflip=tensor, vflip=tensor.flip(0)))
    assert torch.equal(flip_crop(images[..., 0], hflip=flips), flip_crop(images[..., 0], hflip=tensor))
    boxes = [[0, 0, 5, 5]] * 3
    assert torch.equal(resized_crop(list(images), boxes, 4, MEAN, STD, hflip=flips),
                       resized_crop(list(images), boxes, 4, MEAN, STD, hflip=tensor))
    with pytest.raises(TypeError, match="hflip must hold booleans"):
        normalize_flip(images, MEAN, STD, hflip=[1, 0, 1])


def test_window_draws_refuse_fractional_image_sizes():
    for draw in (lambda h: center_boxes(h, [20], 8), lambda h: random_resized_boxes(h, [20])):
        assert draw([10.0]).shape == (1, 4)  # a whole float is a size
        with pytest.raises(ValueError, match=r"heights must be whole numbers.*10.5"):
            draw([10.5])  # was truncated to 10


# --- masks on the resizing path ------------------------------------------------------------------

def _mask_batch(masks):
    images = torch.randint(0, 256, (2, 9, 7, 3), dtype=torch.uint8)
    return {"image": images, "mask": masks}


def test_masks_on_the_resizing_path_take_the_crop_paths_dtypes_and_layouts():
    aug = FusedAugment(MEAN, STD, random_resized_crop=5, hflip=0.5, seed=3, image_key="image",
                       mask_key="mask")
    masks = torch.randint(0, 7, (2, 9, 7), dtype=torch.int64)
    expected = aug(_mask_batch(masks), epoch=0, index=0)["mask"]
    for layout in (masks[:, None], masks[..., None]):  # [N, 1, H, W] and [N, H, W, 1]
        assert torch.equal(aug(_mask_batch(layout), epoch=0, index=0)["mask"], expected)
    for dtype in (torch.float32, torch.bool):
        with pytest.raises(TypeError, match=r"masks must be uint8, int16, int32 or int64"):
            aug(_mask_batch(masks.to(dtype)), epoch=0, index=0)


# --- the draws a batch was augmented with ---------------------------------------------------------

def test_draws_for_are_the_draws_apply_used():
    g = torch.Generator().manual_seed(5)
    images = torch.randint(0, 256, (4, 12, 10, 3), dtype=torch.uint8, generator=g)
    aug = FusedAugment(MEAN, STD, crop=8, padding=2, hflip=0.5, vflip=0.5, seed=9)
    d = aug.draws_for((images,), (3, 7))
    out = aug((images,), epoch=3, index=7)[0]
    manual = normalize_flip(images, MEAN, STD, hflip=d.hflip, vflip=d.vflip, crop=d.crop, offsets=d.offsets)
    assert torch.equal(out, manual)
    shapes = [(11, 13), (9, 6), (20, 17)]
    ragged = Ragged.from_tensors([torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, generator=g)
                                  for h, w in shapes])
    aug = FusedAugment(MEAN, STD, random_resized_crop=6, hflip=0.5, seed=2)
    d = aug.draws_for((ragged,), BatchPosition(1, 4, 0))
    assert d.boxes.shape == (3, 4)
    manual = resized_crop(ragged, d.boxes, d.crop, MEAN, STD, hflip=d.hflip, vflip=d.vflip)
    assert torch.equal(aug((ragged,), epoch=1, index=4)[0], manual)


def test_draws_for_reads_the_jpeg_headers_with_decode():
    pytest.importorskip("PIL")
    if not prefetch.built_with_jpeg():
        pytest.skip("built without libjpeg-turbo")
    from PIL import Image

    files = []
    for h, w in ((40, 30), (25, 50)):
        buf = io.BytesIO()
        Image.fromarray(np.zeros((h, w, 3), np.uint8)).save(buf, format="JPEG")
        files.append(torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8))
    aug = FusedAugment(MEAN, STD, random_resized_crop=8, decode=True, seed=4)
    d = aug.draws_for((Ragged.from_tensors(files),), (0, 0))
    tops, lefts, heights, widths = d.boxes.T.tolist()
    assert all(t + h <= H and l + w <= W for t, l, h, w, (H, W) in
               zip(tops, lefts, heights, widths, ((40, 30), (25, 50))))
