"""Issue 13, items 7-10 and 20 (FusedAugment): masks that do not match their images are refused,
draws depend on the rank, a drawn seed travels with the state, direct calls draw afresh, and bad
arguments are refused when the transform is built. Outputs are compared with the float64
reference applied with the documented draws."""
import re

import numpy as np
import pytest
import torch

import prefetch
from prefetch import ArrayLoader, FusedAugment, Prefetcher

from .helpers import StatefulSource
from .reference import reference, reference_geometry

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


def fake_process_group(monkeypatch, rank, world_size=4):
    """An initialised process group of `world_size` in which this process is `rank` (faked)."""
    import torch.distributed as dist

    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: world_size)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: rank)


# -- item 7: the mask must match its image ---------------------------------------------------------


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


def test_mask_neighbours_are_refused_clearly():
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


# -- item 8: the draws depend on the rank ----------------------------------------------------------


def test_ranks_with_the_same_seed_draw_differently_and_each_rank_reproducibly():
    aug, again = augment(), augment()
    for epoch, index in ((0, 0), (2, 5)):
        per_rank = [aug.draws(64, 10, 8, epoch, index, rank=r) for r in range(4)]
        for r in range(4):
            same = again.draws(64, 10, 8, epoch, index, rank=r)
            assert all(torch.equal(same[k], per_rank[r][k]) for k in ("hflip", "vflip", "offsets"))
            for s in range(r):
                assert not torch.equal(per_rank[r]["offsets"], per_rank[s]["offsets"])
                assert not torch.equal(per_rank[r]["hflip"], per_rank[s]["hflip"])


def prefetched(images, masks, aug, **kwargs):
    batches = [(images[i:i + 2], masks[i:i + 2]) for i in range(0, len(images), 2)]
    with Prefetcher(batches, device="cpu", transform=aug, **kwargs) as pf:
        return [[b for b in pf] for _ in range(2)]


def assert_drawn_with_rank(epochs, images, aug, rank):
    for epoch, batches in enumerate(epochs):
        for index, (got, _) in enumerate(batches):
            src = images[2 * index:2 * index + 2]
            d = aug.draws(2, 10, 8, epoch, index, rank=rank)
            assert_close(got, expected(aug, src, d))


def test_a_prefetcher_draws_with_its_rank_argument():
    images, masks = images_and_masks(n=8)
    runs = {r: prefetched(images, masks, augment(mask_key=1), rank=r) for r in (0, 1)}
    for r, epochs in runs.items():
        assert_drawn_with_rank(epochs, images, augment(), r)
    flat = lambda epochs: [b[0] for batches in epochs for b in batches]  # noqa: E731
    assert not all(torch.equal(a, b) for a, b in zip(flat(runs[0]), flat(runs[1])))
    with pytest.raises(ValueError, match="rank must be an int >= 0, got -1"):
        Prefetcher([], rank=-1)
    with pytest.raises(TypeError, match="rank must be a whole number, got 1.5"):
        Prefetcher([], rank=1.5)
    assert_drawn_with_rank(prefetched(images, masks, augment(mask_key=1), rank=np.int64(1)),
                           images, augment(), 1)


def test_a_prefetcher_takes_its_rank_from_torch_distributed(monkeypatch):
    images, masks = images_and_masks(n=8)
    fake_process_group(monkeypatch, rank=3)
    assert_drawn_with_rank(prefetched(images, masks, augment(mask_key=1)), images, augment(), 3)
    # An explicit rank wins over the process group.
    assert_drawn_with_rank(prefetched(images, masks, augment(mask_key=1), rank=1), images,
                           augment(), 1)


@pytest.mark.parametrize("resident", ["host", "device"])
def test_array_loader_draws_with_its_rank(resident):
    images, labels = images_and_masks(n=40)[0], torch.arange(40)
    got = {}
    for rank in (0, 1):
        aug = augment()
        with ArrayLoader((images, labels), 4, rank=rank, world_size=2, seed=1, resident=resident,
                         transform=aug) as loader:
            got[rank] = list(loader)
            for index, (out, lab) in enumerate(got[rank]):
                d = aug.draws(len(lab), 10, 8, 0, index, rank=rank)
                assert_close(out, expected(aug, images[lab], d))


def test_a_direct_call_takes_its_rank_from_torch_distributed(monkeypatch):
    images, _ = images_and_masks()
    fake_process_group(monkeypatch, rank=2)
    aug = augment()
    assert_close(aug(images, epoch=1, index=3), expected(aug, images, aug.draws(6, 10, 8, 1, 3, rank=2)))


# -- item 9: a drawn seed travels with the state ---------------------------------------------------


def StatefulBatches(batches=8):
    """A stateful source of uint8 image batches (its state: the next batch)."""
    return StatefulSource(lambda i: images_and_masks(n=4, seed=i)[0], batches)


def unseeded():
    return FusedAugment(MEAN, STD, crop=6, padding=2, hflip=0.5, vflip=0.5)  # seed=None


@pytest.mark.parametrize("k", [0, 3, 8])
def test_prefetcher_resume_with_a_drawn_seed_equals_the_uninterrupted_run(k):
    aug = unseeded()
    with Prefetcher(StatefulBatches(), device="cpu", transform=aug) as pf:
        full = list(pf) + list(pf)
    first = Prefetcher(StatefulBatches(), device="cpu", depth=4, transform=aug)
    it = iter(first)
    head = [next(it) for _ in range(k)]
    state = first.state_dict()
    first.close()
    fresh = unseeded()  # a restarted process: another drawn seed
    assert fresh.seed != aug.seed
    with Prefetcher(StatefulBatches(), device="cpu", depth=4, transform=fresh) as second:
        second.load_state_dict(state)
        tail = list(second) + (list(second) if k < 8 else [])  # to the end of epoch 1
    assert fresh.seed == aug.seed
    got = head + tail
    assert len(got) == len(full) == 16
    assert all(torch.equal(a, b) for a, b in zip(got, full))


@pytest.mark.parametrize("resident", ["host", "device"])
def test_array_loader_resume_with_a_drawn_seed_equals_the_uninterrupted_run(resident):
    images, labels = images_and_masks(n=30)[0], torch.arange(30)
    aug = unseeded()

    def make(transform):
        return ArrayLoader((images, labels), 4, seed=3, resident=resident, transform=transform)

    with make(aug) as loader:
        full = list(loader)
    with make(aug) as first:
        it = iter(first)
        head = [next(it) for _ in range(3)]
        state = first.state_dict()
    fresh = unseeded()
    with make(fresh) as second:
        second.load_state_dict(state)
        tail = list(second)
    assert fresh.seed == aug.seed
    got = head + tail
    assert len(got) == len(full)
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(got, full))


def test_loading_a_state_of_another_explicit_seed_is_refused_naming_both():
    images, labels = images_and_masks(n=30)[0], torch.arange(30)
    with Prefetcher(StatefulBatches(), device="cpu", transform=augment(seed=5)) as pf:
        state = pf.state_dict()
    with Prefetcher(StatefulBatches(), device="cpu", transform=augment(seed=6)) as pf:
        with pytest.raises(ValueError, match=r"saved with FusedAugment seed 5, this one was built with seed=6"):
            pf.load_state_dict(state)
    with Prefetcher(StatefulBatches(), device="cpu", transform=augment(seed=5)) as pf:
        pf.load_state_dict(state)  # the same seed: fine
    with ArrayLoader((images, labels), 4, transform=augment(seed=5)) as loader:
        state = loader.state_dict()
    with ArrayLoader((images, labels), 4, transform=augment(seed=6)) as loader:
        with pytest.raises(ValueError, match=r"saved with FusedAugment seed 5, this one was built with seed=6"):
            loader.load_state_dict(state)


def test_a_state_without_the_seed_is_refused_by_a_drawn_seed():
    with Prefetcher(StatefulBatches(), device="cpu") as pf:  # saved with no transform
        state = pf.state_dict()
    with Prefetcher(StatefulBatches(), device="cpu", transform=unseeded()) as pf:
        with pytest.raises(ValueError, match=r"no seed.*seed="):
            pf.load_state_dict(state)
    with Prefetcher(StatefulBatches(), device="cpu", transform=augment(seed=5)) as pf:
        pf.load_state_dict(state)  # an explicit seed needs nothing from the state


# -- item 10: direct calls draw afresh -------------------------------------------------------------


def test_successive_direct_calls_draw_afresh_reproducibly():
    images, _ = images_and_masks(n=16)
    a, b = augment(), augment()
    outs_a = [a(images) for _ in range(3)]
    outs_b = [b(images) for _ in range(3)]
    assert all(torch.equal(x, y) for x, y in zip(outs_a, outs_b))
    assert not torch.equal(outs_a[0], outs_a[1]) and not torch.equal(outs_a[1], outs_a[2])
    # The documented draws: call k of a transform draws (epoch=-1, index=k).
    for k, out in enumerate(outs_a):
        assert_close(out, expected(a, images, a.draws(16, 10, 8, -1, k)))
    # Calls with the position given are unaffected by the direct ones.
    assert_close(a(images, epoch=0, index=0), expected(a, images, a.draws(16, 10, 8, 0, 0)))
    assert_close(a(images, epoch=0, index=0), expected(a, images, augment().draws(16, 10, 8, 0, 0)))
    # The count travels with the transform's state.
    c = augment()
    c.load_state_dict(a.state_dict())
    assert torch.equal(c(images), a(images))


# -- item 20: arguments refused when the transform is built ---------------------------------------


def test_an_unsupported_dtype_is_refused_at_construction():
    for dtype in (torch.float64, torch.uint8, "float32"):
        with pytest.raises(ValueError, match=r"dtype.*float32, float16 or bfloat16.*got %s"
                           % re.escape(str(dtype))):
            FusedAugment(MEAN, STD, dtype=dtype)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        assert FusedAugment(MEAN, STD, dtype=dtype).dtype == dtype


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


def test_argument_neighbours():
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


RANK_SCRIPT = r'''
import sys, torch, torch.distributed as dist
import prefetch

rank, init, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
g = torch.Generator().manual_seed(0)
images = torch.randint(0, 256, (8, 10, 8, 3), dtype=torch.uint8, generator=g)
aug = lambda: prefetch.FusedAugment(%r, %r, crop=6, padding=2, hflip=0.5, vflip=0.5, seed=7)
with prefetch.Prefetcher([images[:4], images[4:]], device="cpu", transform=aug()) as pf:
    prefetched = list(pf)  # the same batches on both ranks: only the draws can differ
with prefetch.ArrayLoader(images, 4, shuffle=False, transform=aug()) as loader:
    arrays = [(b, loader.epoch_indices(0)[4 * i:4 * i + 4]) for i, b in enumerate(loader)]
torch.save({"prefetched": prefetched, "arrays": arrays, "images": images}, out)
dist.barrier()
dist.destroy_process_group()
'''


def test_two_gloo_ranks_with_the_same_seed_draw_differently(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT % (MEAN, STD))
    init = "file://%s" % (tmp_path / "store")
    procs = [subprocess.Popen([sys.executable, str(script), str(r), init, str(tmp_path / ("%d.pt" % r))],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(2)]
    try:
        logs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert all(p.returncode == 0 for p in procs), logs
    got = [torch.load(tmp_path / ("%d.pt" % r)) for r in range(2)]
    images = got[0]["images"]
    aug = augment()
    for r in range(2):
        for index, out in enumerate(got[r]["prefetched"]):
            d = aug.draws(4, 10, 8, 0, index, rank=r)
            assert_close(out, expected(aug, images[4 * index:4 * index + 4], d))
        for index, (out, idx) in enumerate(got[r]["arrays"]):
            assert_close(out, expected(aug, images[idx], aug.draws(len(idx), 10, 8, 0, index, rank=r)))
    assert not torch.equal(got[0]["prefetched"][0], got[1]["prefetched"][0])


def test_image_leaf_neighbours_are_refused_naming_the_leaf():
    images, masks = images_and_masks()
    aug = augment(image_key="image")
    with pytest.raises(TypeError, match=r"image leaf 'image' is float32; it takes uint8"):
        aug({"image": images.float()}, epoch=0, index=0)
    with pytest.raises(TypeError, match=r"image leaf 'image' is a list, not a uint8 tensor"):
        aug({"image": [1, 2]}, epoch=0, index=0)
    with pytest.raises(TypeError, match=r"mean must be a sequence of per-channel values, got 0.5"):
        FusedAugment(0.5, 0.2)
    # Masks with any strides (expanded, transposed) get exactly the image's geometry.
    d = augment().draws(6, 10, 8, 0, 0)
    for m in (torch.arange(80).view(1, 10, 8).expand(6, 10, 8),
              torch.arange(480).view(6, 8, 10).transpose(1, 2)):
        out = augment(mask_key=1)((images, m), epoch=0, index=0)[1]
        ref = reference_geometry(m.unsqueeze(1), d["hflip"], d["vflip"], d["crop"], d["offsets"], 0)
        assert torch.equal(out.double(), ref.squeeze(1))


def test_array_loader_seed_rank_and_world_size_must_be_whole():
    data = torch.arange(10)
    with pytest.raises(TypeError, match="seed must be a whole number, got 2.5"):
        ArrayLoader(data, 2, seed=2.5, resident="device")  # was truncated to 2
    with pytest.raises(ValueError, match=r"seed must be in \[-2\*\*63, 2\*\*64\)"):
        ArrayLoader(data, 2, seed=2**64, resident="device")  # was the order of seed=0
    with pytest.raises(TypeError, match="rank must be a whole number, got 1.5"):
        ArrayLoader(data, 2, rank=1.5, world_size=2, resident="device")
    with pytest.raises(TypeError, match="world_size must be a whole number, got 2.5"):
        ArrayLoader(data, 2, world_size=2.5, resident="device")
    # A whole float is a whole number, here as for every integer argument of prefetch.
    assert ArrayLoader(data, 2, world_size=2.0, rank=1, resident="device").epoch_indices(0).numel() == 5
    loader = ArrayLoader(data, 2, seed=np.int64(3), rank=np.int64(1), world_size=np.int64(2),
                         resident="device")
    assert (loader.seed, loader.rank, loader.world_size) == (3, 1, 2)
    assert loader.epoch_indices(0).tolist() == ArrayLoader(data, 2, seed=3, rank=1, world_size=2,
                                                           resident="device").epoch_indices(0).tolist()


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
