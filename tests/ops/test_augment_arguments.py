"""The fused ops' arguments (normalize_flip, flip_crop): every form they take is computed exactly
(int64 offsets at the extremes, narrow integer dtypes, strided and expanded tensors, whole numbers
of any type), and every form they cannot compute is refused, before anything is allocated, with
an error that names the values: wrong shapes, dtypes and signs, indices out of range, outputs
whose size overflows, tensor arguments on another device than the images (meta included, in the
real and the fake kernels and under torch.compile), a fill the output dtype cannot hold,
fractional or non-finite numbers. Values are compared with the float64 reference."""
import pytest
import torch

from prefetch.ops import flip_crop, normalize_flip

from ..conftest import require_cuda
from ..helpers import native_backtrace, run_child
from ..reference import assert_close_across_devices, reference, reference_geometry

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def _images(device="cpu"):
    return torch.arange(2 * 4 * 5 * 3, dtype=torch.uint8).view(2, 4, 5, 3).to(device)


# ---- errors that print the values -------------------------------------------------------------

@pytest.mark.parametrize("call,match", [
    (lambda x: normalize_flip(x.float(), MEAN[:3], STD[:3]), "images must be uint8, got Float"),
    (lambda x: normalize_flip(x[0], MEAN[:3], STD[:3]), r"4-D \[N, H, W, C\].*\[8, 6, 3\]"),
    (lambda x: normalize_flip(x, MEAN[:2], STD[:3]), "mean has 2 values but the images have C = 3"),
    (lambda x: normalize_flip(x, MEAN[:3], [0.2, 0.0, 0.2]), r"std\[1\] must be > 0, got 0"),
    (lambda x: normalize_flip(x, MEAN[:3], STD[:3], hflip=torch.ones(3, dtype=torch.bool)),
     r"hflip must have shape \[N\] = \[2\], got \[3\]"),
    (lambda x: normalize_flip(x, MEAN[:3], STD[:3], vflip=torch.ones(2)), "vflip must be a bool tensor.*Float"),
    (lambda x: normalize_flip(x, MEAN[:3], STD[:3], crop=(4, 4), offsets=torch.zeros(2, 3, dtype=torch.long)),
     r"offsets must have shape \[N, 2\] = \[2, 2\], got \[2, 3\]"),
    (lambda x: normalize_flip(x, MEAN[:3], STD[:3], offsets=torch.zeros(2, 2)), "offsets must be an integer tensor.*Float"),
    (lambda x: normalize_flip(x, MEAN[:3], STD[:3], crop=(70000, 4)), "65535, got \\[70000, 4\\]"),
    (lambda x: normalize_flip(x, MEAN[:3], STD[:3], layout="HWC"), "layout must be 'NHWC' or 'NCHW', got 'HWC'"),
    (lambda x: normalize_flip(x, MEAN[:3], STD[:3], dtype=torch.float64), "dtype must be"),
    (lambda x: normalize_flip(x, MEAN[:3], STD[:3], fill=300), r"fill must be .* got 300"),
    (lambda x: flip_crop(x[..., 0].float()), "masks must be uint8, int16, int32 or int64, got Float"),
    (lambda x: flip_crop(x), r"masks must be 3-D \[N, H, W\]"),
])
def test_bad_inputs_raise_errors_that_print_the_values(call, match):
    x = torch.zeros(2, 8, 6, 3, dtype=torch.uint8)
    with pytest.raises(RuntimeError, match=match):
        call(x)


def test_indices_out_of_range_name_the_index():
    x = torch.zeros(4, 5, 5, 3, dtype=torch.uint8)
    with pytest.raises(IndexError, match=r"indices\[2\] = 4 is out of range for an input of 4 samples"):
        normalize_flip(x, MEAN[:3], STD[:3], indices=torch.tensor([0, 1, 4]))
    with pytest.raises(IndexError, match=r"indices\[0\] = -1 is out of range"):
        flip_crop(x[..., 0], indices=torch.tensor([-1]))
    with pytest.raises(RuntimeError, match=r"indices must be 1-D \[n\], got shape \[1, 2\]"):
        normalize_flip(x, MEAN[:3], STD[:3], indices=torch.tensor([[0, 1]]))
    with pytest.raises(RuntimeError, match=r"hflip must have shape \[N\] = \[2\], got \[4\]"):
        normalize_flip(x, MEAN[:3], STD[:3], indices=torch.tensor([0, 1]),
                       hflip=torch.zeros(4, dtype=torch.bool))


@pytest.mark.parametrize("bad,match", [
    (dict(offsets=torch.zeros(2, 2)), "offsets must be an integer tensor"),
    (dict(indices=torch.tensor([True, False])), "indices must be an integer tensor"),
    (dict(indices=torch.tensor([-1], dtype=torch.int8)), r"indices\[0\] = -1 is out of range"),
    (dict(hflip=torch.tensor([1, 0], dtype=torch.uint8)), "hflip must be a bool tensor"),
])
def test_arguments_of_the_wrong_dtype_or_sign_are_refused_naming_them(bad, match):
    with pytest.raises((RuntimeError, IndexError), match=match):
        flip_crop(_images()[..., 0], **bad)


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("arg", ["offsets", "indices"])
def test_uint64_offsets_and_indices_refused(device, arg):
    # 2**64 - 1 used to become -1 on the way to int64: a window beside the image read as one
    # overlapping it. Every other integer dtype holds only values int64 holds.
    value = {"offsets": torch.tensor([[2**64 - 1, 0], [0, 0]], dtype=torch.uint64),
             "indices": torch.tensor([1, 0], dtype=torch.uint64)}[arg].to(device)
    with pytest.raises(RuntimeError, match=r"%s must be .*got dtype UInt64" % arg):
        flip_crop(_images(device)[..., 0], **{arg: value})


@pytest.mark.parametrize("fill", [0.5, 254.5, -0.25, float("nan"), "3"])
def test_fractional_fill_and_crop_refused(fill):
    # int() used to truncate: fill=0.5 (meant as a normalized grey) padded with 0, crop=2.5 gave 2.
    with pytest.raises(TypeError, match="fill must be a whole number"):
        flip_crop(_images()[..., 0], crop=6, fill=fill)
    with pytest.raises(TypeError, match="fill must be a whole number"):
        normalize_flip(_images(), [0.5] * 3, [0.5] * 3, crop=6, fill=fill)


def test_whole_fill_and_crop_of_other_types_accepted():
    import numpy as np
    x = _images()
    want = normalize_flip(x, [0.5] * 3, [0.5] * 3, crop=(6, 5), fill=7)
    for fill, crop in ((np.uint8(7), (np.int64(6), 5)), (torch.tensor(7), [6, torch.tensor(5)]), (7.0, (6.0, 5))):
        assert torch.equal(normalize_flip(x, [0.5] * 3, [0.5] * 3, crop=crop, fill=fill), want)
    with pytest.raises(TypeError, match="crop must be a whole number"):
        flip_crop(x[..., 0], crop=2.5)
    with pytest.raises(TypeError, match="crop must be a whole number"):
        flip_crop(x[..., 0], crop=(3, 2.5))


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("mean,std", [([float("nan"), 0.5, 0.5], [0.5] * 3),
                                      ([0.5] * 3, [0.5, float("inf"), 0.5]),
                                      ([float("-inf"), 0.5, 0.5], [0.5] * 3),
                                      ([0.5] * 3, [0.5, 0.5, 0.0])])
def test_non_finite_mean_or_std_refused(device, mean, std):
    # NaN gave an all-NaN batch and std=inf an all-zero one, without a word.
    with pytest.raises(RuntimeError, match=r"(mean|std)\[\d\]"):
        normalize_flip(_images(device), mean, std)


# ---- outputs whose size overflows --------------------------------------------------------------
# An output whose byte size overflows int64 is a RuntimeError naming the sizes: it used to wrap
# around inside the pooled allocation (std::terminate, or a std::bad_alloc). The inputs are
# stride-0 expansions, so no memory is needed; each CPU case runs in a child interpreter, where an
# abort fails the test instead of pytest. After the error the op works again in the same process.

OVERFLOWS = {
    # [2^41 + 1, 1, 1, 2^21] float32: 2^62 elements, 2^64 bytes (wrapped to a small size)
    "normalize_flip": (
        "normalize_flip(torch.zeros(1, 1, 1, 1, dtype=torch.uint8).expand(2**41 + 1, 1, 2**21, 1),"
        " [0.5], [0.5])", "2199023255553"),
    # channels and the largest crop: [2^20, 4096, 65535, 65535] float16
    "normalize_flip_crop": (
        "normalize_flip(torch.zeros(1, 1, 1, 1, dtype=torch.uint8).expand(2**20, 1, 1, 4096),"
        " [0.5] * 4096, [0.5] * 4096, crop=65535, dtype=torch.float16)", "4096"),
    # N from a gather: [2^21, 1024, 65535, 65535] bfloat16, NCHW
    "normalize_flip_gather": (
        "normalize_flip(torch.zeros(1, 1, 1, 1, dtype=torch.uint8).expand(1, 1024, 1, 1), [0.5] * 1024,"
        " [0.5] * 1024, crop=(65535, 65535), layout='NCHW', dtype=torch.bfloat16,"
        " indices=torch.zeros(2**21, dtype=torch.int64))", "2097152"),
    # [2^32 + 1, 65535, 65535] int64 masks
    "flip_crop": (
        "flip_crop(torch.zeros(1, 1, 1, dtype=torch.int64).expand(2**32 + 1, 1, 1), crop=65535)",
        "4294967297"),
    # [2^31, 1, 2^31] int16: 2^62 elements fit, their 2^63 bytes do not
    "flip_crop_bytes": (
        "flip_crop(torch.zeros(1, 1, 1, dtype=torch.int16).expand(2**31, 1, 2**31))",
        "2147483648"),
}


@pytest.mark.parametrize("case", sorted(OVERFLOWS))
def test_output_size_overflow_is_a_runtime_error(case):
    call, size = OVERFLOWS[case]
    out = run_child("""
        import torch
        from prefetch.ops import flip_crop, normalize_flip
        try:
            %s
        except RuntimeError as e:
            print("RuntimeError:", e)
        x = torch.arange(2 * 4 * 4 * 3, dtype=torch.uint8).view(2, 4, 4, 3)
        y = normalize_flip(x, [0.5] * 3, [0.5] * 3, crop=2)
        print("after:", tuple(y.shape), float(y[1, 2, 0, 0]))
    """ % call, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "RuntimeError:" in out.stdout, out.stdout + out.stderr
    line = out.stdout.split("RuntimeError:")[1].splitlines()[0]
    assert "overflow" in line and size in line, line
    expected = float(reference(torch.arange(96, dtype=torch.uint8).view(2, 4, 4, 3), [0.5] * 3,
                               [0.5] * 3, crop=(2, 2))[1, 2, 0, 0])
    after = out.stdout.split("after: (2, 3, 2, 2) ")[1].split()[0]
    assert abs(float(after) - expected) < 1e-6, out.stdout


# Outputs whose byte size overflows int64 (stride-0 inputs of 2^41 + 1 images, 2^32 + 1 masks): a
# RuntimeError naming the size, on `device` (the CPU case runs in a child, above).
def _assert_output_size_overflow_raises(device):
    images = torch.zeros(1, 1, 1, 1, dtype=torch.uint8, device=device).expand(2**41 + 1, 1, 2**21, 1)
    with pytest.raises(RuntimeError, match=r"normalize_flip: the output .*2199023255553.*overflow"):
        normalize_flip(images, [0.5], [0.5])
    masks = torch.zeros(1, 1, 1, dtype=torch.int64, device=device).expand(2**32 + 1, 1, 1)
    with pytest.raises(RuntimeError, match=r"flip_crop: the output .*4294967297.*overflow"):
        flip_crop(masks, crop=65535)


def test_output_size_overflow_in_the_fake_kernel():
    _assert_output_size_overflow_raises("meta")


def test_input_sides_beyond_2_62_refused():
    # The bound that keeps the kernels' index sums (clamped offsets, geometry.h) below 2^63;
    # only a stride-0 expansion can be that large.
    masks = torch.zeros(1, 1, 1, dtype=torch.uint8).expand(1, 2**62, 1)
    with pytest.raises(RuntimeError, match=r"height and width must be below 2\^62, got H = 4611686018427387904"):
        flip_crop(masks, crop=1)
    with pytest.raises(RuntimeError, match=r"height and width must be below 2\^62"):
        flip_crop(masks.to("meta"), crop=1)
    assert flip_crop(masks[:, : 2**62 - 1], crop=1, fill=5).tolist() == [[[0]]]


@pytest.mark.cuda
def test_output_size_overflow_and_fill_range_on_cuda():
    require_cuda()
    # In a child: on the GPU image this call killed the process with SIGSEGV instead of raising
    # (the build had linked a static libstdc++ into the extension, whose number formatting then
    # crashed: tests/test_build.py); a crash must fail this test, not end the whole CUDA run.
    body = """
        from tests.ops.test_augment_arguments import _assert_output_size_overflow_raises
        _assert_output_size_overflow_raises("cuda")
        print("raised")
    """
    out = run_child(body, timeout=120)
    if out.returncode < 0:  # died of a signal: where, natively, for the next reader
        pytest.fail("the child died of signal %d\n%s%s" % (-out.returncode, out.stderr[-1500:],
                                                            native_backtrace(body)))
    assert out.returncode == 0 and "raised" in out.stdout, out.stdout + out.stderr
    with pytest.raises(RuntimeError, match=r"fill must be a uint8 value in \[0, 255\] for uint8 masks, got 300"):
        flip_crop(torch.zeros(2, 4, 4, dtype=torch.uint8, device="cuda"), crop=6, fill=300)


# ---- every tensor argument on the images' device -------------------------------------------
# A meta argument with CPU images used to dispatch to the meta kernel and return an uninitialised
# CPU tensor. As torch.where and the TensorIterator ops do, mixed devices raise; all-meta inputs
# give a meta output of the right shape (shape inference), in the real and the fake kernels.

ARGS = ["hflip", "vflip", "offsets", "indices"]


def _args(n, device):
    return {"hflip": torch.tensor([True, False, True], device=device)[:n],
            "vflip": torch.tensor([False, True, True], device=device)[:n],
            "offsets": torch.tensor([[0, 1], [-1, 0], [2, -2]], device=device)[:n],
            "indices": torch.tensor([1, 0, 1], device=device)[:n]}


def _call(op, x, **kw):
    if op == "normalize_flip":
        return normalize_flip(x, [0.5] * 3, [0.25] * 3, crop=3, **kw)
    return flip_crop(x[..., 0], crop=3, **kw)


@pytest.mark.parametrize("op", ["normalize_flip", "flip_crop"])
@pytest.mark.parametrize("arg", ARGS)
def test_argument_on_meta_with_cpu_inputs_raises(op, arg):
    kw = {arg: _args(2, "meta")[arg]}
    what = "images" if op == "normalize_flip" else "masks"
    with pytest.raises(RuntimeError, match=r"%s: %s is on meta but the %s are on cpu" % (op, arg, what)):
        _call(op, _images(), **kw)
    assert _call(op, _images(), **{arg: _args(2, "cpu")[arg]}).device.type == "cpu"  # still works


@pytest.mark.parametrize("op", ["normalize_flip", "flip_crop"])
@pytest.mark.parametrize("arg", ARGS)
def test_meta_inputs_with_a_cpu_argument_raise(op, arg):
    what = "images" if op == "normalize_flip" else "masks"
    with pytest.raises(RuntimeError, match=r"%s: %s is on cpu but the %s are on meta" % (op, arg, what)):
        _call(op, _images("meta"), **{arg: _args(2, "cpu")[arg]})


def test_direct_op_call_checks_devices():
    x = _images()
    with pytest.raises(RuntimeError, match="offsets is on meta but the images are on cpu"):
        torch.ops.prefetch.normalize_flip.default(
            x, [0.5] * 3, [0.5] * 3, None, None, [2, 2],
            torch.zeros(2, 2, dtype=torch.long, device="meta"), 0, torch.float32, "NHWC", False, None)
    with pytest.raises(RuntimeError, match="indices is on cpu but the masks are on meta"):
        torch.ops.prefetch.flip_crop.default(x[..., 0].to("meta"), None, None, None, None, 0,
                                             torch.tensor([0]))


@pytest.mark.parametrize("op", ["normalize_flip", "flip_crop"])
def test_all_meta_inputs_give_a_meta_output_of_the_cpu_shape(op):
    kw = _args(3, "cpu")
    want = _call(op, _images(), **kw)
    got = _call(op, _images("meta"), **{k: v.to("meta") for k, v in kw.items()})
    assert got.device.type == "meta"
    assert got.shape == want.shape and got.dtype == want.dtype and got.stride() == want.stride()


def test_fake_tensor_mode_checks_devices():
    from torch._subclasses.fake_tensor import FakeTensorMode
    mode = FakeTensorMode()
    images = mode.from_tensor(_images())
    hflip = mode.from_tensor(torch.zeros(2, dtype=torch.bool, device="meta"))
    with mode:
        with pytest.raises(RuntimeError, match="hflip is on meta but the images are on cpu"):
            normalize_flip(images, [0.5] * 3, [0.5] * 3, hflip=hflip)
        ok = normalize_flip(images, [0.5] * 3, [0.5] * 3, hflip=mode.from_tensor(torch.zeros(2, dtype=torch.bool)))
    assert ok.device.type == "cpu" and ok.shape == (2, 3, 4, 5)


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_fullgraph_still_checks_devices_and_fill(dynamic):
    def step(x, m, h, offs):
        img = normalize_flip(x, [0.5] * 3, [0.25] * 3, hflip=h, crop=(3, 3), offsets=offs)
        return img, flip_crop(m, hflip=h, crop=(3, 3), offsets=offs, fill=255)

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager", dynamic=dynamic)
    x = _images()
    kw = _args(2, "cpu")
    got = compiled(x, x[..., 0], kw["hflip"], kw["offsets"])
    want = step(x, x[..., 0], kw["hflip"], kw["offsets"])
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    with pytest.raises(Exception, match="hflip is on meta but the images are on cpu"):
        compiled(x, x[..., 0], kw["hflip"].to("meta"), kw["offsets"])


@pytest.mark.cuda
@pytest.mark.parametrize("op", ["normalize_flip", "flip_crop"])
@pytest.mark.parametrize("arg", ARGS)
@pytest.mark.parametrize("inputs_on,arg_on", [("cuda", "cpu"), ("cpu", "cuda"), ("cuda", "meta"),
                                              ("meta", "cuda")])
def test_cuda_argument_device_mismatch_raises(op, arg, inputs_on, arg_on):
    # CPU images with a CUDA argument dispatch to the CUDA registration, which checks before its
    # device guard; CUDA images with a CPU argument are checked in the shared plan.
    require_cuda()
    what = "images" if op == "normalize_flip" else "masks"
    dev = lambda d: "cuda:0" if d == "cuda" else d  # noqa: E731
    with pytest.raises(RuntimeError, match=r"%s: %s is on %s but the %s are on %s"
                       % (op, arg, dev(arg_on), what, dev(inputs_on))):
        _call(op, _images(inputs_on), **{arg: _args(2, arg_on)[arg]})
    got = _call(op, _images("cuda"), **{arg: _args(2, "cuda")[arg]})
    assert_close_across_devices(got, _call(op, _images(), **{arg: _args(2, "cpu")[arg]}))


# ---- a fill the output dtype can hold ---------------------------------------------------------
# flip_crop's fill must be a value of the mask dtype (300 on uint8 used to pad with 44), checked in
# the real and the fake kernels, as normalize_flip's fill is.

LIMITS = {torch.uint8: (0, 255), torch.int16: (-2**15, 2**15 - 1), torch.int32: (-2**31, 2**31 - 1),
          torch.int64: (-2**63, 2**63 - 1)}


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("dtype,fill", [(torch.uint8, 300), (torch.uint8, 256), (torch.uint8, -1),
                                        (torch.int16, 2**15), (torch.int16, -2**15 - 1),
                                        (torch.int32, 2**31), (torch.int32, -2**31 - 1)])
def test_flip_crop_fill_outside_the_mask_dtype_raises(device, dtype, fill):
    masks = torch.zeros(2, 4, 4, dtype=dtype, device=device)
    lo, hi = LIMITS[dtype]
    name = str(dtype).replace("torch.", "")
    with pytest.raises(RuntimeError, match=r"fill must be an? %s value in \[%d, %d\] for %s masks, got %d"
                       % (name, lo, hi, name, fill)):
        flip_crop(masks, crop=6, fill=fill)


@pytest.mark.parametrize("dtype", sorted(LIMITS, key=str))
def test_flip_crop_fill_at_the_dtype_limits_is_exact(dtype):
    masks = torch.arange(2 * 4 * 4).view(2, 4, 4).to(dtype)
    for fill in LIMITS[dtype]:
        out = flip_crop(masks, crop=6, fill=fill, hflip=torch.tensor([True, False]))
        ref = reference_geometry(masks.unsqueeze(1), torch.tensor([True, False]), None, (6, 6), None, 0)
        inside = torch.zeros(2, 1, 6, 6, dtype=torch.bool)
        inside[:, :, 1:5, 1:5] = True
        assert out.dtype == dtype
        assert bool((out[~inside[:, 0]] == fill).all())  # exact, also past float64's 2**53
        assert torch.equal(out[inside[:, 0]].double(), ref[inside].view(-1))


def test_normalize_flip_fill_checked_in_the_fake_kernel():
    with pytest.raises(RuntimeError, match=r"fill must be a uint8 value in \[0, 255\], got 300"):
        normalize_flip(_images("meta"), [0.5] * 3, [0.5] * 3, crop=6, fill=300)


# ---- argument forms computed exactly ----------------------------------------------------------

@pytest.mark.parametrize("extreme", [2**62, -2**62, 2**63 - 1, -2**63, 2**63 - 3, -2**63 + 1])
def test_offsets_at_int64_extremes_give_fill(extreme):
    images = _images()
    n = images.shape[0]
    flips = torch.tensor([True, False])
    for offsets in ([[extreme, 0], [0, extreme]], [[extreme, extreme], [1, extreme]]):
        offs = torch.tensor(offsets, dtype=torch.int64)
        for hf, vf in ((flips, flips), (~flips, flips), (None, None)):
            out = normalize_flip(images, [0.5] * 3, [0.25] * 3, hflip=hf, vflip=vf, crop=3,
                                 offsets=offs, fill=7)
            ref = reference(images, [0.5] * 3, [0.25] * 3, hf, vf, (3, 3), offs, fill=7)
            assert torch.allclose(out.double(), ref, atol=1e-6), (offsets, hf, vf)
            m = flip_crop(images[..., 0], hflip=hf, vflip=vf, crop=3, offsets=offs, fill=9)
            mref = reference_geometry(images[..., 0].unsqueeze(1), hf, vf, (3, 3), offs, 9)[:, 0]
            assert torch.equal(m.double(), mref)
    assert n == 2


def test_strided_flips_and_narrow_integer_offsets_and_indices_match_the_reference():
    images = torch.randint(0, 256, (4, 6, 7, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(3))
    hflip = torch.tensor([True]).expand(4)                        # stride 0
    vflip = torch.tensor([True, False] * 4)[::2]                   # strided
    offsets = torch.tensor([[1, -2, 0, 3], [0, 2, -1, 1]]).t()    # transposed
    for dt in (torch.int8, torch.int16, torch.int32, torch.uint8):
        offs = offsets.clamp(min=0).to(dt) if dt == torch.uint8 else offsets.to(dt)
        out = normalize_flip(images, [0.5] * 3, [0.25] * 3, hflip=hflip, vflip=vflip, crop=(4, 5),
                             offsets=offs)
        ref = reference(images, [0.5] * 3, [0.25] * 3, hflip, vflip, (4, 5), offs.long())
        assert torch.allclose(out.double(), ref, atol=1e-6), dt
    idx = torch.tensor([3, 0, 3], dtype=torch.int8)
    got = flip_crop(images[..., 0], indices=idx, hflip=hflip[:3], crop=5)
    want = flip_crop(images[..., 0][idx.long()].contiguous(), hflip=hflip[:3].clone(), crop=5)
    assert torch.equal(got, want)
