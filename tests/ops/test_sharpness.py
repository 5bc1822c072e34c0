"""prefetch.ops.sharpness (torchvision's adjust_sharpness, a factor per image) against a float64
reference written here from torchvision's formula: the 3x3 smoothing (1s around a 5, over 13) by
a float64 convolution, rounded; the blend v + (smooth - v) * (1 - factor); clamped and truncated;
the border kept. torchvision computes the blend in float32 with one rounding, so a value within a
float32 rounding of a whole number may truncate either way: the tests require equality wherever
the float64 value is more than ``EPS`` from a whole number, and never more than 1 apart. (Against
torchvision 0.29 itself, offline: equal on every value, benchmarks/NOTES.md.)"""
import pytest
import torch
import torch.nn.functional as F

from prefetch.ops import sharpness

EPS = 1e-3


def sharpness64(x, factors):
    """The float64 value before truncation, [N, C, H, W]."""
    n, c, h, w = x.shape
    xd = x.double()
    if h <= 2 or w <= 2:
        return xd.clone()
    kernel = torch.tensor([[1.0, 1.0, 1.0], [1.0, 5.0, 1.0], [1.0, 1.0, 1.0]], dtype=torch.float64) / 13
    smooth = torch.round(F.conv2d(xd.reshape(n * c, 1, h, w), kernel.view(1, 1, 3, 3))).view(n, c, h - 2, w - 2)
    rest = (1.0 - factors.double()).float().double().view(n, 1, 1, 1)  # torchvision's float32 alpha
    out = xd.clone()
    inner = out[..., 1:-1, 1:-1]
    out[..., 1:-1, 1:-1] = inner + (smooth - inner) * rest
    return out.clamp(0, 255)


def assert_truncated(got, value, min_clear=0.3):
    want = torch.floor(value)
    frac = value - want
    clear = torch.minimum(frac, 1 - frac) > EPS
    diff = (got.cpu().double() - want).abs()
    assert diff.max() <= 1, "off by %d" % diff.max()
    assert torch.equal(got.cpu().double()[clear], want[clear]), "%d clear values differ" % int((diff[clear] > 0).sum())
    # not vacuous: most values are away from a whole number (the border's are whole)
    assert clear.double().mean() >= min_clear


@pytest.mark.parametrize("c", [3, 1, 4])
def test_per_image_factors_against_the_float64_reference(device, c):
    g = torch.Generator().manual_seed(c)
    x = torch.randint(0, 256, (10, c, 23, 19), dtype=torch.uint8, generator=g)
    x[0] = 90  # flat: the smoothing is the image
    x[1, :, :, :8] = 0  # a hard edge
    factors = torch.tensor([0.0, 0.1, 0.5, 0.99, 1.0, 1.01, 1.5, 1.99, 3.0, 12.0], dtype=torch.float64)
    got = sharpness(x.to(device), factors.to(device))
    assert got.dtype == torch.uint8 and got.shape == x.shape and got.is_contiguous()
    assert_truncated(got, sharpness64(x, factors))
    assert torch.equal(got[4].cpu(), x[4])  # factor 1: the image itself
    assert torch.equal(got[:, :, 0].cpu(), x[:, :, 0]) and torch.equal(got[..., -1].cpu(), x[..., -1])


@pytest.mark.parametrize("hw", [(1, 1), (2, 9), (9, 2), (3, 3), (1, 40)])
def test_images_of_two_pixels_or_fewer_a_side_are_unchanged_and_three_have_one_inner_pixel(device, hw):
    x = torch.randint(0, 256, (3, 3) + hw, dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    factors = torch.tensor([0.0, 2.0, 0.3], dtype=torch.float64)
    got = sharpness(x.to(device), factors.to(device))
    if min(hw) <= 2:
        assert torch.equal(got.cpu(), x)
    else:  # 3 x 3: one inner value per channel, the rest border
        assert_truncated(got, sharpness64(x, factors), min_clear=0.0)
        assert not torch.equal(got[1].cpu(), x[1])


def test_any_input_strides_and_a_scalar_factor(device):
    g = torch.Generator().manual_seed(3)
    base = torch.randint(0, 256, (4, 30, 26, 3), dtype=torch.uint8, generator=g)
    x = base.permute(0, 3, 1, 2)[:, :, 3:25, ::2]  # channels last, cropped, every other column
    got = sharpness(x.to(device), 0.25)
    assert torch.equal(got.cpu(), sharpness(x.contiguous(), torch.full((4,), 0.25, dtype=torch.float64)))
    assert_truncated(got, sharpness64(x.contiguous(), torch.full((4,), 0.25)))


def test_empty_batches(device):
    for shape in [(0, 3, 5, 5), (2, 3, 0, 4), (2, 1, 4, 0)]:
        x = torch.zeros(shape, dtype=torch.uint8, device=device)
        assert sharpness(x, torch.zeros(shape[0], dtype=torch.float64, device=device)).shape == shape


@pytest.mark.parametrize("call, message", [
    (lambda: sharpness(torch.zeros(2, 3, 4, 4), torch.zeros(2, dtype=torch.float64)), r"uint8 \[N, C, H, W\]"),
    (lambda: sharpness(torch.zeros(2, 4, 4, dtype=torch.uint8), torch.zeros(2, dtype=torch.float64)),
     r"uint8 \[N, C, H, W\]"),
    (lambda: sharpness(torch.zeros(2, 3, 4, 4, dtype=torch.uint8), torch.zeros(3, dtype=torch.float64)),
     r"float64 \[N\] = \[2\]"),
    (lambda: sharpness(torch.zeros(2, 3, 4, 4, dtype=torch.uint8), torch.zeros(2)), "float64"),
    (lambda: sharpness(torch.zeros(2, 3, 4, 4, dtype=torch.uint8), torch.zeros(2, dtype=torch.float64, device="meta")),
     "factors is on meta"),
])
def test_bad_arguments_are_named(call, message):
    with pytest.raises(RuntimeError, match=message):
        call()


def test_opcheck(device):
    g = torch.Generator().manual_seed(5)
    x = torch.randint(0, 256, (3, 3, 7, 6), dtype=torch.uint8, generator=g).to(device)
    torch.library.opcheck(torch.ops.prefetch.sharpness.default,
                          (x, torch.tensor([0.2, 1.0, 1.7], dtype=torch.float64, device=device)))


def test_torch_compile_fullgraph_compiles_once_across_batches(device):
    import torch._dynamo.testing

    counter = torch._dynamo.testing.CompileCounter()

    def step(x, f):
        return sharpness(x, f).float().mean()

    compiled = torch.compile(step, fullgraph=True, backend=counter)
    g = torch.Generator().manual_seed(6)
    for _ in range(4):
        x = torch.randint(0, 256, (4, 3, 12, 12), dtype=torch.uint8, generator=g).to(device)
        f = (torch.rand(4, generator=g, dtype=torch.float64) * 2).to(device)
        assert torch.equal(compiled(x, f), step(x, f))
    assert counter.frame_count == 1


@pytest.mark.cuda
def test_cuda_writes_the_cpu_kernels_bytes():
    from ..conftest import require_cuda
    require_cuda()
    g = torch.Generator().manual_seed(9)
    x = torch.randint(0, 256, (16, 3, 31, 29), dtype=torch.uint8, generator=g)
    f = torch.rand(16, generator=g, dtype=torch.float64) * 3
    assert torch.equal(sharpness(x.cuda(), f.cuda()).cpu(), sharpness(x, f))


# --- pillow=True: Pillow's ImageEnhance.Sharpness (what timm's RandAugment runs) --------------------
# The reference below is written from Pillow's C, one float32 torch operation for each of its
# operations (Filter.c's ImagingFilter3x3 with ImageFilter.SMOOTH, Blend.c's ImagingBlend); Pillow
# itself is compared in tests/transforms/test_timm_pil_ops.py.

def pil_sharpness32(x, factors):
    """uint8 [N, C, H, W]: Pillow's result, computed with float32 tensors."""
    n, c, h, w = x.shape
    f32 = torch.float32
    side, centre = torch.tensor(1.0, dtype=f32) / 13.0, torch.tensor(5.0, dtype=f32) / 13.0
    v = x.to(f32)

    def taps(row, weight):  # KERNEL1x3 over rows `row` (a slice of v): (l k + c k_c) + r k
        return (row[..., :-2] * side + row[..., 1:-1] * weight) + row[..., 2:] * side

    smooth = x.clone()  # the border (all of an image under 3 a side) kept by the filter
    if h >= 3 and w >= 3:
        below, middle, above = taps(v[:, :, 2:], side), taps(v[:, :, 1:-1], centre), taps(v[:, :, :-2], side)
        smooth[:, :, 1:-1, 1:-1] = clip8(((torch.tensor(0.5, dtype=f32) + below) + middle) + above)
    alpha = factors.to(torch.float64).to(f32).view(n, 1, 1, 1)  # ImagingBlend's float alpha
    d = smooth.to(f32)
    return clip8(d + alpha * (v - d))


CONTRACTION_WITNESS = 1.030302882194519


def clip8(v):
    """Pillow's clip8: 0 at or below 0, 255 at or above, else truncated (NaN: 0, as the kernel)."""
    v = torch.where(v > 0, v, torch.zeros_like(v))
    return torch.where(v >= 255, torch.full_like(v, 255.0), v).to(torch.uint8)


@pytest.mark.parametrize("c", [3, 1])
@pytest.mark.parametrize("hw", [(1, 1), (2, 7), (3, 3), (23, 19), (5, 300), (12, 517)])
def test_pillow_arithmetic_equals_the_float32_reference(device, c, hw):
    g = torch.Generator().manual_seed(c * 1000 + hw[1])
    x = torch.randint(0, 256, (8, c) + hw, dtype=torch.uint8, generator=g)
    x[0] = 90  # flat
    x[1, ..., : hw[1] // 2] = 255  # a hard edge next to random values
    # timm's factors (0.1 .. 1.9), Pillow's shortcuts 0 and 1, and beyond (2.7, 40); 1.0303...: a
    # float32 at which Pillow's two roundings and one fused multiply-add often truncate apart
    # (tests/cpp/sharpness_test.cpp)
    factors = torch.tensor([0.0, 1.0, 0.1, CONTRACTION_WITNESS, 1.3, 1.9, 2.7, 40.0], dtype=torch.float64)
    got = sharpness(x.to(device), factors.to(device), pillow=True)
    assert got.dtype == torch.uint8 and got.shape == x.shape and got.is_contiguous()
    assert torch.equal(got.cpu(), pil_sharpness32(x, factors))
    assert torch.equal(got[1].cpu(), x[1])  # factor 1: the image itself
    if min(hw) >= 3 and c * hw[0] * hw[1] > 9:
        assert not torch.equal(got[2].cpu(), x[2])  # not vacuous: a factor of 0.1 smooths
    # and not torchvision's arithmetic: the same whole-value smoothing, but a blend of one rounding
    if min(hw) >= 10:
        assert not torch.equal(got.cpu(), sharpness(x, factors).cpu())


def test_pillow_arithmetic_with_any_strides_and_extreme_factors(device):
    g = torch.Generator().manual_seed(11)
    base = torch.randint(0, 256, (4, 30, 280, 3), dtype=torch.uint8, generator=g)
    x = base.permute(0, 3, 1, 2)[:, :, 3:25, 1:]  # channels last, cropped
    factors = torch.tensor([1e39, -3.0, 0.5, float("inf")], dtype=torch.float64)
    got = sharpness(x.to(device), factors.to(device), pillow=True)
    assert torch.equal(got.cpu(), pil_sharpness32(x.contiguous(), factors))
    assert torch.equal(got.cpu(), sharpness(x.contiguous(), factors, pillow=True))


def test_pillow_opcheck(device):
    g = torch.Generator().manual_seed(12)
    x = torch.randint(0, 256, (3, 3, 7, 6), dtype=torch.uint8, generator=g).to(device)
    torch.library.opcheck(torch.ops.prefetch.sharpness.default,
                          (x, torch.tensor([0.2, 1.0, 1.7], dtype=torch.float64, device=device), True))


@pytest.mark.cuda
def test_cuda_writes_the_cpu_kernels_bytes_in_pillows_arithmetic():
    from ..conftest import require_cuda
    require_cuda()
    g = torch.Generator().manual_seed(13)
    x = torch.randint(0, 256, (16, 3, 31, 290), dtype=torch.uint8, generator=g)
    f = torch.rand(16, generator=g, dtype=torch.float64) * 3
    f[0], f[1], f[2] = 1e39, 0.0, CONTRACTION_WITNESS
    assert torch.equal(sharpness(x.cuda(), f.cuda(), pillow=True).cpu(), sharpness(x, f, pillow=True))
