"""GaussianBlurAugment and the v2 front ends GaussianBlur and RandomApply([GaussianBlur(...)], p)
(prefetch/transforms/blur_augment.py, v2_photometric.py).

References: the draws against torchvision's distributions (``GaussianBlur.make_params``: sigma
uniform in its range, one for both sides, a float32 value; RandomApply's ``torch.rand(1) < p``)
by their bounds, means and binomial counts; each image of a batch against
:func:`prefetch.ops.gaussian_blur` of that image alone with its own sigma (the op's exactness
against torchvision's formulas: tests/ops/test_gaussian_blur.py)."""
import math

import pytest
import torch

from prefetch.ops import gaussian_blur
from prefetch.transforms import BatchPosition, GaussianBlurAugment, PolicyAugment, v2 as T
from prefetch.transforms.arguments import ArgumentError


def images(n, c, h, w, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, c, h, w), dtype=torch.uint8, generator=g)


def test_the_draws_follow_torchvisions_distributions():
    n = 20000
    t = GaussianBlurAugment(23, (0.1, 2.0), p=0.3, seed=3)
    d = t.draws(n, epoch=1, index=2)
    s = d.sigma
    assert float(s.min()) >= 0.1 and float(s.max()) <= 2.0
    sd = 1.9 / math.sqrt(12)
    assert abs(float(s.mean()) - 1.05) < 5 * sd / math.sqrt(n)
    assert torch.equal(s, s.float().double())  # a float32 value, as torchvision's uniform_ holds
    p_sd = math.sqrt(0.3 * 0.7 / n)
    assert abs(float(d.applied.double().mean()) - 0.3) < 5 * p_sd
    # A pure function of the position: again the same, elsewhere different.
    again = t.draws(n, epoch=1, index=2)
    assert torch.equal(again.sigma, s) and torch.equal(again.applied, d.applied)
    assert not torch.equal(t.draws(n, epoch=1, index=3).sigma, s)
    assert not torch.equal(t.draws(n, epoch=1, index=2, rank=1).sigma, s)
    # a fixed sigma is that value; p = 1 blurs every image
    fixed = GaussianBlurAugment(5, 1.5, seed=0).draws(100)
    assert bool((fixed.sigma == 1.5).all() and fixed.applied.all())


@pytest.mark.parametrize("c", [1, 3])
@pytest.mark.parametrize("p", [1.0, 0.5, 0.0])
def test_each_drawn_image_is_blurred_alone_with_its_sigma_and_the_others_kept(c, p):
    x = images(16, c, 21, 19, seed=c)
    t = GaussianBlurAugment((7, 5), (0.3, 3.0), p=p, seed=5)
    out = t.apply((x,), BatchPosition(0, 4, 0))[0]
    d = t.draws(16, 0, 4, 0)
    assert out.shape == x.shape and out.dtype == torch.uint8
    for i in range(16):
        want = gaussian_blur(x[i:i + 1], (7, 5), float(d.sigma[i])) if d.applied[i] else x[i:i + 1]
        assert torch.equal(out[i:i + 1], want), i
    if p == 0.5:
        assert 0 < int(d.applied.sum()) < 16  # both kinds present (seed 5)


def test_channels_last_batches_keep_their_layout_and_the_input_is_not_written():
    x = images(4, 3, 10, 12)
    keep = x.clone()
    t = GaussianBlurAugment(3, (0.5, 1.5), p=0.5, seed=4)
    assert 0 < int(t.draws(4).applied.sum()) < 4  # both the blurred and the kept (seed 4)
    nchw = t.apply((x,), BatchPosition(0, 0, 0))[0]
    nhwc = t.apply((x.permute(0, 2, 3, 1).contiguous(),), BatchPosition(0, 0, 0))[0]
    assert nhwc.shape == (4, 10, 12, 3) and torch.equal(nhwc.permute(0, 3, 1, 2), nchw)
    assert torch.equal(x, keep)


def test_v2_gaussian_blur_and_random_apply_compile_to_blur_stages():
    recipe = T.Compose([T.RandomResizedCrop(24), T.RandomApply([T.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
                        T.RandomGrayscale(0.2), T.GaussianBlur(23), T.RandomApply([T.GaussianBlur(9, (0.5, 1.0))], p=0.1),
                        T.RandomSolarize(128, p=0.2), T.ToDtype(torch.float32, scale=True)], seed=1)
    blurs = [t for t in recipe.transforms if isinstance(t, GaussianBlurAugment)]
    assert [(b.kernel_size, b.sigma, b.p) for b in blurs] == [((23, 23), (0.1, 2.0), 1.0), ((9, 9), (0.5, 1.0), 0.1)]
    kinds = [type(t).__name__ for t in recipe.transforms]
    # torchvision's order kept: jitter, grayscale, blur, blur, solarize
    assert kinds.index("GaussianBlurAugment") > max(i for i, k in enumerate(kinds[:4]) if k == "PolicyAugment")
    assert isinstance(recipe.transforms[kinds.index("GaussianBlurAugment") + 2], PolicyAugment)
    out = recipe((images(3, 3, 40, 40).permute(0, 2, 3, 1).contiguous(),), BatchPosition(0, 0, 0))[0]
    assert out.shape == (3, 3, 24, 24) and out.dtype == torch.float32


@pytest.mark.parametrize("make,match", [
    (lambda: T.GaussianBlur(4), "GaussianBlur kernel_size must be an odd positive int"),
    (lambda: T.GaussianBlur((3, 5, 7)), "GaussianBlur kernel_size"),
    (lambda: T.GaussianBlur(3.0), "GaussianBlur kernel_size"),
    (lambda: T.GaussianBlur(3, 0.0), "GaussianBlur sigma"),
    (lambda: T.GaussianBlur(3, (2.0, 1.0)), "GaussianBlur sigma"),
    (lambda: T.GaussianBlur(3, (0.0, 1.0)), "GaussianBlur sigma"),
    (lambda: T.RandomApply([T.GaussianBlur(3), T.ColorJitter(0.2)]), r"RandomApply transforms\[0\] must be"),
    (lambda: GaussianBlurAugment(3, p=1.5), "GaussianBlurAugment p must be a probability"),
    (lambda: T.GaussianBlur(3, (1e-46, 1.0)), "GaussianBlur sigma must be values > 0 in float32"),
])
def test_arguments_outside_torchvisions_are_refused_naming_them(make, match):
    with pytest.raises(ArgumentError, match=match):
        make()


def test_torchvisions_kernel_size_and_sigma_forms():
    assert T.GaussianBlur(5).kernel_size == (5, 5) and T.GaussianBlur([5]).kernel_size == (5, 5)
    assert T.GaussianBlur((3, 7)).kernel_size == (3, 7)
    assert T.GaussianBlur(3, 1.5).sigma == (1.5, 1.5) and T.GaussianBlur(3, [1.5]).sigma == (1.5, 1.5)
    assert T.GaussianBlur(3).sigma == (0.1, 2.0)


def test_a_kernel_too_wide_for_the_window_is_named_when_it_runs():
    t = GaussianBlurAugment(23, seed=0)
    with pytest.raises(RuntimeError, match="use a kernel size of at most 15"):
        t.apply((images(2, 3, 8, 8),), BatchPosition(0, 0, 0))
