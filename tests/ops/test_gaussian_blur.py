"""prefetch.ops.gaussian_blur (torchvision's gaussian_blur on uint8, a sigma per image) against
references written here from torchvision's formulas (v2/functional/_misc.py): the 1-D kernels
``softmax(-(x / sigma)^2)`` over ``linspace(-lim, lim, k)``, reflect padding by ``k // 2``, the
2-D convolution with their outer product, ``round_()`` (half to even) and the cast.

Two references: the float64 convolution with the op's own float32 taps (the value the op rounds:
equal wherever it is more than ``EPS64`` from a half, never more than 1 apart) and torchvision's
own float32 arithmetic (its 2-D float32 kernel and convolution: equal wherever the float64 value
is more than ``EPS32`` from a half, which float32 sums of up to 529 taps can cross). Where
torchvision is installed, the op is also compared with it directly."""
import math

import pytest
import torch
import torch.nn.functional as F

from prefetch import _C
from prefetch.ops import gaussian_blur
from prefetch.ops.filters import gaussian_kernels

EPS64 = 1e-5  # the op's float32 row pass moves a value by at most 255 * 2^-24 ~ 1.5e-5 / 2
EPS32 = 1e-3


def taps64(k, sigma):
    """The float64 taps exp(-t^2 / (2 sigma^2)) at t = -(k-1)/2 .. (k-1)/2, normalised."""
    t = torch.arange(k, dtype=torch.float64) - (k - 1) / 2
    w = torch.exp(-t * t / (2 * float(sigma) ** 2))
    return w / w.sum()


def blur64(x, kx, ky):
    """The float64 value before rounding, [N, C, H, W]: each image convolved with the outer product
    of its taps (float32 [N, kx] and [N, ky], taken exactly) after reflect padding."""
    n, c, h, w = x.shape
    out = torch.empty(n, c, h, w, dtype=torch.float64)
    for i in range(n):
        k2 = ky[i].double().view(-1, 1) * kx[i].double().view(1, -1)
        p = F.pad(x[i:i + 1].double(), [kx.shape[1] // 2] * 2 + [ky.shape[1] // 2] * 2, mode="reflect")
        out[i] = F.conv2d(p, k2.expand(c, 1, *k2.shape), groups=c)[0]
    return out


def torchvision_float32(x, ksize, sigmas):
    """torchvision's gaussian_blur_image on each uint8 image, its float32 arithmetic written out:
    its 1-D kernels, their float32 outer product, float32 padding and convolution, round, cast."""
    kxs, kys = ksize
    out = []
    for i in range(x.shape[0]):
        def kernel1d(k, s):
            lim = (k - 1) / (2.0 * math.sqrt(2.0))
            t = torch.linspace(-lim, lim, steps=k, dtype=torch.float32)
            return torch.softmax(t.div(float(s)).pow(2).neg(), dim=0)
        k2 = kernel1d(kys, sigmas[i][1]).unsqueeze(-1) * kernel1d(kxs, sigmas[i][0])
        img = x[i:i + 1].float()
        c = img.shape[1]
        p = F.pad(img, [kxs // 2, kxs // 2, kys // 2, kys // 2], mode="reflect")
        out.append(F.conv2d(p, k2.expand(c, 1, *k2.shape), groups=c).round_().to(torch.uint8))
    return torch.cat(out)


def assert_rounded(got, value, eps, min_clear=0.5):
    want = torch.round(value)  # half to even, as torch's round_
    dist = (value - torch.floor(value) - 0.5).abs()
    clear = dist > eps
    diff = (got.cpu().double() - want).abs()
    assert diff.max() <= 1, "off by %d" % diff.max()
    assert torch.equal(got.cpu().double()[clear], want[clear]), "%d clear values differ" % int((diff[clear] > 0).sum())
    assert clear.double().mean() >= min_clear  # not vacuous


def random_images(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, shape, dtype=torch.uint8, generator=g)


@pytest.mark.parametrize("c", [3, 1, 4])
@pytest.mark.parametrize("ksize", [(3, 3), (5, 9), (23, 23), (1, 7), (7, 1)])
def test_per_image_sigmas_against_the_float64_reference(device, c, ksize):
    x = random_images((6, c, 31, 29), c + ksize[0])
    x[0] = 77  # flat: the blur is the image
    x[1, :, :, :10] = 0  # a hard edge
    sigmas = torch.tensor([[0.1, 0.1], [0.5, 2.0], [1.0, 1.0], [2.0, 0.3], [5.0, 5.0], [0.8, 1.7]], dtype=torch.float64)
    got = gaussian_blur(x.to(device), ksize, sigmas.to(device))
    assert got.dtype == torch.uint8 and got.shape == x.shape and got.is_contiguous() and got.device == torch.device(device)
    kx, ky = gaussian_kernels(ksize[0], sigmas[:, 0]), gaussian_kernels(ksize[1], sigmas[:, 1])
    assert_rounded(got, blur64(x, kx, ky), EPS64)
    assert torch.equal(got[0].cpu(), x[0])


@pytest.mark.parametrize("ksize", [(3, 3), (23, 23), (9, 5)])
def test_equals_torchvisions_float32_arithmetic_away_from_halves(ksize):
    x = random_images((5, 3, 40, 37), 11)
    sigmas = [(s, s) for s in (0.1, 0.6, 1.3, 2.0, 4.5)]  # torchvision's GaussianBlur: one sigma for both sides
    got = gaussian_blur(x, ksize, torch.tensor([s for s, _ in sigmas], dtype=torch.float64))
    want = torchvision_float32(x, ksize, sigmas)
    kx = gaussian_kernels(ksize[0], torch.tensor([s for s, _ in sigmas]))
    ky = gaussian_kernels(ksize[1], torch.tensor([s for _, s in sigmas]))
    value = blur64(x, kx, ky)
    dist = (value - torch.floor(value) - 0.5).abs()
    differ = got != want
    assert (got.int() - want.int()).abs().max() <= 1
    assert not differ[dist > EPS32].any(), "differs from torchvision's float32 away from a half"
    assert differ.double().mean() < 1e-3  # the near-halves are rare


def test_the_kernels_are_torchvisions_bit_for_bit_and_the_gaussian_formula():
    sigmas = torch.tensor([0.1, 0.5, 1.0, 1.7, 2.0, 9.5], dtype=torch.float64)
    for k in (1, 3, 5, 9, 23):
        got = gaussian_kernels(k, sigmas)
        assert got.dtype == torch.float32 and got.shape == (len(sigmas), k)
        for i, s in enumerate(sigmas.tolist()):
            lim = (k - 1) / (2.0 * math.sqrt(2.0))
            t = torch.linspace(-lim, lim, steps=k, dtype=torch.float32)
            assert torch.equal(got[i], torch.softmax(t.div(s).pow(2).neg(), dim=0)), (k, s)
            assert torch.allclose(got[i].double(), taps64(k, s), rtol=0, atol=2e-7), (k, s)


def test_against_torchvision_itself_where_installed():
    tvf = pytest.importorskip("torchvision.transforms.v2.functional")
    x = random_images((4, 3, 33, 24), 12)
    sigmas = [0.3, 1.1, 2.0, 3.3]
    got = gaussian_blur(x, 23, torch.tensor(sigmas, dtype=torch.float64))
    want = torch.stack([tvf.gaussian_blur(x[i], [23, 23], [s, s]) for i, s in enumerate(sigmas)])
    assert (got.int() - want.int()).abs().max() <= 1
    assert (got != want).double().mean() < 1e-3


def test_one_tap_is_the_image_and_a_nan_sigma_is_named():
    x = random_images((3, 3, 9, 8), 23)
    assert torch.equal(gaussian_blur(x, 1, torch.tensor([0.5, 1.0, 9.0])), x)
    with pytest.raises(ValueError, match=r"every sigma must be > 0, got \[nan\]"):
        gaussian_blur(x, 3, torch.tensor([1.0, float("nan"), 1.0]))


def test_the_fakes_messages_are_the_kernels_for_every_dtype():
    from torch._subclasses.fake_tensor import FakeTensorMode
    images = torch.zeros(2, 3, 4, 5, dtype=torch.uint8)
    for dtype in (torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.uint8):
        bad = torch.zeros(2, 3, dtype=dtype)
        with pytest.raises(RuntimeError) as real:
            _op(images, bad, K3)
        with FakeTensorMode() as mode:
            with pytest.raises(RuntimeError) as fake:
                _op(mode.from_tensor(images), mode.from_tensor(bad), mode.from_tensor(K3))
        assert str(real.value).splitlines()[0] in str(fake.value), dtype


def test_default_sigma_scalar_and_pair_are_torchvisions():
    x = random_images((3, 3, 12, 14), 13)
    # torchvision's default: 0.15 * ksize + 0.35 per side
    assert torch.equal(gaussian_blur(x, (5, 7)),
                       gaussian_blur(x, (5, 7), torch.tensor([[5 * 0.15 + 0.35, 7 * 0.15 + 0.35]] * 3)))
    assert torch.equal(gaussian_blur(x, 5, 1.5), gaussian_blur(x, 5, torch.full((3,), 1.5)))
    assert torch.equal(gaussian_blur(x, 5, (0.5, 2.0)), gaussian_blur(x, 5, torch.tensor([[0.5, 2.0]] * 3)))
    assert torch.equal(gaussian_blur(x, 5, [1.5]), gaussian_blur(x, 5, 1.5))


@pytest.mark.parametrize("hw, ksize", [((1, 1), (1, 1)), ((2, 2), (3, 3)), ((1, 9), (17, 1)), ((9, 1), (1, 17)),
                                       ((3, 5), (9, 5))])
def test_the_smallest_images_and_the_widest_kernels_reflect_padding_allows(device, hw, ksize):
    x = random_images((3, 3) + hw, 14)
    sigmas = torch.tensor([0.4, 1.0, 3.0], dtype=torch.float64)
    got = gaussian_blur(x.to(device), ksize, sigmas.to(device))
    kx, ky = gaussian_kernels(ksize[0], sigmas), gaussian_kernels(ksize[1], sigmas)
    assert_rounded(got, blur64(x, kx, ky), EPS64, min_clear=0.0)


def test_any_input_strides(device):
    base = random_images((4, 30, 26, 3), 15)
    x = base.permute(0, 3, 1, 2)[:, :, 3:25, ::2]  # channels last, cropped, every other column
    s = torch.tensor([0.5, 1.0, 1.5, 2.0], dtype=torch.float64)
    got = gaussian_blur(x.to(device), (7, 5), s.to(device))
    assert torch.equal(got.cpu(), gaussian_blur(x.contiguous(), (7, 5), s))


def test_wide_images_span_several_bands_and_any_thread_split():
    # Rows of 4200 values: the CPU kernel's bands (a 256 KiB buffer) are 16 rows, and the threads'
    # chunks cut planes anywhere.
    x = random_images((3, 1, 50, 4200), 16)
    s = torch.tensor([0.7, 2.5, 6.0], dtype=torch.float64)
    previous = torch.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            results.append(gaussian_blur(x, 23, s))
    finally:
        torch.set_num_threads(previous)
    assert all(torch.equal(r, results[0]) for r in results)
    kx = ky = gaussian_kernels(23, s)
    assert_rounded(results[0], blur64(x, kx, ky), EPS64)


def test_every_cpu_build_writes_the_same_bytes():
    from prefetch.ops import cpu_kernel_build, set_cpu_kernel_build
    x = random_images((2, 3, 70, 45), 17)
    s = torch.tensor([0.9, 3.0], dtype=torch.float64)
    before = cpu_kernel_build()
    try:
        outs = {}
        for build in ("baseline", "avx2", "avx512"):
            set_cpu_kernel_build(build)
            outs[cpu_kernel_build()] = gaussian_blur(x, (23, 9), s)
    finally:
        set_cpu_kernel_build(before)
    if len(outs) < 2:
        pytest.skip("this CPU has only the baseline build")
    first = next(iter(outs.values()))
    assert all(torch.equal(o, first) for o in outs.values()), list(outs)


def test_empty_batches(device):
    for shape in [(0, 3, 5, 5), (2, 3, 0, 4), (2, 1, 4, 0)]:
        x = torch.zeros(shape, dtype=torch.uint8, device=device)
        assert gaussian_blur(x, 3, 1.0).shape == shape


def _op(images, kx, ky):
    return torch.ops.prefetch.gaussian_blur.default(images, kx, ky)


U8 = torch.zeros(2, 3, 4, 5, dtype=torch.uint8)
K3 = torch.full((2, 3), 1 / 3)


@pytest.mark.parametrize("call, error, message", [
    (lambda: gaussian_blur(U8, 4), ValueError, "odd positive"),
    (lambda: gaussian_blur(U8, (3, 3, 3)), ValueError, "odd positive"),
    (lambda: gaussian_blur(U8, 3, 0.0), ValueError, "every sigma must be > 0"),
    (lambda: gaussian_blur(U8, 3, torch.ones(3)), ValueError, r"\[N\] or \[N, 2\]"),
    (lambda: gaussian_blur(U8, 3, (1.0, 2.0, 3.0)), ValueError, "one or two"),
    (lambda: gaussian_blur(U8.float(), 3), RuntimeError, r"uint8 \[N, C, H, W\]"),
    (lambda: gaussian_blur(U8, (11, 3)), RuntimeError,
     r"kernel_x's kernel size 11 pads each side by 5, .* width \(5\): use a kernel size of at most 9"),
    (lambda: gaussian_blur(U8, (3, 9)), RuntimeError, r"kernel_y's kernel size 9 .* height \(4\)"),
    (lambda: _op(U8, K3.double(), K3), RuntimeError, r"kernel_x must be float32 \[N, k\] with N = 2"),
    (lambda: _op(U8, K3, K3[:1]), RuntimeError, r"kernel_y must be float32 \[N, k\] with N = 2"),
    (lambda: _op(U8, torch.ones(2, 2), K3), RuntimeError, "odd and positive, got 2"),
    (lambda: _op(U8, K3, K3.to("meta")), RuntimeError, "kernel_y is on meta"),
])
def test_bad_arguments_are_named(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_the_fake_refuses_what_the_kernel_refuses():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        images = mode.from_tensor(U8)
        assert _op(images, mode.from_tensor(K3), mode.from_tensor(K3)).shape == U8.shape
        with pytest.raises(RuntimeError, match="pads each side by 5"):
            _op(images, mode.from_tensor(torch.ones(2, 11)), mode.from_tensor(K3))
        with pytest.raises(RuntimeError, match="odd and positive"):
            _op(images, mode.from_tensor(K3), mode.from_tensor(torch.ones(2, 2)))


def test_opcheck(device):
    x = random_images((3, 3, 7, 6), 18).to(device)
    k = gaussian_kernels(5, torch.tensor([0.5, 1.0, 2.0])).to(device)
    torch.library.opcheck(torch.ops.prefetch.gaussian_blur.default, (x, k, gaussian_kernels(3, torch.ones(3)).to(device)))


def test_torch_compile_fullgraph_compiles_once_across_batches(device):
    import torch._dynamo.testing

    counter = torch._dynamo.testing.CompileCounter()

    def step(x, s):
        return gaussian_blur(x, 7, s).float().mean()

    compiled = torch.compile(step, fullgraph=True, backend=counter)
    g = torch.Generator().manual_seed(19)
    for _ in range(3):
        x = torch.randint(0, 256, (4, 3, 12, 12), dtype=torch.uint8, generator=g).to(device)
        s = (torch.rand(4, generator=g, dtype=torch.float64) * 2 + 0.1).to(device)
        assert torch.equal(compiled(x, s), step(x, s))
    assert counter.frame_count == 1


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_kernel_arguments_are_complete(target):
    images = random_images((2, 3, 5, 12), 20)[:, :, :, ::2]  # any strides
    kx, ky = gaussian_kernels(5, torch.ones(2)), gaussian_kernels(3, torch.ones(2))
    d = _C._gaussian_blur_kernel_args(target, images, kx, ky)
    assert d["problems"] == [] and d["images"] and d["uploaded"] is False
    assert list(d["sizes"]) == [2, 3, 5, 6] and list(d["strides"]) == list(images.stride())
    assert (d["kx"], d["ky"]) == (5, 3)
    assert d["rows"] is (target == "cuda")  # only a CUDA kernel has a row-pass buffer


@pytest.mark.parametrize("field", ["images", "kernel_x", "kernel_y", "out", "rows", "kx"])
def test_a_field_left_unset_is_named(field):
    kx = gaussian_kernels(3, torch.ones(2))
    d = _C._gaussian_blur_kernel_args("cuda", torch.zeros(2, 1, 4, 4, dtype=torch.uint8), kx, kx, drop=field)
    assert any(line.startswith(field) for line in d["problems"]), d["problems"]


@pytest.mark.cuda
def test_cuda_writes_the_cpu_kernels_bytes():
    from ..conftest import require_cuda
    require_cuda()
    x = random_images((16, 3, 97, 83), 21)
    s = torch.rand(16, 2, generator=torch.Generator().manual_seed(22), dtype=torch.float64) * 3 + 0.1
    for ksize in ((23, 23), (3, 5), (1, 1)):
        assert torch.equal(gaussian_blur(x.cuda(), ksize, s.cuda()).cpu(), gaussian_blur(x, ksize, s))
