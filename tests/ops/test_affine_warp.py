"""prefetch.ops.affine_warp (each uint8 image through its own affine map, nearest or bilinear,
with torchvision's fill) against a float64 reference written here from grid_sample's rule.

The kernel computes its source points in float32, so a source point within a float32 rounding of
a nearest-neighbour tie may take either pixel, and a bilinear value within one of a rounding
boundary may round either way. The tests require: nearest equal wherever the point is more than
``EPS`` pixel from a tie; bilinear within 1 everywhere and equal wherever the float64 value is more
than ``EPS`` from a rounding boundary — a wrong map, tap, weight or fill shows on most pixels
(docs/transforms.md states this tolerance)."""
import math

import pytest
import torch

from prefetch.ops import affine_warp

EPS = 1e-3


def warp64(x, m, bilinear, fill):
    """One image ``[C, H, W]`` through pixel map ``m`` (6 floats) in float64: the values before
    rounding, and each pixel's distance to a nearest tie (bilinear: 1, no tie)."""
    c, h, w = x.shape
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float64), torch.arange(w, dtype=torch.float64),
                            indexing="ij")
    sx = m[0] * xs + m[1] * ys + m[2]
    sy = m[3] * xs + m[4] * ys + m[5]
    xd = x.double()
    fills = None if fill is None else torch.tensor(
        [fill[i % len(fill)] for i in range(c)], dtype=torch.float64).view(c, 1, 1)
    if not bilinear:
        rx, ry = torch.round(sx), torch.round(sy)
        tie = torch.minimum((sx - torch.floor(sx) - 0.5).abs(), (sy - torch.floor(sy) - 0.5).abs())
        inside = (rx >= 0) & (rx < w) & (ry >= 0) & (ry < h)
        vals = torch.zeros(c, h, w, dtype=torch.float64)
        vals[:, inside] = xd[:, ry[inside].long(), rx[inside].long()]
        if fills is not None:
            vals = torch.where(inside, vals, fills.expand(c, h, w))
        return vals, tie
    x0, y0 = torch.floor(sx), torch.floor(sy)
    vals = torch.zeros(c, h, w, dtype=torch.float64)
    mask = torch.zeros(h, w, dtype=torch.float64)
    for dx in (0, 1):
        for dy in (0, 1):
            xx, yy = x0 + dx, y0 + dy
            wgt = (1 - (sx - xx).abs()) * (1 - (sy - yy).abs())
            ok = (xx >= 0) & (xx < w) & (yy >= 0) & (yy < h)
            vals[:, ok] += wgt[ok] * xd[:, yy[ok].long(), xx[ok].long()]
            mask[ok] += wgt[ok]
    if fills is not None:
        vals = (vals - fills) * mask + fills
    return vals, torch.ones(h, w, dtype=torch.float64)


def random_maps(n, h, w, g):
    """Rotations, shears, translations and scalings about the centre, as pixel maps."""
    rows = []
    for _ in range(n):
        angle = (torch.rand(1, generator=g).item() - 0.5) * 2 * math.pi
        shear = (torch.rand(1, generator=g).item() - 0.5) * 1.2
        scale = 0.6 + 0.9 * torch.rand(1, generator=g).item()
        tx, ty = ((torch.rand(2, generator=g) - 0.5) * w).tolist()
        a, b = scale * math.cos(angle), scale * (-math.sin(angle) + shear)
        d, e = scale * math.sin(angle), scale * math.cos(angle)
        ox, oy = (w - 1) / 2, (h - 1) / 2
        rows.append([a, b, ox - a * ox - b * oy + tx, d, e, oy - d * ox - e * oy + ty])
    return torch.tensor(rows, dtype=torch.float64)


def check(got, x, maps64, bilinear, fill):
    clear_fraction = []
    for i in range(x.shape[0]):
        value, tie = warp64(x[i], maps64[i].tolist(), bilinear, fill)
        g = got[i].cpu().double()
        if not bilinear:
            clear = (tie > EPS).expand_as(value)
            assert torch.equal(g[clear], value[clear]), "image %d: %d clear pixels differ" % (
                i, int((g[clear] != value[clear]).sum()))
        else:
            v = value.clamp(0, 255)
            want = torch.round(v)
            clear = (v - torch.floor(v) - 0.5).abs() > EPS
            diff = (g - want).abs()
            assert diff.max() <= 1, "image %d: off by %d" % (i, diff.max())
            assert torch.equal(g[clear], want[clear]), "image %d: %d clear pixels differ" % (
                i, int((diff[clear] > 0).sum()))
        clear_fraction.append(clear.double().mean().item())
    assert sum(clear_fraction) / len(clear_fraction) > 0.9  # the comparison is not vacuous


@pytest.mark.parametrize("bilinear", [False, True])
@pytest.mark.parametrize("fill", [None, [9.0], [0.0, 128.0, 255.0]])
@pytest.mark.parametrize("c", [3, 1])
def test_random_maps_against_the_float64_reference(device, bilinear, fill, c):
    if fill is not None and len(fill) not in (1, c):
        pytest.skip("a fill of 3 values needs 3 channels")
    g = torch.Generator().manual_seed(11 + c)
    x = torch.randint(0, 256, (9, c, 19, 23), dtype=torch.uint8, generator=g)
    maps64 = random_maps(9, 19, 23, g)
    got = affine_warp(x.to(device), maps64.float().to(device),
                      interpolation="bilinear" if bilinear else "nearest", fill=fill)
    assert got.dtype == torch.uint8 and got.shape == x.shape and got.is_contiguous()
    # the float32 map the kernel reads, in float64, is the reference's
    check(got, x, maps64.float().double(), bilinear, fill)


@pytest.mark.parametrize("bilinear", [False, True])
def test_whole_pixel_shifts_are_exact_copies_with_the_fill_outside(device, bilinear):
    x = torch.randint(0, 256, (3, 3, 8, 10), dtype=torch.uint8, generator=torch.Generator().manual_seed(2))
    shifts = [(0, 0), (3, -2), (-12, 1)]  # the last wholly outside
    maps = torch.tensor([[1, 0, -dx, 0, 1, -dy] for dx, dy in shifts], dtype=torch.float32)
    got = affine_warp(x.to(device), maps.to(device), interpolation="bilinear" if bilinear else "nearest",
                      fill=[5, 6, 7]).cpu()
    for i, (dx, dy) in enumerate(shifts):
        want = torch.tensor([5, 6, 7], dtype=torch.uint8).view(3, 1, 1).repeat(1, 8, 10)
        for y in range(8):
            for xx in range(10):
                if 0 <= y - dy < 8 and 0 <= xx - dx < 10:
                    want[:, y, xx] = x[i][:, y - dy, xx - dx]
        assert torch.equal(got[i], want), (i, dx, dy)


def test_any_input_strides(device):
    g = torch.Generator().manual_seed(4)
    base = torch.randint(0, 256, (4, 20, 17, 3), dtype=torch.uint8, generator=g)
    x = base.permute(0, 3, 1, 2)[:, :, 2:15, ::2]  # channels last, cropped, every other column
    maps = random_maps(4, 13, 9, g).float()
    for mode in ("nearest", "bilinear"):
        got = affine_warp(x.to(device), maps.to(device), interpolation=mode, fill=3)
        assert torch.equal(got.cpu(), affine_warp(x.contiguous(), maps, interpolation=mode, fill=3))


def test_empty_batches_and_images(device):
    for shape in [(0, 3, 5, 5), (2, 3, 0, 4), (2, 1, 4, 0)]:
        x = torch.zeros(shape, dtype=torch.uint8, device=device)
        out = affine_warp(x, torch.zeros(shape[0], 6, device=device))
        assert out.shape == shape


def test_a_map_that_is_not_finite_gives_the_fill_never_garbage():
    x = torch.full((3, 3, 4, 4), 200, dtype=torch.uint8)
    maps = torch.tensor([[float("nan")] * 6, [float("inf"), 0, 0, 0, 1, 0], [1, 0, 1e30, 0, 1, -1e30]])
    for mode in ("nearest", "bilinear"):
        out = affine_warp(x, maps, interpolation=mode, fill=[1, 2, 3])
        assert torch.equal(out, torch.tensor([1, 2, 3], dtype=torch.uint8).view(1, 3, 1, 1).expand(3, 3, 4, 4))


@pytest.mark.parametrize("call, message", [
    (lambda: affine_warp(torch.zeros(2, 3, 4, 4), torch.zeros(2, 6)), r"uint8 \[N, C, H, W\]"),
    (lambda: affine_warp(torch.zeros(2, 4, 4, dtype=torch.uint8), torch.zeros(2, 6)), r"uint8 \[N, C, H, W\]"),
    (lambda: affine_warp(torch.zeros(2, 17, 4, 4, dtype=torch.uint8), torch.zeros(2, 6)), "1 to 16 channels"),
    (lambda: affine_warp(torch.zeros(2, 3, 4, 4, dtype=torch.uint8), torch.zeros(3, 6)), r"\[N, 6\] = \[2, 6\]"),
    (lambda: affine_warp(torch.zeros(1, 1, 1, 2**21 + 1, dtype=torch.uint8), torch.zeros(1, 6)),
     r"at most 2097152 pixels a side, got H = 1, W = 2097153"),
    (lambda: affine_warp(torch.zeros(2, 3, 4, 4, dtype=torch.uint8), torch.zeros(2, 6, dtype=torch.float64)),
     "float32"),
    (lambda: affine_warp(torch.zeros(2, 3, 4, 4, dtype=torch.uint8), torch.zeros(2, 6), fill=[1, 2]),
     r"1 value or one per channel \(3\)"),
    (lambda: affine_warp(torch.zeros(2, 3, 4, 4, dtype=torch.uint8), torch.zeros(2, 6), fill=300),
     r"fill\[0\] must lie in \[0, 255\]"),
    (lambda: affine_warp(torch.zeros(2, 3, 4, 4, dtype=torch.uint8), torch.zeros(2, 6), interpolation="bicubic"),
     "'nearest' or 'bilinear'"),
])
def test_bad_arguments_are_named(call, message):
    with pytest.raises((RuntimeError, ValueError), match=message):
        call()


def test_meta_matrices_next_to_cpu_images_are_refused():
    with pytest.raises(RuntimeError, match="matrices is on meta"):
        affine_warp(torch.zeros(2, 3, 4, 4, dtype=torch.uint8), torch.zeros(2, 6, device="meta"))


@pytest.mark.parametrize("kwargs", [dict(), dict(bilinear=True, fill=[4.0]), dict(fill=[1.0, 2.0, 3.0])])
def test_opcheck(device, kwargs):
    g = torch.Generator().manual_seed(5)
    x = torch.randint(0, 256, (3, 3, 7, 6), dtype=torch.uint8, generator=g).to(device)
    maps = random_maps(3, 7, 6, g).float().to(device)
    torch.library.opcheck(torch.ops.prefetch.affine_warp.default, (x, maps), kwargs)


def test_torch_compile_fullgraph_compiles_once_across_batches(device):
    """New maps every batch (as each batch draws its own) reuse the one graph."""
    import torch._dynamo.testing

    counter = torch._dynamo.testing.CompileCounter()

    def step(x, m):
        return affine_warp(x, m, interpolation="bilinear", fill=[0.0, 0.0, 0.0]).float().mean()

    compiled = torch.compile(step, fullgraph=True, backend=counter)
    g = torch.Generator().manual_seed(6)
    for _ in range(4):
        x = torch.randint(0, 256, (4, 3, 12, 12), dtype=torch.uint8, generator=g).to(device)
        m = random_maps(4, 12, 12, g).float().to(device)
        assert torch.equal(compiled(x, m), step(x, m))
    assert counter.frame_count == 1


@pytest.mark.cuda
def test_cuda_writes_the_cpu_kernels_bytes():
    """Both backends round every product and sum on its own (no FMA): the same bytes."""
    from ..conftest import require_cuda
    require_cuda()
    g = torch.Generator().manual_seed(9)
    x = torch.randint(0, 256, (16, 3, 31, 29), dtype=torch.uint8, generator=g)
    maps = random_maps(16, 31, 29, g).float()
    for mode in ("nearest", "bilinear"):
        for fill in (None, [10.0, 20.0, 30.0]):
            cpu = affine_warp(x, maps, interpolation=mode, fill=fill)
            gpu = affine_warp(x.cuda(), maps.cuda(), interpolation=mode, fill=fill)
            assert torch.equal(gpu.cpu(), cpu), (mode, fill)
