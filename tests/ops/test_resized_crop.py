"""prefetch.ops.resized_crop against a float64 reference written here: crop, F.interpolate in
float64, flip, normalize, one sample at a time. CPU cases must not import torchvision."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import prefetch
from prefetch import Ragged
from prefetch.ops import resized_crop

from ..reference import assert_close_across_devices
from ..reference import resized_reference as reference

MEAN = [0.485, 0.456, 0.406, 0.5, 0.3]
STD = [0.229, 0.224, 0.225, 0.25, 0.4]
EPS = {torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}
# float32: the op computes in float32 what the reference computes in float64. The sample positions
# are exact (computed in double), the weights are rounded to float and the blends are float sums of
# values up to 255: measured at most 1.3e-6 (relative from magnitude 1 up) over 400 random crops,
# where torch's own float32 F.interpolate is 2.6e-5 off the same reference. 5e-6 leaves room.
F32_TOL = 5e-6


def assert_matches(out, ref, dtype):
    out = out.cpu().double()
    assert out.shape == ref.shape
    err = (out - ref).abs()
    bound = F32_TOL * ref.abs().clamp(min=1.0)
    if dtype != torch.float32:
        bound = bound + ref.abs() * EPS[dtype]  # and one rounding of the float32 value to dtype
    assert bool((err <= bound).all()), "max error %g" % float((err - bound).max())


def random_images(shapes, C, g):
    return [torch.randint(0, 256, (H, W, C), dtype=torch.uint8, generator=g) for H, W in shapes]


def random_boxes(shapes, g):
    """Boxes anywhere: the whole image, one pixel, at each corner, and random ones."""
    boxes = []
    for i, (H, W) in enumerate(shapes):
        kind = i % 5
        if kind == 0:
            box = (0, 0, H, W)
        elif kind == 1:
            box = (int(torch.randint(0, H, (1,), generator=g)), int(torch.randint(0, W, (1,), generator=g)), 1, 1)
        elif kind == 2:  # at the bottom-right corner
            h, w = (int(torch.randint(1, s + 1, (1,), generator=g)) for s in (H, W))
            box = (H - h, W - w, h, w)
        else:
            h, w = (int(torch.randint(1, s + 1, (1,), generator=g)) for s in (H, W))
            box = (int(torch.randint(0, H - h + 1, (1,), generator=g)),
                   int(torch.randint(0, W - w + 1, (1,), generator=g)), h, w)
        boxes.append(box)
    return torch.tensor(boxes, dtype=torch.int64).reshape(-1, 4)


def random_flips(N, g, device):
    return ((torch.rand(N, generator=g) < 0.5).to(device), (torch.rand(N, generator=g) < 0.5).to(device))


SHAPES = [(13, 17), (30, 9), (7, 40), (25, 25), (16, 31), (1, 12), (9, 1)]


@pytest.mark.parametrize("antialias", [False, True])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_dtypes_layouts_antialias_and_random_flips(device, dtype, channels_last, antialias):
    g = torch.Generator().manual_seed(1)
    images = random_images(SHAPES, 3, g)
    boxes = random_boxes(SHAPES, g)
    hflip, vflip = random_flips(len(SHAPES), g, device)
    ragged = Ragged.from_tensors(images, device=device)
    for size in [(11, 14), (1, 1), (20, 6)]:
        out = resized_crop(ragged, boxes.to(device), size, MEAN[:3], STD[:3], hflip=hflip, vflip=vflip,
                           dtype=dtype, channels_last=channels_last, antialias=antialias)
        assert out.device == ragged.device and out.dtype == dtype and out.shape == (len(SHAPES), 3, *size)
        expected_format = torch.channels_last if channels_last else torch.contiguous_format
        assert out.is_contiguous(memory_format=expected_format)
        assert_matches(out, reference(images, boxes, size, MEAN, STD, hflip, vflip, antialias), dtype)


# (image H, W), box, output size: each axis up, down, both, one of each, identity, to and from
# one pixel, and output widths of 1 (where torch's own antialias kernel errs: interpolate64).
SCALES = [
    ((20, 30), (2, 3, 5, 7), (40, 33)),       # upscale both
    ((60, 80), (4, 1, 50, 70), (9, 11)),      # downscale both, by up to 6x
    ((40, 40), (0, 0, 6, 35), (24, 5)),       # height up, width down
    ((40, 40), (1, 2, 35, 6), (5, 24)),       # height down, width up
    ((12, 10), (0, 0, 12, 10), (12, 10)),     # the whole image at its own size
    ((12, 10), (11, 9, 1, 1), (7, 5)),        # one pixel, spread
    ((12, 10), (3, 2, 8, 8), (1, 1)),         # to one pixel
    ((12, 10), (0, 0, 12, 10), (9, 1)),       # output width 1
    ((12, 10), (2, 4, 6, 1), (3, 1)),         # a one-column box
    ((300, 7), (0, 0, 300, 7), (4, 7)),       # a 75x downscale: 151 taps per output row
]


@pytest.mark.parametrize("antialias", [False, True])
@pytest.mark.parametrize("case", range(len(SCALES)))
def test_upscale_downscale_and_edge_sizes(device, case, antialias):
    (H, W), box, size = SCALES[case]
    g = torch.Generator().manual_seed(case)
    images = random_images([(H, W), (H, W)], 3, g)
    boxes = torch.tensor([box, box])
    hflip = torch.tensor([False, True], device=device)
    vflip = torch.tensor([True, False], device=device)
    out = resized_crop([im.to(device) for im in images], boxes, size, MEAN[:3], STD[:3], hflip=hflip,
                       vflip=vflip, antialias=antialias)
    assert_matches(out, reference(images, boxes, size, MEAN, STD, hflip, vflip, antialias), torch.float32)


@pytest.mark.parametrize("C", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("channels_last", [False, True])
def test_channels(device, C, channels_last):
    g = torch.Generator().manual_seed(10 + C)
    images = random_images(SHAPES, C, g)
    boxes = random_boxes(SHAPES, g)
    hflip, vflip = random_flips(len(SHAPES), g, device)
    for antialias in (False, True):
        out = resized_crop(Ragged.from_tensors(images, device=device), boxes, (10, 13), MEAN[:C], STD[:C],
                           hflip=hflip, vflip=vflip, channels_last=channels_last, antialias=antialias)
        assert_matches(out, reference(images, boxes, (10, 13), MEAN, STD, hflip, vflip, antialias),
                       torch.float32)


def test_list_and_ragged_inputs_give_the_same_result(device):
    g = torch.Generator().manual_seed(20)
    images = random_images(SHAPES, 3, g)
    boxes = random_boxes(SHAPES, g)
    hflip, vflip = random_flips(len(SHAPES), g, device)
    kwargs = dict(hflip=hflip, vflip=vflip, dtype=torch.bfloat16, antialias=True)
    from_list = resized_crop([im.to(device) for im in images], boxes, (12, 9), MEAN[:3], STD[:3], **kwargs)
    # A Ragged whose samples lie in reverse order with gaps between them (the op reads each
    # through its offset), tables on the CPU and on the values' device.
    sizes = torch.tensor([list(im.shape) for im in images])
    offsets, chunks, at = [0] * len(images), [], 0
    for n in reversed(range(len(images))):
        chunks.append(torch.full((n + 1,), 7, dtype=torch.uint8))  # a gap
        at += n + 1
        offsets[n] = at
        chunks.append(images[n].reshape(-1))
        at += images[n].numel()
    values = torch.cat(chunks).to(device)
    offsets = torch.tensor(offsets)
    for tables_device in ("cpu", device):
        ragged = Ragged(values, offsets.to(tables_device), sizes.to(tables_device))
        out = resized_crop(ragged, boxes.to(tables_device), (12, 9), MEAN[:3], STD[:3], **kwargs)
        assert torch.equal(out.view(torch.int16), from_list.view(torch.int16))
    assert_matches(from_list, reference(images, boxes, (12, 9), MEAN, STD, hflip, vflip, True), torch.bfloat16)


@pytest.mark.parametrize("antialias", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_reduced_precision_is_the_float32_result_rounded(device, dtype, antialias):
    g = torch.Generator().manual_seed(30)
    images = random_images(SHAPES, 3, g)
    boxes = random_boxes(SHAPES, g)
    # Channel 0 puts some values near 0 (fp16 subnormals), channel 1 overflows fp16 (to 1e6).
    mean, std = [128 / 255 + 3e-6, 0.0, 0.999], [1.0, 1e-6, 0.01]
    ragged = Ragged.from_tensors(images, device=device)
    f32 = resized_crop(ragged, boxes, (9, 16), mean, std, antialias=antialias)
    low = resized_crop(ragged, boxes, (9, 16), mean, std, dtype=dtype, antialias=antialias)
    if low.device.type == "cuda":  # each kernel's FMAs are ptxas's choice (tests/reference.py)
        assert_close_across_devices(low, f32.to(dtype))
    else:
        assert torch.equal(low.view(torch.int16), f32.to(dtype).view(torch.int16))


@pytest.mark.parametrize("antialias", [False, True])
@pytest.mark.parametrize("channels_last", [False, True])
def test_uint8_is_the_float32_result_rounded_half_to_even_and_saturated(device, channels_last,
                                                                         antialias):
    g = torch.Generator().manual_seed(31)
    images = random_images(SHAPES, 3, g)
    boxes = random_boxes(SHAPES, g)
    hflip, vflip = random_flips(len(SHAPES), g, device)
    # The pixel values (channel 0), scaled by 1.5 and shifted below 0 and past 255 (channel 1),
    # halved (channel 2).
    mean, std = [0.0, 0.1, 0.0], [1 / 255, 1 / 382.5, 2 / 255]
    ragged = Ragged.from_tensors(images, device=device)
    kwargs = dict(hflip=hflip, vflip=vflip, channels_last=channels_last, antialias=antialias)
    f32 = resized_crop(ragged, boxes.to(device), (11, 14), mean, std, **kwargs)
    u8 = resized_crop(ragged, boxes.to(device), (11, 14), mean, std, dtype=torch.uint8, **kwargs)
    assert u8.dtype == torch.uint8 and u8.shape == f32.shape
    assert u8.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    assert bool((f32[:, 1] < 0).any()) and bool((f32[:, 1] > 255).any())
    rounded = f32.round().clamp(0, 255).to(torch.uint8)  # torch's round: half to even
    if u8.device.type == "cuda":  # each kernel's FMAs are ptxas's choice: a tie may fall apart
        assert int((u8.int() - rounded.int()).abs().max()) <= 1
    else:
        assert torch.equal(u8, rounded)
    ref = reference(images, boxes, (11, 14), mean, std, hflip, vflip, antialias).clamp(0, 255)
    assert float((u8.cpu().double() - ref).abs().max()) <= 0.5 + 1e-3


def test_uint8_ties_go_to_even():
    # Each whole image at its own size: the resampled values are the bytes, halved exactly.
    images = [torch.arange(256, dtype=torch.uint8).view(16, 16, 1).expand(16, 16, 3).contiguous()]
    out = resized_crop(images, [[0, 0, 16, 16]], (16, 16), [0.0] * 3, [2 / 255] * 3, dtype=torch.uint8)
    halves = torch.arange(256, dtype=torch.float64).view(1, 1, 16, 16) / 2
    assert torch.equal(out, torch.round(halves).expand(1, 3, 16, 16).to(torch.uint8))
    assert out[0, 0, 0, 1] == 0 and out[0, 0, 0, 3] == 2 and out[0, 0, 0, 5] == 2  # 0.5, 1.5, 2.5


def test_training_sizes(device):
    # RandomResizedCrop-like boxes of ~375x500 photos to 64x64 rows of 64 and 192 elements: long
    # and aligned enough for the CUDA kernel's 16-byte stores.
    g = torch.Generator().manual_seed(40)
    shapes = [(375, 500), (333, 500), (500, 375)]
    images = random_images(shapes, 3, g)
    boxes = torch.tensor([[10, 20, 300, 400], [0, 100, 200, 150], [50, 0, 420, 375]])
    hflip, vflip = random_flips(3, g, device)
    for dtype, channels_last, antialias in [(torch.float32, False, True), (torch.bfloat16, True, False),
                                            (torch.float16, True, True)]:
        out = resized_crop(Ragged.from_tensors(images, device=device), boxes, 64, MEAN[:3], STD[:3],
                           hflip=hflip, dtype=dtype, channels_last=channels_last, antialias=antialias)
        assert_matches(out, reference(images, boxes, (64, 64), MEAN, STD, hflip, None, antialias), dtype)


def test_empty_batch(device):
    out = resized_crop([], torch.zeros(0, 4, dtype=torch.int64), (5, 6), MEAN[:3], STD[:3])
    assert out.shape == (0, 3, 5, 6) and out.dtype == torch.float32
    empty = Ragged(torch.empty(0, dtype=torch.uint8, device=device), torch.empty(0, dtype=torch.int64),
                   torch.empty(0, 3, dtype=torch.int64))
    out = resized_crop(empty, torch.zeros(0, 4, dtype=torch.int64), (5, 6), MEAN[:4], STD[:4],
                       channels_last=True, dtype=torch.float16)
    assert out.shape == (0, 4, 5, 6) and out.device == empty.device and out.dtype == torch.float16


@st.composite
def op_cases(draw):
    """Random batches: 0 to 3 images of 1 to 24 pixels a side, boxes anywhere, outputs up and down
    scaled, any flips, channels, dtype, layout, antialias."""
    N, C = draw(st.integers(0, 3)), draw(st.integers(1, 4))
    shapes = [(draw(st.integers(1, 24)), draw(st.integers(1, 24))) for _ in range(N)]
    boxes = []
    for H, W in shapes:
        h, w = draw(st.integers(1, H)), draw(st.integers(1, W))
        boxes.append((draw(st.integers(0, H - h)), draw(st.integers(0, W - w)), h, w))
    flags = st.lists(st.booleans(), min_size=N, max_size=N)
    return {
        "shapes": shapes, "C": C, "boxes": boxes,
        "size": (draw(st.integers(1, 20)), draw(st.integers(1, 20))),
        "hflip": draw(st.none() | flags), "vflip": draw(st.none() | flags),
        "dtype": draw(st.sampled_from([torch.float32, torch.float16, torch.bfloat16])),
        "channels_last": draw(st.booleans()), "antialias": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**31 - 1)),
    }


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=op_cases())
def test_property_resized_crop_equals_the_reference(device, case):
    g = torch.Generator().manual_seed(case["seed"])
    C = case["C"]
    images = random_images(case["shapes"], C, g)
    boxes = torch.tensor(case["boxes"], dtype=torch.int64).reshape(-1, 4)

    def flags(values):
        return None if values is None else torch.tensor(values, dtype=torch.bool).reshape(-1).to(device)

    hflip, vflip = flags(case["hflip"]), flags(case["vflip"])
    mean, std = MEAN[:C], STD[:C]
    images_in = [im.to(device) for im in images] if images else Ragged(
        torch.empty(0, dtype=torch.uint8, device=device), torch.empty(0, dtype=torch.int64),
        torch.empty(0, 3, dtype=torch.int64))
    out = resized_crop(images_in, boxes, case["size"], mean, std, hflip=hflip, vflip=vflip,
                       dtype=case["dtype"], channels_last=case["channels_last"], antialias=case["antialias"])
    assert_matches(out, reference(images, boxes, case["size"], mean, std, hflip, vflip, case["antialias"]),
                   case["dtype"])


def _images():
    g = torch.Generator().manual_seed(50)
    return random_images([(8, 6), (5, 9)], 3, g)


@pytest.mark.parametrize("call,error,match", [
    (lambda im: resized_crop(im, [[0, 0, 8, 6], [3, 0, 10, 2]], 4, MEAN[:3], STD[:3]), RuntimeError,
     r"boxes\[1\] = \(top=3, left=0, height=10, width=2\) is not inside sample 1's image of H x W = 5 x 9"),
    (lambda im: resized_crop(im, [[0, 0, 8, 6], [0, 8, 2, 2]], 4, MEAN[:3], STD[:3]), RuntimeError,
     r"boxes\[1\] = \(top=0, left=8, height=2, width=2\) is not inside sample 1's image of H x W = 5 x 9"),
    (lambda im: resized_crop(im, [[0, 0, 0, 6], [0, 0, 1, 1]], 4, MEAN[:3], STD[:3]), RuntimeError,
     r"boxes\[0\] = \(top=0, left=0, height=0, width=6\) is not inside sample 0's image of H x W = 8 x 6"),
    (lambda im: resized_crop(im, [[-1, 0, 2, 2], [0, 0, 1, 1]], 4, MEAN[:3], STD[:3]), RuntimeError,
     r"boxes\[0\] = \(top=-1, left=0, height=2, width=2\) is not inside"),
    (lambda im: resized_crop([x.float() for x in im], [[0, 0, 1, 1]] * 2, 4, MEAN[:3], STD[:3]),
     RuntimeError, "values must be uint8, got Float"),
    # Another channel count: a Ragged holds it; the op names the sample.
    (lambda im: resized_crop([im[0], im[1][..., :2]], [[0, 0, 1, 1]] * 2, 4, MEAN[:3], STD[:3]),
     RuntimeError, r"resized_crop: sample 1 has C = 2 channels \(sizes\[1\] = \(5, 9, 2\)\) but mean and std have 3"),
    # 2-D images: named in Python, before the op (whose sizes table would be [N, 2]) is reached.
    (lambda im: resized_crop([im[0][..., 0], im[0][:4, :, 0]], [[0, 0, 1, 1]] * 2, 4, MEAN[:3], STD[:3]),
     ValueError, r"resized_crop takes HWC images \(3-D\): image 0 has shape \[8, 6\]; add a channel "
                 r"dimension"),
    (lambda im: torch.ops.prefetch.resized_crop(torch.zeros(8, dtype=torch.uint8), torch.tensor([0, 4]),
                                                torch.tensor([[2, 2], [2, 2]]), torch.tensor([[0, 0, 1, 1]] * 2),
                                                [4, 4], MEAN[:3], STD[:3]),
     RuntimeError, r"sizes must be an int64 tensor \[N, 3\] of \(H, W, C\) per HWC sample, got dtype Long "
                   r"and shape \[2, 2\]"),
    (lambda im: resized_crop(im, torch.zeros(2, 3, dtype=torch.long), 4, MEAN[:3], STD[:3]), RuntimeError,
     r"boxes must have shape \[N, 4\] = \[2, 4\], got \[2, 3\]"),
    (lambda im: resized_crop(im, torch.zeros(3, 4, dtype=torch.long), 4, MEAN[:3], STD[:3]), RuntimeError,
     r"boxes must have shape \[N, 4\] = \[2, 4\], got \[3, 4\]"),
    (lambda im: resized_crop(im, torch.zeros(2, 4), 4, MEAN[:3], STD[:3]), RuntimeError,
     "boxes must be an integer tensor.*got dtype Float"),
    (lambda im: resized_crop(im, [[0, 0, 1, 1]] * 2, (0, 5), MEAN[:3], STD[:3]), RuntimeError,
     r"size must be \(h, w\) with 1 <= h, w <= 65535, got \[0, 5\]"),
    (lambda im: resized_crop(im, [[0, 0, 1, 1]] * 2, (70000, 5), MEAN[:3], STD[:3]), RuntimeError,
     r"size must be \(h, w\) with 1 <= h, w <= 65535, got \[70000, 5\]"),
    (lambda im: resized_crop(im, [[0, 0, 1, 1]] * 2, (4, 4, 4), MEAN[:3], STD[:3]), RuntimeError,
     r"size must be \(h, w\), got 3 values: \[4, 4, 4\]"),
    (lambda im: resized_crop(im, [[0, 0, 1, 1]] * 2, 2.5, MEAN[:3], STD[:3]), TypeError,
     "size must be a whole number, got 2.5"),
    (lambda im: resized_crop(im, [[0, 0, 1, 1]] * 2, 4, MEAN[:2], STD[:2]), RuntimeError,
     r"sample 0 has C = 3 channels \(sizes\[0\] = \(8, 6, 3\)\) but mean and std have 2 values"),
    (lambda im: resized_crop(im, [[0, 0, 1, 1]] * 2, 4, MEAN[:3], STD[:2]), RuntimeError,
     "mean has 3 values but std has 2"),
    (lambda im: resized_crop(im, [[0, 0, 1, 1]] * 2, 4, MEAN[:3], [0.2, 0.0, 0.2]), RuntimeError,
     r"std\[1\] must be > 0, got 0"),
    (lambda im: resized_crop(im, [[0, 0, 1, 1]] * 2, 4, [0.5, float("nan"), 0.5], STD[:3]), RuntimeError,
     r"mean\[1\] must be finite, got nan"),
    (lambda im: resized_crop(im, [[0, 0, 1, 1]] * 2, 4, MEAN[:3], STD[:3], dtype=torch.float64),
     RuntimeError, "dtype must be torch.float32, torch.float16, torch.bfloat16 or torch.uint8 .*, got Double"),
    (lambda im: resized_crop(im, [[0, 0, 1, 1]] * 2, 4, MEAN[:3], STD[:3], hflip=torch.ones(3, dtype=torch.bool)),
     RuntimeError, r"hflip must have shape \[N\] = \[2\], got \[3\]"),
    (lambda im: resized_crop(im, [[0, 0, 1, 1]] * 2, 4, MEAN[:3], STD[:3], vflip=torch.ones(2)),
     RuntimeError, "vflip must be a bool tensor of shape \\[N\\] = \\[2\\], got dtype Float"),
    (lambda im: resized_crop(Ragged.from_tensors(im).values, [[0, 0, 1, 1]] * 2, 4, MEAN[:3], STD[:3]),
     TypeError, "resized_crop takes a prefetch.Ragged or a list of HWC uint8 tensors, got Tensor"),
])
def test_bad_inputs_raise_errors_that_print_the_values(call, error, match):
    with pytest.raises(error, match=match):
        call(_images())


def test_bad_tables_name_the_sample_and_the_values():
    images = _images()
    r = Ragged.from_tensors(images)  # 144 + 135 values
    boxes = torch.tensor([[0, 0, 1, 1]] * 2)
    # Tables a Ragged would refuse (check=False: as an asynchronous copy's, not read when made): the
    # op checks them itself.
    outside = Ragged(r.values, torch.tensor([0, 200]), r.sizes, check=False)
    with pytest.raises(RuntimeError, match=r"sample 1 \(offsets\[1\] = 200, sizes\[1\] = \(5, 9, 3\)\) does "
                                           r"not lie inside the 279 values"):
        resized_crop(outside, boxes, 4, MEAN[:3], STD[:3])
    negative = Ragged(r.values, torch.tensor([-1, 144]), r.sizes, check=False)
    with pytest.raises(RuntimeError, match=r"sample 0 \(offsets\[0\] = -1, "):
        resized_crop(negative, boxes, 4, MEAN[:3], STD[:3])
    channels = Ragged(r.values, r.offsets, torch.tensor([[8, 6, 3], [5, 9, 4]]), check=False)
    with pytest.raises(RuntimeError, match=r"sample 1 has C = 4 channels \(sizes\[1\] = \(5, 9, 4\)\) but "
                                           r"mean and std have 3 values"):
        resized_crop(channels, boxes, 4, MEAN[:3], STD[:3])
    op = torch.ops.prefetch.resized_crop.default
    with pytest.raises(RuntimeError, match="values must be contiguous \\(stride 1\\), got stride 2"):
        op(torch.zeros(600, dtype=torch.uint8)[::2], r.offsets, r.sizes, boxes, [4, 4], MEAN[:3], STD[:3])
    with pytest.raises(RuntimeError, match=r"values must be 1-D \(a Ragged's packed samples\), got shape \[1, 279\]"):
        op(r.values[None], r.offsets, r.sizes, boxes, [4, 4], MEAN[:3], STD[:3])
    with pytest.raises(RuntimeError, match="offsets has 3 samples but sizes has 2"):
        op(r.values, torch.zeros(3, dtype=torch.long), r.sizes, boxes, [4, 4], MEAN[:3], STD[:3])
    with pytest.raises(RuntimeError, match="boxes is on meta but the values are on cpu"):
        op(r.values, r.offsets, r.sizes, boxes.to("meta"), [4, 4], MEAN[:3], STD[:3])


def test_meta_inputs_give_a_meta_output():
    r = Ragged.from_tensors(_images()).to("meta")
    out = resized_crop(r, torch.zeros(2, 4, dtype=torch.int64, device="meta"), (7, 5), MEAN[:4], STD[:4],
                       dtype=torch.bfloat16, channels_last=True)
    assert out.device.type == "meta" and out.shape == (2, 4, 7, 5) and out.dtype == torch.bfloat16
    assert out.is_contiguous(memory_format=torch.channels_last)


def _opcheck_cases(device):
    g = torch.Generator().manual_seed(60)
    images = random_images([(9, 8), (6, 11), (12, 5)], 3, g)
    r = Ragged.from_tensors(images, device=device)
    boxes = torch.tensor([[0, 0, 9, 8], [1, 2, 4, 7], [3, 1, 1, 1]])
    flips = torch.tensor([True, False, True], device=device)
    return {
        "defaults": ((r.values, r.offsets, r.sizes, boxes.to(device), [6, 5], MEAN[:3], STD[:3]), {}),
        "flips-antialias-bf16-channels_last": (
            (r.values, r.offsets, r.sizes, boxes.to(device), [10, 4], MEAN[:3], STD[:3]),
            dict(hflip=flips, vflip=flips, dtype=torch.bfloat16, channels_last=True, antialias=True)),
        "tables-on-cpu-int32-boxes-fp16": (
            (r.values, r.offsets.cpu(), r.sizes.cpu(), boxes.to(torch.int32), [3, 7], MEAN[:3], STD[:3]),
            dict(hflip=flips.cpu(), dtype=torch.float16)),
    }


@pytest.mark.parametrize("case", ["defaults", "flips-antialias-bf16-channels_last", "tables-on-cpu-int32-boxes-fp16"])
def test_opcheck(device, case):
    args, kwargs = _opcheck_cases(device)[case]
    torch.library.opcheck(torch.ops.prefetch.resized_crop.default, args, kwargs)


def test_torch_compile_fullgraph(device):
    g = torch.Generator().manual_seed(70)
    images = random_images([(20, 30), (15, 10)], 3, g)
    r = Ragged.from_tensors(images, device=device)
    boxes = torch.tensor([[0, 0, 20, 30], [2, 3, 10, 5]], device=device)
    hflip = torch.tensor([True, False], device=device)

    def step(ragged, b, h):
        return resized_crop(ragged, b, (8, 8), MEAN[:3], STD[:3], hflip=h, dtype=torch.float16,
                            antialias=True).float().sum()

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(r, boxes, hflip), step(r, boxes, hflip))


@pytest.mark.cuda
def test_cuda_call_with_host_tables_does_not_synchronise():
    from ..conftest import require_cuda
    require_cuda()
    g = torch.Generator().manual_seed(80)
    images = random_images([(20, 30), (15, 10), (9, 9)], 3, g)
    r = Ragged.from_tensors(images, device="cuda")  # its layout known on the host
    boxes = torch.tensor([[0, 0, 20, 30], [2, 3, 10, 5], [4, 4, 1, 1]])  # on the CPU
    hflip = torch.tensor([True, False, True])  # on the CPU too
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = resized_crop(r, boxes, (8, 7), MEAN[:3], STD[:3], hflip=hflip, antialias=True)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert_matches(out, reference(images, boxes, (8, 7), MEAN, STD, hflip, None, True), torch.float32)


# --- bicubic ----------------------------------------------------------------------------------------
# The reference is torch's float64 F.interpolate(mode="bicubic") (a = -0.75; antialias: a = -0.5 and
# twice the support), clamped to [0, 255] as torchvision's uint8 result; tests/cpp checks the same
# taps against Keys' formula written out. Random bytes overshoot nearly everywhere, so the clamp is
# reached at most pixels.

@pytest.mark.parametrize("antialias", [False, True])
@pytest.mark.parametrize("case", range(len(SCALES)))
def test_bicubic_upscale_downscale_and_edge_sizes(device, case, antialias):
    (H, W), box, size = SCALES[case]
    g = torch.Generator().manual_seed(100 + case)
    images = random_images([(H, W), (H, W)], 3, g)
    boxes = torch.tensor([box, box])
    hflip = torch.tensor([False, True], device=device)
    vflip = torch.tensor([True, False], device=device)
    out = resized_crop([im.to(device) for im in images], boxes, size, MEAN[:3], STD[:3], hflip=hflip,
                       vflip=vflip, antialias=antialias, interpolation="bicubic")
    ref = reference(images, boxes, size, MEAN, STD, hflip, vflip, antialias, bicubic=[True, True])
    assert_matches(out, ref, torch.float32)


@pytest.mark.parametrize("antialias", [False, True])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.uint8])
def test_bicubic_per_sample_mixes_with_bilinear(device, dtype, channels_last, antialias):
    g = torch.Generator().manual_seed(110)
    images = random_images(SHAPES, 3, g)
    boxes = random_boxes(SHAPES, g)
    hflip, vflip = random_flips(len(SHAPES), g, device)
    bicubic = torch.rand(len(SHAPES), generator=g) < 0.5
    bicubic[:2] = torch.tensor([True, False])  # both kinds, whatever the draw
    ragged = Ragged.from_tensors(images, device=device)
    # The table on the CPU, on the device, and as a list: the same result.
    outs = [resized_crop(ragged, boxes, (11, 14), MEAN[:3], STD[:3], hflip=hflip, vflip=vflip,
                         dtype=dtype, channels_last=channels_last, antialias=antialias,
                         interpolation=table)
            for table in (bicubic, bicubic.to(device), bicubic.tolist())]
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])
    ref = reference(images, boxes, (11, 14), MEAN, STD, hflip, vflip, antialias, bicubic=bicubic)
    if dtype == torch.uint8:
        return  # (uint8 output: test_bicubic_uint8_output)
    assert_matches(outs[0], ref, dtype)


def test_bicubic_uint8_output_is_the_clamped_pixel_rounded():
    g = torch.Generator().manual_seed(120)
    images = random_images(SHAPES, 3, g)
    boxes = random_boxes(SHAPES, g)
    zero, unit = [0.0] * 3, [1 / 255] * 3  # the pixel values themselves
    for antialias in (False, True):
        out = resized_crop(images, boxes, (12, 9), zero, unit, dtype=torch.uint8, antialias=antialias,
                           interpolation="bicubic")
        ref = reference(images, boxes, (12, 9), zero, unit, antialias=antialias,
                        bicubic=[True] * len(SHAPES))
        assert float((out.double() - ref).abs().max()) <= 0.5 + 1e-3


def test_bicubic_is_not_bilinear_and_names_its_modes():
    images = _images()
    boxes = [[0, 0, 8, 6], [1, 1, 4, 4]]
    bilinear = resized_crop(images, boxes, 9, MEAN[:3], STD[:3])
    assert torch.equal(resized_crop(images, boxes, 9, MEAN[:3], STD[:3], interpolation="BILINEAR"), bilinear)
    bicubic = resized_crop(images, boxes, 9, MEAN[:3], STD[:3], interpolation="bicubic")
    assert not torch.equal(bicubic, bilinear)

    class Mode:  # torchvision's InterpolationMode, by its value
        value = "bicubic"

    assert torch.equal(resized_crop(images, boxes, 9, MEAN[:3], STD[:3], interpolation=Mode()), bicubic)
    with pytest.raises(ValueError, match=r"interpolation must be 'bilinear' or 'bicubic' .*got 'nearest'"):
        resized_crop(images, boxes, 9, MEAN[:3], STD[:3], interpolation="nearest")
    with pytest.raises(TypeError, match="interpolation must be 'bilinear', 'bicubic' or one boolean per "
                                        "sample .*got int"):
        resized_crop(images, boxes, 9, MEAN[:3], STD[:3], interpolation=3)
    with pytest.raises(TypeError, match="interpolation must hold booleans"):
        resized_crop(images, boxes, 9, MEAN[:3], STD[:3], interpolation=[1, 0])
    with pytest.raises(RuntimeError, match=r"bicubic must have shape \[N\] = \[2\], got \[3\]"):
        resized_crop(images, boxes, 9, MEAN[:3], STD[:3], interpolation=[True, False, True])


def test_bicubic_close_to_torch_uint8_path_on_smooth_images():
    """torch's own uint8 CPU kernel (what torchvision's CPU resize runs) rounds to uint8 between
    its horizontal and vertical passes; on images without sharp edges neither pass overshoots
    and the two agree within 1 level (the float path's rounding); the docs state the rest."""
    g = torch.Generator().manual_seed(130)
    # Smooth images: bilinear upsamplings of coarse random grids.
    images = [F.interpolate(torch.rand(1, 3, 6, 7, generator=g) * 200 + 20, size=(60, 70), mode="bilinear",
                            align_corners=False)[0].round().byte().permute(1, 2, 0).contiguous()
              for _ in range(3)]
    boxes = [[0, 0, 60, 70], [5, 3, 40, 51], [10, 10, 13, 17]]
    for size, antialias in (((24, 20), True), ((24, 20), False), ((80, 90), False), ((80, 90), True)):
        out = resized_crop(images, boxes, size, [0.0] * 3, [1 / 255] * 3, dtype=torch.uint8,
                           antialias=antialias, interpolation="bicubic")
        for n, (top, left, h, w) in enumerate(boxes):
            crop = images[n][top:top + h, left:left + w].permute(2, 0, 1)[None].contiguous()
            theirs = F.interpolate(crop, size=size, mode="bicubic", align_corners=False, antialias=antialias)
            assert int((out[n].int() - theirs[0].int()).abs().max()) <= 1


def test_bicubic_against_torchvision_itself_where_installed():
    """torchvision's v2 ``resized_crop(..., BICUBIC, antialias=True)`` on uint8 (its CPU path is
    torch's uint8 kernel, above) on smooth images: within 1 level."""
    tvf = pytest.importorskip("torchvision.transforms.v2.functional")
    from torchvision.transforms import InterpolationMode

    g = torch.Generator().manual_seed(150)
    image = F.interpolate(torch.rand(1, 3, 9, 8, generator=g) * 220 + 10, size=(90, 80), mode="bilinear",
                          align_corners=False)[0].round().byte()
    for (top, left, h, w), size in (((3, 5, 70, 60), (32, 28)), ((10, 0, 20, 30), (64, 72))):
        theirs = tvf.resized_crop(image, top, left, h, w, list(size), interpolation=InterpolationMode.BICUBIC,
                                  antialias=True)
        ours = resized_crop([image.permute(1, 2, 0).contiguous()], [[top, left, h, w]], size, [0.0] * 3,
                            [1 / 255] * 3, dtype=torch.uint8, interpolation="bicubic")[0]
        assert int((ours.int() - theirs.int()).abs().max()) <= 1


def test_bicubic_opcheck_and_meta(device):
    g = torch.Generator().manual_seed(140)
    images = random_images([(9, 8), (6, 11), (12, 5)], 3, g)
    r = Ragged.from_tensors(images, device=device)
    boxes = torch.tensor([[0, 0, 9, 8], [1, 2, 4, 7], [3, 1, 1, 1]])
    bicubic = torch.tensor([True, False, True])
    torch.library.opcheck(torch.ops.prefetch.resized_crop.default,
                          (r.values, r.offsets, r.sizes, boxes.to(device), [6, 5], MEAN[:3], STD[:3]),
                          dict(antialias=True, bicubic=bicubic.to(device)))
    meta = Ragged.from_tensors(images).to("meta")
    out = resized_crop(meta, torch.zeros(3, 4, dtype=torch.int64, device="meta"), (7, 5), MEAN[:3], STD[:3],
                       interpolation=bicubic.to("meta"))
    assert out.device.type == "meta" and out.shape == (3, 3, 7, 5)
    with pytest.raises(RuntimeError, match=r"bicubic must have shape \[N\] = \[3\], got \[2\]"):
        resized_crop(meta, torch.zeros(3, 4, dtype=torch.int64, device="meta"), (7, 5), MEAN[:3], STD[:3],
                     interpolation=bicubic[:2].to("meta"))
