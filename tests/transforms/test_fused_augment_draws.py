"""FusedAugment's draws are a function of (seed, rank, epoch, batch index): DDP ranks given the
same seed draw differently, each reproducibly, whether the rank comes from the Prefetcher's or the
ArrayLoader's argument or from torch.distributed (also for direct calls, and between two real gloo
processes); direct calls without a position draw afresh, reproducibly. Outputs are compared with
the float64 reference applied with the documented draws."""
import numpy as np
import pytest
import torch

from prefetch import ArrayLoader, Prefetcher

from .test_fused_augment import MEAN, STD, assert_close, augment, expected, images_and_masks


def fake_process_group(monkeypatch, rank, world_size=4):
    """An initialised process group of `world_size` in which this process is `rank` (faked)."""
    import torch.distributed as dist

    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: world_size)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: rank)


# ---- the rank ----------------------------------------------------------------------------------


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
    import os
    import pathlib
    import subprocess
    import sys

    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT % (MEAN, STD))
    init = "file://%s" % (tmp_path / "store")
    procs = [subprocess.Popen([sys.executable, str(script), str(r), init, str(tmp_path / ("%d.pt" % r))],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=dict(os.environ, PYTHONPATH=str(pathlib.Path(__file__).resolve().parents[2])))
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


# ---- direct calls -------------------------------------------------------------------------------


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
