"""prefetch.timm.create_loader: timm's create_loader arguments over a Prefetcher. Its
batches equal the compiled recipe applied to the dataset's images read in order; timm's
FastCollateMixup (its attributes) becomes prefetch's MixUpCutMix with timm's mixup_enabled
switch; the attributes timm's train.py reads are there; what is not compiled is refused."""
import io
import types

import numpy as np
import pytest
import torch

import prefetch
from prefetch.transforms import BatchPosition
from prefetch.timm import (PrefetchLoader, create_loader, create_transform, encoded_to_uint8,
                           image_to_uint8)

Image = pytest.importorskip("PIL.Image")


class PilImages(torch.utils.data.Dataset):
    """timm's ImageDataset's shape: (image, target), the image through ``self.transform``."""

    def __init__(self, n=12, seed=0):
        g = np.random.default_rng(seed)
        self.arrays = [g.integers(0, 256, (40 + 3 * i, 50 - 2 * i, 3), dtype=np.uint8) for i in range(n)]
        self.transform = None

    def __len__(self):
        return len(self.arrays)

    def __getitem__(self, i):
        image = Image.fromarray(self.arrays[i])
        return (self.transform(image) if self.transform is not None else image), i % 5


def timm_mixup(**kw):
    """An object with timm's FastCollateMixup attributes (timm itself is optional)."""
    args = dict(mixup_alpha=0.8, cutmix_alpha=1.0, cutmix_minmax=None, mix_prob=1.0, switch_prob=0.5,
                mode="batch", correct_lam=True, label_smoothing=0.1, num_classes=5, mixup_enabled=True,
                _mix_batch_collate=None)
    args.update(kw)
    return types.SimpleNamespace(**args)


def test_image_to_uint8_reads_pil_and_arrays():
    a = np.arange(24, dtype=np.uint8).reshape(2, 4, 3)
    assert torch.equal(image_to_uint8(Image.fromarray(a)), torch.from_numpy(a))
    assert image_to_uint8(Image.fromarray(a[..., 0])).shape == (2, 4, 1)
    with pytest.raises(TypeError, match=r"must be a PIL image or a uint8 \[H, W, C\] array, got torch.float32"):
        image_to_uint8(torch.zeros(2, 2, 3))


class JpegFiles(PilImages):
    """timm's ImageDataset(load_bytes=True)'s shape: the file's bytes through ``self.transform``."""

    def __init__(self, n=12, seed=0):
        super().__init__(n, seed)
        self.files = []
        for a in self.arrays:
            out = io.BytesIO()
            Image.fromarray(a).save(out, format="JPEG", quality=90)
            self.files.append(out.getvalue())

    def __getitem__(self, i):
        data = self.files[i]
        return (self.transform(data) if self.transform is not None else data), i % 5


def test_encoded_to_uint8_reads_bytes_and_refuses_images():
    assert torch.equal(encoded_to_uint8(b"\x01\x02"), torch.tensor([1, 2], dtype=torch.uint8))
    assert torch.equal(encoded_to_uint8(np.array([3, 4], dtype=np.uint8)), torch.tensor([3, 4], dtype=torch.uint8))
    with pytest.raises(TypeError, match=r"encoded file's bytes .*got torch.uint8 of shape \[2, 2, 3\]"):
        encoded_to_uint8(torch.zeros(2, 2, 3, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"an empty file \(0 bytes\)"):
        encoded_to_uint8(b"")


@pytest.mark.skipif(not prefetch.built_with_jpeg(), reason="built without libjpeg-turbo")
@pytest.mark.parametrize("training", [False, True])
def test_decode_reads_the_files_bytes_and_equals_the_decoded_images(training):
    # timm's ImageDataset(load_bytes=True) with decode=True: the same batches as the PIL images
    # (on the CPU the decode is Pillow's, pixel for pixel), the recipe's draws alike.
    kwargs = dict(batch_size=4, device="cpu", num_workers=0, is_training=training, seed=3,
                  interpolation="bicubic", auto_augment="rand-m9-mstd0.5-inc1" if training else None)
    files, images = JpegFiles(), PilImages()
    with Image.open(io.BytesIO(files.files[0])) as f:
        decoded0 = np.asarray(f.convert("RGB"))
    images.arrays = [np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for b in files.files]
    assert np.array_equal(images.arrays[0], decoded0)
    with create_loader(files, 24, decode=True, **kwargs) as loader:
        assert files.transform is encoded_to_uint8
        torch.manual_seed(5)  # (the training order: the RandomSampler's seed is drawn from it)
        got = [x.clone() for x, _ in loader]
    with create_loader(images, 24, **kwargs) as loader:
        torch.manual_seed(5)
        expected = [x.clone() for x, _ in loader]
    assert len(got) == len(expected) >= 2
    for a, b in zip(got, expected):
        assert torch.equal(a, b)


def test_eval_batches_equal_the_recipe_on_the_images_in_order():
    ds = PilImages()
    with create_loader(ds, 24, batch_size=4, device="cpu", num_workers=0, crop_pct=0.9,
                       interpolation="bicubic") as loader:
        assert isinstance(loader, PrefetchLoader) and ds.transform is image_to_uint8
        assert len(loader) == 3 and loader.dataset is ds and not loader.mixup_enabled
        assert isinstance(loader.sampler, torch.utils.data.SequentialSampler)
        got = [(x.clone(), y.clone()) for x, y in loader]
    recipe = create_transform(24, crop_pct=0.9, interpolation="bicubic")
    for k, (x, y) in enumerate(got):
        images = [torch.from_numpy(a) for a in ds.arrays[4 * k:4 * k + 4]]
        want = recipe((prefetch.Ragged.from_tensors(images), torch.arange(4)), epoch=0, index=k)[0]
        assert torch.equal(x, want)
        assert torch.equal(y, torch.tensor([(4 * k + i) % 5 for i in range(4)]))


def test_training_shuffles_drops_the_last_batch_and_erases():
    ds = PilImages(n=10)
    with create_loader(ds, 16, batch_size=4, is_training=True, device="cpu", num_workers=0,
                       interpolation="random", re_prob=1.0, re_mode="const", seed=3,
                       fp16=True) as loader:
        assert isinstance(loader.sampler, torch.utils.data.RandomSampler) and len(loader) == 2
        batches = [x for x, _ in loader]
    assert len(batches) == 2
    for x in batches:
        assert x.shape == (4, 3, 16, 16) and x.dtype == torch.float16
        assert bool((x == 0).flatten(1).any(1).all())  # every image erased with zeros


def test_timms_mixup_is_compiled_with_its_switch():
    ds = PilImages(n=8)
    kw = dict(batch_size=4, is_training=True, device="cpu", num_workers=0, seed=5, hflip=0.0,
              color_jitter=None)
    with create_loader(ds, 16, collate_fn=timm_mixup(), **kw) as loader:
        assert loader.mixup_enabled
        mixed = [(x.clone(), y.clone()) for x, y in loader]
        loader.mixup_enabled = False
        assert not loader.mixup_enabled
        off = [(x.clone(), y.clone()) for x, y in loader]
    for _, y in mixed + off:
        assert y.shape == (4, 5) and torch.allclose(y.sum(1), torch.ones(4))
    one_hot = torch.tensor([0.1 / 5, 1.0 - 0.1 + 0.1 / 5])

    def smoothed_one_hot(y):
        return bool(torch.isclose(y.reshape(-1, 1), one_hot, atol=1e-6).any(1).all())

    for _, y in off:  # switched off: timm's smoothed one-hot targets, lam = 1
        assert smoothed_one_hot(y)
    assert not all(smoothed_one_hot(y) for _, y in mixed)


def test_the_erasing_follows_the_mix_as_timms_prefetch_loader_erases_the_mixed_batch():
    """timm mixes in its collate and erases in its PrefetchLoader: an erased box is the fill
    exactly, never blended into another image by the mix (with re_split the first half is clean)."""
    ds = PilImages(n=8)
    kw = dict(batch_size=8, is_training=True, device="cpu", num_workers=0, seed=2, hflip=0.0,
              color_jitter=None, re_prob=1.0, re_mode="const")
    with create_loader(ds, 16, collate_fn=timm_mixup(mixup_alpha=1.0, cutmix_alpha=0.0), **kw) as loader:
        (x, y), = [(x.clone(), y.clone()) for x, y in loader]
    assert y.shape == (8, 5)
    assert bool((x == 0).flatten(1).any(1).all())  # every image has its box of exact zeros
    with create_loader(ds, 16, collate_fn=timm_mixup(mixup_alpha=1.0, cutmix_alpha=0.0), re_split=True,
                       **kw) as loader:
        (x, _), = [(x.clone(), y.clone()) for x, y in loader]
    zeros = (x == 0).flatten(1).any(1)
    assert not bool(zeros[:4].any()) and bool(zeros[4:].all())


class Stream(torch.utils.data.IterableDataset):
    def __init__(self):
        self.inner = PilImages(n=6)
        self.transform = None

    def __iter__(self):
        for i in range(len(self.inner)):
            yield self.transform(Image.fromarray(self.inner.arrays[i])), i


def test_an_iterable_dataset_is_neither_shuffled_nor_sampled_as_timms():
    with create_loader(Stream(), 16, batch_size=2, is_training=True, distributed=False, device="cpu",
                       num_workers=0, seed=0) as loader:
        labels = torch.cat([y for _, y in loader])
    assert labels.tolist() == list(range(6))


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(use_prefetcher=False), ValueError, "use_prefetcher=False is timm's own loader"),
    (dict(num_aug_splits=2), ValueError, "num_aug_splits=2 is not compiled"),
    (dict(num_aug_repeats=3), ValueError, "num_aug_repeats=3 is not compiled"),
    (dict(use_multi_epochs_loader=True), ValueError, "use_multi_epochs_loader is not needed"),
    (dict(collate_fn=torch.utils.data.default_collate), ValueError,
     "collate_fn must be None or timm's FastCollateMixup"),
    (dict(input_size_choices=[16, 24]), ValueError, "input_size_choices"),
    (dict(collate_fn=types.SimpleNamespace(mixup_alpha=1.0)), ValueError, "FastCollateMixup"),
])
def test_what_is_not_compiled_is_refused(kwargs, error, match):
    with pytest.raises(error, match=match):
        create_loader(PilImages(n=2), 16, batch_size=2, device="cpu", num_workers=0, **kwargs)
    with pytest.raises(TypeError, match="has no transform attribute"):
        create_loader(torch.utils.data.TensorDataset(torch.zeros(2)), 16, batch_size=2, device="cpu")


def test_timms_own_fast_collate_mixup_where_installed():
    mixup = pytest.importorskip("timm.data.mixup")
    theirs = mixup.FastCollateMixup(mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1, num_classes=5)
    with create_loader(PilImages(n=4), 16, batch_size=4, is_training=True, device="cpu", num_workers=0,
                       collate_fn=theirs, seed=1) as loader:
        assert loader.mixup_enabled
        (x, y), = [(x.clone(), y.clone()) for x, y in loader]
    assert y.shape == (4, 5)
