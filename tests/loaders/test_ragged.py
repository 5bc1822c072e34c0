"""Ragged batches: Samples of different sizes cross as one Ragged (values + offsets + sizes, one
copy, no padding), checked against the samples themselves; the Ragged type on its own; the
errors; the worker ring."""
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import prefetch
from prefetch import Ragged
from prefetch.sources import worker_ring as _worker_ring

from ..conftest import SANITIZED


def images(n, seed=0, channels=3, dtype=torch.uint8):
    """HWC images of n different sizes, content from the seed."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (3 + (7 * i) % 11, 2 + (5 * i) % 9, channels),
                          generator=g).to(dtype) for i in range(n)]


def assert_ragged_equals(r, samples):
    assert isinstance(r, Ragged), type(r)
    assert len(r) == len(samples) and r.dtype == samples[0].dtype
    got = r.tensors()
    for k, (a, b) in enumerate(zip(got, samples)):
        assert a.shape == b.shape and torch.equal(a.cpu(), b), "sample %d" % k
        assert torch.equal(r[k].cpu(), b)
    assert r.sizes.tolist() == [list(t.shape) for t in samples]


# ---- the type ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.int64])
def test_from_tensors_round_trips(dtype):
    samples = images(6, dtype=dtype)
    samples[2] = samples[2].transpose(0, 1)  # a view, not contiguous: packed in its own order
    r = Ragged.from_tensors(samples)
    assert_ragged_equals(r, samples)
    assert r.values.numel() == sum(t.numel() for t in samples)  # no padding
    assert r.offsets.tolist() == [sum(t.numel() for t in samples[:k]) for k in range(6)]
    assert r[-1].shape == samples[-1].shape and r.rank == 3
    assert_ragged_equals(r.to("cpu"), samples)
    assert "6 samples" in repr(r)


def test_one_dimensional_samples_of_any_length():
    seqs = [torch.arange(n) for n in (3, 0, 7, 1)]
    assert_ragged_equals(Ragged.from_tensors(seqs), seqs)


def test_bad_ragged_arguments_say_what_they_got():
    with pytest.raises(TypeError, match="values must be a 1-D tensor, got a 2-D"):
        Ragged(torch.zeros(2, 2), torch.zeros(1, dtype=torch.int64), torch.zeros(1, 2, dtype=torch.int64))
    with pytest.raises(TypeError, match="offsets must be a 1-D int64 tensor, got a 1-D int32"):
        Ragged(torch.zeros(4), torch.zeros(1, dtype=torch.int32), torch.zeros(1, 1, dtype=torch.int64))
    with pytest.raises(ValueError, match="2 offsets but 1 sizes"):
        Ragged(torch.zeros(4), torch.zeros(2, dtype=torch.int64), torch.zeros(1, 1, dtype=torch.int64))
    with pytest.raises(IndexError, match="sample 5 of a Ragged of 2"):
        Ragged.from_tensors(images(2))[5]
    with pytest.raises(prefetch.CollateError, match=r"sample 1 is uint8 of shape \[3, 3\], and "
                                                    r"sample 0 uint8 of shape \[2, 2, 1\]"):
        Ragged.from_tensors([torch.zeros(2, 2, 1, dtype=torch.uint8),
                             torch.zeros(3, 3, dtype=torch.uint8)])


# ---- through the Prefetcher -------------------------------------------------------------------

def test_samples_of_different_sizes_arrive_as_one_ragged_in_one_copy():
    batches = [images(5, seed=s) for s in range(4)]
    source = [(prefetch.Samples(b), torch.arange(5)) for b in batches]
    with prefetch.Prefetcher(source, device="cpu") as pf:
        for _ in range(2):
            got = list(pf)
            assert len(got) == 4
            for (r, labels), want in zip(got, batches):
                assert_ragged_equals(r, want)
                assert torch.equal(labels, torch.arange(5))
                # values, offsets and sizes are views of the batch's one packed buffer: one copy
                storage = r.values.untyped_storage().data_ptr()
                assert r.offsets.untyped_storage().data_ptr() == storage
                assert r.sizes.untyped_storage().data_ptr() == storage
        stats = pf.stats()
    values = sum(t.numel() for b in batches for t in b)
    assert stats["bytes_collated"] >= 2 * (values + 4 * 5 * 8 * 4)  # every byte collated


def test_fixed_size_samples_still_stack():
    same = [torch.full((4, 4, 3), i, dtype=torch.uint8) for i in range(3)]
    with prefetch.Prefetcher([prefetch.Samples(same)], device="cpu") as pf:
        (batch,) = list(pf)
    assert torch.equal(batch, torch.stack(same))


def test_a_ragged_in_the_batch_moves_as_it_is():
    r = Ragged.from_tensors(images(4, seed=3))
    with prefetch.Prefetcher([{"images": r, "n": 4}], device="cpu") as pf:
        (batch,) = list(pf)
    assert batch["n"] == 4
    assert_ragged_equals(batch["images"], r.tensors())


def test_the_transform_receives_the_ragged():
    seen = []

    def transform(batch):
        seen.append(type(batch[0]))
        return batch

    with prefetch.Prefetcher([(prefetch.Samples(images(3)),)], device="cpu",
                             device_transform=transform) as pf:
        list(pf)
    assert seen == [Ragged]


def test_fused_augment_refuses_a_ragged_saying_what_to_do():
    aug = prefetch.FusedAugment((0.5,) * 3, (0.25,) * 3)
    with prefetch.Prefetcher([(prefetch.Samples(images(3)), 0)], device="cpu", transform=aug) as pf:
        with pytest.raises(TypeError, match=r"image leaf 0 is a prefetch.Ragged \(3 images of "
                                            r"different sizes\).*random_resized_crop=size"):
            list(pf)


@pytest.mark.parametrize("samples,match", [
    ([torch.zeros(2, 3, 3, dtype=torch.uint8), torch.zeros(2, 3, dtype=torch.uint8)],
     r"sample 1 has shape \[2, 3\], expected \[2, 3, 3\] \(the shape of sample 0; .*same rank"),
    ([torch.zeros(2, 3, 3, dtype=torch.uint8), torch.zeros(4, 3, 3, dtype=torch.float32)],
     r"batch\[0\]\.values: sample 1 has dtype torch.float32, expected torch.uint8"),
])
def test_samples_that_cannot_be_ragged_raise_and_the_next_epoch_works(samples, match):
    good = images(3)
    source = [(prefetch.Samples(good),), (prefetch.Samples(samples),)]
    with prefetch.Prefetcher(source, device="cpu") as pf:
        it = iter(pf)
        assert_ragged_equals(next(it)[0], good)
        with pytest.raises(prefetch.CollateError, match=match):
            next(it)
        source.pop()
        (batch,) = list(pf)
        assert_ragged_equals(batch[0], good)


def test_max_batch_bytes_bounds_a_ragged_batch():
    big = images(6)
    need = sum(t.numel() for t in big)
    with prefetch.Prefetcher([(prefetch.Samples(big),)], device="cpu",
                             max_batch_bytes=need // 2) as pf:
        with pytest.raises(prefetch.CollateError, match="max_batch_bytes"):
            list(pf)


# ---- through DataLoader workers and the worker ring -------------------------------------------

class Decoded(Dataset):
    """Images of their own size, as decoded JPEGs are."""

    def __len__(self):
        return 60

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randint(0, 256, (4 + i % 9, 2 + i % 5, 3), dtype=torch.uint8, generator=g), i


def _reference(ds, batch_size):
    return [[ds[i][0] for i in range(k, min(k + batch_size, len(ds)))]
            for k in range(0, len(ds), batch_size)]


@pytest.mark.parametrize("context, lease", [
    ("spawn", True), ("spawn", False),
    pytest.param("fork", True, marks=pytest.mark.skipif(SANITIZED, reason="fork() under ASan"))])
def test_ragged_batches_through_the_worker_ring(context, lease, monkeypatch):
    monkeypatch.setattr(_worker_ring, "LEASE_ON_CPU", lease)
    ds = Decoded()
    want = _reference(ds, 8)
    dl = DataLoader(ds, batch_size=8, num_workers=2, collate_fn=prefetch.collate.samples,
                    multiprocessing_context=context, persistent_workers=True)
    with prefetch.Prefetcher(dl, device="cpu") as pf:
        for _ in range(3):
            n = 0
            for (r, labels), w in zip(pf, want):
                assert_ragged_equals(r, w)
                n += 1
                del r, labels
            assert n == len(want)
        stats = pf.stats()
    assert stats["worker_ring_batches"] >= len(want), stats


class RankChangesAtFive(Dataset):
    """Module level, so that spawn and forkserver workers (the sanitized run) can pickle it."""

    def __len__(self):
        return 16

    def __getitem__(self, i):
        return torch.zeros((3, 3, 3) if i != 5 else (3, 3), dtype=torch.uint8)


def test_samples_that_cannot_be_ragged_raise_through_workers_too():
    dl = DataLoader(RankChangesAtFive(), batch_size=8, num_workers=2, collate_fn=prefetch.collate.samples)
    with prefetch.Prefetcher(dl, device="cpu") as pf:
        with pytest.raises(prefetch.CollateError, match="sample 5") as info:
            list(pf)
    assert "dataset index 5" in "\n".join(getattr(info.value, "__notes__", []))


def test_a_delivered_ragged_knows_its_shapes_without_reading_the_device():
    samples = images(4, seed=9)
    with prefetch.Prefetcher([(prefetch.Samples(samples),)], device="cpu") as pf:
        (batch,) = list(pf)
    r = batch[0]
    want = [tuple(t.shape) for t in samples]
    # sizes that cannot be read (a meta tensor has no data): shapes() must not need them
    r.sizes = torch.empty(r.sizes.shape, dtype=torch.int64, device="meta")
    assert r.shapes() == want and r[2].shape == want[2]
    assert Ragged.from_tensors(samples).shapes() == want
    r.offsets = torch.empty(r.offsets.shape, dtype=torch.int64, device="meta")
    offsets, sizes = r.host_tables()  # from the host's knowledge, as the op needs them
    assert offsets.tolist() == [sum(t.numel() for t in samples[:k]) for k in range(4)]
    assert sizes.tolist() == [list(s) for s in want]
    with pytest.raises(ValueError, match="4 sizes but 3 shapes"):
        Ragged(r.values, r.offsets, r.sizes, shapes=want[:3])


# --- Ragged -------------------------------------------------------------------------------------

def test_a_ragged_slices_into_a_ragged_sharing_its_values():
    parts = [torch.arange(6).view(2, 3), torch.arange(3).view(1, 3) + 10, torch.arange(9).view(3, 3) + 20]
    r = Ragged.from_tensors(parts)
    for sl in (slice(0, 2), slice(1, None), slice(None, None, 2), slice(-1, None)):
        sub = r[sl]
        assert isinstance(sub, Ragged) and sub.values.data_ptr() == r.values.data_ptr()
        assert [t.tolist() for t in sub.tensors()] == [t.tolist() for t in parts[sl]]
        offsets, sizes = sub.host_tables()
        assert sizes.tolist() == [list(t.shape) for t in parts[sl]]
        assert [r.values[o:o + t.numel()].tolist() for o, t in zip(offsets.tolist(), parts[sl])] == \
               [t.reshape(-1).tolist() for t in parts[sl]]
    with pytest.raises(TypeError, match="indexed by an int or a slice"):
        r["a"]


def test_a_ragged_refuses_tables_that_reach_outside_its_values():
    values = torch.arange(10)
    with pytest.raises(ValueError, match=r"sample 0 \(offsets\[0\] = -1, sizes\[0\] = \[2\]\) does not lie "
                                         r"inside the 10 values"):
        Ragged(values, torch.tensor([-1]), torch.tensor([[2]]))  # narrow() would have wrapped
    with pytest.raises(ValueError, match=r"sample 1 .* does not lie inside the 10 values"):
        Ragged(values, torch.tensor([0, 8]), torch.tensor([[2], [3]]))
    with pytest.raises(ValueError, match="negative size"):
        Ragged(values, torch.tensor([0]), torch.tensor([[-2]]))
    r = Ragged(values, torch.tensor([-1]), torch.tensor([[2]]), check=False)  # unchecked tables
    with pytest.raises(IndexError, match="does not lie inside its 10 values"):
        r[0]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_any_dimension_may_differ_masks_and_channel_counts_included(num_workers):
    """[H, W] masks of different heights and widths collate into a Ragged of rank 2 (they had to
    be [H, W, 1]); HWC images of different channel counts too, and an op that needs one channel
    count names the sample that has another."""
    g = torch.Generator().manual_seed(8)
    masks = [torch.randint(0, 9, (3 + i, 2 + 3 * i), dtype=torch.int64, generator=g) for i in range(4)]
    mixed = [torch.randint(0, 256, (4 + i, 5, 3 if i != 2 else 4), dtype=torch.uint8, generator=g)
             for i in range(4)]
    loader = DataLoader(list(zip(masks, mixed)), batch_size=4, num_workers=num_workers,
                        collate_fn=prefetch.collate.samples)
    with prefetch.Prefetcher(loader, device="cpu") as pf:
        (got_masks, got_mixed), = list(pf)
    assert_ragged_equals(got_masks, masks)
    assert_ragged_equals(got_mixed, mixed)
    with pytest.raises(RuntimeError, match=r"resized_crop: sample 2 has C = 4 channels"):
        prefetch.ops.resized_crop(got_mixed, [[0, 0, 4, 4]] * 4, 4, [0.5] * 3, [0.2] * 3)
