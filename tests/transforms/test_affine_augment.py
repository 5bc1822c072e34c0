"""AffineAugment and the v2 front ends RandomAffine and RandomRotation
(prefetch/transforms/affine_augment.py, v2_photometric.py), and the scale of
policy_ops.affine.

References: torchvision's inverse affine matrix written out here from
``torchvision/transforms/functional.py::_get_inverse_affine_matrix`` and applied at sample points
in its centred coordinates (the map an output pixel reads); the draws against the ranges and
distributions of ``RandomAffine.make_params`` (uniform angle, scale and shear; translations
``int(round(uniform(-t * size, t * size)))``); each image of a batch against the warp of that
image alone with its own parameters (the warp's exactness against torchvision's float64 sampling:
test_policy_ops.py); quarter turns against ``torch.rot90``. Where torchvision is importable the
warp with a scale is compared with its ``affine`` too."""
import math

import pytest
import torch

from prefetch.transforms import AffineAugment, BatchPosition, v2 as T
from prefetch.transforms import policy_ops as O
from prefetch.transforms.arguments import ArgumentError


def images(n, c, h, w, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, c, h, w), dtype=torch.uint8, generator=g)


def tv_inverse(center, angle, translate, scale, shear):
    """torchvision's ``_get_inverse_affine_matrix`` (inverted=True), as written there."""
    rot = math.radians(angle)
    sx, sy = math.radians(shear[0]), math.radians(shear[1])
    cx, cy = center
    tx, ty = translate
    a = math.cos(rot - sy) / math.cos(sy)
    b = -math.cos(rot - sy) * math.tan(sx) / math.cos(sy) - math.sin(rot)
    c = math.sin(rot - sy) / math.cos(sy)
    d = -math.sin(rot - sy) * math.tan(sx) / math.cos(sy) + math.cos(rot)
    matrix = [d, -b, 0.0, -c, a, 0.0]
    matrix = [x / scale for x in matrix]
    matrix[2] += matrix[0] * (-cx - tx) + matrix[1] * (-cy - ty)
    matrix[5] += matrix[3] * (-cx - tx) + matrix[4] * (-cy - ty)
    matrix[2] += cx
    matrix[5] += cy
    return matrix


@pytest.mark.parametrize("h,w", [(1, 1), (7, 12), (32, 32)])
def test_the_maps_with_a_scale_are_torchvisions_inverse_matrix_at_every_pixel(h, w):
    g = torch.Generator().manual_seed(h * 100 + w)
    for _ in range(20):
        angle, s = float(torch.rand(1, generator=g)) * 360 - 180, 0.5 + float(torch.rand(1, generator=g))
        tx, ty = float(torch.randint(-5, 6, (1,), generator=g)), float(torch.randint(-5, 6, (1,), generator=g))
        shx, shy = (float(v) * 40 - 20 for v in torch.rand(2, generator=g))
        m = O.pixel_maps(1, h, w, angle=angle, translate=(tx, ty), shear=(shx, shy), scale=s)[0].tolist()
        inv = tv_inverse((0.0, 0.0), angle, (tx, ty), s, (shx, shy))
        ox, oy = (w - 1) / 2, (h - 1) / 2  # torchvision's grid: centred pixel coordinates
        for y in range(0, h, max(1, h // 4)):
            for x in range(0, w, max(1, w // 4)):
                u, v = x - ox, y - oy
                want = (inv[0] * u + inv[1] * v + inv[2] + ox, inv[3] * u + inv[4] * v + inv[5] + oy)
                got = (m[0] * x + m[1] * y + m[2], m[3] * x + m[4] * y + m[5])
                assert got == pytest.approx(want, abs=1e-9), (angle, s, x, y)


def test_scale_one_is_the_warp_without_a_scale_and_bad_scales_are_refused():
    x = images(3, 3, 9, 11)
    assert torch.equal(O.affine(x, angle=[10.0, -5.0, 33.0], scale=1.0),
                       O.affine(x, angle=[10.0, -5.0, 33.0]))
    for bad in (0.0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="scale must be > 0"):
            O.affine(x, angle=1.0, scale=bad)


def test_the_warp_with_a_scale_equals_torchvision_itself():
    F = pytest.importorskip("torchvision.transforms.v2.functional")
    x = images(1, 3, 24, 31)
    for s in (0.7, 1.0, 1.3):
        want = F.affine(x, angle=12.0, translate=[2, -3], scale=s, shear=[5.0, -4.0])
        got = O.affine(x, angle=12.0, translate=(2.0, -3.0), scale=s, shear=(5.0, -4.0))
        # nearest may take the other pixel where the source point is within a float32
        # rounding of a half: rare (test_policy_ops.py bounds it the same way)
        assert (got != want).any(1).float().mean() < 0.01, s


# ---- the draws ------------------------------------------------------------------------------------

def test_the_draws_follow_torchvisions_distributions():
    n, h, w = 20000, 40, 30
    t = AffineAugment((-10.0, 30.0), translate=(0.1, 0.25), scale=(0.8, 1.2),
                      shear=(-5.0, 5.0, 2.0, 4.0), seed=3)
    d = t.draws(n, h, w, epoch=1, index=2)

    def uniform_ok(v, low, high):
        sd = (high - low) / math.sqrt(12)
        return (float(v.min()) >= low and float(v.max()) <= high
                and abs(float(v.mean()) - (low + high) / 2) < 5 * sd / math.sqrt(n))

    assert uniform_ok(d.angle, -10.0, 30.0) and uniform_ok(d.scale, 0.8, 1.2)
    assert uniform_ok(d.shear_x, -5.0, 5.0) and uniform_ok(d.shear_y, 2.0, 4.0)
    # Whole pixels within the rounded bounds (max_dx = 3, max_dy = 10), each value of the range
    # about as often as a rounded uniform makes it (the ends half as often).
    for v, top in ((d.tx, 3), (d.ty, 10)):
        assert bool((v == v.round()).all()) and int(v.abs().max()) == top
        counts = torch.bincount((v + top).long(), minlength=2 * top + 1).double() / n
        inner = 1.0 / (2 * top)
        assert torch.allclose(counts[1:-1], torch.full((2 * top - 1,), inner, dtype=torch.float64),
                              atol=0.25 * inner)
        assert abs(float(counts[0]) - inner / 2) < 0.25 * inner
    # A different position draws differently; the same one again the same.
    again = t.draws(n, h, w, epoch=1, index=2)
    assert torch.equal(again.angle, d.angle)
    assert not torch.equal(t.draws(n, h, w, epoch=1, index=3).angle, d.angle)


def test_without_translate_scale_or_shear_those_draws_are_the_identity():
    d = AffineAugment((-5.0, 5.0), seed=0).draws(50, 8, 8)
    assert bool((d.tx == 0).all() and (d.ty == 0).all() and (d.scale == 1).all())
    assert bool((d.shear_x == 0).all() and (d.shear_y == 0).all())
    assert bool((AffineAugment((-5.0, 5.0), shear=(1.0, 2.0), seed=0).draws(50, 8, 8).shear_y == 0).all())


# ---- each image its own warp ---------------------------------------------------------------------

@pytest.mark.parametrize("c", [1, 3])
@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
def test_each_image_equals_the_warp_of_that_image_alone(c, interpolation):
    x = images(12, c, 13, 17, seed=c)
    t = AffineAugment((-30.0, 30.0), translate=(0.2, 0.2), scale=(0.7, 1.3), shear=(-10, 10, -5, 5),
                      interpolation=interpolation, fill=[7.0] * c, seed=5)
    out = t.apply((x,), BatchPosition(0, 4, 0))[0]
    d = t.draws(12, 13, 17, 0, 4, 0)
    for i in range(12):
        want = O.affine(x[i:i + 1], angle=float(d.angle[i]), translate=(float(d.tx[i]), float(d.ty[i])),
                        scale=float(d.scale[i]), shear=(float(d.shear_x[i]), float(d.shear_y[i])),
                        interpolation=interpolation, fill=[7.0] * c)
        assert torch.equal(out[i:i + 1], want), i


def test_rotation_turns_the_other_way_and_its_quarter_turns_are_exact():
    x = images(6, 3, 11, 11)
    for degrees, k in (((90.0, 90.0), 1), ((180.0, 180.0), 2), ((-90.0, -90.0), 3), ((0.0, 0.0), 0)):
        out = AffineAugment(degrees, rotation=True, seed=1).apply((x,), BatchPosition(0, 0, 0))[0]
        assert torch.equal(out, torch.rot90(x, k=k, dims=(-2, -1))), degrees
    t = AffineAugment((-40.0, 40.0), rotation=True, seed=2)
    out = t.apply((x,), BatchPosition(0, 1, 0))[0]
    angles = t.draws(6, 11, 11, 0, 1, 0).angle
    for i in range(6):  # torchvision's rotate(a) is affine(-a)
        assert torch.equal(out[i:i + 1], O.affine(x[i:i + 1], angle=-float(angles[i])))


def test_channels_last_batches_keep_their_layout():
    x = images(4, 3, 10, 12)
    t = AffineAugment((-20.0, 20.0), scale=(0.9, 1.1), seed=4)
    nchw = t.apply((x,), BatchPosition(0, 0, 0))[0]
    nhwc = t.apply((x.permute(0, 2, 3, 1).contiguous(),), BatchPosition(0, 0, 0))[0]
    assert nhwc.shape == (4, 10, 12, 3) and torch.equal(nhwc.permute(0, 3, 1, 2), nchw)


# ---- the v2 front ends ---------------------------------------------------------------------------

def test_v2_random_affine_and_rotation_compile_to_their_stages_with_torchvisions_arguments():
    recipe = T.Compose([T.RandomCrop(16), T.RandomAffine(15, translate=(0.1, 0.1), scale=(0.9, 1.1),
                                                         shear=8),
                        T.RandomRotation((-30, 10), interpolation="bilinear"),
                        T.ToDtype(torch.float32, scale=True)], seed=1)
    affine, rotation = [t for t in recipe.transforms if isinstance(t, AffineAugment)]
    assert affine.degrees == (-15.0, 15.0) and affine.shear == (-8.0, 8.0) and not affine.rotation
    assert affine.translate == (0.1, 0.1) and affine.scale == (0.9, 1.1)
    assert rotation.degrees == (-30.0, 10.0) and rotation.rotation
    assert rotation.interpolation == "bilinear" and affine.seed != rotation.seed
    out = recipe((images(3, 3, 20, 20).permute(0, 2, 3, 1).contiguous(),), BatchPosition(0, 0, 0))[0]
    assert out.shape == (3, 3, 16, 16) and out.dtype == torch.float32


@pytest.mark.parametrize("make,match", [
    (lambda: T.RandomAffine(-1), "RandomAffine degrees must be a number >= 0 or a"),
    (lambda: T.RandomAffine((10, 5)), "RandomAffine degrees"),
    (lambda: T.RandomAffine(5, translate=(0.5, 1.5)), "RandomAffine translate must be"),
    (lambda: T.RandomAffine(5, scale=(0.0, 1.0)), "RandomAffine scale must be"),
    (lambda: T.RandomAffine(5, shear=(1, 2, 3)), "RandomAffine shear must be"),
    (lambda: T.RandomAffine(5, interpolation="bicubic"), "RandomAffine interpolation must be"),
    (lambda: T.RandomAffine(5, fill=300), "RandomAffine fill"),
    (lambda: T.RandomAffine(5, center=(1.0,)), "RandomAffine center must be"),
    (lambda: T.RandomRotation(5, expand=True), "RandomRotation expand must be False"),
    (lambda: T.RandomRotation(-5), "RandomRotation degrees must be"),
    (lambda: T.RandomRotation(5, interpolation="bicubic"), "RandomRotation interpolation must be"),
    (lambda: AffineAugment((0.0, 1.0), rotation=True, scale=(1.0, 2.0)), "AffineAugment rotation must be False"),
])
def test_arguments_outside_torchvisions_or_the_subset_are_refused_naming_them(make, match):
    with pytest.raises(ArgumentError, match=match):
        make()


def test_a_warp_before_the_crop_is_refused_by_the_order():
    with pytest.raises(ValueError, match=r"step 1 \(RandomResizedCrop\) comes after RandomRotation"):
        T.Compose([T.RandomRotation(10), T.RandomResizedCrop(8), T.ToDtype(torch.float32, scale=True)])
