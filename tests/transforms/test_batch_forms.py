"""Every form a collate makes of a field reaches every transform path (issue 43, item 3): a dense
tensor (``collate.samples`` stacks samples of one shape — a batch of one file, duplicate files),
a ``Ragged`` (samples of different shapes), a list or tuple (a user's collate, a ``Samples`` before
collation: tensors or numpy arrays), a batch of one and an empty batch — for FusedAugment with and
without decode, the crop and resizing paths, masks and v2 Compose (with and without a policy). The
reference is the same transform, at the same position, on the Ragged form (resizing paths) or on
the stacked tensor (the crop path); each path's empty batch gives an empty batch of the right
shape."""
import io

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import prefetch
from prefetch import FusedAugment, Ragged
from prefetch.transforms import v2 as T

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
POSITION = dict(epoch=1, index=3)


def jpeg(h, w, seed):
    Image = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(small).resize((w, h), Image.BICUBIC).save(out, format="JPEG")
    return out.getvalue()


def needs_jpeg():
    if not prefetch.built_with_jpeg():
        pytest.skip("prefetch was built without libjpeg-turbo")


def forms(samples):
    """The forms of one field's samples (all one shape): what each collate makes of them."""
    out = {"ragged": Ragged.from_tensors(samples), "list": list(samples), "tuple": tuple(samples),
           "numpy list": [s.numpy() for s in samples]}
    out["dense"] = torch.stack(samples)
    return out


def image_samples(n, h=20, w=18, c=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (h, w, c), dtype=torch.uint8, generator=g) for _ in range(n)]


PATHS = {
    "crop": lambda: FusedAugment(MEAN, STD, crop=12, padding=2, hflip=0.5, vflip=0.5, seed=4),
    "center crop": lambda: FusedAugment(MEAN, STD, crop=13, center_crop=True, seed=4),
    "random_resized_crop": lambda: FusedAugment(MEAN, STD, random_resized_crop=(10, 12), hflip=0.5, seed=4),
    "resize + center crop": lambda: FusedAugment(MEAN, STD, crop=11, resize=14, center_crop=True, seed=4),
    "v2": lambda: T.Compose([T.RandomResizedCrop(10), T.RandomHorizontalFlip(),
                             T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)], seed=4),
    "v2 policy": lambda: T.Compose([T.CenterCrop(12), T.TrivialAugmentWide(),
                                    T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD),
                                    T.RandomErasing(0.5)], seed=4),
}


def reference_form(path, samples):
    """The form each path's reference takes: the stacked batch where the path takes one size
    (its only form before), the Ragged where it resizes."""
    return Ragged.from_tensors(samples) if path in ("random_resized_crop", "resize + center crop",
                                                   "v2") else torch.stack(samples)


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("form", ["ragged", "list", "tuple", "numpy list", "dense"])
@pytest.mark.parametrize("n", [1, 3])
def test_every_form_of_the_image_leaf_reaches_every_path(path, form, n):
    samples = image_samples(n)
    want = PATHS[path]()((reference_form(path, samples), torch.arange(n)), **POSITION)[0]
    got = PATHS[path]()((forms(samples)[form], torch.arange(n)), **POSITION)[0]
    assert got.shape == want.shape and torch.equal(got, want), (path, form)


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("form", ["list", "tuple", "ragged"])
def test_an_empty_batch_gives_an_empty_batch(path, form):
    one = PATHS[path]()((reference_form(path, image_samples(1)), torch.arange(1)), **POSITION)[0]
    empty = {"list": [], "tuple": (), "ragged": Ragged(
        torch.empty(0, dtype=torch.uint8), torch.empty(0, dtype=torch.int64),
        torch.empty(0, 3, dtype=torch.int64))}[form]
    got = PATHS[path]()((empty, torch.arange(0)), **POSITION)[0]
    assert got.shape == (0,) + tuple(one.shape[1:]) and got.dtype == one.dtype


MASK_PATHS = {
    "crop": lambda: FusedAugment(MEAN, STD, crop=12, padding=2, hflip=0.5, vflip=0.5, mask_key=1,
                                 mask_fill=7, seed=4),
    "random_resized_crop": lambda: FusedAugment(MEAN, STD, random_resized_crop=(10, 12), hflip=0.5,
                                                mask_key=1, seed=4),
}


@pytest.mark.parametrize("path", sorted(MASK_PATHS))
@pytest.mark.parametrize("form", ["ragged", "list", "tuple", "numpy list", "dense"])
@pytest.mark.parametrize("n", [1, 3])
def test_every_form_of_the_mask_leaf_gets_its_images_geometry(path, form, n):
    samples = image_samples(n)
    g = torch.Generator().manual_seed(1)
    masks = [torch.randint(0, 30, (20, 18), dtype=torch.int16, generator=g) for _ in range(n)]
    images = reference_form(path, samples)
    want = MASK_PATHS[path]()((images, torch.stack(masks)), **POSITION)
    got = MASK_PATHS[path]()((images, forms(masks)[form]), **POSITION)
    assert torch.equal(got[0], want[0])
    assert got[1].dtype == want[1].dtype and torch.equal(got[1], want[1]), (path, form)


# ---- decode=True: the encoded leaf -------------------------------------------------------------

DECODE = {
    "random_resized_crop": lambda: FusedAugment(MEAN, STD, random_resized_crop=12, hflip=0.5,
                                                decode=True, seed=2),
    "resize + center crop": lambda: FusedAugment(MEAN, STD, crop=12, resize=14, center_crop=True,
                                                 decode=True, seed=2),
    "v2": lambda: T.Compose([T.Resize(14), T.CenterCrop(12), T.ToDtype(torch.float32, scale=True),
                             T.Normalize(MEAN, STD)], decode=True, seed=2),
}


def encoded_forms(files):
    tensors = [torch.frombuffer(bytearray(f), dtype=torch.uint8) for f in files]
    out = {"ragged": Ragged.from_tensors(tensors), "list": tensors, "tuple": tuple(tensors),
           "bytes": list(files), "numpy list": [np.frombuffer(f, dtype=np.uint8) for f in files]}
    if len({len(f) for f in files}) == 1:  # what collate.samples makes of files of one length
        out["dense"] = torch.stack(tensors)
    return out


@pytest.mark.parametrize("path", sorted(DECODE))
@pytest.mark.parametrize("files", ["one file", "duplicates", "different"])
def test_every_form_of_the_encoded_leaf_decodes(path, files):
    needs_jpeg()
    a, b = jpeg(30, 41, 0), jpeg(37, 29, 1)
    files = {"one file": [a], "duplicates": [a, a, a], "different": [a, b, a]}[files]
    all_forms = encoded_forms(files)
    want = DECODE[path]()((all_forms.pop("ragged"), torch.arange(len(files))), **POSITION)[0]
    for form, leaf in all_forms.items():
        got = DECODE[path]()((leaf, torch.arange(len(files))), **POSITION)[0]
        assert torch.equal(got, want), (path, form)
    # the windows are what FusedAugment reports for the batch, whatever its form
    aug = DECODE[path]()
    aug = aug.transforms[0] if not isinstance(aug, FusedAugment) else aug
    for form, leaf in encoded_forms(files).items():
        assert torch.equal(aug.draws_for((leaf,), (1, 3)).boxes,
                           aug.draws_for((encoded_forms(files)["ragged"],), (1, 3)).boxes), form


@pytest.mark.parametrize("path", sorted(DECODE))
@pytest.mark.parametrize("empty", [[], (), torch.empty(0, 5, dtype=torch.uint8)])
def test_an_empty_encoded_batch_gives_an_empty_batch(path, empty):
    needs_jpeg()
    got = DECODE[path]()((empty, torch.arange(0)), **POSITION)[0]
    assert got.shape == (0, 3, 12, 12)


class JpegBytes(torch.utils.data.Dataset):
    """The README's JpegBytes example, the files in memory."""

    def __init__(self, files):
        self.files = files

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        return torch.frombuffer(bytearray(self.files[i]), dtype=torch.uint8), i


def test_the_readme_example_with_a_last_batch_of_one_and_duplicate_files():
    """17 files at batch_size=16 (drop_last=False) left a last batch of one file, which
    collate.samples stacks into a dense [1, L] tensor: decode=True refused it."""
    needs_jpeg()
    files = [jpeg(24 + k % 3, 30 - k % 2, k % 4) for k in range(17)]
    aug = FusedAugment(MEAN, STD, random_resized_crop=16, hflip=0.5, decode=True, seed=0)
    loader = DataLoader(JpegBytes(files), batch_size=16, collate_fn=prefetch.collate.samples)
    with prefetch.Prefetcher(loader, device="cpu", transform=aug) as pf:
        got = [(x.clone(), y.clone()) for x, y in pf]
    assert [x.shape[0] for x, _ in got] == [16, 1]
    for index, (x, y) in enumerate(got):
        tensors = [torch.frombuffer(bytearray(files[i]), dtype=torch.uint8) for i in y.tolist()]
        want = aug((Ragged.from_tensors(tensors), y), epoch=0, index=index)[0]
        assert torch.equal(x, want)
