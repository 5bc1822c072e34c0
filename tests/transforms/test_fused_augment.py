"""FusedAugment and the Prefetcher's transform/device_transform, against the float64 reference
applied to plain iteration of the source with the same draws."""
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import prefetch

from ..reference import reference, reference_geometry

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


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
    dict(crop=(9, 7), center_crop=True, hflip=0.5, padding=2),
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
    with pytest.raises(ValueError, match="mean has 3 values, std has 2"):
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
    offsets = torch.tensor([[(16 - 9) // 2, (12 - 7) // 2]] * 4)  # torchvision's CenterCrop
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
