"""prefetch.ops.decode_jpeg / jpeg_sizes / decode_resized_crop against an independent reference:
JPEGs encoded here by Pillow, decoded by Pillow (``Image.open(f).convert("RGB")``) and cropped with
numpy; decode_resized_crop against a float64 pure-torch resampling of Pillow's decode.

Skipped when the extension was built without libjpeg-turbo, unless PREFETCH_REQUIRE_EXTRAS=1 (CI,
as scripts/install.sh reads it): a build without the decoder then fails here instead."""
import io
import os

import numpy as np
import pytest
import torch

import prefetch
from prefetch import Ragged
from prefetch.ops import decode_jpeg, decode_resized_crop, jpeg_sizes, resized_crop

from .. import reference
from ..conftest import require_cuda

Image = pytest.importorskip("PIL.Image")  # the [test] extra brings Pillow

REQUIRE_EXTRAS = os.environ.get("PREFETCH_REQUIRE_EXTRAS", "0") == "1"
WITH_JPEG = prefetch.built_with_jpeg()


@pytest.fixture(autouse=True)
def _needs_the_decoder(request):
    """Every test but the one about a build without the decoder needs libjpeg-turbo."""
    if WITH_JPEG or request.node.originalname == "test_a_build_without_libjpeg_says_how_to_get_it":
        return
    why = "prefetch was built without libjpeg-turbo (%s)" % torch.ops.prefetch._jpeg_decoder_library()
    if REQUIRE_EXTRAS:
        pytest.fail("PREFETCH_REQUIRE_EXTRAS=1 but " + why)
    pytest.skip(why)


@pytest.fixture
def two_threads():
    """The batch's samples are decoded on torch's intra-op threads: use more than one."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


# --- JPEGs made by Pillow ------------------------------------------------------------------------

def smooth(H, W, C=3, seed=0):
    """An HxWxC uint8 image that compresses like a photo: a small random image upscaled bicubically
    (plus a little noise, so that the high frequencies are not all zero)."""
    rng = np.random.default_rng(seed)
    bands = []
    for _ in range(C):
        small = rng.integers(0, 256, (H // 8 + 2, W // 8 + 2), dtype=np.uint8)
        bands.append(np.asarray(Image.fromarray(small, "L").resize((W, H), Image.BICUBIC)))
    x = np.stack(bands, -1).astype(np.int16) + rng.integers(-6, 7, (H, W, C))
    return np.clip(x, 0, 255).astype(np.uint8)


def encode(H, W, mode="RGB", seed=0, quality=90, **save):
    if mode == "CMYK":
        image = Image.fromarray(smooth(H, W, 4, seed), "CMYK")
    else:
        image = Image.fromarray(smooth(H, W, 3, seed), "RGB").convert(mode)
    f = io.BytesIO()
    image.save(f, "JPEG", quality=quality, **save)
    return f.getvalue()


def pillow_rgb(data):
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


# name -> (H, W, mode, Pillow's save options)
CASES = {
    "444": (37, 53, "RGB", dict(subsampling=0)),
    "422": (40, 61, "RGB", dict(subsampling=1)),
    "420": (45, 70, "RGB", dict(subsampling=2)),
    "420_large": (131, 197, "RGB", dict(subsampling=2, quality=75)),
    "gray": (33, 47, "L", {}),
    "gray_large": (83, 70, "L", {}),
    "cmyk": (29, 38, "CMYK", {}),
    "cmyk_large": (70, 45, "CMYK", {}),
    "progressive_420": (66, 50, "RGB", dict(subsampling=2, progressive=True)),
    "progressive_444": (41, 43, "RGB", dict(subsampling=0, progressive=True)),
    "progressive_gray": (52, 39, "L", dict(progressive=True)),
    "restart_blocks_420": (57, 75, "RGB", dict(subsampling=2, restart_marker_blocks=3)),
    "restart_rows_422": (64, 49, "RGB", dict(subsampling=1, restart_marker_rows=1)),
    "1x1_420": (1, 1, "RGB", dict(subsampling=2)),
    "1x1_gray": (1, 1, "L", {}),
    "1x40_420": (1, 40, "RGB", dict(subsampling=2)),
    "40x1_420": (40, 1, "RGB", dict(subsampling=2)),
    "1x23_444": (1, 23, "RGB", dict(subsampling=0)),
    "23x1_422": (23, 1, "RGB", dict(subsampling=1)),
    "2x2_420": (2, 2, "RGB", dict(subsampling=2)),
    "17x33_420": (17, 33, "RGB", dict(subsampling=2)),
    "17x33_422": (17, 33, "RGB", dict(subsampling=1)),
    "16x16_420": (16, 16, "RGB", dict(subsampling=2)),
    "9x15_progressive": (9, 15, "RGB", dict(subsampling=2, progressive=True)),
}


_ENCODED = {}


def jpeg(name):
    if name not in _ENCODED:
        H, W, mode, save = CASES[name]
        _ENCODED[name] = encode(H, W, mode, seed=len(_ENCODED) + 1, **save)
    return _ENCODED[name]


def test_the_test_jpegs_have_the_layouts_they_claim():
    """Pillow writes what the cases say: sampling factors, progressive, restart markers, CMYK."""
    def opened(name):
        return Image.open(io.BytesIO(jpeg(name)))

    assert [s[1:3] for s in opened("444").layer] == [(1, 1)] * 3
    assert [s[1:3] for s in opened("422").layer] == [(2, 1), (1, 1), (1, 1)]
    assert [s[1:3] for s in opened("420").layer] == [(2, 2), (1, 1), (1, 1)]
    assert opened("gray").mode == "L" and opened("cmyk").mode == "CMYK"
    assert opened("progressive_420").info.get("progressive") and opened("progressive_444").info.get("progressive")
    assert not opened("420").info.get("progressive")
    for name in ("restart_blocks_420", "restart_rows_422"):
        data = jpeg(name)
        assert b"\xff\xdd" in data and b"\xff\xd0" in data, name  # DRI, and RST0 in the scan
    assert b"\xff\xdd" not in jpeg("420")


# --- whole images and regions --------------------------------------------------------------------

@pytest.mark.parametrize("name", list(CASES))
def test_full_decode_equals_pillow(name):
    data = jpeg(name)
    expected = pillow_rgb(data)
    out = decode_jpeg([data])
    assert isinstance(out, Ragged) and len(out) == 1
    assert out.dtype == torch.uint8 and out.device.type == "cpu"
    assert out.shapes() == [expected.shape]
    assert out.sizes.tolist() == [list(expected.shape)] and out.offsets.tolist() == [0]
    np.testing.assert_array_equal(out[0].numpy(), expected)


def test_jpeg_sizes_equal_pillow():
    names = list(CASES)
    data = [jpeg(n) for n in names]
    sizes = jpeg_sizes(data)
    assert sizes.dtype == torch.int64 and sizes.shape == (len(names), 3)
    for n, name in enumerate(names):
        with Image.open(io.BytesIO(data[n])) as image:
            W, H = image.size
        assert sizes[n].tolist() == [H, W, 3], name
    # From a Ragged too; they are the sizes of decode_jpeg's output.
    assert torch.equal(jpeg_sizes(Ragged.from_tensors([torch.frombuffer(bytearray(d), dtype=torch.uint8)
                                                       for d in data])), sizes)
    assert torch.equal(decode_jpeg(data).sizes, sizes)
    # From the header alone: a stream cut in its entropy-coded data still has them.
    cut = [d[:d.index(b"\xff\xda") + 40] for d in data]
    assert torch.equal(jpeg_sizes(cut), sizes)


def edge_boxes(H, W, g):
    """Boxes touching every edge and corner, one-pixel boxes everywhere, full rows and columns,
    boxes starting and ending on and beside iMCU boundaries (8 and 16 pixels), and random ones."""
    def rnd(lo, hi):  # inclusive
        return int(torch.randint(lo, hi + 1, (1,), generator=g))

    boxes = {(0, 0, H, W)}
    for t, l in [(0, 0), (0, W - 1), (H - 1, 0), (H - 1, W - 1), (H // 2, W // 2)]:
        boxes.add((t, l, 1, 1))  # one pixel at each corner and the centre
    for _ in range(12):
        boxes.add((rnd(0, H - 1), rnd(0, W - 1), 1, 1))
    boxes.add((0, 0, 1, W))                      # the first row, the last row, a middle row
    boxes.add((H - 1, 0, 1, W))
    boxes.add((H // 2, 0, 1, W))
    boxes.add((0, 0, H, 1))                      # the first column, the last, a middle one
    boxes.add((0, W - 1, H, 1))
    boxes.add((0, W // 2, H, 1))
    for _ in range(4):                           # touching each edge, other sides random
        h, w = rnd(1, H), rnd(1, W)
        boxes.add((0, rnd(0, W - w), h, w))          # top
        boxes.add((H - h, rnd(0, W - w), h, w))      # bottom
        boxes.add((rnd(0, H - h), 0, h, w))          # left
        boxes.add((rnd(0, H - h), W - w, h, w))      # right
        boxes.add((H - h, W - w, h, w))              # bottom-right corner
    for b in (7, 8, 9, 15, 16, 17, 23, 24, 25, 31, 32, 33, 47, 48, 49):  # around iMCU boundaries
        if b < H:
            boxes.add((b, 0, rnd(1, H - b), W))
            boxes.add((0, 0, b, W))
            boxes.add((b, rnd(0, W - 1), 1, 1))
        if b < W:
            boxes.add((0, b, H, rnd(1, W - b)))
            boxes.add((0, 0, H, b))
            boxes.add((rnd(0, H - 1), b, 1, 1))
    for _ in range(30):
        h, w = rnd(1, H), rnd(1, W)
        boxes.add((rnd(0, H - h), rnd(0, W - w), h, w))
    return sorted(boxes)


@pytest.mark.parametrize("name", list(CASES))
def test_regions_equal_crops_of_the_full_decode(name):
    data = jpeg(name)
    full = pillow_rgb(data)
    H, W = full.shape[:2]
    boxes = edge_boxes(H, W, torch.Generator().manual_seed(H * 1000 + W))
    out = decode_jpeg([data] * len(boxes), boxes)  # one box per copy of the image
    assert len(out) == len(boxes)
    assert out.sizes.tolist() == [[h, w, 3] for _, _, h, w in boxes]
    regions = out.tensors()
    for n, (t, l, h, w) in enumerate(boxes):
        got = regions[n].numpy()
        if not np.array_equal(got, full[t:t + h, l:l + w]):
            diff = np.argwhere(got != full[t:t + h, l:l + w])[0]
            pytest.fail("%s: region (top=%d, left=%d, height=%d, width=%d) differs from the crop of "
                        "the full decode, first at (y, x, c) = %s" % (name, t, l, h, w, diff.tolist()))
    # The regions are packed one after another, without padding.
    counts = [h * w * 3 for _, _, h, w in boxes]
    assert out.values.numel() == sum(counts)
    assert out.offsets.tolist() == np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist()


def test_boxes_as_a_tensor_of_any_integer_dtype_or_a_list():
    data = jpeg("420")
    boxes = [[3, 5, 20, 30], [0, 0, 1, 1]]
    expected = decode_jpeg([data, data], boxes)
    for as_tensor in (torch.tensor(boxes), torch.tensor(boxes, dtype=torch.int32),
                      torch.tensor(boxes, dtype=torch.int16), torch.tensor(boxes).t().contiguous().t(),
                      tuple(map(tuple, boxes))):
        got = decode_jpeg([data, data], as_tensor)
        assert torch.equal(got.values, expected.values) and torch.equal(got.sizes, expected.sizes)


def test_a_mixed_batch_on_two_threads(two_threads):
    """Every layout, whole and boxed, in one call: each sample equals its own Pillow reference,
    and the list, a Ragged of the same bytes and a Ragged with gaps between its samples (in
    another order) give the same bytes."""
    g = torch.Generator().manual_seed(7)
    data, boxes, expected = [], [], []
    for rep in range(3):
        for name in CASES:
            d = jpeg(name)
            full = pillow_rgb(d)
            H, W = full.shape[:2]
            if rep == 0:
                box = (0, 0, H, W)
            else:
                h = int(torch.randint(1, H + 1, (1,), generator=g))
                w = int(torch.randint(1, W + 1, (1,), generator=g))
                box = (int(torch.randint(0, H - h + 1, (1,), generator=g)),
                       int(torch.randint(0, W - w + 1, (1,), generator=g)), h, w)
            t, l, h, w = box
            data.append(d)
            boxes.append(box)
            expected.append(full[t:t + h, l:l + w])

    from_list = decode_jpeg(data, boxes)
    for n, region in enumerate(from_list.tensors()):
        np.testing.assert_array_equal(region.numpy(), expected[n], err_msg="sample %d" % n)

    tensors = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in data]
    from_ragged = decode_jpeg(Ragged.from_tensors(tensors), torch.tensor(boxes))
    assert torch.equal(from_ragged.values, from_list.values)
    assert torch.equal(from_ragged.offsets, from_list.offsets)
    assert torch.equal(from_ragged.sizes, from_list.sizes)

    # The samples in reverse order with a gap of junk before each: decode_jpeg reads each through
    # its offset and size.
    chunks, offsets, at = [], [0] * len(data), 0
    for n in reversed(range(len(data))):
        chunks.append(torch.full((n % 5 + 1,), 0xFF, dtype=torch.uint8))
        at += n % 5 + 1
        offsets[n] = at
        chunks.append(tensors[n])
        at += tensors[n].numel()
    gappy = Ragged(torch.cat(chunks), torch.tensor(offsets), torch.tensor([[t.numel()] for t in tensors]))
    from_gappy = decode_jpeg(gappy, boxes)
    assert torch.equal(from_gappy.values, from_list.values)
    assert torch.equal(jpeg_sizes(gappy), jpeg_sizes(data))


def test_list_items_of_every_accepted_kind_give_the_same_result():
    d = jpeg("422")
    as_tensor = torch.frombuffer(bytearray(d), dtype=torch.uint8)
    strided = torch.stack([as_tensor, torch.zeros_like(as_tensor)], 1)[:, 0]  # stride 2
    assert not strided.is_contiguous()
    kinds = [d, bytearray(d), memoryview(d), as_tensor, strided, as_tensor.clone()]
    out = decode_jpeg(kinds)
    expected = pillow_rgb(d)
    for region in out.tensors():
        np.testing.assert_array_equal(region.numpy(), expected)
    out = decode_jpeg(tuple(kinds))
    assert len(out) == len(kinds)


def test_the_empty_batch():
    out = decode_jpeg([])
    assert isinstance(out, Ragged) and len(out) == 0
    assert out.values.numel() == 0 and out.sizes.shape == (0, 3) and out.offsets.shape == (0,)
    assert len(decode_jpeg([], torch.zeros(0, 4, dtype=torch.int64))) == 0
    assert jpeg_sizes([]).shape == (0, 3)
    empty = Ragged(torch.empty(0, dtype=torch.uint8), torch.empty(0, dtype=torch.int64),
                   torch.empty(0, 1, dtype=torch.int64))
    assert len(decode_jpeg(empty)) == 0
    out = decode_resized_crop([], torch.zeros(0, 4, dtype=torch.int64), (5, 6), [0.5] * 3, [0.2] * 3)
    assert out.shape == (0, 3, 5, 6)


def test_the_empty_batch_through_the_ops():
    """The ops themselves take an empty batch."""
    values = torch.empty(0, dtype=torch.uint8)
    offsets, sizes = torch.empty(0, dtype=torch.int64), torch.empty(0, 1, dtype=torch.int64)
    assert torch.ops.prefetch.jpeg_sizes(values, offsets, sizes).shape == (0, 3)
    for boxes in (None, torch.zeros(0, 4, dtype=torch.int64)):
        v, o, s = torch.ops.prefetch.decode_jpeg(values, offsets, sizes, boxes)
        assert v.numel() == 0 and o.shape == (0,) and s.shape == (0, 3)


def test_trailing_bytes_decode_as_pillow_does():
    d = jpeg("420")
    assert d.endswith(b"\xff\xd9")
    for variant in (d + b"\x00" * 17, d + b"junk after the image"):
        out = decode_jpeg([variant])
        np.testing.assert_array_equal(out[0].numpy(), pillow_rgb(variant))


@pytest.mark.parametrize("cut", [1, 2])
def test_a_missing_end_marker_fails_exactly_where_pillow_fails(cut):
    """Without its last bytes, a stream decodes when the entropy decoder never reads them (then
    with Pillow's pixels) and is truncated otherwise, for Pillow as for decode_jpeg."""
    for name in CASES:
        variant = jpeg(name)[:-cut]
        try:
            expected = pillow_rgb(variant)
        except OSError:
            expected = None
        if expected is None:
            with pytest.raises(RuntimeError, match="sample 0 .*truncated"):
                decode_jpeg([variant])
        else:
            np.testing.assert_array_equal(decode_jpeg([variant])[0].numpy(), expected, err_msg=name)


@pytest.mark.cuda
def test_a_cuda_device_gets_the_same_pixels():
    require_cuda()
    device = torch.device("cuda", torch.cuda.current_device())
    data = [jpeg("420"), jpeg("gray"), jpeg("cmyk")]
    boxes = [[1, 2, 30, 40], [0, 0, 33, 47], [5, 6, 7, 8]]
    cpu = decode_jpeg(data, boxes)
    out = decode_jpeg(data, boxes, device=device)
    assert out.device == device and out.shapes() == cpu.shapes()
    # A GPU decoder (nvJPEG: its own IDCT, chroma upsampling and colour conversion) is close; the
    # CPU decoder, when no GPU decoder is installed, is exact. "Close", measured on an H200
    # (torchvision 0.26's nvJPEG): mean 6.5 levels from libjpeg on this noisy 4:2:0 image, as
    # far as torchvision's own decode_jpeg(device="cuda") is (tests/ops/test_gpu_decoders.py
    # holds the GPU path to that decoder exactly).
    close = prefetch.ops.gpu_jpeg_decoder() != "cpu"
    for a, b in zip(out.tensors(), cpu.tensors()):
        if close:
            assert (a.cpu().int() - b.int()).abs().float().mean() < 10
        else:
            assert torch.equal(a.cpu(), b)


# --- decode_resized_crop -------------------------------------------------------------------------

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
EPS = {torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}
F32_TOL = 5e-6  # tests/ops/test_resized_crop.py: float32 blends of a float64 reference


def resized_reference(data, boxes, size, hflip, vflip, antialias):
    """resized_crop's float64 reference (tests/reference.py) of Pillow's decode."""
    images = [torch.from_numpy(pillow_rgb(d).copy()) for d in data]
    boxes = [[int(v) for v in b] for b in boxes]
    return reference.resized_reference(images, boxes, size, MEAN, STD, hflip, vflip, antialias)


def assert_matches(out, ref, dtype):
    out = out.double()
    assert out.shape == ref.shape
    err = (out - ref).abs()
    bound = F32_TOL * ref.abs().clamp(min=1.0)
    if dtype != torch.float32:
        bound = bound + ref.abs() * EPS[dtype]
    assert bool((err <= bound).all()), "max excess error %g" % float((err - bound).max())


RESIZE_NAMES = ["444", "422", "420_large", "gray", "cmyk", "progressive_420", "restart_blocks_420",
                "1x1_420", "1x40_420", "40x1_420", "17x33_420"]


def resize_batch(seed):
    g = torch.Generator().manual_seed(seed)
    data, boxes = [], []
    for name in RESIZE_NAMES:
        H, W = CASES[name][:2]
        for kind in range(3):
            if kind == 0:
                box = (0, 0, H, W)
            elif kind == 1:
                box = (H - 1, W - 1, 1, 1) if H * W > 1 else (0, 0, 1, 1)
            else:
                h = int(torch.randint(1, H + 1, (1,), generator=g))
                w = int(torch.randint(1, W + 1, (1,), generator=g))
                box = (int(torch.randint(0, H - h + 1, (1,), generator=g)),
                       int(torch.randint(0, W - w + 1, (1,), generator=g)), h, w)
            data.append(jpeg(name))
            boxes.append(box)
    N = len(data)
    hflip = torch.rand(N, generator=g) < 0.5
    vflip = torch.rand(N, generator=g) < 0.5
    return data, boxes, hflip, vflip


@pytest.mark.parametrize("antialias", [False, True])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_decode_resized_crop_equals_the_float64_reference(two_threads, dtype, channels_last, antialias):
    data, boxes, hflip, vflip = resize_batch(seed=3)
    for size in [(11, 14), (1, 1), (24, 1), (40, 33)]:
        out = decode_resized_crop(data, boxes, size, MEAN, STD, hflip=hflip, vflip=vflip, dtype=dtype,
                                  channels_last=channels_last, antialias=antialias)
        assert out.dtype == dtype and out.device.type == "cpu" and out.shape == (len(data), 3, *size)
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        assert out.is_contiguous(memory_format=fmt)
        assert_matches(out, resized_reference(data, boxes, size, hflip, vflip, antialias), dtype)


def test_decode_resized_crop_equals_resized_crop_of_the_full_decode():
    """Decoding only the boxes changes no bit of the result."""
    data, boxes, hflip, vflip = resize_batch(seed=4)
    boxes = torch.tensor(boxes)
    for antialias, dtype in [(False, torch.float32), (True, torch.float32), (True, torch.bfloat16)]:
        fused = decode_resized_crop(data, boxes, (13, 9), MEAN, STD, hflip=hflip, vflip=vflip,
                                    dtype=dtype, antialias=antialias)
        twostep = resized_crop(decode_jpeg(data), boxes, (13, 9), MEAN, STD, hflip=hflip, vflip=vflip,
                               dtype=dtype, antialias=antialias)
        assert torch.equal(fused, twostep)
    # Without flips, with the defaults (antialias=True, as torchvision's v2 transforms).
    out = decode_resized_crop(data, boxes.tolist(), (8, 8), MEAN, STD)
    assert_matches(out, resized_reference(data, boxes.tolist(), (8, 8), None, None, True), torch.float32)


def test_decode_resized_crop_is_the_same_on_one_thread_and_from_a_ragged():
    """Samples are taken by whichever thread is free: the result does not depend on it."""
    data, boxes, hflip, vflip = resize_batch(seed=5)
    kwargs = dict(hflip=hflip, vflip=vflip, dtype=torch.bfloat16, antialias=True, channels_last=True)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = decode_resized_crop(data, boxes, (17, 12), MEAN, STD, **kwargs)
        torch.set_num_threads(2)
        two = decode_resized_crop(data, boxes, (17, 12), MEAN, STD, **kwargs)
        ragged = Ragged.from_tensors([torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in data])
        from_ragged = decode_resized_crop(ragged, torch.tensor(boxes, dtype=torch.int32), (17, 12), MEAN,
                                          STD, **kwargs)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two) and torch.equal(one, from_ragged)


def test_decode_resized_crop_checks_its_arguments():
    data = [jpeg("420"), jpeg("gray")]  # 45 x 70, 33 x 47
    boxes = [[0, 0, 5, 5], [1, 1, 4, 4]]

    def call(**changes):
        args = dict(boxes=boxes, size=(4, 4), mean=MEAN, std=STD)
        args.update(changes)
        return decode_resized_crop(data, args.pop("boxes"), args.pop("size"), args.pop("mean"),
                                   args.pop("std"), **args)

    for changes, message in [
        (dict(mean=MEAN[:2], std=STD[:2]), "RGB: mean and std need 3 values, got 2"),
        (dict(mean=MEAN + [0.5], std=STD + [0.5]), "need 3 values, got 4"),
        (dict(boxes=[[0, 0, 5, 5]]), r"decode_resized_crop: boxes must have shape \[N, 4\] = \[2, 4\]"),
        (dict(boxes=torch.zeros(2, 4)), "decode_resized_crop: boxes must be an integer tensor"),
        (dict(boxes=[[0, 0, 5, 5], [0, 0, 34, 1]]),
         r"decode_resized_crop: boxes\[1\] .* sample 1's image of H x W = 33 x 47"),
        (dict(hflip=torch.tensor([True])), r"hflip must have shape \[N\] = \[2\]"),
        (dict(vflip=torch.tensor([1.0, 0.0])), "vflip must be a bool tensor"),
        (dict(size=(0, 4)), "size must be"),
        (dict(dtype=torch.float64), "dtype must be"),
        (dict(std=[0.0, 1.0, 1.0]), "std"),
    ]:
        with pytest.raises(RuntimeError, match=message):
            call(**changes)
    assert call().shape == (2, 3, 4, 4)


# --- errors --------------------------------------------------------------------------------------

def good_batch():
    return [jpeg("420"), jpeg("gray"), jpeg("progressive_444"), jpeg("444"), jpeg("cmyk")]


def bad_streams():
    base, prog = jpeg("420_large"), jpeg("progressive_420")
    return {
        "empty": b"",
        "not_a_jpeg": b"GIF89a, certainly not a JPEG" * 3,
        "png_magic": b"\x89PNG\r\n\x1a\n" + bytes(100),
        "only_soi": b"\xff\xd8",
        "header_only": base[:60],
        "truncated_scan": base[:len(base) * 2 // 3],
        "truncated_last_bytes": base[:-40],
        "truncated_progressive": prog[:len(prog) * 2 // 3],
        "garbage_after_soi": b"\xff\xd8" + bytes(range(256)) * 4,
    }


def bottom_right_pixel(data):
    try:
        with Image.open(io.BytesIO(data)) as image:
            W, H = image.size
    except Exception:  # noqa: BLE001  (not even a JPEG header: any box)
        return [0, 0, 1, 1]
    return [H - 1, W - 1, 1, 1]


@pytest.mark.parametrize("kind", list(bad_streams()))
def test_a_bad_stream_names_its_sample_and_the_next_call_works(two_threads, kind):
    bad = bad_streams()[kind]
    data = good_batch()
    data[3] = bad
    with pytest.raises(RuntimeError, match=r"sample 3\b") as info:
        decode_jpeg(data)
    assert "decode_jpeg" in str(info.value)
    # Pillow refuses these streams too (an independent check that they are bad).
    with pytest.raises(Exception):
        pillow_rgb(bad)
    # A Ragged input, and decode_resized_crop, name the same sample.
    with pytest.raises(RuntimeError, match=r"sample 3\b"):
        decode_jpeg(Ragged.from_tensors([torch.tensor(list(d), dtype=torch.uint8) for d in data]))
    # (With the bottom-right pixel as the box: the rows below a box are never decoded, so a box
    # above the point where a stream is cut decodes.)
    with pytest.raises(RuntimeError, match=r"sample 3\b"):
        decode_resized_crop(data, [bottom_right_pixel(d) for d in data], (4, 4), MEAN, STD)
    # After the error, the same decoder works.
    good = good_batch()
    out = decode_jpeg(good)
    for n, d in enumerate(good):
        np.testing.assert_array_equal(out[n].numpy(), pillow_rgb(d))


@pytest.mark.parametrize("kind", ["empty", "not_a_jpeg", "png_magic", "only_soi", "header_only",
                                  "garbage_after_soi"])
def test_jpeg_sizes_of_a_bad_header_names_its_sample(kind):
    data = good_batch()
    data[3] = bad_streams()[kind]
    with pytest.raises(RuntimeError, match=r"jpeg_sizes: sample 3\b"):
        jpeg_sizes(data)
    assert jpeg_sizes(good_batch()).shape == (5, 3)


def test_the_first_failing_sample_is_named_when_several_fail():
    data = good_batch()
    data[1] = b"nope"
    data[4] = b""
    with pytest.raises(RuntimeError, match=r"sample (1|4)\b"):  # either: they decode in parallel
        decode_jpeg(data)
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread decodes in order: sample 1 fails first
    try:
        with pytest.raises(RuntimeError, match=r"sample 1\b"):
            decode_jpeg(data)
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("box", [
    (-1, 0, 5, 5), (0, -1, 5, 5), (0, 0, 0, 5), (0, 0, 5, 0), (0, 0, -3, 5),
    (0, 0, 46, 70), (0, 0, 45, 71), (45, 0, 1, 1), (0, 70, 1, 1), (40, 60, 6, 5), (40, 60, 5, 11),
    (2 ** 62, 0, 1, 1), (0, 0, 2 ** 62, 2 ** 62), (-(2 ** 63), 0, 1, 1), (1, 1, 2 ** 63 - 1, 1)])
def test_a_box_outside_its_image_names_the_sample(box):
    data = good_batch()
    data[3] = jpeg("420")  # 45 x 70
    boxes = [[0, 0, 1, 1]] * 5
    boxes[3] = list(box)
    with pytest.raises(RuntimeError, match=r"boxes\[3\].*sample 3's image of H x W = 45 x 70"):
        decode_jpeg(data, torch.tensor(boxes))
    # The largest box that fits is fine, and the next call works.
    boxes[3] = [0, 0, 45, 70]
    assert decode_jpeg(data, boxes).shapes()[3] == (45, 70, 3)


def test_wrong_inputs_say_what_was_expected():
    d = jpeg("420")
    t = torch.frombuffer(bytearray(d), dtype=torch.uint8)
    for bad, message in [
        (d, "list of bytes"),                                    # bytes, not a list of them
        (t, r"\[N, L\] uint8 .* a 1-D tensor is one file: pass \[data\]"),  # one file's tensor
        (t.view(1, 1, -1), r"\[N, L\] uint8 .* 3-D uint8"),    # [N, L] is N files of L bytes
        ("a path.jpg", "list of bytes"),
        (None, "list of bytes"),
        ([d, 3], "encoded image 1 must be bytes or a 1-D uint8 tensor, got an int"),
        ([d, t.float()], "encoded image 1 .* float32 tensor"),
        ([t.view(1, -1)], "encoded image 0 .* uint8 tensor of shape \\[1, %d\\]" % len(d)),
        ([t.view(torch.int8)], "encoded image 0 .* int8"),
        (Ragged.from_tensors([t.float()]), "Ragged of 1-D uint8 samples.*float32"),
        (Ragged.from_tensors([t.view(-1, 1)]), "Ragged of 1-D uint8 samples.*rank 2"),
    ]:
        for fn in (decode_jpeg, jpeg_sizes):
            with pytest.raises(TypeError, match=message):
                fn(bad)
    # Boxes of the wrong dtype, shape or count.
    for boxes, message in [
        (torch.zeros(1, 4), "boxes must be an integer tensor"),
        (torch.zeros(1, 4, dtype=torch.bool), "boxes must be an integer tensor"),
        (torch.zeros(2, 4, dtype=torch.int64), r"boxes must have shape \[N, 4\] = \[1, 4\], got \[2, 4\]"),
        (torch.zeros(1, 3, dtype=torch.int64), r"\[1, 4\], got \[1, 3\]"),
        (torch.zeros(4, dtype=torch.int64), r"\[1, 4\], got \[4\]"),
    ]:
        with pytest.raises(RuntimeError, match=message):
            decode_jpeg([d], boxes)
    assert decode_jpeg([d], [[0, 0, 1, 1]]).shapes() == [(1, 1, 3)]


def test_the_ops_check_their_tables():
    d = torch.frombuffer(bytearray(jpeg("420")), dtype=torch.uint8)
    n = d.numel()
    off, size = torch.tensor([0]), torch.tensor([[n]])
    ops = torch.ops.prefetch
    for values, offsets, sizes, message in [
        (d.float(), off, size, "values must be a 1-D uint8 tensor"),
        (d.view(1, -1), off, size, "values must be a 1-D uint8 tensor"),
        (torch.stack([d, d], 1)[:, 0], off, size, "values must be contiguous"),
        (d, off.int(), size, "offsets must be a 1-D int64 tensor"),
        (d, off, size.int(), "sizes must be an int64 tensor"),
        (d, off, torch.tensor([[n, 1]]), "sizes must be an int64 tensor"),
        (d, torch.tensor([0, 0]), size, "offsets has 2 samples but sizes has 1"),
        (d, torch.tensor([1]), size, r"sample 0 \(offsets\[0\] = 1, sizes\[0\] = %d bytes\) does not lie" % n),
        (d, torch.tensor([-1]), torch.tensor([[4]]), "sample 0 .* does not lie inside"),
        (d, off, torch.tensor([[-1]]), "sample 0 .* does not lie inside"),
        (d, torch.tensor([n + 1]), torch.tensor([[0]]), "does not lie inside"),
        (d, torch.tensor([2 ** 62]), torch.tensor([[2 ** 62]]), "does not lie inside"),
    ]:
        with pytest.raises(RuntimeError, match=message):
            ops.decode_jpeg(values, offsets, sizes)
        with pytest.raises(RuntimeError, match=message):
            ops.jpeg_sizes(values, offsets, sizes)
    # The [N] form of sizes is accepted too, and a sample of 0 bytes at the very end is an error
    # about the stream, not the tables.
    v, o, s = ops.decode_jpeg(d, off, torch.tensor([n]))
    assert s.tolist() == [[45, 70, 3]]
    with pytest.raises(RuntimeError, match=r"sample 0 .*empty input"):
        ops.decode_jpeg(d, torch.tensor([n]), torch.tensor([0]))


def test_a_build_without_libjpeg_says_how_to_get_it():
    if WITH_JPEG:
        pytest.skip("this build has libjpeg-turbo")
    assert "not found" in torch.ops.prefetch._jpeg_decoder_library()
    for fn in (decode_jpeg, jpeg_sizes):
        with pytest.raises(RuntimeError, match="libjpeg-turbo"):
            fn([b"\xff\xd8\xff"])


def test_boxes_that_are_not_n_by_4_integers_are_refused_by_name():
    data = [encode(12, 10)]
    with pytest.raises(TypeError, match="boxes must be an integer"):
        decode_resized_crop(data, None, (4, 4), [0.5] * 3, [0.2] * 3)
    with pytest.raises(ValueError, match=r"boxes must have shape \[N, 4\].*\[1, 3\]"):
        decode_jpeg(data, [[0, 0, 1]])


def _encoded_tables(files):
    r = prefetch.ops.decode.encoded_batch(files)
    offsets, sizes = r.host_tables()
    return r.values, offsets, sizes


def test_opcheck_of_the_ops_with_a_fixed_output_shape():
    values, offsets, sizes = _encoded_tables([encode(30, 41, seed=1), encode(17, 9, seed=2)])
    boxes = torch.tensor([[1, 2, 20, 30], [0, 0, 17, 9]])
    torch.library.opcheck(torch.ops.prefetch.jpeg_sizes.default, (values, offsets, sizes))
    for kwargs in ({}, {"hflip": torch.tensor([True, False]), "dtype": torch.bfloat16,
                        "channels_last": True, "antialias": True}):
        torch.library.opcheck(torch.ops.prefetch.decode_resized_crop.default,
                              (values, offsets, sizes, boxes, [8, 6], [0.5] * 3, [0.25] * 3), kwargs)


def test_torch_compile_fullgraph_of_decode_resized_crop():
    values, offsets, sizes = _encoded_tables([encode(30, 41, seed=1), encode(17, 9, seed=2)])
    boxes = torch.tensor([[1, 2, 20, 30], [0, 0, 17, 9]])

    def step(v, o, s, b):
        x = torch.ops.prefetch.decode_resized_crop(v, o, s, b, [8, 6], [0.5] * 3, [0.25] * 3)
        return x * 2

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(values, offsets, sizes, boxes), step(values, offsets, sizes, boxes),
                               rtol=0, atol=0)
