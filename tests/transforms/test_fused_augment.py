"""FusedAugment and the Prefetcher's transform/device_transform, against the float64 reference
applied to plain iteration of the source with the same draws; masks that do not match their
images and arguments it cannot apply are refused, naming them. What decides the draws (seed,
rank, epoch, index): test_fused_augment_draws.py; the resizing path: test_resizing.py; decode=True:
test_fused_augment_decode.py."""
import re

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import prefetch
from prefetch import ArrayLoader, FusedAugment, Prefetcher

from ..reference import reference, reference_geometry

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def images_and_masks(n=6, h=10, w=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, h, w, 3), dtype=torch.uint8, generator=g)
    masks = torch.randint(0, 20, (n, h, w), dtype=torch.int32, generator=g)
    return images, masks


def augment(**kwargs):
    args = dict(crop=6, padding=2, hflip=0.5, vflip=0.5, seed=7)
    args.update(kwargs)
    return FusedAugment(MEAN, STD, **args)


def expected(aug, images, d):
    return reference(images, MEAN, STD, d["hflip"], d["vflip"], d["crop"], d["offsets"], aug.fill)


def assert_close(got, ref):
    assert torch.allclose(got.cpu().double(), ref, atol=1e-5, rtol=1e-5)


class Images(Dataset):
    """uint8 HWC images, an integer mask carrying each pixel's coordinates, and a label."""

    def __init__(self, n=22, h=14, w=12):
        g = torch.Generator().manual_seed(11)
        self.images = torch.randint(0, 256, (n, h, w, 3), dtype=torch.uint8, generator=g)
        coords = (torch.arange(h).view(h, 1) * w + torch.arange(w)).to(torch.int32)
        self.masks = coords.expand(n, h, w).clone()

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return {"image": self.images[i], "mask": self.masks[i], "label": i}


def run(device, workers=0, seed=5, epochs=2, **aug_kwargs):
    aug = prefetch.FusedAugment(MEAN, STD, seed=seed, image_key="image", mask_key="mask",
                                mask_fill=-1, **aug_kwargs)
    loader = DataLoader(Images(), batch_size=8, num_workers=workers,
                        collate_fn=prefetch.collate.samples)
    with prefetch.Prefetcher(loader, device=device, transform=aug) as pf:
        return [[{k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in b.items()}
                 for b in pf] for _ in range(epochs)], aug


@pytest.mark.parametrize("kwargs", [
    dict(crop=10, padding=3, hflip=0.5, vflip=0.5, fill=17),
    dict(hflip=1.0),
    dict(crop=(14, 12), padding=4, dtype=torch.bfloat16, channels_last=True),
    dict(crop=(9, 7), center_crop=True, hflip=0.5),
])
def test_matches_reference_with_the_same_draws(device, kwargs):
    epochs, aug = run(device, **kwargs)
    plain = list(DataLoader(Images(), batch_size=8))
    for epoch, batches in enumerate(epochs):
        for index, (got, src) in enumerate(zip(batches, plain)):
            n, H, W = src["image"].shape[:3]
            d = aug.draws(n, H, W, epoch=epoch, index=index)
            ref = reference(src["image"], MEAN, STD, d["hflip"], d["vflip"], d["crop"],
                            d["offsets"], aug.fill)
            tol = 1e-5 if aug.dtype == torch.float32 else 2e-2
            assert got["image"].dtype == aug.dtype
            assert torch.allclose(got["image"].double(), ref, atol=tol, rtol=tol)
            # The mask went through exactly the image's geometry.
            ref_mask = reference_geometry(src["mask"].unsqueeze(1), d["hflip"], d["vflip"],
                                          d["crop"], d["offsets"], -1).squeeze(1)
            assert torch.equal(got["mask"].double(), ref_mask)
            assert torch.equal(got["label"], src["label"])
    # Epochs draw differently.
    assert not torch.equal(epochs[0][0]["mask"], epochs[1][0]["mask"]) or kwargs == dict(hflip=1.0)


def test_same_seed_same_batches_across_runs_and_worker_counts():
    a, _ = run("cpu", workers=0, seed=123, crop=9, padding=2, vflip=0.3)
    b, _ = run("cpu", workers=0, seed=123, crop=9, padding=2, vflip=0.3)
    c, _ = run("cpu", workers=2, seed=123, crop=9, padding=2, vflip=0.3)
    d, _ = run("cpu", workers=0, seed=124, crop=9, padding=2, vflip=0.3)
    flat = lambda runs: [b_["image"] for ep in runs for b_ in ep]  # noqa: E731
    assert all(torch.equal(x, y) for x, y in zip(flat(a), flat(b)))
    assert all(torch.equal(x, y) for x, y in zip(flat(a), flat(c)))
    assert not all(torch.equal(x, y) for x, y in zip(flat(a), flat(d)))


def test_unseeded_augments_differ():
    assert prefetch.FusedAugment(MEAN, STD).seed != prefetch.FusedAugment(MEAN, STD).seed


def test_device_transform_runs_on_the_device_on_the_copy_stream(device):
    seen = []

    def fn(batch):
        images, labels = batch
        for t in (images, labels):  # Composer #3699: "device" transforms ran on the CPU
            assert t.device == device, "device_transform got a tensor on %s" % t.device
        if device.type == "cuda":
            assert torch.cuda.current_stream(device) != torch.cuda.default_stream(device)
        seen.append(int(labels[0]))
        return images.float() * 2, labels

    loader = DataLoader(Images(), batch_size=8, collate_fn=lambda b: (
        torch.stack([x["image"] for x in b]), torch.tensor([x["label"] for x in b])))
    with prefetch.Prefetcher(loader, device=device, device_transform=fn) as pf:
        out = list(pf)
    assert seen == [0, 8, 16]
    ref = list(loader)
    for (img, lab), (rimg, rlab) in zip(out, ref):
        assert torch.equal(img.cpu(), rimg.float() * 2) and torch.equal(lab.cpu(), rlab)


def test_bad_augment_arguments():
    with pytest.raises(ValueError, match="probability"):
        prefetch.FusedAugment(MEAN, STD, hflip=1.5)
    with pytest.raises(ValueError, match="crop"):
        prefetch.FusedAugment(MEAN, STD, crop=(0, 3))
    with pytest.raises(ValueError, match=r"FusedAugment std must have as many values as mean \(3\), got 2"):
        prefetch.FusedAugment(MEAN, STD[:2])
    aug = prefetch.FusedAugment(MEAN, STD, crop=40)
    with pytest.raises(ValueError, match="larger than the image"):
        aug(torch.zeros(2, 8, 8, 3, dtype=torch.uint8))
    with pytest.raises(TypeError, match="callable"):
        prefetch.Prefetcher([], transform=3)


def test_center_crop_takes_the_centred_window_every_time():
    aug = prefetch.FusedAugment(MEAN, STD, crop=(9, 7), center_crop=True, hflip=0.0, seed=1)
    g = torch.Generator().manual_seed(3)
    images = torch.randint(0, 256, (4, 16, 12, 3), dtype=torch.uint8, generator=g)
    # torchvision's CenterCrop: int(round((16 - 9) / 2)) = round(3.5) = 4 (half to even), round(2.5) = 2
    offsets = torch.tensor([[4, 2]] * 4)
    ref = reference(images, MEAN, STD, crop=(9, 7), offsets=offsets)
    for epoch, index in ((0, 0), (3, 5)):
        out = aug((images,), epoch=epoch, index=index)[0]
        assert torch.allclose(out.double(), ref, atol=1e-5)


def test_fused_augment_under_the_meta_device():
    aug = prefetch.FusedAugment([0.5] * 3, [0.5] * 3, crop=(3, 3), padding=1, seed=0)
    images = torch.arange(2 * 4 * 5 * 3, dtype=torch.uint8).view(2, 4, 5, 3)
    with torch.device("meta"):  # the draws are made on meta, the images stay on the CPU
        with pytest.raises(RuntimeError, match="is on meta but the images are on cpu"):
            aug(images, epoch=0, index=0)
        out = aug(torch.zeros(2, 4, 5, 3, dtype=torch.uint8), epoch=0, index=0)  # all meta
    assert out.device.type == "meta" and out.shape == (2, 3, 3, 3)
    # Meta images made outside the context: the draws follow them, the output is meta too.
    out = aug(images.to("meta"), epoch=0, index=0)
    assert out.device.type == "meta" and out.shape == (2, 3, 3, 3)
    # And the CPU path is untouched.
    want = aug(images, epoch=0, index=0)
    d = aug.draws(2, 4, 5, epoch=0, index=0)
    ref = reference(images, [0.5] * 3, [0.5] * 3, d["hflip"], d["vflip"], d["crop"], d["offsets"])
    assert torch.allclose(want.double(), ref, atol=1e-6)


# ---- a mask must match its image ---------------------------------------------------------------


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("channel_dim", [False, True])
def test_a_mask_of_another_height_or_width_is_refused_naming_both_sizes(layout, channel_dim):
    images, _ = images_and_masks(h=10, w=8)
    if layout == "NCHW":
        images = images.permute(0, 3, 1, 2).contiguous()
    aug = augment(image_key="image", mask_key="mask")
    for mh, mw in ((8, 10), (10, 7), (12, 8)):
        mask = torch.zeros(6, mh, mw, dtype=torch.int64)
        if channel_dim:
            mask = mask.unsqueeze(1)
        with pytest.raises(ValueError, match=r"'mask'.*%dx%d.*'image'.*10x8" % (mh, mw)):
            aug({"image": images, "mask": mask}, epoch=0, index=0)


def test_a_mask_batch_of_another_n_is_refused_naming_both():
    images, masks = images_and_masks(n=6)
    aug = augment(mask_key=1)
    with pytest.raises(ValueError, match=r"mask.*4 samples.*image.*6") as info:
        aug((images, masks[:4]), epoch=0, index=0)
    assert "hflip" not in str(info.value)


def test_a_mask_of_another_layout_dtype_or_device_or_an_unholdable_fill_is_refused():
    images, masks = images_and_masks()
    aug = augment(mask_key=1)
    # Channels in dim 1 that are not 1: a mask is one value per pixel.
    with pytest.raises(ValueError, match=r"mask.*\[N, H, W\] or \[N, 1, H, W\].*\(6, 3, 10, 8\)"):
        aug((images, masks.unsqueeze(1).expand(6, 3, 10, 8)), epoch=0, index=0)
    for bad in (masks[0], masks.view(6, 1, 1, 10, 8)):  # 2-D, 5-D
        with pytest.raises(ValueError, match=r"mask.*\[N, H, W\] or \[N, 1, H, W\]"):
            aug((images, bad), epoch=0, index=0)
    # A float or bool mask: named, with the dtypes that work.
    for dtype in (torch.float32, torch.bool):
        with pytest.raises(TypeError, match=r"mask.*%s.*uint8, int16, int32 or int64"
                           % str(dtype).replace("torch.", "")):
            aug((images, masks.to(dtype)), epoch=0, index=0)
    # A mask on another device than its image.
    with pytest.raises(ValueError, match=r"mask.*meta.*image.*cpu"):
        aug((images, masks.to("meta")), epoch=0, index=0)
    # A mask_fill the mask's dtype cannot hold would be written as another label.
    aug8 = augment(mask_key=1, mask_fill=-1)
    with pytest.raises(ValueError, match=r"mask_fill=-1.*uint8.*\[0, 255\]"):
        aug8((images, masks.to(torch.uint8)), epoch=0, index=0)
    assert augment(mask_key=1, mask_fill=255)((images, masks.to(torch.uint8)), epoch=0,
                                              index=0)[1].dtype == torch.uint8


def test_an_empty_batch_gives_empty_outputs():
    images, masks = images_and_masks()
    aug = augment(mask_key=1)
    out_images, out_masks = aug((images[:0], masks[:0]), epoch=0, index=0)
    assert out_images.shape == (0, 3, 6, 6) and out_masks.shape == (0, 6, 6)


def test_array_loader_device_path_refuses_a_mask_of_another_size():
    images, _ = images_and_masks(n=12)
    masks = torch.zeros(12, 10, 9, dtype=torch.int64)
    aug = augment(image_key="image", mask_key="mask")
    with ArrayLoader({"image": images, "mask": masks}, 4, resident="device",
                     transform=aug) as loader:
        with pytest.raises(ValueError, match=r"'mask'.*10x9.*'image'.*10x8"):
            list(loader)


def test_a_bad_mask_batch_reaches_the_consumer_and_the_next_epoch_works():
    images, masks = images_and_masks(n=8)

    class Source:
        epochs = 0

        def __iter__(self):
            epoch, self.epochs = self.epochs, self.epochs + 1
            for i in range(0, 8, 2):
                m = masks[i:i + 2]
                yield images[i:i + 2], (m[:, :9] if epoch == 0 and i == 2 else m)

    aug = augment(mask_key=1)
    with Prefetcher(Source(), device="cpu", transform=aug) as pf:
        it = iter(pf)
        next(it)
        with pytest.raises(ValueError, match=r"mask leaf 1 is 9x8.*image leaf 0 is 10x8"):
            next(it)
        got = list(pf)  # epoch 1
    assert len(got) == 4
    for index, (out, out_mask) in enumerate(got):
        d = aug.draws(2, 10, 8, 1, index)
        assert_close(out, expected(aug, images[2 * index:2 * index + 2], d))
        ref = reference_geometry(masks[2 * index:2 * index + 2].unsqueeze(1), d["hflip"], d["vflip"],
                                 d["crop"], d["offsets"], 0)
        assert torch.equal(out_mask.double(), ref.squeeze(1))


def test_a_bad_image_leaf_is_named_and_masks_of_any_strides_follow_the_image():
    images, masks = images_and_masks()
    aug = augment(image_key="image")
    with pytest.raises(TypeError, match=r"image leaf 'image' is float32; it takes uint8"):
        aug({"image": images.float()}, epoch=0, index=0)
    with pytest.raises(TypeError, match=r"image leaf 'image' sample 0 is an int, not a tensor"):
        aug({"image": [1, 2]}, epoch=0, index=0)
    with pytest.raises(TypeError, match=r"image leaf 'image' is a str, not a uint8 tensor"):
        aug({"image": "x"}, epoch=0, index=0)
    with pytest.raises(TypeError, match=r"mean must be a sequence of per-channel values, got 0.5"):
        FusedAugment(0.5, 0.2)
    # Masks with any strides (expanded, transposed) get exactly the image's geometry.
    d = augment().draws(6, 10, 8, 0, 0)
    for m in (torch.arange(80).view(1, 10, 8).expand(6, 10, 8),
              torch.arange(480).view(6, 8, 10).transpose(1, 2)):
        out = augment(mask_key=1)((images, m), epoch=0, index=0)[1]
        ref = reference_geometry(m.unsqueeze(1), d["hflip"], d["vflip"], d["crop"], d["offsets"], 0)
        assert torch.equal(out.double(), ref.squeeze(1))


# ---- arguments refused when the transform is built ----------------------------------------------


def test_an_unsupported_dtype_is_refused_at_construction():
    for dtype in (torch.float64, torch.int16, "float32"):
        with pytest.raises(ValueError, match=r"dtype.*float32, float16, bfloat16 or uint8.*got %s"
                           % re.escape(str(dtype))):
            FusedAugment(MEAN, STD, dtype=dtype)
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.uint8):
        assert FusedAugment(MEAN, STD, dtype=dtype).dtype == dtype


@pytest.mark.parametrize("geometry", [dict(random_resized_crop=24), dict(crop=20, padding=3)])
def test_uint8_output_is_the_float32_output_rounded(geometry):
    """What the v2 front end hands a policy: the resampled (or cropped) pixels as uint8, the same
    draws as the float32 output's, rounded half to even."""
    images = torch.randint(0, 256, (6, 40, 36, 3), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(5))
    pixels = dict(mean=(0.0,) * 3, std=(1 / 255,) * 3, hflip=0.5, vflip=0.5, seed=11, **geometry)
    f32 = FusedAugment(dtype=torch.float32, **pixels)(images, epoch=0, index=3)
    u8 = FusedAugment(dtype=torch.uint8, **pixels)(images, epoch=0, index=3)
    assert u8.dtype == torch.uint8 and u8.shape == f32.shape
    assert torch.equal(u8, f32.round().clamp(0, 255).to(torch.uint8))
    assert not torch.equal(u8.float(), f32) or "crop" in geometry  # resampled values are not whole


def test_a_forced_layout_that_looks_wrong_is_refused():
    images, _ = images_and_masks()  # NHWC, 3 channels
    nchw = images.permute(0, 3, 1, 2).contiguous()
    with pytest.raises(ValueError, match=r"layout='NHWC'.*\(6, 3, 10, 8\).*NCHW"):
        FusedAugment(MEAN, STD, layout="NHWC")(nchw, epoch=0, index=0)
    with pytest.raises(ValueError, match=r"layout='NCHW'.*\(6, 10, 8, 3\).*NHWC"):
        FusedAugment(MEAN, STD, layout="NCHW")(images, epoch=0, index=0)
    # The right forced layout and auto-detection work as before.
    ref = reference(images, MEAN, STD)
    assert_close(FusedAugment(MEAN, STD, hflip=0.0, layout="NCHW")(nchw), ref)
    assert_close(FusedAugment(MEAN, STD, hflip=0.0, layout="NHWC")(images), ref)
    assert_close(FusedAugment(MEAN, STD, hflip=0.0)(nchw), ref)
    assert_close(FusedAugment(MEAN, STD, hflip=0.0)(images), ref)


def test_bad_numbers_are_refused_when_built_and_numpy_or_tensor_numbers_taken():
    # std of 0 or below, non-finite mean/std: refused now, not at the first batch.
    for std in ([0.2, 0.0, 0.2], [0.2, -0.1, 0.2], [0.2, float("nan"), 0.2]):
        with pytest.raises(ValueError, match=r"std\[1\] must be a finite number > 0"):
            FusedAugment(MEAN, std)
    with pytest.raises(ValueError, match=r"mean\[0\] must be a finite number, got inf"):
        FusedAugment([float("inf"), 0, 0], STD)
    with pytest.raises(ValueError, match=r"fill must be an int in \[0, 255\].*got 300"):
        FusedAugment(MEAN, STD, fill=300)
    # Probabilities as numpy floats and 0-d tensors work; NaN does not.
    assert FusedAugment(MEAN, STD, hflip=np.float32(0.25), vflip=torch.tensor(0.5)).vflip == 0.5
    for p in (float("nan"), "0.5", torch.tensor([0.5, 0.5])):
        with pytest.raises(ValueError, match="probability"):
            FusedAugment(MEAN, STD, hflip=p)
    with pytest.raises(ValueError, match="probability"):
        FusedAugment(MEAN, STD, vflip=None)  # hflip=None is its default (0.5, or 0 when centred)
    # Seeds: numpy ints are ints; fractions and seeds past 64 bits (which would alias) are not.
    assert FusedAugment(MEAN, STD, seed=np.int64(9)).seed == 9
    with pytest.raises(TypeError, match=r"seed must be a whole number, got 2.5"):
        FusedAugment(MEAN, STD, seed=2.5)
    with pytest.raises(ValueError, match=r"seed must be in \[-2\*\*63, 2\*\*64\)"):
        FusedAugment(MEAN, STD, seed=2**64)
    # crop and padding: whole numbers only (7.5 was truncated to 7).
    for crop in ((7.5, 3), 3.5, "ab", (4, 4, 4)):
        with pytest.raises(ValueError, match=r"crop must be \(h, w\) of positive ints, got"):
            FusedAugment(MEAN, STD, crop=crop)
    assert FusedAugment(MEAN, STD, crop=np.int64(5)).crop == (5, 5)
    # Whole floats are whole numbers, as normalize_flip(crop=5.0, fill=3.0) takes them.
    assert FusedAugment(MEAN, STD, crop=5.0, fill=3.0).crop == (5, 5)
    with pytest.raises(ValueError, match="padding must be an int"):
        FusedAugment(MEAN, STD, padding=True)
    # mean/std against the images' channels: named at the first batch.
    images, _ = images_and_masks()
    # A padding so large that the window positions overflow int64 (was "Overflow when unpacking
    # long long"); 2**40 still works.
    with pytest.raises(ValueError, match=r"padding=4611686018427387904 around a 10x8 image"):
        FusedAugment(MEAN, STD, crop=4, padding=2**62)(images, epoch=0, index=0)
    out = FusedAugment(MEAN, STD, crop=4, padding=2**40, fill=3, seed=1)(images, epoch=0, index=0)
    assert_close(out, reference(images[:, :4, :4], MEAN, STD, fill=3, crop=(4, 4),
                                offsets=torch.full((6, 2), -2**40)))
    with pytest.raises(ValueError, match=r"mean and std have 4 values.*3 channels"):
        FusedAugment(MEAN + [0.5], STD + [0.2])(images, epoch=0, index=0)
