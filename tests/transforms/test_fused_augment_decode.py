"""FusedAugment(decode=True) through the Prefetcher: encoded JPEGs in, the same batches out as
Pillow's decode followed by FusedAugment(random_resized_crop=...) with the same seed (the windows
are drawn from the headers' sizes, which equal the decoded sizes), with and without workers."""
import io
import os

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import prefetch

Image = pytest.importorskip("PIL.Image")

if not prefetch.built_with_jpeg():
    if os.environ.get("PREFETCH_REQUIRE_EXTRAS", "0") == "1":
        raise RuntimeError("PREFETCH_REQUIRE_EXTRAS=1 but prefetch was built without libjpeg-turbo")
    pytest.skip("prefetch was built without libjpeg-turbo", allow_module_level=True)

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def jpeg(h, w, seed, mode="RGB", **save):
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)
    img = Image.fromarray(small).resize((w, h), Image.BICUBIC).convert(mode)
    out = io.BytesIO()
    img.save(out, format="JPEG", **save)
    return out.getvalue()


def pillow_rgb(data):
    with Image.open(io.BytesIO(data)) as f:
        return torch.from_numpy(np.array(f.convert("RGB")))


FILES = [jpeg(40 + 7 * k, 90 - 5 * k, k, **({"progressive": True} if k % 4 == 1 else {}))
         for k in range(12)] + [jpeg(33, 47, 99, mode="L"), jpeg(50, 41, 98, mode="CMYK")]


class EncodedFiles(Dataset):
    """Module level: spawn and forkserver workers pickle it."""

    def __init__(self, files, decoded=False):
        self.files, self.decoded = files, decoded

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        data = self.files[i]
        x = pillow_rgb(data) if self.decoded else torch.frombuffer(bytearray(data), dtype=torch.uint8)
        return x, i


def run(files, aug, decoded, workers=0, batch_size=5):
    loader = DataLoader(EncodedFiles(files, decoded), batch_size=batch_size, num_workers=workers,
                        collate_fn=prefetch.collate.samples)
    with prefetch.Prefetcher(loader, device="cpu", transform=aug) as pf:
        return [(x.clone(), y.clone()) for x, y in pf]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decoding_in_the_transform_equals_decoding_in_the_dataset(workers, dtype):
    kw = dict(random_resized_crop=(24, 32), hflip=0.5, vflip=0.3, dtype=dtype, seed=7)
    got = run(FILES, prefetch.FusedAugment(MEAN, STD, decode=True, **kw), decoded=False, workers=workers)
    want = run(FILES, prefetch.FusedAugment(MEAN, STD, **kw), decoded=True)
    assert len(got) == len(want) == 3
    for (x, y), (rx, ry) in zip(got, want):
        assert x.shape == rx.shape and x.dtype == dtype
        assert torch.equal(y, ry)
        assert torch.equal(x, rx)


@pytest.mark.parametrize("interpolation", ["bicubic", "random"])
def test_decoding_with_bicubic_or_random_interpolation(interpolation):
    kw = dict(random_resized_crop=(24, 32), hflip=0.5, seed=8, interpolation=interpolation)
    got = run(FILES, prefetch.FusedAugment(MEAN, STD, decode=True, **kw), decoded=False)
    want = run(FILES, prefetch.FusedAugment(MEAN, STD, **kw), decoded=True)
    bilinear = run(FILES, prefetch.FusedAugment(MEAN, STD, **dict(kw, interpolation="bilinear")),
                   decoded=True)
    for (x, _), (rx, _), (bx, _) in zip(got, want, bilinear):
        assert torch.equal(x, rx)
        assert not torch.equal(x, bx)


def test_validation_resize_and_center_crop_with_decode():
    kw = dict(crop=20, resize=24, center_crop=True, hflip=0.0, seed=1, channels_last=True)
    got = run(FILES, prefetch.FusedAugment(MEAN, STD, decode=True, **kw), decoded=False)
    want = run(FILES, prefetch.FusedAugment(MEAN, STD, **kw), decoded=True)
    for (x, _), (rx, _) in zip(got, want):
        assert x.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(x, rx)


def test_the_result_matches_a_float64_reference_of_pillows_decode():
    aug = prefetch.FusedAugment(MEAN, STD, decode=True, random_resized_crop=16, hflip=0.5, seed=3,
                                antialias=False)
    (x, _), = run(FILES[:4], aug, decoded=False, batch_size=4)
    sizes = [tuple(pillow_rgb(f).shape[:2]) for f in FILES[:4]]
    d = aug.draws(4, [s[0] for s in sizes], [s[1] for s in sizes], 0, 0, 0)
    mean, std = torch.tensor(MEAN, dtype=torch.float64), torch.tensor(STD, dtype=torch.float64)
    for n, f in enumerate(FILES[:4]):
        t, l, h, w = d.boxes[n].tolist()
        crop = pillow_rgb(f)[t:t + h, l:l + w].permute(2, 0, 1)[None].double()
        ref = torch.nn.functional.interpolate(crop, size=(16, 16), mode="bilinear", align_corners=False)[0]
        if d.hflip[n]:
            ref = ref.flip(-1)
        ref = (ref / 255 - mean[:, None, None]) / std[:, None, None]
        torch.testing.assert_close(x[n].double(), ref, atol=2e-5, rtol=0)


def test_a_bad_file_names_its_sample_and_the_next_epoch_works():
    files = FILES[:6]
    files[4] = b"not a jpeg at all"
    aug = prefetch.FusedAugment(MEAN, STD, decode=True, random_resized_crop=16, seed=0)
    loader = DataLoader(EncodedFiles(files), batch_size=3, collate_fn=prefetch.collate.samples)
    with prefetch.Prefetcher(loader, device="cpu", transform=aug) as pf:
        with pytest.raises(RuntimeError, match="sample 1 .*Not a JPEG file"):
            list(pf)
        loader.dataset.files = FILES[:6]
        assert [x.shape[0] for x, _ in pf] == [3, 3]


def test_decode_needs_a_resize_and_takes_no_masks():
    with pytest.raises(ValueError, match="random_resized_crop"):
        prefetch.FusedAugment(MEAN, STD, decode=True)
    with pytest.raises(ValueError, match="mask_key"):
        prefetch.FusedAugment(MEAN, STD, decode=True, random_resized_crop=8, mask_key=1)
    with pytest.raises(ValueError, match="3 values"):
        prefetch.FusedAugment((0.5,), (0.5,), decode=True, random_resized_crop=8)(
            [prefetch.Ragged.from_tensors([torch.frombuffer(bytearray(FILES[0]), dtype=torch.uint8)])])
    aug = prefetch.FusedAugment(MEAN, STD, decode=True, random_resized_crop=8)
    with pytest.raises(TypeError, match="encoded JPEGs"):
        aug([torch.zeros(2, 8, 8, 3, dtype=torch.uint8)])


def test_a_direct_call_decodes_a_list_of_byte_strings():
    aug = prefetch.FusedAugment(MEAN, STD, decode=True, random_resized_crop=12, seed=5)
    ref = prefetch.FusedAugment(MEAN, STD, random_resized_crop=12, seed=5)
    out = aug((FILES[:3], torch.arange(3)))
    want = ref((prefetch.Ragged.from_tensors([pillow_rgb(f) for f in FILES[:3]]), torch.arange(3)))
    assert torch.equal(out[0], want[0]) and torch.equal(out[1], want[1])


@pytest.mark.cuda
def test_on_a_gpu_the_decoded_windows_are_close_to_the_cpu_decoders():
    from ..conftest import require_cuda

    require_cuda()
    files = FILES[:-1]  # nvJPEG has no CMYK
    kw = dict(random_resized_crop=24, hflip=0.5, seed=2)
    loader = DataLoader(EncodedFiles(files), batch_size=13, collate_fn=prefetch.collate.samples)
    with prefetch.Prefetcher(loader, device="cuda", transform=prefetch.FusedAugment(MEAN, STD, decode=True, **kw)) as pf:
        (gpu, _), = list(pf)
    cpu = run(files, prefetch.FusedAugment(MEAN, STD, decode=True, **kw), decoded=False, batch_size=13)[0][0]
    assert gpu.device.type == "cuda" and gpu.shape == cpu.shape
    # nvJPEG's IDCT and chroma upsampling may differ from libjpeg's by a few levels
    assert (gpu.cpu() - cpu).abs().mean().item() < 4 / 255 / min(STD)
