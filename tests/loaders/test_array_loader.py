"""ArrayLoader against a reference gather done here with torch indexing, on both residencies."""
import itertools
import logging

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data.distributed import DistributedSampler

import prefetch
from prefetch import ArrayLoader, FusedAugment

from ..helpers import engine_of
from ..reference import reference

MEAN, STD = [0.49, 0.48, 0.45], [0.25, 0.24, 0.26]


def make_arrays(n=203, seed=0, h=12, w=10):
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, h, w, 3), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, 1000, (n,), generator=g)
    return images, labels


def expected_batches(arrays, order, batch_size, drop_last):
    """The reference: torch indexing of every array by consecutive slices of `order`."""
    out = []
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        if drop_last and len(idx) < batch_size:
            break
        out.append(tuple(a[idx] for a in arrays))
    return out


def augment():
    return FusedAugment(MEAN, STD, crop=10, padding=2, hflip=0.5, vflip=0.3, seed=17)


def augmented_reference(aug, images, labels, epoch, index):
    """What FusedAugment must make of a gathered batch: its documented draws, applied by the
    float64 reference."""
    d = aug.draws(images.shape[0], images.shape[1], images.shape[2], epoch, index)
    ref = reference(images, MEAN, STD, hflip=d["hflip"], vflip=d["vflip"], crop=d["crop"],
                    offsets=d["offsets"], fill=aug.fill)
    return ref, labels


def assert_close_to_reference(got, ref):
    err = (got.cpu().double() - ref).abs()
    assert bool((err <= 1e-6 * ref.abs().clamp(min=1.0)).all()), float(err.max())


@pytest.mark.parametrize("resident", ["host", "device"])
@pytest.mark.parametrize("shuffle,drop_last", list(itertools.product([False, True], [False, True])))
def test_batches_equal_a_reference_gather(device, resident, shuffle, drop_last):
    images, labels = make_arrays()
    with ArrayLoader((images, labels), 32, shuffle=shuffle, drop_last=drop_last, seed=5,
                     resident=resident, device=device) as loader:
        assert loader.resident == resident
        for epoch in range(2):
            order = loader.epoch_indices(epoch)
            if shuffle:
                assert sorted(order.tolist()) == list(range(len(images)))
            else:
                assert order.tolist() == list(range(len(images)))
            expected = expected_batches((images, labels), order, 32, drop_last)
            got = list(loader)
            assert len(got) == len(expected) == len(loader) == (6 if drop_last else 7)
            for g, e in zip(got, expected):
                assert isinstance(g, tuple) and g[0].device == device
                assert g[0].dtype == torch.uint8 and g[1].dtype == torch.int64
                assert torch.equal(g[0].cpu(), e[0]) and torch.equal(g[1].cpu(), e[1])
            if not drop_last:
                assert got[-1][0].shape[0] == 203 - 6 * 32  # the partial last batch
        if shuffle:
            assert not torch.equal(loader.epoch_indices(0), loader.epoch_indices(1))


@pytest.mark.parametrize("shuffle,drop_last", list(itertools.product([False, True], [False, True])))
def test_fused_augment_same_batches_on_both_residencies(device, shuffle, drop_last):
    images, labels = make_arrays()
    runs = {}
    for resident in ("host", "device"):
        with ArrayLoader((images, labels), 32, shuffle=shuffle, drop_last=drop_last, seed=5,
                         resident=resident, device=device, transform=augment()) as loader:
            runs[resident] = [list(loader), list(loader)]  # two epochs
    order_loader = ArrayLoader((images, labels), 32, shuffle=shuffle, drop_last=drop_last, seed=5,
                               resident="device")
    aug = augment()
    for epoch in range(2):
        expected = expected_batches((images, labels), order_loader.epoch_indices(epoch), 32, drop_last)
        for index, (h, d, e) in enumerate(zip(runs["host"][epoch], runs["device"][epoch], expected)):
            assert torch.equal(h[0].cpu(), d[0].cpu()) and torch.equal(h[1].cpu(), d[1].cpu())
            ref, ref_labels = augmented_reference(aug, e[0], e[1], epoch, index)
            assert_close_to_reference(d[0], ref)
            assert torch.equal(d[1].cpu(), ref_labels)
    # Epochs draw differently.
    assert not torch.equal(runs["host"][0][0][0].cpu(), runs["host"][1][0][0].cpu())


def test_dict_arrays_mask_follows_the_image(device):
    images, labels = make_arrays(n=40)
    masks = torch.randint(0, 5, (40, 12, 10), dtype=torch.uint8)
    aug = FusedAugment(MEAN, STD, crop=8, padding=1, hflip=0.5, seed=3, image_key="image",
                       mask_key="mask")
    out = {}
    for resident in ("host", "device"):
        with ArrayLoader({"image": images, "mask": masks, "label": labels}, 16, resident=resident,
                         device=device, transform=aug) as loader:
            out[resident] = list(loader)
    for h, d in zip(out["host"], out["device"]):
        assert list(h) == ["image", "mask", "label"]
        for k in h:
            assert torch.equal(h[k].cpu(), d[k].cpu()), k
    # The mask of the first batch against the draws applied by the reference geometry.
    order = ArrayLoader({"image": images}, 16, resident="device").epoch_indices(0)[:16]
    d = aug.draws(16, 12, 10, 0, 0)
    from ..reference import reference_geometry
    ref = reference_geometry(masks[order].unsqueeze(1), d["hflip"], d["vflip"], d["crop"],
                             d["offsets"], 0).squeeze(1)
    assert torch.equal(out["device"][0]["mask"].cpu().double(), ref)


_ARRAY_DTYPES = [torch.uint8, torch.int16, torch.int64, torch.float16, torch.float32, torch.bool]


@st.composite
def array_sets(draw):
    n = draw(st.integers(1, 40))
    arrays = []
    for _ in range(draw(st.integers(1, 3))):
        dtype = draw(st.sampled_from(_ARRAY_DTYPES))
        shape = (n,) + tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
        t = (torch.rand(shape) * 100).to(dtype)
        if draw(st.booleans()) and len(shape) >= 3:
            t = t.transpose(1, 2)  # rows that are not dense
        arrays.append(t)
    return tuple(arrays)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arrays=array_sets(), batch_size=st.integers(1, 12), shuffle=st.booleans(),
       drop_last=st.booleans(), resident=st.sampled_from(["host", "device"]),
       world=st.integers(1, 3), epoch=st.integers(0, 3))
def test_property_array_loader_equals_a_reference_gather(arrays, batch_size, shuffle, drop_last,
                                                          resident, world, epoch):
    n = arrays[0].shape[0]
    rank = epoch % world
    with prefetch.ArrayLoader(arrays, batch_size, shuffle=shuffle, drop_last=drop_last, seed=epoch,
                              rank=rank, world_size=world, resident=resident) as loader:
        loader.set_epoch(epoch)
        got = list(loader)
        order = loader.epoch_indices(epoch)
    assert len(order) == (n // world if drop_last else -(-n // world))
    assert set(order.tolist()) <= set(range(n))
    expected = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    if drop_last and expected and len(expected[-1]) < batch_size:
        expected.pop()
    assert len(got) == len(expected) == len(loader)
    for batch, idx in zip(got, expected):
        assert isinstance(batch, tuple) and len(batch) == len(arrays)
        for g, a in zip(batch, arrays):
            assert g.dtype == a.dtype and g.shape == a[idx].shape
            assert torch.equal(g, a[idx])


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("num_samples", [203, 7, 3])
def test_rank_shards_match_distributed_sampler(num_samples, drop_last):
    for world_size in range(1, 5):
        shards = []
        for rank in range(world_size):
            loader = ArrayLoader(torch.arange(num_samples), 1000, shuffle=False, drop_last=drop_last,
                                 rank=rank, world_size=world_size, resident="device")
            sampler = DistributedSampler(range(num_samples), num_replicas=world_size, rank=rank,
                                         shuffle=False, drop_last=drop_last)
            shard = loader.epoch_indices(0).tolist()
            assert shard == list(sampler)
            shards.append(shard)
        check_shards(shards, num_samples, world_size, drop_last)


@pytest.mark.parametrize("drop_last", [False, True])
def test_shuffled_rank_shards_disjoint_and_covering(drop_last):
    images, labels = make_arrays(n=103)
    for world_size in range(1, 5):
        seen = []
        for rank in range(world_size):
            with ArrayLoader((images, labels), 8, drop_last=drop_last, rank=rank,
                             world_size=world_size, seed=9) as loader:
                ids = torch.cat([b[1] for b in loader])
                shard = loader.epoch_indices(3)
                loader.set_epoch(3)
                assert torch.equal(torch.cat([b[1] for b in loader]),
                                   labels[shard[:len(shard) // 8 * 8] if drop_last else shard])
            seen.append(loader.epoch_indices(0).tolist())
            assert len(ids) == len(loader) * 8 if drop_last else len(ids) == len(seen[-1])
        check_shards(seen, 103, world_size, drop_last)


def check_shards(shards, num_samples, world_size, drop_last):
    """DistributedSampler's contract: equal shard sizes; drop_last: disjoint, at most
    world_size - 1 samples left out; otherwise covering, at most world_size - 1 repeated."""
    sizes = {len(s) for s in shards}
    assert len(sizes) == 1
    flat = [i for s in shards for i in s]
    distinct = set(flat)
    if drop_last:
        assert len(distinct) == len(flat)
        assert num_samples - len(distinct) <= world_size - 1
    else:
        assert distinct == set(range(num_samples))
        assert len(flat) - num_samples <= world_size - 1 or num_samples < world_size


def test_rank_and_world_size_default_to_torch_distributed(monkeypatch):
    import torch.distributed as dist

    # An initialised process group of 4 in which this process is rank 3 (faked: one process).
    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 4)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 3)
    loader = ArrayLoader(torch.arange(10), 2, shuffle=False, resident="device")
    assert (loader.rank, loader.world_size) == (3, 4)
    sampler = DistributedSampler(range(10), num_replicas=4, rank=3, shuffle=False)
    assert loader.epoch_indices(0).tolist() == list(sampler) == [3, 7, 1]
    # Explicit arguments win over the process group.
    assert ArrayLoader(torch.arange(10), 2, rank=0, world_size=2, resident="device").rank == 0
    with pytest.raises(ValueError, match=r"rank must be in \[0, world_size\) = \[0, 2\), got 2"):
        ArrayLoader(torch.arange(10), 4, rank=2, world_size=2)


def uninterrupted(make, epochs=2):
    with make() as loader:
        return [b for _ in range(epochs) for b in loader]


@pytest.mark.parametrize("resident", ["host", "device"])
def test_resume_after_k_batches_equals_the_uninterrupted_run(device, resident):
    images, labels = make_arrays()

    def make():
        return ArrayLoader((images, labels), 16, seed=2, resident=resident, device=device, depth=4,
                           transform=augment())

    full = uninterrupted(make)
    per_epoch = len(full) // 2
    # k = 0, inside the prefetch window (the host path has up to depth batches ahead), the
    # middle, the last batch of the epoch, and the whole epoch.
    for k in (0, 1, 3, 6, per_epoch - 1, per_epoch):
        with make() as first:
            it = iter(first)
            head = [next(it) for _ in range(k)]
            state = first.state_dict()
        assert state["epoch"] == (1 if k == per_epoch else 0)
        assert state["batches_consumed"] == (0 if k == per_epoch else k)
        with make() as second:
            second.load_state_dict(state)
            rest = [b for b in second] + ([b for b in second] if k < per_epoch else [])
        resumed = head + rest
        assert len(resumed) == len(full), k
        for i, (a, b) in enumerate(zip(resumed, full)):
            assert torch.equal(a[0].cpu(), b[0].cpu()) and torch.equal(a[1].cpu(), b[1].cpu()), (k, i)


def test_resume_with_set_epoch_keeps_the_position():
    images, labels = make_arrays(n=64)
    with ArrayLoader((images, labels), 8, seed=4) as a:
        a.set_epoch(5)
        it = iter(a)
        next(it), next(it)
        state = a.state_dict()
        assert state["epoch"] == 5 and state["batches_consumed"] == 2
        rest_expected = list(it)
    with ArrayLoader((images, labels), 8, seed=4) as b:
        b.load_state_dict(state)
        b.set_epoch(5)  # the loop's usual call: same epoch, position kept
        rest = list(b)
        b.set_epoch(6)  # another epoch: from its start
        assert len(list(b)) == 8
    assert len(rest) == 6
    assert all(torch.equal(x[1], y[1]) for x, y in zip(rest, rest_expected))


@pytest.mark.parametrize("resident", ["host", "device"])
def test_an_epoch_replaced_by_load_state_dict_no_longer_moves_the_position(resident):
    images, labels = make_arrays(n=64)
    with ArrayLoader((images, labels), 8, seed=4, resident=resident, device="cpu") as a:
        state = {**a.state_dict(), "epoch": 3, "batches_consumed": 5}
        old = iter(a)
        next(old)
        a.load_state_dict(state)
        stale = list(old)  # host: stopped; device: the old epoch's batches, not counted
        assert resident == "device" or stale == []
        assert (a.state_dict()["epoch"], a.state_dict()["batches_consumed"]) == (3, 5)
        rest = list(a)
        order = a.epoch_indices(3)
        assert len(rest) == 3
        assert all(torch.equal(b[1], labels[order[40 + 8 * k:48 + 8 * k]]) for k, b in enumerate(rest))


def test_load_state_dict_refuses_a_different_layout():
    images, labels = make_arrays(n=64)
    state = ArrayLoader((images, labels), 8, seed=4).state_dict()
    with pytest.raises(ValueError, match=r"batch_size: saved 8, this loader 16.*seed: saved 4, this loader 5"):
        ArrayLoader((images, labels), 16, seed=5).load_state_dict(state)


def test_memmap_larger_than_the_ring(tmp_path):
    n, shape = 4000, (32, 32, 3)
    path = tmp_path / "images.u8"
    data = np.memmap(path, dtype=np.uint8, mode="w+", shape=(n,) + shape)
    rng = np.random.default_rng(0)
    for start in range(0, n, 500):
        data[start:start + 500] = rng.integers(0, 256, (min(500, n - start),) + shape, dtype=np.uint8)
    data.flush()
    del data
    images = np.memmap(path, dtype=np.uint8, mode="r", shape=(n,) + shape)
    labels = np.arange(n)
    with ArrayLoader((images, labels), 50, seed=1, depth=2) as loader:
        batches = list(loader)
        ring = sum(prefetch._C._testing.slot_capacities(engine_of(loader)))
        order = loader.epoch_indices(0)
    assert images.nbytes > 4 * ring  # the ring holds batches, never the dataset
    reread = np.fromfile(path, dtype=np.uint8).reshape((n,) + shape)
    for i, (img, lab) in enumerate(batches):
        idx = order[i * 50:(i + 1) * 50].numpy()
        assert np.array_equal(img.numpy(), reread[idx]) and np.array_equal(lab.numpy(), idx)


@pytest.mark.parametrize("arrays,match", [
    ((), "empty tuple of arrays"),
    ({}, "empty dict of arrays"),
    ((torch.zeros(0, 3), torch.zeros(0)), r"empty \(0 samples\)"),
    ((torch.zeros(5, 3), torch.zeros(4)), r"share their first dimension; got arrays\[0\]: 5, arrays\[1\]: 4"),
    ({"x": torch.zeros(5), "y": torch.tensor(1.0)}, r"arrays\['y'\] is 0-D"),
])
def test_bad_arrays_raise_clear_errors(arrays, match):
    with pytest.raises(ValueError, match=match):
        ArrayLoader(arrays, 2)


def test_bad_arguments():
    x = torch.zeros(4, 2)
    with pytest.raises(ValueError, match="batch_size must be an int >= 1, got 0"):
        ArrayLoader(x, 0)
    with pytest.raises(ValueError, match="resident must be 'host', 'device' or 'auto', got 'gpu'"):
        ArrayLoader(x, 2, resident="gpu")
    with pytest.raises(TypeError, match=r"arrays\[1\] is a list; ArrayLoader takes numpy arrays"):
        ArrayLoader((x, [1, 2, 3, 4]), 2)
    with pytest.raises(prefetch.CollateError, match="numpy array of dtype object"):
        ArrayLoader(np.array([None] * 4, dtype=object), 2)


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



def test_single_array_and_auto_residency_on_the_cpu(caplog):
    x = torch.arange(10)
    with caplog.at_level(logging.INFO, logger="prefetch"):
        loader = ArrayLoader(x, 4, shuffle=False, resident="auto", device="cpu")
    assert loader.resident == "host"
    assert "picked 'host'" in caplog.text
    with loader:
        assert [b.tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


@pytest.mark.cuda
def test_auto_residency_on_cuda_uploads_small_arrays():
    from ..conftest import require_cuda

    require_cuda()
    images, labels = make_arrays(n=32)
    loader = ArrayLoader((images, labels), 8, resident="auto")
    assert loader.resident == "device" and loader.device.type == "cuda"
    batch = next(iter(loader))
    assert batch[0].is_cuda and torch.equal(batch[1].cpu(), labels[loader.epoch_indices(0)[:8]])
    tiny = ArrayLoader((images, labels), 8, resident="auto", memory_fraction=1e-12)
    assert tiny.resident == "host"
    tiny.close()


class FailsOnce(prefetch.transforms.Transform):
    """A transform that raises on batch 2 of epoch 0 and passes everything else through."""

    def apply(self, batch, position):
        if position.epoch == 0 and position.index == 2:
            raise ArithmeticError("boom in batch %d" % position.index)
        return batch


@pytest.mark.parametrize("resident", ["host", "device"])
def test_an_error_reaches_the_consumer_and_the_next_epoch_works(device, resident):
    images, labels = make_arrays(n=40)
    with ArrayLoader((images, labels), 8, transform=FailsOnce(), device=device,
                     resident=resident) as loader:
        it = iter(loader)
        assert len([next(it), next(it)]) == 2
        with pytest.raises(ArithmeticError, match="boom in batch 2"):
            next(it)
        got = list(loader)
        expected = expected_batches((images, labels), loader.epoch_indices(1), 8, False)
        assert len(got) == 5
        assert all(torch.equal(g[1].cpu(), e[1]) for g, e in zip(got, expected))


class SlowOnce(prefetch.transforms.Transform):
    """A transform that stalls batch 1 of every epoch for `seconds`."""

    def __init__(self, seconds):
        self.seconds = seconds

    def apply(self, batch, position):
        if position.index == 1:
            import time

            time.sleep(self.seconds)
        return batch


def test_timeout_raises_and_next_can_be_called_again():
    images, labels = make_arrays(n=40)
    with ArrayLoader((images, labels), 8, transform=SlowOnce(1.0), timeout=0.2, depth=1) as loader:
        it = iter(loader)
        next(it)
        with pytest.raises(prefetch.PrefetchTimeout, match=r"timeout=0.2s"):
            next(it)
        rest = []
        while True:  # the stalled batch arrives; the epoch completes
            try:
                rest.append(next(it))
            except prefetch.PrefetchTimeout:
                continue
            except StopIteration:
                break
        assert len(rest) == 4
        assert loader.state_dict()["epoch"] == 1


def _rss_bytes():
    import os

    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_memmap_is_not_read_up_front(tmp_path):
    # 128 MiB on disk: building the loader maps the file and reads none of it (a touched mapped
    # page counts in RSS). How much a batch then maps is the kernel's business: this VM's maps
    # large folios, ~0.7 MiB per random row even for numpy alone, so no bound is asserted there.
    n, shape = 16384, (64, 64, 2)
    path = tmp_path / "big.u8"
    data = np.memmap(path, dtype=np.uint8, mode="w+", shape=(n,) + shape)
    for start in range(0, n, 4096):
        data[start:start + 4096] = (np.arange(start, start + 4096) % 251).astype(np.uint8)[:, None, None, None]
    data.flush()
    del data
    images = np.memmap(path, dtype=np.uint8, mode="r", shape=(n,) + shape)
    before = _rss_bytes()
    with ArrayLoader((images, np.arange(n)), 64, seed=0, depth=2) as loader:
        assert _rss_bytes() - before < 16 * 2**20, "constructing the loader read the file"
        it = iter(loader)
        for _ in range(4):
            img, ids = next(it)
            assert np.array_equal(img[:, 0, 0, 0].numpy(), (ids.numpy() % 251).astype(np.uint8))
