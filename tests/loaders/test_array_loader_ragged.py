"""ArrayLoader over ragged fields (samples of different lengths: a store's encoded images,
variable-size raw images) against a reference gather done here, sample by sample, in Python."""
import io
import itertools

import numpy as np
import pytest
import torch

import prefetch
from prefetch import ArrayLoader, FusedAugment, Ragged
from prefetch._core.tree import ndarray_to_tensor

MEAN, STD = [0.49, 0.48, 0.45], [0.25, 0.24, 0.26]


def raw_images(n=37, seed=0):
    """HWC uint8 images of their own sizes, and their labels."""
    rng = np.random.default_rng(seed)
    images = [torch.from_numpy(rng.integers(0, 256, (int(rng.integers(5, 30)),
                                                     int(rng.integers(5, 30)), 3), dtype=np.uint8))
              for _ in range(n)]
    return images, torch.arange(n) * 7


def as_memmap_field(tmp_path, samples):
    """``samples`` (1-D uint8 tensors) as a Ragged whose values are a read-only memmap, with
    gaps between the samples and the samples stored in reverse order (offsets need not be
    sorted)."""
    path = tmp_path / "values.bin"
    offsets, pos, chunks = [0] * len(samples), 0, []
    for k in reversed(range(len(samples))):
        chunks.append(b"\xee" * (k % 3))  # a gap
        pos += k % 3
        offsets[k] = pos
        chunks.append(bytes(samples[k].numpy()))
        pos += samples[k].numel()
    path.write_bytes(b"".join(chunks))
    values = np.memmap(path, dtype=np.uint8, mode="r")
    sizes = torch.tensor([[s.numel()] for s in samples], dtype=torch.int64)
    return Ragged(ndarray_to_tensor(values, "values"), torch.tensor(offsets), sizes)


def reference_batches(samples, labels, order, batch_size, drop_last):
    out = []
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size].tolist()
        if drop_last and len(idx) < batch_size:
            break
        out.append(([samples[i] for i in idx], labels[idx]))
    return out


def assert_batches_equal(got, expected):
    assert len(got) == len(expected)
    for (r, lab), (samples, ref_lab) in zip(got, expected):
        assert isinstance(r, Ragged) and len(r) == len(samples)
        assert torch.equal(lab.cpu(), ref_lab)
        for a, b in zip(r.tensors(), samples):
            assert a.shape == b.shape and torch.equal(a.cpu(), b)


@pytest.mark.parametrize("resident", ["host", "device"])
@pytest.mark.parametrize("shuffle,drop_last", list(itertools.product([False, True], [False, True])))
def test_ragged_images_equal_a_reference_gather(device, resident, shuffle, drop_last):
    images, labels = raw_images()
    field = Ragged.from_tensors(images)
    with ArrayLoader((field, labels), 8, shuffle=shuffle, drop_last=drop_last, seed=5,
                     resident=resident, device=device) as loader:
        for epoch in range(2):
            got = list(loader)
            ref = reference_batches(images, labels, loader.epoch_indices(epoch), 8, drop_last)
            assert_batches_equal(got, ref)


def test_a_memmapped_field_with_gaps_and_any_order(tmp_path, device):
    images, labels = raw_images(n=50, seed=1)
    flat = [t.reshape(-1) for t in images]
    field = as_memmap_field(tmp_path, flat)
    with ArrayLoader({"bytes": field, "label": labels}, 16, seed=2, device=device,
                     num_threads=2) as loader:
        got = [(b["bytes"], b["label"]) for b in loader]
        assert_batches_equal(got, reference_batches(flat, labels, loader.epoch_indices(0), 16, False))


@pytest.mark.parametrize("resident", ["host", "device"])
def test_resume_and_shards(resident):
    images, labels = raw_images(n=45, seed=2)
    field = Ragged.from_tensors(images)

    def make(**kw):
        return ArrayLoader((field, labels), 4, seed=9, resident=resident, **kw)

    with make() as loader:
        full = list(loader)
    with make() as first:
        it = iter(first)
        head = [next(it) for _ in range(5)]
        state = first.state_dict()
    with make() as second:
        second.load_state_dict(state)
        rest = list(second)
    for (a, la), (b, lb) in zip(head + rest, full):
        assert torch.equal(la, lb) and all(torch.equal(x, y) for x, y in zip(a.tensors(), b.tensors()))
    assert len(head + rest) == len(full)
    seen = []
    for rank in range(3):
        with make(rank=rank, world_size=3) as shard:
            seen += [int(x) // 7 for _, lab in shard for x in lab]
    assert sorted(seen) == list(range(45))


def jpegs(n=12, seed=3):
    from PIL import Image

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        h, w = int(rng.integers(40, 90)), int(rng.integers(40, 90))
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, "JPEG")
        out.append(torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8))
    return out


@pytest.mark.skipif(not prefetch.built_with_jpeg(), reason="built without the JPEG decoder")
def test_decoding_a_ragged_field_equals_the_transform_on_the_same_bytes(tmp_path, device, monkeypatch):
    pytest.importorskip("PIL")
    # The CPU decoder on a CUDA device too: nvJPEG's pixels are not libjpeg's (within the bound of
    # tests/ops/test_gpu_decoders.py), and this test is about the loader's windows, draws and
    # resampling, which must then equal the reference bit for bit (seen on the H200: the GPU
    # decoder's batches 0.1 apart in normalized units, exact with the CPU decoder's bytes).
    monkeypatch.setenv("PREFETCH_GPU_JPEG_DECODER", "cpu")
    files = jpegs()
    labels = torch.arange(len(files))
    field = as_memmap_field(tmp_path, files)
    aug = FusedAugment(MEAN, STD, random_resized_crop=24, decode=True, seed=4)
    with ArrayLoader((field, labels), 5, seed=1, device=device, transform=aug) as loader:
        order = loader.epoch_indices(0)
        for b, (images, lab) in enumerate(loader):
            idx = order[b * 5:(b + 1) * 5]
            assert torch.equal(lab.cpu(), idx)
            # The reference: the same transform at the same position on the files' bytes.
            ref = aug(Ragged.from_tensors([files[i] for i in idx.tolist()]), epoch=0, index=b)
            assert torch.equal(images.cpu(), ref.cpu())


def test_bad_ragged_fields_are_refused():
    images, labels = raw_images(n=6)
    field = Ragged.from_tensors(images)
    with pytest.raises(ValueError, match=r"share their first dimension; got arrays\[0\].offsets: 6, "
                                         r"arrays\[0\].sizes: 6, arrays\[1\]: 5"):
        ArrayLoader((field, labels[:5]), 2)
    past = Ragged(field.values, field.offsets + 10**6, field.sizes, check=False)
    with pytest.raises(ValueError, match="sample 0"):
        ArrayLoader((past, labels), 2)
    two_d = Ragged(field.values.view(-1, 1)[:, 0], field.offsets, field.sizes)
    with ArrayLoader((two_d, labels), 2) as loader:  # a 1-D view is fine
        assert len(list(loader)) == 3


def test_ragged_index_select_equals_picking_samples(device):
    images, _ = raw_images(n=9)
    field = Ragged.from_tensors(images, device=device)
    idx = torch.tensor([8, 0, 3, 3, -1], device=device)
    got = field.index_select(0, idx)
    for a, i in zip(got.tensors(), [8, 0, 3, 3, 8]):
        assert torch.equal(a.cpu(), images[i])
    with pytest.raises(IndexError, match="index 9 is out of range for a Ragged of 9 samples"):
        field.index_select(0, torch.tensor([9], device=device))
    with pytest.raises(ValueError, match="dim 0"):
        field.index_select(1, idx)


def test_variable_size_raw_images_resized_by_the_resizing_path(device):
    images, labels = raw_images(n=21, seed=4)
    aug = FusedAugment(MEAN, STD, random_resized_crop=12, seed=8)
    with ArrayLoader((Ragged.from_tensors(images), labels), 6, seed=3, device=device,
                     transform=aug) as loader:
        order = loader.epoch_indices(0)
        for b, (out, lab) in enumerate(loader):
            idx = order[b * 6:(b + 1) * 6].tolist()
            ref = aug(Ragged.from_tensors([images[i] for i in idx]), epoch=0, index=b)
            assert out.shape == (len(idx), 3, 12, 12) and torch.equal(out.cpu(), ref.cpu())
            assert torch.equal(lab.cpu(), labels[idx])


@pytest.mark.skipif(not prefetch.built_with_jpeg(), reason="built without the JPEG decoder")
def test_a_packed_store_through_the_v2_front_end(tmp_path):
    pytest.importorskip("PIL")
    from prefetch.transforms import v2 as T

    files = jpegs(n=10, seed=6)
    store = prefetch.pack(((bytes(f.numpy()), i) for i, f in enumerate(files)), tmp_path / "s",
                          progress=False)
    recipe = T.Compose([T.RandomResizedCrop(20), T.RandomHorizontalFlip(), T.TrivialAugmentWide(),
                        T.ToDtype(torch.float32, scale=True), T.Normalize(mean=MEAN, std=STD),
                        T.RandomErasing(0.5)], seed=2, decode=True)
    with ArrayLoader(store, 4, seed=1, transform=recipe) as loader:  # the Store itself
        order = loader.epoch_indices(0)
        for b, (images, labels) in enumerate(loader):
            idx = order[b * 4:(b + 1) * 4]
            assert torch.equal(labels, idx)
            ref = recipe(Ragged.from_tensors([files[i] for i in idx.tolist()]), epoch=0, index=b)
            assert torch.equal(images, ref)


def test_a_store_resumes_mid_epoch_and_shards_across_ranks(tmp_path):
    pytest.importorskip("PIL")
    files = jpegs(n=23, seed=7)
    store = prefetch.pack(((bytes(f.numpy()), i) for i, f in enumerate(files)), tmp_path / "s",
                          progress=False)

    def make(**kw):
        return ArrayLoader(store, 4, seed=5, **kw)

    def as_lists(batches):
        return [([bytes(t.numpy()) for t in r.tensors()], lab.tolist()) for r, lab in batches]

    with make() as loader:
        loader.set_epoch(3)
        full = as_lists(loader)
    with make() as first:
        first.set_epoch(3)
        it = iter(first)
        head = as_lists([next(it) for _ in range(2)])
        state = first.state_dict()
    with make() as second:
        second.load_state_dict(state)
        second.set_epoch(3)
        rest = as_lists(second)
    assert head + rest == full
    for images, labels in full:  # each sample is its file's bytes
        assert images == [bytes(files[i].numpy()) for i in labels]
    seen = []
    for rank in range(2):
        with make(rank=rank, world_size=2, drop_last=True) as shard:
            seen += [i for _, labels in as_lists(shard) for i in labels]
    assert len(seen) == len(set(seen)) == 2 * (23 // 2 // 4) * 4
