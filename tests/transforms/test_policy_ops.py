"""The policies' ops with per-sample parameters (prefetch/transforms/policy_ops.py) against
float64 references written here from torchvision's formulas (torchvision.transforms.v2.functional,
uint8 images), one image at a time.

torchvision computes in float32 and truncates (or rounds) back to uint8 after each op, so a
float64 reference can land on the other side of an integer where the exact value is within a
float32 rounding of it. The tests therefore require: equal wherever the reference's value is more
than ``EPS`` from the truncation (or rounding) boundary, and never more than 1 apart — a wrong
formula, parameter or sample shows on most pixels. (Against torchvision itself the ops were
compared offline, bit for bit: benchmarks/NOTES.md.)"""
import math

import pytest
import torch
import torch.nn.functional as F

from prefetch.transforms import policies as P
from prefetch.transforms import policy_ops as O

EPS = 1e-3
CLEAR = []  # the fraction of clear pixels of each comparison (see not_vacuous)


@pytest.fixture(autouse=True)
def not_vacuous():
    """Most pixels of a test's comparisons are away from a boundary, where equality is required
    (an image whose values are all whole, as a factor of 0 or 1 makes, is all boundary)."""
    CLEAR.clear()
    yield
    if CLEAR:
        assert sum(CLEAR) / len(CLEAR) > 0.3, CLEAR


def images(n=12, c=3, h=17, w=13, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, c, h, w), dtype=torch.uint8, generator=g)
    x[0] = 77  # a flat image: the degenerate cases (no contrast, no hue, no range)
    if n > 1:
        x[1, :, :, : w // 2] = 0  # large runs of one value: equalize's histogram case
    return x


def assert_truncated(got, value, what, rounding=False):
    """``got`` (uint8) against the float64 ``value`` truncated (or rounded half to even) to
    [0, 255]: equal away from the boundaries, within 1 everywhere."""
    v = value.clamp(0, 255)
    want = torch.round(v) if rounding else torch.floor(v)
    boundary = (v - torch.floor(v) - (0.5 if rounding else 0.0)).abs()
    if not rounding:
        boundary = torch.minimum(boundary, 1 - boundary)
    clear = boundary > EPS
    diff = (got.double() - want).abs()
    assert diff.max() <= 1, "%s: off by %d" % (what, diff.max())
    assert torch.equal(got.double()[clear], want[clear]), "%s: %d clear pixels differ" % (
        what, int((diff[clear] > 0).sum()))
    CLEAR.append(clear.double().mean().item())


def grey64(x):
    """torchvision's luma on uint8, floored (float64)."""
    r, g, b = x.double().unbind(0)
    return torch.floor(0.2989 * r + 0.587 * g + 0.114 * b)


FACTORS = [0.0, 0.35, 1.0, 1.6, 1.99, 0.01, 0.5, 1.2, 0.8, 1.45, 0.99, 1.7]


@pytest.mark.parametrize("c", [3, 1])
def test_brightness_saturation_contrast(c):
    x = images(c=c)
    f = torch.tensor(FACTORS, dtype=torch.float64)
    got_b, got_s, got_c = O.adjust_brightness(x, f), O.adjust_saturation(x, f), O.adjust_contrast(x, f)
    for i in range(len(x)):
        xi, fi = x[i].double(), float(f[i])
        assert_truncated(got_b[i], xi * fi, "brightness %d" % i)
        if c == 3:
            assert_truncated(got_s[i], xi * fi + grey64(x[i]) * (1 - fi), "saturation %d" % i)
            mean = grey64(x[i]).mean()
        else:
            assert torch.equal(got_s[i], x[i])  # a grey image has no saturation
            mean = xi.mean()
        assert_truncated(got_c[i], xi * fi + mean * (1 - fi), "contrast %d" % i)



def test_contrast_of_images_past_65793_pixels_uses_torchs_mean():
    """Up to 65,793 pixels Contrast is color_jitter's one-step chain (an exact grey sum); above, a
    grey sum can pass 2^24 and torch's float32 mean is torchvision's: a table from it. Both sides
    of the line against the float64 reference."""
    for h, w in ((256, 257), (257, 257)):  # 65,792 and 66,049 pixels
        x = images(n=2, h=h, w=w, seed=4)
        x[1] = x[1] // 2 + 128  # bright: a grey sum near 2^24
        f = torch.tensor([0.6, 1.4], dtype=torch.float64)
        got = O.adjust_contrast(x, f)
        for i in range(2):
            mean = grey64(x[i]).mean()
            assert_truncated(got[i], x[i].double() * float(f[i]) + mean * (1 - float(f[i])),
                             "contrast %d of %dx%d" % (i, h, w))

@pytest.mark.parametrize("c", [3, 1])
def test_sharpness_blends_with_the_rounded_smoothing_inside_the_border(c):
    x = images(c=c)
    f = torch.tensor(FACTORS, dtype=torch.float64)
    got = O.adjust_sharpness(x, f)
    kernel = torch.tensor([[1, 1, 1], [1, 5, 1], [1, 1, 1]], dtype=torch.float64) / 13
    for i in range(len(x)):
        xi = x[i].double()
        smooth = torch.round(F.conv2d(xi.unsqueeze(1), kernel.view(1, 1, 3, 3)).squeeze(1))
        want = xi.clone()
        inner = want[:, 1:-1, 1:-1]
        want[:, 1:-1, 1:-1] = inner * float(f[i]) + smooth * (1 - float(f[i]))
        assert_truncated(got[i], want, "sharpness %d" % i)
        assert torch.equal(got[i][:, 0], x[i][:, 0]) and torch.equal(got[i][:, :, -1], x[i][:, :, -1])
    small = images(c=c, h=2, w=9)
    assert torch.equal(O.adjust_sharpness(small, 0.1), small)


def hue64(x, factor):
    """torchvision's adjust_hue on one uint8 RGB image, in float64 (HSV as PIL defines it),
    before the final ``* (256 - 1e-3)`` and truncation."""
    img = x.double() / 255
    r, g, b = img
    maxc, minc = img.amax(0), img.amin(0)
    eq = maxc == minc
    span = torch.where(eq, torch.ones_like(maxc), maxc - minc)
    s = torch.where(eq, torch.zeros_like(maxc), (maxc - minc) / torch.where(eq, torch.ones_like(maxc), maxc))
    rc, gc, bc = (maxc - r) / span, (maxc - g) / span, (maxc - b) / span
    h = torch.where(maxc == r, bc - gc, torch.where(maxc == g, 2.0 + rc - bc, 4.0 + gc - rc))
    h = torch.where(eq, torch.zeros_like(h), h)
    h = ((h / 6.0 + 1.0) % 1.0 + factor) % 1.0
    i = torch.floor(h * 6)
    f = h * 6 - i
    i = i.long() % 6
    v = maxc
    p, q, t = (v * (1 - s)).clamp(0, 1), (v * (1 - s * f)).clamp(0, 1), (v * (1 - s * (1 - f))).clamp(0, 1)
    table = [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)]
    out = torch.zeros(3, *h.shape, dtype=torch.float64)
    for k, (rr, gg, bb) in enumerate(table):
        m = i == k
        out[0][m], out[1][m], out[2][m] = rr[m], gg[m], bb[m]
    return out * (256 - 1e-3)


def test_hue_turns_each_image_by_its_own_factor():
    x = images()
    f = torch.tensor([0.0, 0.5, -0.5, 0.1, -0.25, 0.33, 0.01, -0.01, 0.2, 0.45, -0.4, 0.05],
                     dtype=torch.float64)
    got = O.adjust_hue(x, f)
    for i in range(len(x)):
        assert_truncated(got[i], hue64(x[i], float(f[i])), "hue %d" % i)
    grey = images(c=1)
    assert torch.equal(O.adjust_hue(grey, 0.3), grey)
    with pytest.raises(ValueError, match=r"\[-0.5, 0.5\]"):
        O.adjust_hue(x, 0.6)


def test_posterize_solarize_invert_are_exact():
    x = images()
    bits = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 3, 1, 8])
    got = O.posterize(x, bits)
    threshold = torch.tensor([0, 255, 128, 127.5, 1, 254, 77, 78, 200, 10.2, 99, 180],
                             dtype=torch.float64)
    sol = O.solarize(x, threshold)
    for i in range(len(x)):
        keep = 256 - (1 << (8 - int(bits[i])))  # the top bits' mask
        assert torch.equal(got[i], x[i] & keep)
        xi = x[i].int()
        assert torch.equal(sol[i].int(), torch.where(xi.double() >= threshold[i], 255 - xi, xi))
    assert torch.equal(O.invert(x).int(), 255 - x.int())
    with pytest.raises(ValueError, match="bits"):
        O.posterize(x, 9)
    with pytest.raises(ValueError, match="at most 255"):
        O.solarize(x, 256)


def test_autocontrast_stretches_each_channel():
    x = images()
    x[2, 1] = 40  # one constant channel in a non-constant image
    got = O.autocontrast(x)
    for i in range(len(x)):
        for ch in range(3):
            v = x[i, ch].double()
            low, high = v.min(), v.max()
            if low == high:
                assert torch.equal(got[i, ch], x[i, ch])
            else:
                assert_truncated(got[i, ch], (v - low) / ((high - low) / 255), "autocontrast %d" % i)


def equalize_channel(values):
    """PIL's (and torchvision's) equalization of one uint8 channel, in Python integers."""
    flat = values.flatten().tolist()
    hist = [0] * 256
    for v in flat:
        hist[v] += 1
    top = max(v for v in range(256) if hist[v])
    step = (len(flat) - hist[top]) // 255
    if step == 0:
        return values.clone()
    lut, cum = [0], 0
    for v in range(255):
        cum += hist[v]
        lut.append(min(255, (cum + step // 2) // step))
    return torch.tensor([lut[v] for v in flat], dtype=torch.uint8).view_as(values)


def test_equalize_is_pils_per_channel_rule_exactly():
    x = images(h=31, w=29)
    x[3] = torch.randint(100, 104, x[3].shape, generator=torch.Generator().manual_seed(4),
                         dtype=torch.int64).to(torch.uint8)  # few values
    got = O.equalize(x)
    for i in range(len(x)):
        for ch in range(3):
            assert torch.equal(got[i, ch], equalize_channel(x[i, ch])), (i, ch)


def sample64(x, sources_x, sources_y, mode, fill):
    """Sample one uint8 image at source pixel coordinates (float64, pixel centres at integers)
    as grid_sample(align_corners=False, zeros) and torchvision's fill rule do; returns the float
    value before rounding, and how far each sample is from a nearest-neighbour tie."""
    c, h, w = x.shape
    xd = x.double()
    if mode == "nearest":
        ix, iy = torch.round(sources_x), torch.round(sources_y)
        tie = torch.minimum((sources_x - torch.floor(sources_x) - 0.5).abs(),
                            (sources_y - torch.floor(sources_y) - 0.5).abs())
        inside = (ix >= 0) & (ix < w) & (iy >= 0) & (iy < h)
        vals = torch.zeros(c, *ix.shape, dtype=torch.float64)
        vals[:, inside] = xd[:, iy[inside].long(), ix[inside].long()]
        if fill is not None:
            vals[:, ~inside] = float(fill)
        return vals, tie
    x0, y0 = torch.floor(sources_x), torch.floor(sources_y)
    vals = torch.zeros(c, *sources_x.shape, dtype=torch.float64)
    mask = torch.zeros(sources_x.shape, dtype=torch.float64)
    for dx in (0, 1):
        for dy in (0, 1):
            xx, yy = x0 + dx, y0 + dy
            wgt = (1 - (sources_x - xx).abs()) * (1 - (sources_y - yy).abs())
            ok = (xx >= 0) & (xx < w) & (yy >= 0) & (yy < h)
            vals[:, ok] += wgt[ok] * xd[:, yy[ok].long(), xx[ok].long()]
            mask[ok] += wgt[ok]
    if fill is not None:
        vals = (vals - fill) * mask + fill
    return vals, torch.full(sources_x.shape, 1.0, dtype=torch.float64)


def affine64(x, angle, translate, shear, center, mode, fill):
    """torchvision's affine of one image, in float64: its inverse matrix applied to each output
    pixel's centre (coordinates about the image's centre), then sampled."""
    c, h, w = x.shape
    rot, sx, sy = math.radians(angle), math.radians(shear[0]), math.radians(shear[1])
    a = math.cos(rot - sy) / math.cos(sy)
    b = -(a * math.tan(sx) + math.sin(rot))
    cc = math.sin(rot - sy) / math.cos(sy)
    d = math.cos(rot) - cc * math.tan(sx)
    cx, cy = (0.0, 0.0) if center is None else (center[0] - w / 2, center[1] - h / 2)
    tx, ty = cx + translate[0], cy + translate[1]
    m = [d, -b, 0.0, -cc, a, 0.0]
    m[2] = cx - m[0] * tx - m[1] * ty
    m[5] = cy - m[3] * tx - m[4] * ty
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float64) - (h - 1) / 2,
                            torch.arange(w, dtype=torch.float64) - (w - 1) / 2, indexing="ij")
    src_x = m[0] * xs + m[1] * ys + m[2] + (w - 1) / 2
    src_y = m[3] * xs + m[4] * ys + m[5] + (h - 1) / 2
    return sample64(x, src_x, src_y, mode, fill)


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
@pytest.mark.parametrize("fill", [None, 9])
def test_affine_shears_and_translations_per_image(mode, fill):
    x = images(n=8, h=21, w=16)
    shear_x = torch.tensor([0.0, 10.0, -25.0, 44.0, 3.3, -7.0, 0.5, 30.0], dtype=torch.float64)
    shift = torch.tensor([0, 3, -5, 7, -1, 12, -20, 2], dtype=torch.float64)
    shear = O.affine(x, shear=(shear_x, 0.0), center=(0.0, 0.0), interpolation=mode, fill=fill)
    moved = O.affine(x, translate=(shift, -shift), interpolation=mode, fill=fill)
    for i in range(len(x)):
        for got, args in ((shear, (0.0, (0, 0), (float(shear_x[i]), 0.0), (0.0, 0.0))),
                          (moved, (0.0, (float(shift[i]), -float(shift[i])), (0.0, 0.0), None))):
            value, tie = affine64(x[i], *args, mode, fill)
            clear = tie > EPS
            if mode == "nearest":
                assert torch.equal(got[i].double()[:, clear], value[:, clear]), (i, args)
            else:
                assert_truncated(got[i], value, "bilinear %d" % i, rounding=True)


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_rotation_quarter_turns_are_exact_and_others_sample_the_rotated_grid(mode):
    x = images(n=6, h=15, w=15)
    angles = torch.tensor([90.0, 180.0, -90.0, 33.0, -135.0, 360.0], dtype=torch.float64)
    table = P.OpTable(torch.full((6, 1), P.OP_CODES["Rotate"]), angles.float().view(6, 1))
    got = O.apply_table(x, table, interpolation=mode)
    assert torch.equal(got[0], torch.rot90(x[0], 1, (-2, -1)))  # counter-clockwise
    assert torch.equal(got[1], torch.rot90(x[1], 2, (-2, -1)))
    assert torch.equal(got[2], torch.rot90(x[2], 3, (-2, -1)))
    assert torch.equal(got[5], x[5])
    for i in (3, 4):  # rotate(angle) is affine(-angle)
        value, tie = affine64(x[i], -float(angles[i]), (0, 0), (0, 0), None, mode, None)
        if mode == "nearest":
            clear = tie > EPS
            assert torch.equal(got[i].double()[:, clear], value[:, clear])
        else:
            assert_truncated(got[i], value, "rotate %d" % i, rounding=True)


# Rows of 1440 bytes (put back as int64), 162 (int16), 35 (bytes), and a channels-last batch.
@pytest.mark.parametrize("c, h, w, channels_last", [(3, 24, 20, False), (3, 9, 6, False),
                                                    (1, 7, 5, False), (3, 24, 20, True)])
def test_apply_table_batched_equals_each_sample_alone_in_column_order(c, h, w, channels_last):
    x = images(n=40, c=c, h=h, w=w, seed=3)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    g = torch.Generator().manual_seed(8)
    for table in (P.trivial_augment_wide(40, g, height=h, width=w),
                  P.rand_augment(40, g, height=h, width=w, num_ops=3, magnitude=15),
                  P.auto_augment(40, g, height=h, width=w),
                  P.color_jitter(40, g, brightness=0.5, contrast=0.5, saturation=0.5, hue=0.2)):
        fill = [1, 2, 3][:c]
        got = O.apply_table(x, table, interpolation="bilinear", fill=fill)
        for i in range(40):
            one = P.OpTable(table.ops[i:i + 1], table.magnitudes[i:i + 1])
            # a table of one sample, one step at a time
            y = x[i:i + 1]
            for k in range(one.ops.shape[1]):
                y = O.apply_table(y, P.OpTable(one.ops[:, k:k + 1], one.magnitudes[:, k:k + 1]),
                                  interpolation="bilinear", fill=fill)
            assert torch.equal(got[i:i + 1], y), (i, table.steps(i))
        assert not torch.equal(got, x)



def test_a_column_of_many_ops_equals_each_sample_alone_and_quarter_turns_stay_exact():
    """A column drawing most ops (the batch sorted by op, each kind's slice transformed in place):
    each sample equals its op applied alone; a quarter turn stays an exact copy."""
    x = images(n=12, h=16, w=16, seed=9)
    names = ["Rotate", "ShearX", "Rotate", "TranslateY", "Posterize", "Invert", "Equalize",
             "Brightness", "Hue", "Color", "Identity", "AutoContrast"]
    mags = [90.0, 0.2, 33.0, 5.0, 3.0, 0.0, 0.0, 0.4, -0.2, 0.5, 0.0, 0.0]
    table = P.OpTable(torch.tensor([[P.OP_CODES[n]] for n in names]),
                      torch.tensor(mags, dtype=torch.float32).view(-1, 1))
    got = O.apply_table(x, table, interpolation="bilinear", fill=[9, 8, 7])
    assert torch.equal(got[0], torch.rot90(x[0], 1, (-2, -1)))
    for i in range(12):
        one = O.apply_table(x[i:i + 1], P.OpTable(table.ops[i:i + 1], table.magnitudes[i:i + 1]),
                            interpolation="bilinear", fill=[9, 8, 7])
        assert torch.equal(got[i:i + 1], one), names[i]
    assert torch.equal(got[10], x[10])


def test_photometric_ops_use_parameters_on_the_images_device_unread():
    """Parameters already on the images' device are not read back to the host (that would
    synchronise a loader's producer thread): on the meta device, whose tensors have no values,
    any read raises. Host parameters are still checked."""
    x = torch.zeros(4, 3, 8, 8, dtype=torch.uint8, device="meta")
    f64 = dict(dtype=torch.float64, device="meta")
    for name, run in [("adjust_hue", lambda: O.adjust_hue(x, torch.zeros(4, **f64))),
                      ("solarize", lambda: O.solarize(x, torch.zeros(4, **f64))),
                      ("posterize", lambda: O.posterize(x, torch.zeros(4, dtype=torch.int64, device="meta"))),
                      ("adjust_sharpness", lambda: O.adjust_sharpness(x, torch.ones(4, **f64))),
                      ("adjust_brightness", lambda: O.adjust_brightness(x, torch.ones(4, **f64))),
                      ("adjust_contrast", lambda: O.adjust_contrast(x, torch.ones(4, **f64))),
                      ("adjust_saturation", lambda: O.adjust_saturation(x, torch.ones(4, **f64)))]:
        out = run()
        assert out.device.type == "meta" and out.shape == x.shape and out.dtype == torch.uint8, name
    with pytest.raises(ValueError, match=r"\[-0.5, 0.5\]"):
        O.adjust_hue(images(n=2), [0.1, 0.7])
    with pytest.raises(ValueError, match="at most 255"):
        O.solarize(images(n=2), 300.0)
    with pytest.raises(ValueError, match=r"\[0, 8\]"):
        O.posterize(images(n=2), 9)

def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match=r"uint8 images \[N, C, H, W\].*float32"):
        O.adjust_brightness(torch.zeros(2, 3, 4, 4), 1.0)
    with pytest.raises(ValueError, match="C 1 or 3"):
        O.invert(torch.zeros(2, 4, 4, 4, dtype=torch.uint8))
    with pytest.raises(ValueError, match="one per image"):
        O.adjust_contrast(images(n=3), [1.0, 2.0])
    with pytest.raises(ValueError, match="'nearest' or 'bilinear'"):
        O.affine(images(n=2), angle=3.0, interpolation="bicubic")
    table = P.OpTable(torch.zeros(3, 1, dtype=torch.int64), torch.zeros(3, 1))
    with pytest.raises(ValueError, match="3 samples, the images 2"):
        O.apply_table(images(n=2), table)


@pytest.mark.cuda
def test_on_cuda_the_same_ops_as_on_the_cpu():
    from ..conftest import require_cuda
    require_cuda()
    x = images(n=64, h=32, w=24, seed=5)
    g = torch.Generator().manual_seed(9)
    for table in (P.trivial_augment_wide(64, g, height=32, width=24),
                  P.color_jitter(64, g, brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1)):
        for mode in ("nearest", "bilinear"):
            cpu = O.apply_table(x, table, interpolation=mode)
            cuda = O.apply_table(x.cuda(), table, interpolation=mode)
            assert cuda.device.type == "cuda"
            diff = (cuda.cpu().int() - cpu.int()).abs()
            # prefetch's kernels round alike on both devices (docs/custom_ops.md); what torch
            # computes on the device for a table (Contrast's mean past 65,793 pixels) may sum in
            # another order, moving a value on a truncation boundary by 1, nothing more.
            assert diff.max() <= 1 and (diff > 0).double().mean() < 1e-3, (mode, diff.max())
