"""timm's RandAugment, AutoAugment and AugMix by their strings (prefetch.transforms.timm.
RandAugment, AutoAugment, AugMix): the strings parsed as timm's ``rand_augment_transform``,
``auto_augment_transform`` and ``augment_and_mix_transform`` parse them; the draws follow timm's distributions (statistical tests
over many images); and each image comes out as timm's ops, applied one by one to the PIL image
with that image's draws, would leave it (the reference below is written from timm 1.0's
``auto_augment.py`` with Pillow's calls; where timm is installed, its own op functions are the
reference too)."""
import math
import re

import numpy as np
import pytest
import torch
from PIL import Image, ImageEnhance, ImageFilter, ImageOps

from prefetch.transforms import BatchPosition
from prefetch.transforms.timm import (AugMix, AutoAugment, RandAugment, augmix_config, auto_augment_policy,
                                     create_transform, rand_augment_config)
from prefetch.transforms.timm.auto_augment import (RAND_INCREASING_TRANSFORMS, RAND_TRANSFORMS,
                                                   RAND_WEIGHTED_0)

from ..pil_images import from_pil, to_pil

FILL = (124, 116, 104)


@pytest.mark.parametrize("text, expected", [
    ("rand-m9-mstd0.5-inc1", dict(magnitude=9, magnitude_std=0.5, increasing=True,
                                  transforms=RAND_INCREASING_TRANSFORMS)),
    ("rand-m9-mstd0.5", dict(magnitude=9, magnitude_std=0.5, transforms=RAND_TRANSFORMS)),
    ("rand-m7-n3-p0.8", dict(magnitude=7, num_layers=3, prob=0.8)),
    ("rand-mstd101", dict(magnitude=10, magnitude_std=math.inf)),
    ("rand-m15-mmax20", dict(magnitude=15, magnitude_max=20)),
    ("rand-mstd1-tweights", dict(magnitude_std=1.0, transforms=tuple(n for n, _ in RAND_WEIGHTED_0))),
    ("rand", dict(magnitude=10, num_layers=2, prob=0.5, magnitude_std=0.0, transforms=RAND_TRANSFORMS)),
    ("rand-m", dict(magnitude=10)),  # a section without a number is skipped, as timm skips it
])
def test_strings_parse_as_timm_parses_them(text, expected):
    config = rand_augment_config(text)
    for name, value in expected.items():
        assert getattr(config, name) == value, name
    if "tweights" in text:
        raw = [w for _, w in RAND_WEIGHTED_0]
        assert config.weights == pytest.approx([w / sum(raw) for w in raw])
    else:
        assert config.weights is None


@pytest.mark.parametrize("text", ["rand-m9-mstd0.5-inc1", "rand-m7-n3-p0.8", "rand-mstd101",
                                  "rand-m15-mmax20", "rand-mstd1-tweights", "rand-m9-mstd0.5",
                                  "rand-m9-t3a", "rand-m9-mstd0.5-t3aw"])
def test_timm_itself_where_installed_parses_the_same(text):
    aa = pytest.importorskip("timm.data.auto_augment")
    theirs = aa.rand_augment_transform(text, dict(translate_const=100, img_mean=FILL))
    ours = rand_augment_config(text)
    assert tuple(op.name for op in theirs.ops) == ours.transforms
    assert theirs.num_layers == ours.num_layers
    assert {op.prob for op in theirs.ops} == {ours.prob}
    assert {op.magnitude for op in theirs.ops} == {ours.magnitude}
    assert {op.magnitude_std for op in theirs.ops} == {ours.magnitude_std}
    assert {op.magnitude_max for op in theirs.ops} == {ours.magnitude_max}
    if theirs.choice_weights is None:
        assert ours.weights is None
    else:
        assert tuple(theirs.choice_weights) == pytest.approx(ours.weights)


@pytest.mark.parametrize("text, words", [
    ("augmix-m5", "starts with 'rand'"),
    ("rand-q3", "unknown section 'q3'"),
    ("rand-m9.5", "'9.5' does not parse"),
    ("rand-n16-tweights", "n = 16 ops chosen without replacement from a set of 15"),
])
def test_bad_strings_are_refused_naming_the_section(text, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        rand_augment_config(text)


def test_other_arguments_are_checked():
    with pytest.raises(ValueError, match="interpolation"):
        RandAugment("rand-m9", interpolation="nearest")
    with pytest.raises(ValueError, match=r"fill\[1\] must be a whole number"):
        RandAugment("rand-m9", fill=(1, 300, 2))


# --- the draws ---------------------------------------------------------------------------------

N = 40000


def test_draws_follow_timms_distributions():
    ra = RandAugment("rand-m9-mstd0.5-inc1", seed=11)
    d = ra.draws(N, epoch=2, index=5)
    assert d.ops.shape == (N, 2)
    # ops uniform over the 15, with replacement (two layers pick the same op 1/15 of the time)
    counts = torch.bincount(d.ops.flatten(), minlength=15).double() / (2 * N)
    assert (counts - 1 / 15).abs().max() < 0.006
    same = (d.ops[:, 0] == d.ops[:, 1]).double().mean()
    assert abs(same - 1 / 15) < 0.006
    assert abs(d.applied.double().mean() - 0.5) < 0.01
    # the magnitude: gauss(9, 0.5) clipped to [0, 10]
    m = d.magnitudes.flatten()
    assert abs(m.mean() - 9.0) < 0.01 and abs(m.std() - 0.5) < 0.01
    assert m.max() <= 10.0 and m.min() >= 0.0
    assert abs(d.negative.double().mean() - 0.5) < 0.01
    assert abs(d.bicubic.double().mean() - 0.5) < 0.01
    # a function of the position: the same draws again, others elsewhere
    again = ra.draws(N, epoch=2, index=5)
    assert torch.equal(again.ops, d.ops) and torch.equal(again.magnitudes, d.magnitudes)
    assert not torch.equal(ra.draws(N, epoch=2, index=6).ops, d.ops)


def test_uniform_magnitudes_and_the_upper_bound():
    d = RandAugment("rand-m8-mstd200", seed=1).draws(N)
    m = d.magnitudes.flatten()
    assert abs(m.mean() - 4.0) < 0.05 and m.max() <= 8.0 and m.min() >= 0.0  # uniform in [0, 8]
    clipped = RandAugment("rand-m12", seed=1).draws(100).magnitudes
    assert bool((clipped == 10.0).all())  # mmax absent: 10
    raised = RandAugment("rand-m12-mmax15", seed=1).draws(100).magnitudes
    assert bool((raised == 12.0).all())


def test_weighted_choice_is_without_replacement_and_by_weight():
    ra = RandAugment("rand-m9-tweights-n2", seed=3)
    d = ra.draws(N)
    assert bool((d.ops[:, 0] != d.ops[:, 1]).all())
    raw = torch.tensor([w for _, w in RAND_WEIGHTED_0], dtype=torch.float64)
    p = raw / raw.sum()
    first = torch.bincount(d.ops[:, 0], minlength=15).double() / N
    assert (first - p).abs().max() < 0.01
    # the second pick: by weight among the rest, p_j / (1 - p_i) given the first i (numpy's rule)
    second = torch.bincount(d.ops[:, 1], minlength=15).double() / N
    expected = torch.stack([p[j] * sum(p[i] / (1 - p[i]) for i in range(15) if i != j) for j in range(15)])
    assert (second - expected).abs().max() < 0.01


def test_a_fixed_interpolation_is_every_draw():
    assert bool(RandAugment("rand-m9", interpolation="bicubic", seed=0).draws(50).bicubic.all())
    assert not bool(RandAugment("rand-m9", interpolation="bilinear", seed=0).draws(50).bicubic.any())


# --- the images --------------------------------------------------------------------------------

def timm_op(name, img, magnitude, negative, bicubic, fill, translate_pct=0.45, uniform=None):
    """timm's AugmentOp body for one PIL image at this magnitude and sign (written from
    auto_augment.py's level functions and ops); ``uniform``: GaussianBlurRand's random()."""
    level = magnitude / 10.0
    if name == "Desaturate":  # _minmax_level_to_arg(level, 0.5, 1.0), then desaturate
        arg = max(0.5, min(1.0, 0.5 + (1.0 - 0.5) * level))
        return ImageEnhance.Color(img).enhance(min(1.0, max(0.0, 1.0 - arg)))
    if name == "GaussianBlur":  # _minmax_level_to_arg(level, 0.1, 2.0)
        return img.filter(ImageFilter.GaussianBlur(radius=max(0.1, min(2.0, 0.1 + (2.0 - 0.1) * level))))
    if name == "GaussianBlurRand":  # random.uniform(0.1, 2.0 * _minmax_level_to_arg(level))
        factor = max(0.0, min(1.0, 0.0 + (1.0 - 0.0) * level))
        return img.filter(ImageFilter.GaussianBlur(radius=0.1 + (2.0 * factor - 0.1) * uniform))
    sign = -1.0 if negative else 1.0
    resample = Image.Resampling.BICUBIC if bicubic else Image.Resampling.BILINEAR
    kw = dict(resample=resample, fillcolor=fill if img.mode == "RGB" else fill[0])
    if name == "AutoContrast":
        return ImageOps.autocontrast(img)
    if name == "Equalize":
        return ImageOps.equalize(img)
    if name == "Invert":
        return ImageOps.invert(img)
    if name == "Rotate":
        return img.rotate(level * 30.0 * sign, **kw)
    if name.startswith("Posterize"):
        bits = int(level * 4)
        bits = {"Posterize": bits, "PosterizeIncreasing": 4 - bits, "PosterizeOriginal": bits + 4}[name]
        if bits >= 8:
            return img
        # (Pillow 13's ImageOps.posterize refuses 0 bits, which PosterizeIncreasing asks for at
        # magnitude 10; the table is what older Pillows computed: every value 0)
        return img.point([i & ~(2 ** (8 - bits) - 1) for i in range(256)] * len(img.getbands()))
    if name in ("Solarize", "SolarizeIncreasing"):
        t = min(256, int(level * 256))
        return ImageOps.solarize(img, 256 - t if name == "SolarizeIncreasing" else t)
    if name == "SolarizeAdd":
        add = min(128, int(level * 110))
        lut = [min(255, i + add) if i < 128 else i for i in range(256)]
        return img.point(lut * (3 if img.mode == "RGB" else 1))
    base = name.replace("Increasing", "")
    if base in ("Color", "Contrast", "Brightness", "Sharpness"):
        factor = max(0.1, 1.0 + level * 0.9 * sign) if name.endswith("Increasing") else level * 1.8 + 0.1
        return getattr(ImageEnhance, base)(img).enhance(factor)
    if name in ("ShearX", "ShearY"):
        f = level * 0.3 * sign
        data = (1, f, 0, 0, 1, 0) if name == "ShearX" else (1, 0, 0, f, 1, 0)
        return img.transform(img.size, Image.Transform.AFFINE, data, **kw)
    pct = level * translate_pct * sign
    data = ((1, 0, pct * img.size[0], 0, 1, 0) if name == "TranslateXRel"
            else (1, 0, 0, 0, 1, pct * img.size[1]))
    return img.transform(img.size, Image.Transform.AFFINE, data, **kw)


def photos(n, c, h, w, seed):
    g = torch.Generator().manual_seed(seed)
    ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    base = torch.stack([(40 + xs * 3 + ys) % 256, 60 + (ys * 150) // h, ((xs // 9 + ys // 7) % 2) * 120 + 60])
    out = base[:c].unsqueeze(0).repeat(n, 1, 1, 1)
    noise = torch.randint(-20, 21, out.shape, generator=g)
    return (out + noise).clamp(0, 255).to(torch.uint8)



@pytest.mark.parametrize("text", ["rand-m9-mstd0.5-inc1", "rand-m9-mstd0.5", "rand-m10-n3-p1.0-mstd1",
                                  "rand-m9-mstd0.5-tweights", "rand-m9-mstd0.5-inc1-t3a",
                                  "rand-m7-n3-t3aw"])
@pytest.mark.parametrize("interpolation", ["random", "bicubic"])
@pytest.mark.parametrize("c, h, w", [(3, 36, 44), (1, 19, 23)])
def test_each_image_is_timms_ops_with_its_draws(text, interpolation, c, h, w):
    n = 64
    fill = FILL[:c] if c == 3 else (FILL[0],)
    ra = RandAugment(text, interpolation=interpolation, fill=fill, seed=7)
    images = photos(n, c, h, w, seed=len(text))
    position = BatchPosition(1, 3, 0)
    got = ra.augment(images, position)
    d = ra.draws(n, *position)
    names = ra.config.transforms
    reached = set()
    for k in range(n):
        img = to_pil(images[k])
        for layer in range(ra.config.num_layers):
            if bool(d.applied[k, layer]):
                name = names[int(d.ops[k, layer])]
                reached.add(name)
                img = timm_op(name, img, float(d.magnitudes[k, layer]), bool(d.negative[k, layer]),
                              bool(d.bicubic[k, layer]), FILL if c == 3 else fill)
        assert torch.equal(got[k], from_pil(img)), (k, [names[int(o)] for o in d.ops[k]], d.applied[k])
    # most ops reached in one batch
    assert len(reached) >= (3 if text.endswith("t3a") else 6 if "tweights" in text or "t3aw" in text else 10)
    assert torch.equal(images, photos(n, c, h, w, seed=len(text)))  # the input is not written


def test_timms_own_ops_where_installed():
    """timm's AugmentOp on each PIL image, its randomness replaced by this image's draws."""
    aa = pytest.importorskip("timm.data.auto_augment")
    n = 48
    ra = RandAugment("rand-m9-mstd0.5-inc1", interpolation="random", fill=FILL, seed=5)
    images = photos(n, 3, 32, 40, seed=2)
    got = ra.augment(images, BatchPosition(0, 0, 0))
    d = ra.draws(n)
    hparams = dict(translate_const=100, img_mean=FILL)
    for k in range(n):
        img = to_pil(images[k])
        for layer in range(2):
            if not bool(d.applied[k, layer]):
                continue
            name = ra.config.transforms[int(d.ops[k, layer])]
            op = aa.AugmentOp(name, prob=1.0, magnitude=float(d.magnitudes[k, layer]), hparams=dict(
                hparams, interpolation=Image.Resampling.BICUBIC if bool(d.bicubic[k, layer])
                else Image.Resampling.BILINEAR))
            negative = bool(d.negative[k, layer])
            if name == "PosterizeIncreasing" and float(d.magnitudes[k, layer]) >= 10.0:
                # 0 bits: Pillow >= 13 raises inside timm; the written-out reference stands in
                img = timm_op(name, img, 10.0, negative, False, FILL)
                continue
            saved = aa.random.random
            aa.random.random = lambda: 1.0 if negative else 0.0  # _randomly_negate's draw
            try:
                img = op(img)
            finally:
                aa.random.random = saved
        assert torch.equal(got[k], from_pil(img)), k


def test_create_transform_compiles_the_string_as_timm():
    recipe = create_transform(224, is_training=True, auto_augment="rand-m9-mstd0.5-inc1",
                              interpolation="bicubic", re_prob=0.25, re_mode="pixel")
    kinds = [type(s).__name__ for s in recipe.steps]
    assert "RandAugmentStep" in kinds and "ColorJitter" not in kinds  # timm turns the jitter off
    step = recipe.steps[kinds.index("RandAugmentStep")]
    assert step.fill == (124, 116, 104) and step.interpolation == "bicubic"
    assert step.config_str == "rand-m9-mstd0.5-inc1"
    random_interp = create_transform(224, is_training=True, auto_augment="rand-m9", interpolation="random")
    assert [s for s in random_interp.steps if type(s).__name__ == "RandAugmentStep"][0].interpolation == "random"


def test_the_recipe_runs_timms_ops_on_its_window():
    # The compiled recipe: the window (uint8), then RandAugment on it with that image's draws
    # (each image timm's ops replayed through Pillow), then the normalisation.
    recipe = create_transform(32, is_training=True, auto_augment="rand-m9-mstd0.5-inc1",
                              interpolation="bicubic", seed=4)
    window, stage, _ = recipe.transforms
    images = photos(16, 3, 48, 40, seed=9).permute(0, 2, 3, 1).contiguous()  # NHWC, as decoded
    position = BatchPosition(0, 1, 0)
    windows = window.apply((images, torch.arange(16)), position)[0]
    assert windows.dtype == torch.uint8 and windows.shape == (16, 3, 32, 32)
    augmented = stage.augment(windows, position)
    d = stage.draws(16, *position)
    for k in range(16):
        img = to_pil(windows[k])
        for layer in range(2):
            if bool(d.applied[k, layer]):
                img = timm_op(stage.transforms[int(d.ops[k, layer])], img, float(d.magnitudes[k, layer]),
                              bool(d.negative[k, layer]), bool(d.bicubic[k, layer]), FILL)
        assert torch.equal(augmented[k], from_pil(img)), k
    assert not torch.equal(augmented, windows)
    out = recipe.apply((images, torch.arange(16)), position)[0]
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    assert torch.allclose(out, (augmented.float() / 255 - mean) / std, atol=1e-5)
    assert torch.equal(out, recipe.apply((images, torch.arange(16)), position)[0])


def test_a_fill_for_other_channels_is_refused_before_any_draw():
    gray = photos(4, 1, 16, 16, seed=1)
    for stage in (RandAugment("rand-m9", seed=1), AutoAugment("v0", seed=1), AugMix("augmix", seed=1)):
        for index in range(4):  # every batch, whether a geometric op is drawn or not
            with pytest.raises(ValueError, match=r"fill \(128, 128, 128\) has 3 values for images of 1 "
                                                 r"channels"):
                stage.augment(gray, BatchPosition(0, index, 0))
    assert RandAugment("rand-m9", fill=(np.int64(7),)).fill == (7,)
    with pytest.raises(ValueError, match="one value or one per channel .* got 4 values"):
        RandAugment("rand-m9", fill=(1, 2, 3, 4))
    with pytest.raises(ValueError, match="auto_augment: a timm config string"):
        create_transform(32, is_training=True, auto_augment=3)


# --- AutoAugment --------------------------------------------------------------------------------

@pytest.mark.parametrize("text, name, std", [("original", "original", 0.0), ("v0r-mstd0.5", "v0r", 0.5),
                                             ("originalr", "originalr", 0.0), ("v0-mstd1", "v0", 1.0),
                                             ("v0-x", "v0", 0.0)])
def test_auto_augment_strings_parse_as_timm_parses_them(text, name, std):
    got_name, policy, got_std = auto_augment_policy(text)
    assert (got_name, got_std) == (name, std)
    assert len(policy) == 25 and all(len(sub) == 2 for sub in policy)


def test_the_3_augment_policy_is_timms():
    # timm's auto_augment_policy_3a: Solarize 1.0 5, Desaturate 1.0 10, GaussianBlurRand 1.0 10
    assert auto_augment_policy("3a-mstd0.5") == ("3a", ((("Solarize", 1.0, 5),), (("Desaturate", 1.0, 10),),
                                                        (("GaussianBlurRand", 1.0, 10),)), 0.5)


@pytest.mark.parametrize("text", ["original", "originalr", "v0", "v0r", "3a"])
def test_timms_own_policies_where_installed(text):
    aa = pytest.importorskip("timm.data.auto_augment")
    theirs = aa.auto_augment_policy(text, dict(translate_const=100, img_mean=FILL))
    ours = auto_augment_policy(text)[1]
    assert [[(op.name, op.prob, op.magnitude) for op in sub] for sub in theirs] == \
        [[(op, p, m) for op, p, m in sub] for sub in ours]


@pytest.mark.parametrize("text, words", [
    ("v1", "unknown policy 'v1'"),
    ("original-n2", "unknown section 'n2'"), ("original-mstd0.5.5", "'0.5.5' does not parse"),
])
def test_bad_auto_augment_strings_are_refused(text, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        AutoAugment(text)


def test_auto_augment_draws_follow_timms():
    aa = AutoAugment("v0", seed=2)
    d = aa.draws(N, epoch=1, index=4)
    policy = auto_augment_policy("v0")[1]
    # the sub-policy: uniform over the 25, and each image's ops are its sub-policy's
    picked = d.sub_policy
    counts = torch.bincount(picked, minlength=25).double() / N
    assert (counts - 1 / 25).abs().max() < 0.006
    for k, sub in enumerate(policy):
        rows = picked == k
        assert bool((d.ops[rows] == torch.tensor([aa.transforms.index(op) for op, _, _ in sub])).all())
        for layer, (_, p, m) in enumerate(sub):
            rate = d.applied[rows, layer].double().mean()
            assert abs(rate - p) < 0.05, (k, layer)
            assert bool((d.magnitudes[rows, layer] == m).all())  # no noise without mstd
    noisy = AutoAugment("v0-mstd0.5", seed=2).draws(N)
    spread = noisy.magnitudes - torch.tensor([[m for _, _, m in policy[0]]], dtype=torch.float64)
    assert float(noisy.magnitudes.max()) <= 10.0 and float(noisy.magnitudes.min()) >= 0.0
    assert 0.3 < float(spread.std()) < 6.0  # (the magnitudes differ by sub-policy too)


@pytest.mark.parametrize("text", ["original", "v0", "v0r-mstd0.5", "originalr", "3a", "3a-mstd1"])
@pytest.mark.parametrize("interpolation", ["random", "bilinear"])
def test_each_image_is_timms_auto_augment_with_its_draws(text, interpolation):
    n = 96
    aa = AutoAugment(text, interpolation=interpolation, fill=FILL, seed=9)
    images = photos(n, 3, 33, 41, seed=5)
    got = aa.augment(images, BatchPosition(2, 0, 0))
    d = aa.draws(n, 2, 0, 0)
    assert (d.uniform is not None) == text.startswith("3a")
    reached = set()
    for k in range(n):
        img = to_pil(images[k])
        for layer in range(d.ops.shape[1]):
            if bool(d.applied[k, layer]):
                name = aa.transforms[int(d.ops[k, layer])]
                reached.add(name)
                img = timm_op(name, img, float(d.magnitudes[k, layer]), bool(d.negative[k, layer]),
                              bool(d.bicubic[k, layer]), FILL,
                              uniform=None if d.uniform is None else float(d.uniform[k, layer]))
        assert torch.equal(got[k], from_pil(img)), k
    if text.startswith("3a"):
        assert reached == {"Solarize", "Desaturate", "GaussianBlurRand"}


def test_create_transform_compiles_3_augment_and_keeps_the_jitter_as_timm():
    # timm's create_transform leaves ColorJitter on for '3a' strings (DeiT III's recipe)
    for text, kind in (("3a", "AutoAugmentStep"), ("rand-m9-t3a", "RandAugmentStep")):
        kinds = [type(s).__name__ for s in create_transform(64, is_training=True, auto_augment=text,
                                                            color_jitter=0.3).steps]
        assert kind in kinds and "ColorJitter" in kinds, (text, kinds)
        batch = create_transform(64, is_training=True, auto_augment=text, seed=1)(  # (HWC, as timm's)
            (photos(8, 3, 70, 90, seed=1).permute(0, 2, 3, 1).contiguous(), torch.arange(8)), epoch=0, index=0)
        assert batch[0].shape == (8, 3, 64, 64)


def test_create_transform_compiles_an_auto_augment_string_as_timm():
    recipe = create_transform(224, is_training=True, auto_augment="original", interpolation="bicubic")
    kinds = [type(s).__name__ for s in recipe.steps]
    assert "AutoAugmentStep" in kinds and "ColorJitter" not in kinds
    step = recipe.steps[kinds.index("AutoAugmentStep")]
    assert step.fill == FILL and step.translate_const == int(224 * 0.45)
    out = create_transform(32, is_training=True, auto_augment="v0r", seed=1).apply(
        (photos(4, 3, 40, 36, seed=1).permute(0, 2, 3, 1).contiguous(), torch.arange(4)), BatchPosition(0, 0, 0))
    assert out[0].shape == (4, 3, 32, 32)


# --- AugMix ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("augmix", dict(magnitude=3, width=3, depth=-1, alpha=1.0, magnitude_std=math.inf)),
    ("augmix-m5-w4-d2", dict(magnitude=5, width=4, depth=2)),
    ("augmix-m9-mstd0.5-a0.5-b0", dict(magnitude=9, magnitude_std=0.5, alpha=0.5)),
    ("augmix-m3-b1", dict(magnitude=3, blended=True)),
])
def test_augmix_strings_parse_as_timm_parses_them(text, expected):
    config = augmix_config(text)
    for name, value in expected.items():
        assert getattr(config, name) == value, name


@pytest.mark.parametrize("text", ["augmix-m5-w4-d2", "augmix-m9-mstd0.5-a0.5", "augmix-m5-b1"])
def test_timms_own_augmix_where_installed_parses_the_same(text):
    aa = pytest.importorskip("timm.data.auto_augment")
    theirs = aa.augment_and_mix_transform(text, dict(translate_pct=0.3, img_mean=FILL))
    ours = augmix_config(text)
    assert (theirs.width, theirs.depth, theirs.alpha) == (ours.width, ours.depth, ours.alpha)
    assert theirs.blended == ours.blended
    if ours.blended and int(np.__version__.split(".")[0]) >= 2:  # timm's own weights (NumPy 2: float32)
        from prefetch.transforms.timm.augmix import blended_weights
        g = torch.Generator().manual_seed(1)
        ws = torch._sample_dirichlet(torch.ones(50, 3, dtype=torch.float64), generator=g).float()
        m = torch.rand(50, generator=g).float()
        ours_w = blended_weights(ws, m)
        for k in range(50):
            assert np.array_equal(theirs._calc_blended_weights(ws[k].numpy(), np.float32(m[k])),
                                  ours_w[k].numpy()), k
    assert tuple(op.name for op in theirs.ops) == AugMix.transforms
    assert {op.magnitude for op in theirs.ops} == {ours.magnitude}
    assert {op.magnitude_std for op in theirs.ops} == {ours.magnitude_std}
    assert {op.prob for op in theirs.ops} == {1.0}


@pytest.mark.parametrize("text, words", [
    ("rand-m9", "starts with 'augmix'"), ("augmix-q2", "unknown section 'q2'"),
    ("augmix-w0", "w must be >= 1"),
    ("augmix-m3.5", "'3.5' does not parse"),
])
def test_bad_augmix_strings_are_refused(text, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        AugMix(text)


def test_augmix_draws_follow_timms():
    n = 20000
    d = AugMix("augmix-m5-w3", seed=4).draws(n, 1, 2)
    w = d.weights.double()
    assert torch.allclose(w.sum(1), torch.ones(n, dtype=torch.float64), atol=1e-6)
    # Dirichlet(1, 1, 1): each weight Beta(1, 2), mean 1/3, variance 1/18; m ~ Beta(1, 1) uniform
    assert abs(w.mean() - 1 / 3) < 0.01 and abs(w[:, 0].var() - 1 / 18) < 0.005
    assert abs(d.m.double().mean() - 0.5) < 0.01 and abs(d.m.double().var() - 1 / 12) < 0.005
    for chain in d.chains:
        depth = chain.applied.sum(1)
        counts = torch.bincount(depth, minlength=4).double() / n
        assert counts[0] == 0 and (counts[1:] - 1 / 3).abs().max() < 0.015  # 1 to 3 ops
        assert bool((chain.applied[:, 0]).all())  # the applied ops are the first ones
        assert bool((chain.applied[:, 1] | ~chain.applied[:, 2]).all())
        m = chain.magnitudes.flatten()  # uniform in [0, 5]
        assert abs(m.mean() - 2.5) < 0.05 and m.min() >= 0 and m.max() <= 5
        ops = torch.bincount(chain.ops.flatten(), minlength=13).double() / chain.ops.numel()
        assert (ops - 1 / 13).abs().max() < 0.01
    fixed = AugMix("augmix-d2", seed=4).draws(100)
    assert all(bool((c.applied.sum(1) == 2).all()) for c in fixed.chains)


def timm_chain(img, chain, k):
    """Image k through one AugMix chain with timm's ops (its draws)."""
    aug = img
    for layer in range(chain.ops.shape[1]):
        if bool(chain.applied[k, layer]):
            aug = timm_op(AugMix.transforms[int(chain.ops[k, layer])], aug,
                          float(chain.magnitudes[k, layer]), bool(chain.negative[k, layer]),
                          bool(chain.bicubic[k, layer]), FILL, translate_pct=0.3)
    return aug


def timm_augmix(img, d, k):
    """timm's AugMixAugment._apply_basic for image k with its draws: each chain from the image,
    summed in float32 as numpy sums, clipped, truncated, then Image.blend with m."""
    mixed = np.zeros(np.asarray(img).shape, dtype=np.float32)
    for c, chain in enumerate(d.chains):
        mixed += np.float32(d.weights[k, c]) * np.asarray(timm_chain(img, chain, k), dtype=np.float32)
    np.clip(mixed, 0, 255.0, out=mixed)
    return Image.blend(img, Image.fromarray(mixed.astype(np.uint8)), float(np.float32(d.m[k])))


def timm_blended_weights(ws, m):
    """timm's _calc_blended_weights, as NumPy 2 computes it: float32 throughout (its Python
    float 1. is a float32 here, so that NumPy 1, which would compute in float64, gives the same)."""
    ws = ws * m
    cump = np.float32(1.)
    rws = []
    for w in ws[::-1]:
        alpha = w / cump
        cump *= (1 - alpha)
        rws.append(alpha)
    return np.array(rws[::-1], dtype=np.float32)


def timm_augmix_blended(img, d, k):
    """timm's AugMixAugment._apply_blended for image k with its draws: each chain from the
    image, the image blended with each in turn by timm's blended weights."""
    weights = timm_blended_weights(d.weights[k].numpy().astype(np.float32), np.float32(d.m[k]))
    out = img
    for c, chain in enumerate(d.chains):
        out = Image.blend(out, timm_chain(img, chain, k), float(weights[c]))
    return out


@pytest.mark.parametrize("text", ["augmix-m5-w4-d2", "augmix", "augmix-m9-mstd0.5-a0.5", "augmix-b1",
                                  "augmix-m5-w4-d2-b1"])
@pytest.mark.parametrize("interpolation", ["random", "bicubic"])
def test_each_image_is_timms_augmix_with_its_draws(text, interpolation):
    n = 48
    mix = AugMix(text, interpolation=interpolation, fill=FILL, seed=6)
    images = photos(n, 3, 30, 38, seed=7)
    got = mix.augment(images, BatchPosition(0, 5, 0))
    d = mix.draws(n, 0, 5, 0)
    timm = timm_augmix_blended if "b1" in text else timm_augmix
    for k in range(n):
        assert torch.equal(got[k], from_pil(timm(to_pil(images[k]), d, k))), k


def test_blended_weights_are_timms_and_leave_the_image_its_share():
    """The blended weights against timm's loop (NumPy 2's float32); and, as the mode intends,
    blending in turn gives chain k the share w_k m of the result and the image 1 - m (float64)."""
    g = torch.Generator().manual_seed(3)
    weights = torch._sample_dirichlet(torch.full((200, 4), 1.0, dtype=torch.float64), generator=g).float()
    m = torch.rand(200, generator=g).float()
    from prefetch.transforms.timm.augmix import blended_weights
    got = blended_weights(weights, m)
    for k in range(200):
        want = timm_blended_weights(weights[k].numpy(), np.float32(m[k]))
        assert np.array_equal(got[k].numpy(), want), k
    a = got.double()
    share = torch.empty_like(a)  # the image's share after each blend: (1 - a_k) times the last
    image = torch.ones(200, dtype=torch.float64)
    for k in range(4):
        share[:, k] = a[:, k]
        share[:, :k] *= (1 - a[:, k]).view(-1, 1)
        image *= 1 - a[:, k]
    assert torch.allclose(share, weights.double() * m.double().view(-1, 1), atol=1e-5)
    assert torch.allclose(image, 1 - m.double(), atol=1e-5)


def test_create_transform_compiles_augmix_as_timm():
    recipe = create_transform(224, is_training=True, auto_augment="augmix-m5-w4-d2")
    kinds = [type(s).__name__ for s in recipe.steps]
    assert "AugMixStep" in kinds and "ColorJitter" not in kinds
    step = recipe.steps[kinds.index("AugMixStep")]
    assert step.translate_pct == 0.3 and step.fill == FILL and step.translate_const == int(224 * 0.45)
    stage = create_transform(32, is_training=True, auto_augment="augmix-m5-w4-d2", seed=2).transforms[1]
    assert isinstance(stage, AugMix) and stage.config.width == 4 and stage.translate_pct == 0.3


@pytest.mark.parametrize("stage", [RandAugment("rand-m9-mstd0.5-inc1", fill=FILL, seed=3),
                                   AutoAugment("v0r-mstd0.5", fill=FILL, seed=3),
                                   AugMix("augmix-m5-w3", fill=FILL, seed=3)], ids=repr)
def test_the_device_writes_the_cpus_bytes(stage, device):
    # Every op is on the images' device (tables, blends, pil_affine's float64 thread work); the
    # draws are the host's: the same bytes on CUDA as on the CPU.
    images = photos(24, 3, 29, 35, seed=4)
    expected = stage.augment(images, BatchPosition(0, 1, 0))
    got = stage.augment(images.to(device), BatchPosition(0, 1, 0))
    assert got.device.type == torch.device(device).type
    assert torch.equal(got.cpu(), expected)
