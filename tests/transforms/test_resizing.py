"""FusedAugment's resizing path (random_resized_crop=, resize= with center_crop) against a float64
reference written here: each image's window cropped, F.interpolate in float64, flips, normalize;
masks with F.interpolate's nearest. The windows' own distribution is tested in
test_crop_boxes.py; here, that the transform draws them from its seed stream and applies them."""
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

import prefetch
from prefetch import Ragged
from prefetch.transforms.crop_boxes import center_boxes, random_resized_boxes
from prefetch.transforms import BatchPosition

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def images(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (20 + (13 * i) % 37, 24 + (7 * i) % 41, 3), dtype=torch.uint8,
                          generator=g) for i in range(n)]


def reference(samples, boxes, size, hflip, vflip, antialias, bicubic=None):
    out = []
    mean = torch.tensor(MEAN, dtype=torch.float64).view(3, 1, 1)
    std = torch.tensor(STD, dtype=torch.float64).view(3, 1, 1)
    cubic = [False] * len(samples) if bicubic is None else bicubic.tolist()
    for img, (top, left, h, w), hf, vf, c in zip(samples, boxes.tolist(), hflip.tolist(), vflip.tolist(),
                                                  cubic):
        crop = img[top:top + h, left:left + w].permute(2, 0, 1).double()[None]
        x = F.interpolate(crop, size=size, mode="bicubic" if c else "bilinear", align_corners=False,
                          antialias=antialias)[0]
        if c:
            x = x.clamp(0, 255)  # as torchvision's uint8 result
        if hf:
            x = x.flip(2)
        if vf:
            x = x.flip(1)
        out.append((x / 255 - mean) / std)
    return torch.stack(out)


def assert_close(out, ref):
    assert out.shape == ref.shape
    err = (out.double() - ref).abs().max().item()
    assert err < 2e-5, "max error %g" % err


@pytest.mark.parametrize("antialias", [True, False])
def test_random_resized_crop_of_a_ragged_batch(antialias):
    samples = images(6)
    aug = prefetch.FusedAugment(MEAN, STD, random_resized_crop=(16, 20), hflip=0.5, vflip=0.5,
                                seed=3, antialias=antialias)
    out = aug(Ragged.from_tensors(samples), epoch=2, index=5, rank=1)
    d = aug.draws(6, [t.shape[0] for t in samples], [t.shape[1] for t in samples], 2, 5, 1)
    # the windows come from the batch's seed stream, after the two flip draws
    g = BatchPosition(2, 5, 1).generator(3)
    torch.rand(6, generator=g), torch.rand(6, generator=g)
    want_boxes = random_resized_boxes([t.shape[0] for t in samples], [t.shape[1] for t in samples],
                                      generator=g)
    assert torch.equal(d.boxes, want_boxes)
    assert out.shape == (6, 3, 16, 20) and out.dtype == torch.float32
    assert_close(out, reference(samples, d.boxes, (16, 20), d.hflip, d.vflip, antialias))
    # the same draws again at the same position, others at the next batch
    assert torch.equal(aug(Ragged.from_tensors(samples), epoch=2, index=5, rank=1), out)
    assert not torch.equal(aug.draws(6, [40] * 6, [50] * 6, 2, 6, 1).boxes,
                           aug.draws(6, [40] * 6, [50] * 6, 2, 5, 1).boxes)


@pytest.mark.parametrize("antialias", [True, False])
def test_bicubic_and_random_interpolation(antialias):
    samples = images(8, seed=7)
    sizes = ([t.shape[0] for t in samples], [t.shape[1] for t in samples])
    bicubic = prefetch.FusedAugment(MEAN, STD, random_resized_crop=(16, 20), seed=3, antialias=antialias,
                                    interpolation="bicubic")
    d = bicubic.draws(8, *sizes, 1, 2)
    assert d.bicubic is None
    out = bicubic(Ragged.from_tensors(samples), epoch=1, index=2)
    assert_close(out, reference(samples, d.boxes, (16, 20), d.hflip, d.vflip, antialias,
                                torch.ones(8, dtype=torch.bool)))
    # "random" (timm's): each sample bilinear or bicubic with probability 1/2, drawn after the
    # windows, so its flips and windows are those of a fixed interpolation with the same seed.
    rand = prefetch.FusedAugment(MEAN, STD, random_resized_crop=(16, 20), seed=3, antialias=antialias,
                                 interpolation="random")
    r = rand.draws(8, *sizes, 1, 2)
    assert torch.equal(r.boxes, d.boxes) and torch.equal(r.hflip, d.hflip)
    g = BatchPosition(1, 2, 0).generator(3)
    torch.rand(8, generator=g), torch.rand(8, generator=g)
    random_resized_boxes(*sizes, generator=g)
    assert torch.equal(r.bicubic, torch.rand(8, generator=g) < 0.5)
    out = rand(Ragged.from_tensors(samples), epoch=1, index=2)
    assert_close(out, reference(samples, r.boxes, (16, 20), r.hflip, r.vflip, antialias, r.bicubic))
    assert "interpolation='random'" in repr(rand)
    # Over many batches the draw is a fair coin (a 6-sigma band around 1/2).
    drawn = torch.cat([rand.draws(64, [40] * 64, [50] * 64, 0, k).bicubic for k in range(50)])
    assert abs(drawn.double().mean().item() - 0.5) < 6 * (0.25 / drawn.numel()) ** 0.5
    # A validation window's bicubic resize too (DeiT's eval transform).
    val = prefetch.FusedAugment(MEAN, STD, crop=16, resize=18, center_crop=True, hflip=0.0,
                                interpolation="bicubic", antialias=antialias)
    v = val.draws(8, *sizes)
    assert_close(val(Ragged.from_tensors(samples), epoch=0, index=0),
                 reference(samples, v.boxes, (16, 16), v.hflip, v.vflip, antialias,
                           torch.ones(8, dtype=torch.bool)))


def test_an_nhwc_batch_resizes_as_the_same_images_in_a_ragged():
    same = torch.stack([t[:20, :24] for t in images(4, seed=1)])
    aug = prefetch.FusedAugment(MEAN, STD, random_resized_crop=12, seed=0, dtype=torch.bfloat16,
                                channels_last=True)
    a = aug(same, epoch=0, index=0)
    b = aug(Ragged.from_tensors(list(same)), epoch=0, index=0)
    assert a.dtype == torch.bfloat16 and a.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(a, b)


def test_validation_resize_then_center_crop_as_one_window():
    samples = images(5, seed=2)
    aug = prefetch.FusedAugment(MEAN, STD, crop=16, resize=18, center_crop=True, hflip=0.0)
    out = aug(Ragged.from_tensors(samples), epoch=0, index=0)
    boxes = center_boxes([t.shape[0] for t in samples], [t.shape[1] for t in samples], 16, 18)
    none = torch.zeros(5, dtype=torch.bool)
    assert_close(out, reference(samples, boxes, (16, 16), none, none, True))
    # the same transform, with different seeds, gives the same (nothing is drawn)
    other = prefetch.FusedAugment(MEAN, STD, crop=16, resize=18, center_crop=True, hflip=0.0, seed=9)
    assert torch.equal(other(Ragged.from_tensors(samples), epoch=4, index=1), out)


@pytest.mark.parametrize("layout", ["HW", "HW1", "HW through workers"])
def test_masks_get_the_same_windows_and_flips_with_nearest_neighbours(layout):
    """Masks of their images' sizes, [H, W] (collated into a Ragged of rank 2, widths
    differing) or [H, W, 1]; with DataLoader workers, through the Prefetcher."""
    samples = images(4, seed=4)
    masks = [torch.randint(0, 21, t.shape[:2], dtype=torch.int64) for t in samples]
    aug = prefetch.FusedAugment(MEAN, STD, random_resized_crop=(9, 11), hflip=0.5, vflip=0.5,
                                seed=1, mask_key=1)
    if layout == "HW through workers":
        loader = torch.utils.data.DataLoader(list(zip(samples, masks)), batch_size=4, num_workers=2,
                                             collate_fn=prefetch.collate.samples)
        with prefetch.Prefetcher(loader, device="cpu", transform=aug) as pf:
            pf.set_epoch(0)
            (out_images, out_masks), = list(pf)
        index = 0
    else:
        mask_leaf = Ragged.from_tensors(masks if layout == "HW" else [m[..., None] for m in masks])
        index = 3
        out_images, out_masks = aug((Ragged.from_tensors(samples), mask_leaf), epoch=0, index=index)
    d = aug.draws(4, [t.shape[0] for t in samples], [t.shape[1] for t in samples], 0, index, 0)
    assert_close(out_images, reference(samples, d.boxes, (9, 11), d.hflip, d.vflip, True))
    for k, (m, (top, left, h, w)) in enumerate(zip(masks, d.boxes.tolist())):
        want = F.interpolate(m[top:top + h, left:left + w][None, None].double(), size=(9, 11),
                             mode="nearest")[0, 0].long()
        if d.hflip[k]:
            want = want.flip(1)
        if d.vflip[k]:
            want = want.flip(0)
        assert torch.equal(out_masks[k], want), "mask %d" % k
    assert out_masks.dtype == torch.int64


class Decoded(Dataset):
    def __len__(self):
        return 24

    def __getitem__(self, i):
        return images(1, seed=100 + i)[0][: 20 + i % 7, : 22 + i % 5], i


def test_through_dataloader_workers_equals_the_transform_on_plain_batches():
    ds = Decoded()
    aug = prefetch.FusedAugment(MEAN, STD, random_resized_crop=14, seed=7)
    dl = DataLoader(ds, batch_size=8, num_workers=2, collate_fn=prefetch.collate.samples)
    with prefetch.Prefetcher(dl, device="cpu", transform=aug) as pf:
        for epoch in range(2):  # the first epoch makes the ring's block; the second uses it
            got = [images.clone() for images, _ in pf]
            assert len(got) == 3
            for k, out in enumerate(got):
                samples = [ds[i][0] for i in range(8 * k, 8 * k + 8)]
                want = aug(Ragged.from_tensors(samples), epoch=epoch, index=k, rank=0)
                assert torch.equal(out, want), "epoch %d batch %d" % (epoch, k)
        assert pf.stats()["worker_ring_batches"] > 0


def test_gather_resizes_the_gathered_rows():
    whole = torch.stack([t[:20, :24] for t in images(10, seed=5)])
    aug = prefetch.FusedAugment(MEAN, STD, random_resized_crop=8, seed=2)
    idx = torch.tensor([7, 2, 2, 9])
    pos = BatchPosition(1, 4, 0)
    assert torch.equal(aug.gather((whole, 0), idx, pos)[0], aug.apply((whole[idx], 0), pos)[0])


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(random_resized_crop=8, crop=8), ValueError, "takes no crop= or padding="),
    (dict(random_resized_crop=0), ValueError, "random_resized_crop must be"),
    (dict(crop=8, resize=10), ValueError, "needs center_crop=True"),
    (dict(crop=8, resize=-1, center_crop=True), ValueError, "resize must be a positive whole number"),
    (dict(random_resized_crop=8, scale=(0.5, 0.1)), ValueError, "scale must be finite"),
    (dict(random_resized_crop=8, interpolation="nearest"), ValueError,
     "interpolation must be 'bilinear', 'bicubic' or 'random', got 'nearest'"),
    (dict(random_resized_crop=8, interpolation=2), TypeError, "interpolation must be"),
    (dict(crop=8, interpolation="bicubic"), ValueError,
     "interpolation='bicubic' is the resizing path's filter: pass random_resized_crop= or resize="),
])
def test_bad_resizing_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        prefetch.FusedAugment(MEAN, STD, **kwargs)


def test_resizing_refuses_what_it_cannot_read():
    aug = prefetch.FusedAugment(MEAN, STD, random_resized_crop=8)
    with pytest.raises(TypeError, match="must be a Ragged of HWC uint8 images, a list of them or "
                                        "an NHWC uint8 batch .*float32.*convert them to uint8"):
        aug(torch.zeros(2, 8, 8, 3), epoch=0, index=0)
    with pytest.raises(TypeError, match="Ragged of rank 2"):
        aug(Ragged.from_tensors([torch.zeros(4, 4, dtype=torch.uint8),
                                 torch.zeros(5, 4, dtype=torch.uint8)]), epoch=0, index=0)
    with pytest.raises(ValueError, match="mean and std have 3 values but the images .* have 4"):
        aug(Ragged.from_tensors([torch.zeros(9, 9, 4, dtype=torch.uint8)]), epoch=0, index=0)
    assert "random_resized_crop=(8, 8)" in repr(aug)


@pytest.mark.cuda
def test_cuda_ragged_batches_through_the_prefetcher_need_no_sync():
    from ..conftest import require_cuda

    require_cuda()
    ds = Decoded()
    aug = prefetch.FusedAugment(MEAN, STD, random_resized_crop=14, seed=7)
    dl = DataLoader(ds, batch_size=8, num_workers=2, collate_fn=prefetch.collate.samples,
                    multiprocessing_context="spawn")
    with prefetch.Prefetcher(dl, device="cuda", transform=aug) as pf:
        got = [images.cpu() for images, _ in pf]
    for k, out in enumerate(got):
        samples = [ds[i][0] for i in range(8 * k, 8 * k + 8)]
        want = aug(Ragged.from_tensors(samples), epoch=0, index=k, rank=0)
        assert (out - want).abs().max() < 1e-5, "batch %d" % k
