"""The kernel arguments every op assembles, for the CPU and for a CUDA kernel, checked on the CPU.

A CUDA registration once carried its own copy of this assembly and left the per-channel constants
unset: a certain crash at the first batch on a GPU that nothing run without one could see. The
assembly lives in code the CPU build compiles (csrc/torch/ops/kernel_args.h's complete_args, each
op's check in its csrc/torch/ops/<op>/<op>.cpp), and the test hooks ``_C._*_kernel_args``
(csrc/torch/ops/kernel_args_hook.h) run it for either target (the CUDA upload replaced by a copy into CPU
memory). These tests assert, for every op and for both channel paths (constants inline up to 64
channels, uploaded beyond), that every pointer the kernel reads is set, that every size and stride
agrees with the output, and that the constants are the float64 formula's — and that the
completeness check names any field left unset.
"""
import pytest
import torch

from prefetch._core.extension import _C
from prefetch.ragged import Ragged

TARGETS = ["cpu", "cuda"]
CHANNELS = [1, 3, 64, 65, 130]  # 64: the last inline count; 65 and 130: uploaded
INLINE = 64


def _mean_std(C):
    mean = [0.1 + 0.8 * c / max(1, C - 1) for c in range(C)]
    std = [0.05 + 0.3 * ((7 * c) % C) / C for c in range(C)]
    return mean, std


def _expected_constants(mean, std):
    """(scale, bias) per channel: 1 / (255 std) and -mean / std in float64, rounded once to float32."""
    out = []
    for m, s in zip(mean, std):
        scale = torch.tensor(1.0 / (255.0 * s), dtype=torch.float64).float().item()
        bias = torch.tensor(-m / s, dtype=torch.float64).float().item()
        out.append((scale, bias))
    return out


def _check_constants(d, target, mean, std):
    C = len(mean)
    expected = _expected_constants(mean, std)
    assert d["affine"] == expected, "the host table (exactly the float32 rounding of the float64 formula)"
    uploads = target == "cuda" and C > INLINE
    assert d["inline"] == (C <= INLINE)
    assert d["uploaded"] == uploads
    if uploads:
        assert d["affine_device"] == expected, "the device table"
    else:
        assert d["affine_device"] is None


def _check_output(d, out_shape, dtype, channels_last):
    out = d["out"]
    assert tuple(out.shape) == tuple(out_shape) and out.dtype == dtype
    assert out.is_contiguous(memory_format=torch.channels_last if channels_last else
                              torch.contiguous_format)
    assert list(d["sizes"]) == list(out.shape)
    assert list(d["strides"]) == list(out.stride())


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("C", CHANNELS)
@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_normalize_flip_arguments_are_complete(target, C, layout):
    g = torch.Generator().manual_seed(C)
    N, H, W = 3, 7, 9
    shape = (N, H, W, C) if layout == "NHWC" else (N, C, H, W)
    images = torch.randint(0, 256, shape, dtype=torch.uint8, generator=g)
    mean, std = _mean_std(C)
    hflip = torch.tensor([True, False, True])
    offsets = torch.tensor([[0, 1], [-2, 3], [4, -1]])
    for kwargs, sets in [
        (dict(), dict(hflip=False, vflip=False, offsets=False, rows=False)),
        (dict(hflip=hflip, crop=[5, 6], offsets=offsets), dict(hflip=True, vflip=False, offsets=True, rows=False)),
        (dict(vflip=hflip[:2], crop=[4, 4], indices=torch.tensor([2, 0])),
         dict(hflip=False, vflip=True, offsets=False, rows=True)),
    ]:
        for dtype, channels_last in [(torch.float32, False), (torch.bfloat16, True), (torch.float16, False)]:
            d = _C._normalize_flip_kernel_args(target, images, mean, std, layout=layout, dtype=dtype,
                                               channels_last=channels_last, **kwargs)
            assert d["problems"] == []
            assert d["images"], "images: not the input's data"
            for field, expected in sets.items():
                assert d[field] == expected, field
            n = kwargs["indices"].numel() if "indices" in kwargs else N
            h, w = kwargs.get("crop", (H, W))
            _check_output(d, (n, C, h, w), dtype, channels_last)
            _check_constants(d, target, mean, std)


def _ragged(shapes, C, g):
    images = [torch.randint(0, 256, (H, W, C), dtype=torch.uint8, generator=g) for H, W in shapes]
    return Ragged.from_tensors(images), images


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("C", CHANNELS)
def test_resized_crop_arguments_are_complete(target, C):
    g = torch.Generator().manual_seed(100 + C)
    shapes = [(6, 9), (11, 5), (8, 8)]
    r, images = _ragged(shapes, C, g)
    offsets, sizes = r.host_tables()
    boxes = torch.tensor([[0, 0, 6, 9], [2, 1, 7, 3], [3, 4, 5, 4]])
    mean, std = _mean_std(C)
    flips = torch.tensor([False, True, True])
    for kwargs, flip_sets, dtype, channels_last in [
        (dict(), (False, False), torch.float32, False),
        (dict(hflip=flips), (True, False), torch.float16, True),
        (dict(hflip=flips, vflip=~flips, antialias=True), (True, True), torch.bfloat16, False),
        (dict(bicubic=flips), (False, False), torch.float32, False),
    ]:
        d = _C._resized_crop_kernel_args(target, r.values, offsets, sizes, boxes, [4, 5], mean, std,
                                         dtype=dtype, channels_last=channels_last, **kwargs)
        assert d["problems"] == []
        assert d["values"], "values: not the input's data"
        assert (d["hflip"], d["vflip"]) == flip_sets
        assert d["bicubic"] == ("bicubic" in kwargs)
        # The per-sample table the kernel reads: offset, H, W, C, top, left, height, width.
        expected = [[int(offsets[n]), H, W, C] + boxes[n].tolist() for n, (H, W) in enumerate(shapes)]
        assert d["samples"].tolist() == expected
        _check_output(d, (3, C, 4, 5), dtype, channels_last)
        _check_constants(d, target, mean, std)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.int32, torch.int64])
def test_flip_crop_arguments_are_complete(target, dtype):
    masks = torch.arange(3 * 6 * 7).reshape(3, 6, 7).to(dtype)
    flips = torch.tensor([True, False, True])
    for kwargs, sets, shape in [
        (dict(), dict(hflip=False, vflip=False, offsets=False, rows=False), (3, 6, 7)),
        (dict(hflip=flips, vflip=flips, crop=[4, 5], offsets=torch.tensor([[0, 0], [1, 2], [-1, 3]])),
         dict(hflip=True, vflip=True, offsets=True, rows=False), (3, 4, 5)),
        (dict(indices=torch.tensor([1, 1, 0, 2])), dict(hflip=False, vflip=False, offsets=False, rows=True),
         (4, 6, 7)),
    ]:
        d = _C._flip_crop_kernel_args(target, masks, **kwargs)
        assert d["problems"] == []
        assert d["masks"] and d["itemsize"] == masks.element_size()
        assert d["uploaded"] is False
        for field, expected in sets.items():
            assert d[field] == expected, field
        assert tuple(d["out"].shape) == shape and d["out"].dtype == dtype
        assert list(d["sizes"]) == list(shape)


# The completeness check itself: every field a registration could forget is named.
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("field, needs", [
    ("affine", "any"), ("affine_device", "cuda-uploaded"), ("images", "any"), ("out", "any"),
    ("hflip", "any"), ("offsets", "any"), ("g.rows", "any"), ("oN", "any")])
@pytest.mark.parametrize("C", [3, 65])
def test_a_field_left_unset_is_named(target, field, needs, C):
    images = torch.randint(0, 256, (2, 5, 6, C), dtype=torch.uint8)
    mean, std = _mean_std(C)
    d = _C._normalize_flip_kernel_args(target, images, mean, std, hflip=torch.tensor([True, False]),
                                       offsets=torch.tensor([[0, 0], [1, 1]]), crop=[4, 4],
                                       indices=torch.tensor([1, 0]), drop=field)
    read = needs == "any" or (target == "cuda" and C > INLINE)
    if read:
        assert any(line.startswith(field) for line in d["problems"]), d["problems"]
    else:
        assert d["problems"] == []


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("field", ["affine", "affine_device", "values", "samples", "out", "hflip",
                                   "bicubic", "oN"])
def test_a_resized_crop_field_left_unset_is_named(target, field):
    C = 70
    r, _ = _ragged([(6, 9), (5, 5)], C, torch.Generator().manual_seed(1))
    offsets, sizes = r.host_tables()
    mean, std = _mean_std(C)
    d = _C._resized_crop_kernel_args(target, r.values, offsets, sizes, torch.tensor([[0, 0, 6, 9], [1, 1, 3, 3]]),
                                     [4, 4], mean, std, hflip=torch.tensor([True, False]),
                                     bicubic=torch.tensor([False, True]), drop=field)
    if field == "affine_device" and target == "cpu":
        assert d["problems"] == []
    else:
        assert any(line.startswith(field) for line in d["problems"]), d["problems"]


@pytest.mark.parametrize("field", ["masks", "out", "offsets", "hflip", "itemsize"])
def test_a_flip_crop_field_left_unset_is_named(field):
    masks = torch.zeros(2, 4, 4, dtype=torch.int32)
    d = _C._flip_crop_kernel_args("cuda", masks, hflip=torch.tensor([True, False]),
                                  offsets=torch.tensor([[0, 0], [1, 1]]), crop=[3, 3], drop=field)
    assert any(line.startswith(field) for line in d["problems"]), d["problems"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fill", [None, [7.0], [1.0, 2.0, 3.0]])
def test_affine_warp_arguments_are_complete(target, fill):
    images = torch.randint(0, 256, (2, 3, 5, 6), dtype=torch.uint8).contiguous(
        memory_format=torch.channels_last)  # the kernel reads any strides
    maps = torch.tensor([[1, 0, 0, 0, 1, 0], [0.5, 0.2, 1, -0.1, 1, 2]], dtype=torch.float32)
    d = _C._affine_warp_kernel_args(target, images, maps, bilinear=True, fill=fill)
    assert d["problems"] == [] and d["images"] and d["uploaded"] is False
    assert list(d["sizes"]) == [2, 3, 5, 6] and list(d["strides"]) == list(images.stride())
    assert tuple(d["out"].shape) == (2, 3, 5, 6) and d["out"].is_contiguous()
    assert d["fill"] == (None if fill is None else [fill[c % len(fill)] for c in range(3)])


@pytest.mark.parametrize("field", ["images", "matrices", "out"])
def test_an_affine_warp_field_left_unset_is_named(field):
    d = _C._affine_warp_kernel_args("cuda", torch.zeros(2, 1, 4, 4, dtype=torch.uint8),
                                    torch.zeros(2, 6), drop=field)
    assert any(line.startswith(field) for line in d["problems"]), d["problems"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fill", [[7], [1, 2, 3]])
@pytest.mark.parametrize("bicubic", [False, True])
def test_pil_affine_arguments_are_complete(target, fill, bicubic):
    images = torch.randint(0, 256, (2, 3, 5, 6), dtype=torch.uint8).contiguous(
        memory_format=torch.channels_last)  # the kernel reads any strides
    maps = torch.tensor([[1, 0, 0, 0, 1, 0], [0.5, 0.2, 1, -0.1, 1, 2]], dtype=torch.float64)
    d = _C._pil_affine_kernel_args(target, images, maps, bicubic=bicubic, fill=fill)
    assert d["problems"] == [] and d["images"] and d["uploaded"] is False
    assert list(d["sizes"]) == [2, 3, 5, 6] and list(d["strides"]) == list(images.stride())
    assert tuple(d["out"].shape) == (2, 3, 5, 6) and d["out"].is_contiguous()
    assert d["fill"] == [fill[c % len(fill)] for c in range(3)] and d["bicubic"] is bicubic


@pytest.mark.parametrize("field", ["images", "matrices", "out"])
def test_a_pil_affine_field_left_unset_is_named(field):
    d = _C._pil_affine_kernel_args("cuda", torch.zeros(2, 1, 4, 4, dtype=torch.uint8),
                                   torch.zeros(2, 6, dtype=torch.float64), drop=field)
    assert any(line.startswith(field) for line in d["problems"]), d["problems"]


@pytest.mark.parametrize("target", TARGETS)
def test_sharpness_arguments_are_complete(target):
    images = torch.randint(0, 256, (2, 3, 5, 6), dtype=torch.uint8)[:, :, :, ::2]  # any strides
    d = _C._sharpness_kernel_args(target, images, torch.tensor([0.5, 1.5], dtype=torch.float64))
    assert d["problems"] == [] and d["images"] and d["uploaded"] is False
    assert list(d["sizes"]) == [2, 3, 5, 3] and list(d["strides"]) == list(images.stride())
    assert tuple(d["out"].shape) == (2, 3, 5, 3) and d["out"].is_contiguous()


@pytest.mark.parametrize("field", ["images", "factors", "out"])
def test_a_sharpness_field_left_unset_is_named(field):
    d = _C._sharpness_kernel_args("cuda", torch.zeros(2, 1, 4, 4, dtype=torch.uint8),
                                  torch.zeros(2, dtype=torch.float64), drop=field)
    assert any(line.startswith(field) for line in d["problems"]), d["problems"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("T", [1, 3])
def test_lookup_arguments_are_complete(target, T):
    images = torch.randint(0, 256, (2, 3, 5, 6), dtype=torch.uint8)[:, :, 1:, :]  # any strides
    d = _C._lookup_kernel_args(target, images, torch.zeros(2, T, 256, dtype=torch.uint8))
    assert d["problems"] == [] and d["images"] and d["uploaded"] is False and d["T"] == T
    assert list(d["sizes"]) == [2, 3, 4, 6] and list(d["strides"]) == list(images.stride())
    assert tuple(d["out"].shape) == (2, 3, 4, 6) and d["out"].is_contiguous()


@pytest.mark.parametrize("field", ["images", "tables", "out", "T"])
def test_a_lookup_field_left_unset_is_named(field):
    d = _C._lookup_kernel_args("cuda", torch.zeros(2, 1, 4, 4, dtype=torch.uint8),
                               torch.zeros(2, 1, 256, dtype=torch.uint8), drop=field)
    assert any(line.startswith(field) for line in d["problems"]), d["problems"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("C", [1, 3])
def test_color_jitter_arguments_are_complete(target, C):
    images = torch.randint(0, 256, (2, 5, 6, C), dtype=torch.uint8).permute(0, 3, 1, 2)  # any strides
    steps = torch.tensor([[1, 2, 0], [3, 4, 2]])
    factors = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.25, 1.0]], dtype=torch.float64)  # hue in range
    d = _C._color_jitter_kernel_args(target, images, steps, factors)
    assert d["problems"] == [] and d["images"] and d["uploaded"] is False and d["K"] == 3
    assert list(d["sizes"]) == [2, C, 5, 6] and list(d["strides"]) == list(images.stride())
    assert tuple(d["out"].shape) == (2, C, 5, 6) and d["out"].is_contiguous()


def test_color_jitter_arguments_of_no_step_are_complete():
    """A chain of no step (K = 0: RandAugment's num_ops=0) has empty tables with no data to
    point at: complete, not "prefetch internal error" (issue 43)."""
    for target in TARGETS:
        d = _C._color_jitter_kernel_args(target, torch.zeros(2, 3, 4, 4, dtype=torch.uint8),
                                         torch.zeros(2, 0, dtype=torch.int64),
                                         torch.zeros(2, 0, dtype=torch.float64))
        assert d["problems"] == [] and d["K"] == 0


@pytest.mark.parametrize("field", ["images", "steps", "factors", "grey_sums", "out", "K"])
def test_a_color_jitter_field_left_unset_is_named(field):
    d = _C._color_jitter_kernel_args("cuda", torch.zeros(2, 3, 4, 4, dtype=torch.uint8),
                                     torch.zeros(2, 1, dtype=torch.int64),
                                     torch.zeros(2, 1, dtype=torch.float64), drop=field)
    assert any(line.startswith(field) for line in d["problems"]), d["problems"]


def test_the_ops_run_the_same_assembly():
    """The CPU ops run complete_args before their kernels: with more than 64 channels (the uploaded
    path on CUDA) they still give the float64 formula's values."""
    C = 70
    images = torch.randint(0, 256, (2, 3, 4, C), dtype=torch.uint8)
    mean, std = _mean_std(C)
    out = torch.ops.prefetch.normalize_flip(images, mean, std)
    ref = (images.double().permute(0, 3, 1, 2) / 255 - torch.tensor(mean, dtype=torch.float64).view(1, C, 1, 1)) \
        / torch.tensor(std, dtype=torch.float64).view(1, C, 1, 1)
    assert torch.allclose(out.double(), ref, atol=1e-5)


def test_the_gpu_cpu_bound_passes_what_it_states_and_fails_beyond():
    """tests/reference.py's bound (docs/custom_ops.md, "CPU and GPU results") can fail."""
    from ..reference import assert_close_across_devices

    base = torch.tensor([0.5, -2.0, 3e5, float("inf")])
    assert_close_across_devices(base * (1 + 5e-7), base)
    with pytest.raises(AssertionError):
        assert_close_across_devices(base + 3e-6, base)
    half = torch.tensor([1.0, 100.0], dtype=torch.float16)
    one_ulp = torch.tensor([1.0 + 2 ** -10, 100.0], dtype=torch.float16)
    assert_close_across_devices(one_ulp, half)
    with pytest.raises(AssertionError):
        assert_close_across_devices(torch.tensor([1.0 + 2 ** -8, 100.0], dtype=torch.float16), half)
    with pytest.raises(AssertionError):
        assert_close_across_devices(torch.tensor([1, 2]), torch.tensor([1, 3]))


@pytest.mark.parametrize("target", TARGETS)
def test_histogram_arguments_are_complete(target):
    images = torch.randint(0, 256, (2, 5, 6, 3), dtype=torch.uint8).permute(0, 3, 1, 2)  # any strides
    d = _C._histogram_kernel_args(target, images)
    assert d["problems"] == [] and d["images"] and d["uploaded"] is False
    assert list(d["sizes"]) == [2, 3, 5, 6] and list(d["strides"]) == list(images.stride())
    assert tuple(d["out"].shape) == (2, 3, 256) and d["out"].dtype == torch.int32
    assert int(d["out"].abs().sum()) == 0  # zeroed: the CUDA kernel adds to it


@pytest.mark.parametrize("field", ["images", "out", "C"])
def test_a_histogram_field_left_unset_is_named(field):
    d = _C._histogram_kernel_args("cuda", torch.zeros(2, 1, 4, 4, dtype=torch.uint8), drop=field)
    assert any(line.startswith(field) for line in d["problems"]), d["problems"]
