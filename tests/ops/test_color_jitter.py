"""prefetch.ops.color_jitter (each image's own chain of brightness, contrast, saturation and hue)
against torchvision v2's formulas written here in float32 torch, operation for operation, one
image and one step at a time: equal value for value; its pillow_color step against Pillow's
formulas (Convert.c's grey, Blend.c's blend) written the same way, and against Pillow itself.
(The policies' float64 references of the same ops, which bound the float32 arithmetic itself, are
in tests/transforms/test_policy_ops.py.)"""
import pytest
import torch

from prefetch.ops import COLOR_STEPS, color_jitter

# A factor whose products and sums, rounded each (Pillow's Blend.c), differ from one fused
# multiply-add for 191 of the 65,536 (grey, value) pairs (tests/ops/test_sharpness.py found it for
# the same blend): a build that contracts them (GCC does wherever the target has FMA, unless the
# file includes common/no_contraction.h) writes other bytes.
from .test_sharpness import CONTRACTION_WITNESS

BRIGHTNESS, CONTRAST, SATURATION, HUE, PILLOW_COLOR = (
    COLOR_STEPS.index(s) for s in ("brightness", "contrast", "saturation", "hue", "pillow_color"))


def fma32(a, b, c):
    """float32 ``a * b + c`` in one rounding, exactly (a, b, c float32 tensors, a * b exact in
    float64: 24-bit by 24-bit): the float64 sum s and its error e (TwoSum); float32(s) is the
    answer unless s lies exactly halfway between two float32 values (the one case where the
    float64 rounding could decide the float32 one), where the exact s + e picks the one on e's
    side, and e = 0 leaves the tie to even (float32(s))."""
    a, b, c = (t.to(torch.float64) for t in (a, b, c))
    q = a * b
    s = q + c
    bb = s - c
    e = (c - (s - bb)) + (q - bb)
    r = s.to(torch.float32)
    other = torch.nextafter(r, torch.where(s > r.double(), torch.inf, -torch.inf).to(torch.float32))
    halfway = (r.double() != s) & (2 * s == r.double() + other.double())
    above, below = torch.maximum(r, other), torch.minimum(r, other)
    return torch.where(halfway & (e > 0), above, torch.where(halfway & (e < 0), below, r))


def test_the_fma_reference_rounds_once_at_float32_midpoints():
    """Where the float64 sum lands exactly between two float32 values, only the exact value
    decides (random triples never land there): 1 + 2^-24 -/+ 2^-54 and the ties themselves."""
    t = lambda *v: torch.tensor(v, dtype=torch.float64).to(torch.float32)  # noqa: E731
    k = 2.0 ** -27
    a = t(32767 * k, 1025 * k, 2.0 ** -12, 2.0 ** -12)
    b = t(32769 * k, 1047553 * k, 2.0 ** -12, 2.0 ** -12)
    c = t(1.0, 1.0, 1.0, 1.0 + 2.0 ** -23)
    # (2^15 - 1)(2^15 + 1) = 2^30 - 1 and 1025 * 1047553 = 2^30 + 1: a * b = 2^-24 -/+ 2^-54
    want = t(1.0, 1.0 + 2.0 ** -23, 1.0, 1.0 + 2.0 ** -22)  # below, above, and ties to even
    assert torch.equal(fma32(a, b, c), want)


def blend(x, other, factor):
    """torchvision's _blend on uint8: x * f + other * (1 - f), where add_ with alpha is one
    fused multiply-add in torch's vectorised loop (fma32 here: the loop's scalar remainder, a
    tensor's last few values, rounds twice — 76.99999 for a flat 19 x 23 image's last 4 values at
    factor 0.1056, 77.0 for the rest — so torch itself is not a reference for every position)."""
    p = x.float().mul(factor)
    alpha = torch.tensor(1.0 - factor, dtype=torch.float64).to(torch.float32)
    other = torch.as_tensor(other, dtype=torch.float32).expand_as(p)
    return fma32(other, alpha.expand_as(p), p).clamp_(0, 255).to(torch.uint8)


def grey(x):
    """torchvision's r * 0.2989 + g * 0.587 + b * 0.114 (add_ with alpha: fused), floored."""
    r, g, b = x.unbind(dim=-3)
    f32 = lambda v: torch.tensor(v, dtype=torch.float64).to(torch.float32).expand_as(r)  # noqa: E731
    return fma32(b, f32(0.114), fma32(g, f32(0.587), r.mul(0.2989))).floor_().unsqueeze(-3)


def hue(x, factor):
    """torchvision v2's adjust_hue_image on one uint8 image [3, H, W]."""
    img = x.to(torch.float32).mul_(1.0 / 255)
    r, g, _ = img.unbind(dim=-3)
    minc, maxc = torch.aminmax(img, dim=-3)
    eqc = maxc == minc
    channels_range = maxc - minc
    ones = torch.ones_like(maxc)
    s = channels_range / torch.where(eqc, ones, maxc)
    divisor = torch.where(eqc, ones, channels_range).unsqueeze_(dim=-3)
    rc, gc, bc = ((maxc.unsqueeze(dim=-3) - img) / divisor).unbind(dim=-3)
    not_r = maxc != r
    is_g = maxc == g
    hg = rc.add(2.0).sub_(bc).mul_(is_g & not_r)
    hr = bc.sub_(gc).mul_(~not_r)
    hb = gc.add_(4.0).sub_(rc).mul_(not_r.logical_and_(is_g.logical_not_()))
    h = hr.add_(hg).add_(hb).mul_(1.0 / 6.0).add_(1.0).fmod_(1.0)
    h = h.add_(factor).remainder_(1.0)
    h6 = h.mul(6)
    i = torch.floor(h6)
    f = h6.sub_(i)
    i = i.to(torch.int32).remainder_(6)
    sxf = s * f
    one_minus_s = 1.0 - s
    q = (1.0 - sxf).mul_(maxc).clamp_(0.0, 1.0)
    t = sxf.add_(one_minus_s).mul_(maxc).clamp_(0.0, 1.0)
    p = one_minus_s.mul_(maxc).clamp_(0.0, 1.0)
    vpqt = torch.stack((maxc, p, q, t), dim=-3)
    select = torch.tensor([[0, 2, 1, 1, 3, 0], [3, 0, 0, 2, 1, 1], [1, 1, 3, 0, 0, 2]])[:, i.long()]
    return vpqt.gather(-3, select).mul_(255.0 + 1.0 - 1e-3).to(torch.uint8)


def pillow_color(x, factor):
    """Pillow's ImageEnhance.Color(image).enhance(factor) on one uint8 image [C, H, W]: the grey
    Convert.c's L24 for RGB (the image itself for L), then Blend.c's ``(float)(grey + alpha * (v -
    grey))`` with alpha a C float, the product and the sum each rounded to float32 (two torch ops),
    and its clip: 0 at or below 0 (NaN included), 255 at or above 255, else truncated."""
    v = x.to(torch.int64)
    if x.shape[0] == 3:
        r, g, b = v.unbind(dim=0)
        grey = ((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16).unsqueeze(0)
    else:
        grey = v
    alpha = torch.tensor(factor, dtype=torch.float64).to(torch.float32)
    blended = grey.to(torch.float32) + alpha * (v - grey).to(torch.float32)
    blended = torch.where(blended > 0, blended, 0.0)
    return torch.where(blended >= 255, 255.0, blended).to(torch.uint8)


def step_reference(x, step, factor):
    """One step of torchvision v2 on one uint8 image [C, H, W]."""
    c = x.shape[0]
    if step == BRIGHTNESS:
        return x.float().mul(factor).clamp_(0, 255).to(torch.uint8)
    if step == CONTRAST:
        g = grey(x.float()) if c == 3 else x.float()
        return blend(x, g.mean(dim=(-3, -2, -1), keepdim=True), factor)
    if step == SATURATION:
        return x.clone() if c == 1 else blend(x, grey(x.float()), factor)
    if step == HUE:
        return x.clone() if c == 1 else hue(x, factor)
    if step == PILLOW_COLOR:
        return pillow_color(x, factor)
    return x.clone()


def chain_reference(x, steps, factors):
    out = []
    for i in range(x.shape[0]):
        y = x[i]
        for s, f in zip(steps[i].tolist(), factors[i].tolist()):
            y = step_reference(y, s, f)
        out.append(y)
    return torch.stack(out)


def draw(n, k, g, hue_range=0.5):
    steps = torch.randint(0, len(COLOR_STEPS), (n, k), generator=g)
    factors = torch.rand(n, k, generator=g, dtype=torch.float64) * 2
    hue_factors = (torch.rand(n, k, generator=g, dtype=torch.float64) * 2 - 1) * hue_range
    pillow_factors = torch.rand(n, k, generator=g, dtype=torch.float64) * 4 - 1  # any: [-1, 3)
    factors = torch.where(steps == PILLOW_COLOR, pillow_factors, factors)
    return steps, torch.where(steps == HUE, hue_factors, factors)


def images(n, c, h, w, g):
    x = torch.randint(0, 256, (n, c, h, w), dtype=torch.uint8, generator=g)
    x[0] = 77  # flat: no contrast, no saturation, no hue
    if n > 2:
        x[1, :, :, : w // 2] = 255  # saturated runs
        x[2, 0] = x[2, -1]  # equal channels: the hue's ties between maxima
    return x


@pytest.mark.parametrize("c", [3, 1])
def test_chains_equal_torchvisions_ops_one_step_at_a_time(c):
    g = torch.Generator().manual_seed(c)
    for k in (1, 2, 4, 6):  # 6: a chain may repeat a step (two Contrasts read two means)
        x = images(10, c, 19, 23, g)
        steps, factors = draw(10, k, g)
        got = color_jitter(x, steps, factors)
        assert got.dtype == torch.uint8 and got.shape == x.shape and got.is_contiguous()
        assert torch.equal(got, chain_reference(x, steps, factors)), (k, steps)
        assert not torch.equal(got, x)


def test_every_order_of_colorjitters_four_steps():
    """ColorJitter's chains: the four steps in each of the 24 orders, factors in its ranges."""
    import itertools
    orders = torch.tensor(list(itertools.permutations([BRIGHTNESS, CONTRAST, SATURATION, HUE])))
    g = torch.Generator().manual_seed(3)
    x = images(24, 3, 16, 21, g)
    factors = 0.6 + 0.8 * torch.rand(24, 4, generator=g, dtype=torch.float64)
    factors = torch.where(orders == HUE, factors - 1.0, factors)  # hue in [-0.4, 0.4]
    assert torch.equal(color_jitter(x, orders, factors), chain_reference(x, orders, factors))


# Pixels and hues where a hue computed with contracted multiply-adds (1 - s * f as one FMA, say: what
# GCC does by default in a build with the FMA instruction) lands one below or above torchvision's
# value; the values torchvision 0.29's adjust_hue gives. Found by comparing such a build with
# torchvision over 15.7M values (67 differed; the build of record differs in none).
HUE_ROUNDING_CASES = [
    ((200, 117, 49), 0.45109350784347035, (49, 177, 200)),
    ((126, 232, 196), -0.3940512361077747, (232, 158, 126)),
    ((133, 201, 126), 0.44740593269141926, (171, 126, 201)),
    ((86, 209, 96), 0.3962629051666863, (143, 86, 209)),
    ((66, 174, 78), -0.33380313892454205, (174, 78, 66)),
    ((55, 255, 14), 0.06069294578035156, (14, 255, 61)),
    ((14, 162, 34), 0.4262876638600638, (117, 14, 162)),
    ((24, 121, 55), 0.01674622098470435, (24, 121, 65)),
    ((3, 135, 228), -0.287934255731902, (74, 228, 3)),
    ((30, 111, 196), -0.21912242934515502, (30, 196, 63)),
    ((11, 184, 213), -0.01995407268717253, (11, 208, 213)),
    ((9, 170, 202), -0.14530013011515275, (9, 202, 66)),
    ((40, 92, 186), -0.38864129659059743, (140, 186, 40)),
    ((236, 235, 117), 0.28043037980856866, (117, 236, 198)),
    ((7, 169, 173), -0.23566169245432111, (71, 173, 7)),
    ((3, 114, 75), -0.35022492999861576, (114, 64, 3)),
    ((37, 179, 100), -0.01682581635189495, (37, 179, 86)),
    ((60, 64, 234), 0.2228949976090684, (234, 60, 179)),
    ((43, 232, 95), -0.2519697062731192, (232, 188, 43)),
    ((228, 46, 34), -0.31808395117636556, (63, 34, 228)),
    ((57, 165, 247), -0.2550030692318773, (75, 247, 57)),
    ((48, 142, 221), -0.4630519076098558, (221, 166, 48)),
    ((56, 158, 229), -0.4630519076098558, (229, 166, 56)),
    ((156, 252, 105), 0.3825861306419487, (105, 112, 252)),
]


def test_the_hue_rounds_each_operation_alone_where_a_fused_multiply_add_would_differ():
    pixels = torch.tensor([p for p, _, _ in HUE_ROUNDING_CASES], dtype=torch.uint8).view(-1, 3, 1, 1)
    factors = torch.tensor([[h] for _, h, _ in HUE_ROUNDING_CASES], dtype=torch.float64)
    steps = torch.full_like(factors, HUE, dtype=torch.int64)
    torchvisions = torch.tensor([t for _, _, t in HUE_ROUNDING_CASES], dtype=torch.uint8).view(-1, 3, 1, 1)
    assert torch.equal(chain_reference(pixels, steps, factors), torchvisions)  # the reference's own check
    assert torch.equal(color_jitter(pixels, steps, factors), torchvisions)
    # wider rows reach the vectorised loop: each pixel repeated across a row of 37
    wide = pixels.expand(-1, -1, 1, 37).contiguous()
    assert torch.equal(color_jitter(wide, steps, factors), torchvisions.expand(-1, -1, 1, 37))


@pytest.mark.parametrize("shape", [(1, 3, 1, 1), (2, 3, 5, 7), (3, 3, 31, 65), (2, 1, 9, 33)])
def test_pillow_color_equals_pillows_enhance_color(shape):
    """Pillow itself: ImageEnhance.Color on each RGB or L image, factors Pillow takes (below 0,
    between, above 1, large), sizes from 1x1 to rows the vectorised loop reaches."""
    import numpy
    from PIL import Image, ImageEnhance

    n, c, h, w = shape
    g = torch.Generator().manual_seed(h * w + c)
    x = torch.randint(0, 256, shape, dtype=torch.uint8, generator=g)
    for factor in (0.0, 1.0, 0.1, CONTRACTION_WITNESS, 1.3, 1.9, -0.5, 2.7, 40.0):
        factors = torch.full((n, 1), factor, dtype=torch.float64)
        got = color_jitter(x, torch.full((n, 1), PILLOW_COLOR), factors)
        for i in range(n):
            mode = "RGB" if c == 3 else "L"
            pil = Image.fromarray(x[i].permute(1, 2, 0).squeeze(-1).numpy(), mode)
            want = torch.from_numpy(numpy.array(ImageEnhance.Color(pil).enhance(factor)))
            want = want.reshape(h, w, c).permute(2, 0, 1)
            assert torch.equal(got[i], want), (shape, factor, i)
            assert torch.equal(pillow_color(x[i], factor), want)  # the reference's own check


def test_pillow_color_rounds_the_blends_product_and_sum_each(device):
    """At CONTRACTION_WITNESS some values differ from the one-rounding blend; the op writes
    Pillow's two roundings on every build (rows of 64 reach the vectorised loops)."""
    g = torch.Generator().manual_seed(9)
    x = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8, generator=g)
    factors = torch.full((2, 1), CONTRACTION_WITNESS, dtype=torch.float64)
    got = color_jitter(x.to(device), torch.full((2, 1), PILLOW_COLOR), factors).cpu()
    want = chain_reference(x, torch.full((2, 1), PILLOW_COLOR), factors)
    assert torch.equal(got, want)
    # the fused blend (one rounding, exact in float64 first) differs: the test can tell them apart
    v = x.to(torch.int64)
    grey = ((v[:, 0] * 19595 + v[:, 1] * 38470 + v[:, 2] * 7471 + 0x8000) >> 16).unsqueeze(1)
    alpha = float(torch.tensor(CONTRACTION_WITNESS, dtype=torch.float32))
    fused = (grey.double() + alpha * (v - grey).double()).float().clamp(0, 255).to(torch.uint8)
    assert not torch.equal(fused, want)


def test_pillow_color_takes_any_factor_and_one_channel_images_blend_with_themselves(device):
    x = torch.randint(0, 256, (3, 1, 6, 5), dtype=torch.uint8, generator=torch.Generator().manual_seed(10))
    factors = torch.tensor([[-3.0], [3e38], [1e39]], dtype=torch.float64)  # 1e39: inf in float32
    got = color_jitter(x.to(device), [["pillow_color"]] * 3, factors).cpu()
    assert torch.equal(got[:2], x[:2])  # v + alpha * 0: v for every finite float32 alpha
    assert not got[2].any()  # inf * 0 is NaN, which Pillow's conversion makes 0 on x86-64
    assert torch.equal(got, chain_reference(x, torch.full((3, 1), PILLOW_COLOR), factors))


def test_the_host_checks_for_a_devices_images_take_any_pillow_color_factor():
    """The wrapper checks host steps for a device's images before the copy (the CPU op checks its
    own in C++): the same refusals, and pillow_color's factors unbounded as Pillow's."""
    from prefetch.ops.color import _check_color_steps

    steps = torch.tensor([[PILLOW_COLOR, BRIGHTNESS]])
    for factor in (-3.0, 40.0, float("inf")):
        _check_color_steps(steps, torch.tensor([[factor, 1.0]], dtype=torch.float64), 1)
    with pytest.raises(ValueError, match=r"brightness factor of image 0 \(step 1\) is -1.0"):
        _check_color_steps(steps, torch.tensor([[1.0, -1.0]], dtype=torch.float64), 1)
    with pytest.raises(ValueError, match=r"step codes are 0 to 5 .*pillow_color\); image 0, step 0 is 6"):
        _check_color_steps(steps + 1, torch.ones(1, 2, dtype=torch.float64), 1)


def test_step_names_and_numbers_are_accepted_and_strides_do_not_matter(device):
    g = torch.Generator().manual_seed(4)
    x = images(3, 3, 14, 9, g)
    xs = x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)[:, :, 1:, ::2]  # channels_last, cut
    chains = [["hue", "contrast", "identity"], ["saturation", "pillow_color", "identity"],
              ["brightness", "hue", "pillow_color"]]
    factors = [[0.2, 1.3, 7.0], [0.4, 1.7, -5.0], [1.5, -0.3, -0.4]]  # an identity's factor: unread
    steps = torch.tensor([[COLOR_STEPS.index(s) for s in c] for c in chains])
    want = chain_reference(xs.contiguous(), steps, torch.tensor(factors, dtype=torch.float64))
    got = color_jitter(xs.to(device), chains, factors)
    assert torch.equal(got.cpu(), want)


def test_large_images_sum_their_grey_exactly():
    """A 256 x 256 image's grey sum nears 2^24: still equal (float32 sums such whole values
    exactly)."""
    g = torch.Generator().manual_seed(5)
    x = torch.randint(200, 256, (2, 3, 256, 256), dtype=torch.uint8, generator=g)
    steps = torch.tensor([[CONTRAST], [CONTRAST]])
    factors = torch.tensor([[0.7], [1.3]], dtype=torch.float64)
    assert torch.equal(color_jitter(x, steps, factors), chain_reference(x, steps, factors))


def test_empty_batches_and_images(device):
    for shape in [(0, 3, 5, 5), (2, 3, 0, 4), (2, 1, 4, 0)]:
        x = torch.zeros(shape, dtype=torch.uint8, device=device)
        steps = torch.full((shape[0], 2), CONTRAST, dtype=torch.int64)
        got = color_jitter(x, steps, torch.ones(shape[0], 2, dtype=torch.float64))
        assert got.shape == shape


@pytest.mark.parametrize("steps, factors, message", [
    ([[7]], [[1.0]], r"step codes are 0 to 5 .*image 0, step 0 is 7"),
    ([["sharpen"]], [[1.0]], "color_jitter's steps are"),
    ([[BRIGHTNESS]], [[-0.5]], r"brightness factor of image 0 \(step 0\) is -0.5"),
    ([[HUE]], [[0.7]], r"hue factor of image 0 \(step 0\) is 0.7"),
    ([[SATURATION]], [[float("nan")]], "saturation factor"),
])
def test_bad_steps_and_factors_are_named(steps, factors, message):
    with pytest.raises(ValueError, match=message):
        color_jitter(torch.zeros(1, 3, 4, 4, dtype=torch.uint8), steps, factors)


@pytest.mark.parametrize("images, steps, factors, message", [
    (torch.zeros(2, 3, 4, 4), torch.zeros(2, 1, dtype=torch.int64), torch.zeros(2, 1, dtype=torch.float64),
     r"uint8 \[N, C, H, W\]"),
    (torch.zeros(2, 4, 4, 4, dtype=torch.uint8), torch.zeros(2, 1, dtype=torch.int64),
     torch.zeros(2, 1, dtype=torch.float64), "1 or 3 channels, got C = 4"),
    (torch.zeros(2, 3, 4, 4, dtype=torch.uint8), torch.zeros(3, 1, dtype=torch.int64),
     torch.zeros(3, 1, dtype=torch.float64), r"int64 \[N, K\] = \[2, K\]"),
    (torch.zeros(2, 3, 4, 4, dtype=torch.uint8), torch.zeros(2, 2, dtype=torch.int64),
     torch.zeros(2, 1, dtype=torch.float64), r"float64 \[N, K\] = \[2, 2\]"),
    (torch.zeros(2, 3, 4, 4, dtype=torch.uint8), torch.zeros(2, 1, dtype=torch.int64, device="meta"),
     torch.zeros(2, 1, dtype=torch.float64), "steps is on meta"),
])
def test_bad_arguments_are_named_by_the_op(images, steps, factors, message):
    with pytest.raises(RuntimeError, match=message):
        color_jitter(images, steps, factors)


def test_opcheck(device):
    g = torch.Generator().manual_seed(6)
    for c in (1, 3):
        x = images(3, c, 7, 6, g).to(device)
        steps, factors = draw(3, 3, g)
        torch.library.opcheck(torch.ops.prefetch.color_jitter.default,
                              (x, steps.to(device), factors.to(device)))


def test_torch_compile_fullgraph_compiles_once_across_batches(device):
    import torch._dynamo.testing

    counter = torch._dynamo.testing.CompileCounter()

    def step(x, s, f):
        return torch.ops.prefetch.color_jitter.default(x, s, f).float().mean()

    compiled = torch.compile(step, fullgraph=True, backend=counter)
    g = torch.Generator().manual_seed(7)
    for _ in range(4):
        x = images(4, 3, 12, 12, g).to(device)
        s, f = draw(4, 4, g)
        s, f = s.to(device), f.to(device)
        assert torch.equal(compiled(x, s, f), step(x, s, f))
    assert counter.frame_count == 1


@pytest.mark.cuda
def test_cuda_writes_the_cpus_bytes():
    from ..conftest import require_cuda
    require_cuda()
    g = torch.Generator().manual_seed(8)
    for c in (3, 1):
        x = images(64, c, 37, 45, g)
        steps, factors = draw(64, 5, g)
        cpu = color_jitter(x, steps, factors)
        cuda = color_jitter(x.cuda(), steps.cuda(), factors.cuda())  # device tensors: unread
        assert torch.equal(cuda.cpu(), cpu)
