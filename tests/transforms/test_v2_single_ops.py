"""torchvision v2's single-op random transforms (RandomGrayscale, Grayscale, RandomSolarize,
RandomInvert, RandomPosterize, RandomAdjustSharpness, RandomAutocontrast, RandomEqualize) and
RandomApply over them and ColorJitter (prefetch/transforms/v2_photometric.py, drawn by
prefetch/transforms/policies.py's random_op, applied_with and chain).

References: the draws' distribution is torchvision's ``torch.rand(1) < p`` per image (binomial
bounds); each drawn image equals torchvision's op written here from its formula
(``torchvision/transforms/v2/functional/_color.py`` on uint8: solarize, invert, posterize,
rgb_to_grayscale) or, for the ops whose exactness test_policy_ops.py holds against float64
references (sharpness, autocontrast, equalize, the colour jitter), the same op applied to that
image alone; an image not drawn is returned unchanged. Where torchvision is importable the
written references are checked against it too."""
import math

import pytest
import torch

from prefetch.transforms import BatchPosition, FusedAugment, PolicyAugment, v2 as T
from prefetch.transforms import policies as P
from prefetch.transforms import policy_ops as O
from prefetch.transforms.arguments import ArgumentError

SIZES = [(1, 1), (3, 5), (17, 9), (32, 32)]


def images(n, c, h, w, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, c, h, w), dtype=torch.uint8, generator=g)


# ---- references, from torchvision's formulas (v2/functional/_color.py, uint8) -------------------

def solarize_ref(x, threshold):
    return torch.where(x >= threshold, 255 - x, x)


def invert_ref(x):
    return 255 - x


def posterize_ref(x, bits):
    mask = (0xFF << (8 - bits)) & 0xFF
    return x & mask


def grayscale_ref(x):
    """``_rgb_to_grayscale_image`` on uint8 kept to the input's channels: float32
    ``r * 0.2989 + g * 0.587 + b * 0.114`` (torchvision's order of operations), truncated, in
    every channel; a 1-channel image as it is."""
    if x.shape[-3] == 1:
        return x.clone()
    r, g, b = x.unbind(-3)
    grey = r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114).to(torch.uint8)
    return grey.unsqueeze(-3).expand(x.shape).contiguous()


def grey64(x):
    r, g, b = x.double().unbind(-3)
    return 0.2989 * r + 0.587 * g + 0.114 * b


def test_the_grayscale_reference_is_torchvisions_luma_in_float64_off_the_boundaries():
    """The float32 reference above against the float64 luma: equal wherever the exact value is
    not within a float32 rounding of an integer."""
    x = images(8, 3, 31, 29)
    exact = grey64(x)
    clear = (exact - exact.floor() > 1e-3) & (exact.ceil() - exact > 1e-3)
    ref = grayscale_ref(x)[:, 0].double()
    assert torch.equal(ref[clear], exact.floor()[clear])
    assert (ref - exact.floor()).abs().max() <= 1


def test_the_references_equal_torchvision_itself():
    F = pytest.importorskip("torchvision.transforms.v2.functional")
    for c in (1, 3):
        x = images(4, c, 13, 11)
        assert torch.equal(F.solarize(x, 128.0), solarize_ref(x, 128.0))
        assert torch.equal(F.invert(x), invert_ref(x))
        assert torch.equal(F.posterize(x, 3), posterize_ref(x, 3))
        assert torch.equal(F.rgb_to_grayscale(x, num_output_channels=c), grayscale_ref(x))


# ---- the draws ------------------------------------------------------------------------------------

def _binomial_ok(k, n, p, sigmas=5.0):
    return abs(k - n * p) <= sigmas * math.sqrt(n * p * (1 - p)) + 1e-9


@pytest.mark.parametrize("op", sorted(P.RANDOM_OPS))
@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.8, 1.0])
def test_each_image_gets_the_op_with_probability_p(op, p):
    n = 20000
    table = P.random_op(n, torch.Generator().manual_seed(1), op=op, p=p, parameter=3)
    code = P.OP_CODES[P.RANDOM_OPS[op][0]]
    assert table.ops.shape == (n, 1) and table.parameters.dtype == torch.float64
    drawn = table.ops[:, 0] == code
    assert bool(((table.ops[:, 0] == code) | (table.ops[:, 0] == P.OP_CODES["Identity"])).all())
    k = int(drawn.sum())
    if p in (0.0, 1.0):
        assert k == n * p
    else:
        assert _binomial_ok(k, n, p), (op, p, k)
    # The parameter is given exactly where the op is drawn (RandomGrayscale: factor 0).
    want = 0.0 if op == "RandomGrayscale" or P.RANDOM_OPS[op][1] is None else 3.0
    assert bool((table.parameters[drawn, 0] == want).all())


def test_random_apply_keeps_or_drops_each_row_whole_with_probability_p():
    n, p = 20000, 0.8
    g = torch.Generator().manual_seed(2)
    table = P.chain(n, g, steps=[("color_jitter", dict(brightness=0.4, contrast=0.4,
                                                         saturation=0.2, hue=0.1)),
                                 ("random_op", dict(op="RandomGrayscale", p=0.2))], p=p)
    assert table.ops.shape == (n, 5)
    identity = P.OP_CODES["Identity"]
    jittered = (table.ops[:, :4] != identity).any(1)
    grey = table.ops[:, 4] == P.OP_CODES["Color"]
    # A dropped row is Identity in every column: the jitter (its four adjustments always drawn
    # when kept) and the grey step both; a kept row has the four adjustments in some order.
    assert _binomial_ok(int(jittered.sum()), n, p)
    assert bool((table.ops[jittered, :4] != identity).all())
    assert _binomial_ok(int(grey.sum()), n, p * 0.2)
    assert not bool((grey & ~jittered).any())
    assert bool((table.parameters[~jittered] == 0).all())
    # The jitter's own columns are ColorJitter's draws' (its factors' parameters, its order).
    sorted_codes = table.ops[jittered, :4].sort(1).values
    want = torch.tensor(sorted(P.OP_CODES[k] for k in ("Brightness", "Contrast", "Color", "Hue")))
    assert bool((sorted_codes == want).all())


def test_draws_are_a_function_of_the_position_and_the_seed():
    step = T.RandomSolarize(100, p=0.5).policy(7)
    a = step.draws(64, 8, 8, epoch=1, index=3)
    b = T.RandomSolarize(100, p=0.5).policy(7).draws(64, 8, 8, epoch=1, index=3)
    c = step.draws(64, 8, 8, epoch=1, index=4)
    assert torch.equal(a.ops, b.ops) and not torch.equal(a.ops, c.ops)


# ---- each drawn image equals the reference, the others are unchanged ----------------------------

WRITTEN = {
    "RandomSolarize": (lambda: T.RandomSolarize(128.0, p=0.5), lambda x: solarize_ref(x, 128.0)),
    "RandomSolarize-0": (lambda: T.RandomSolarize(0, p=0.5), lambda x: solarize_ref(x, 0)),
    "RandomSolarize-255": (lambda: T.RandomSolarize(255, p=0.5), lambda x: solarize_ref(x, 255)),
    "RandomInvert": (lambda: T.RandomInvert(p=0.5), invert_ref),
    "RandomPosterize-3": (lambda: T.RandomPosterize(3, p=0.5), lambda x: posterize_ref(x, 3)),
    "RandomPosterize-0": (lambda: T.RandomPosterize(0, p=0.5), lambda x: posterize_ref(x, 0)),
    "RandomPosterize-8": (lambda: T.RandomPosterize(8, p=0.5), lambda x: posterize_ref(x, 8)),
    "RandomGrayscale": (lambda: T.RandomGrayscale(p=0.5), grayscale_ref),
    "Grayscale": (lambda: T.Grayscale(3), grayscale_ref),
}
ALONE = {  # the op on the image alone (its exactness: test_policy_ops.py)
    "RandomAdjustSharpness": (lambda: T.RandomAdjustSharpness(1.7, p=0.5),
                              lambda x: O.adjust_sharpness(x, 1.7)),
    "RandomAdjustSharpness-0": (lambda: T.RandomAdjustSharpness(0.0, p=0.5),
                                lambda x: O.adjust_sharpness(x, 0.0)),
    "RandomAutocontrast": (lambda: T.RandomAutocontrast(p=0.5), O.autocontrast),
    "RandomEqualize": (lambda: T.RandomEqualize(p=0.5), O.equalize),
}


def _check_per_image(step, reference, x, position=(0, 5, 0)):
    stage = step.policy(11)
    assert isinstance(stage, PolicyAugment)
    out = stage.apply((x,), BatchPosition(*position))[0]
    table = stage.draws(x.shape[0], x.shape[2], x.shape[3], *position)
    drawn = table.ops[:, 0] != P.OP_CODES["Identity"]
    for i in range(x.shape[0]):
        want = reference(x[i:i + 1]) if drawn[i] else x[i:i + 1]
        assert torch.equal(out[i:i + 1], want), (step, i, bool(drawn[i]))
    return drawn


@pytest.mark.parametrize("name", sorted(WRITTEN) + sorted(ALONE))
@pytest.mark.parametrize("c", [1, 3])
@pytest.mark.parametrize("hw", SIZES, ids=["%dx%d" % s for s in SIZES])
def test_each_drawn_image_equals_the_reference_and_the_others_are_unchanged(name, c, hw):
    make, reference = {**WRITTEN, **ALONE}[name]
    x = images(24, c, *hw, seed=hash((name, c, hw)) % 1000)
    drawn = _check_per_image(make(), reference, x)
    if name != "Grayscale":  # p = 0.5 over 24 images: some drawn, some not
        assert 0 < int(drawn.sum()) < 24
    else:
        assert bool(drawn.all())


def test_random_apply_of_colour_jitter_equals_each_row_applied_alone():
    x = images(32, 3, 9, 13, seed=4)
    step = T.RandomApply([T.ColorJitter(0.4, 0.4, 0.2, 0.1), T.RandomGrayscale(0.5)], p=0.6)
    stage = step.policy(3)
    out = stage.apply((x,), BatchPosition(2, 1, 0))[0]
    table = stage.draws(32, 9, 13, 2, 1, 0)
    kept = (table.ops != P.OP_CODES["Identity"]).any(1)
    assert 0 < int(kept.sum()) < 32
    for i in range(32):
        row = P.OpTable(table.ops[i:i + 1], table.magnitudes[i:i + 1], table.parameters[i:i + 1])
        assert torch.equal(out[i:i + 1], O.apply_table(x[i:i + 1], row)), i
        if not kept[i]:
            assert torch.equal(out[i], x[i])
        grey = table.ops[i, 4] == P.OP_CODES["Color"]
        if grey:  # after the jitter, every channel equal
            assert torch.equal(out[i, 0], out[i, 1]) and torch.equal(out[i, 1], out[i, 2])


def test_random_apply_of_colour_jitter_is_colour_jitter_where_kept():
    """RandomApply([ColorJitter(...)], p) keeps ColorJitter's own draws on the kept rows: the
    kept rows' table is the one ColorJitter alone draws from the same stream, before the p draw."""
    n = 64
    jitter = dict(brightness=0.4, contrast=0.4, saturation=0.2, hue=0.1)
    alone = P.color_jitter(n, torch.Generator().manual_seed(9), **jitter)
    applied = P.color_jitter(n, torch.Generator().manual_seed(9), **jitter, p=0.5)
    kept = (applied.ops != P.OP_CODES["Identity"]).any(1)
    assert 0 < int(kept.sum()) < n
    assert torch.equal(applied.ops[kept], alone.ops[kept])
    assert torch.equal(applied.magnitudes[kept], alone.magnitudes[kept])


# ---- through Compose -----------------------------------------------------------------------------

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def test_a_self_supervised_view_compiles_to_the_uint8_window_its_stages_and_the_normalisation():
    view = T.Compose([T.RandomResizedCrop(16, scale=(0.4, 1.0)), T.RandomHorizontalFlip(),
                      T.RandomApply([T.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
                      T.RandomGrayscale(p=0.2), T.RandomSolarize(128, p=0.2),
                      T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)], seed=5)
    kinds = [type(t).__name__ for t in view.transforms]
    assert kinds[0] == "FusedAugment" and view.transforms[0].dtype == torch.uint8
    stages = [t for t in view.transforms if isinstance(t, PolicyAugment)]
    assert [s.policy for s in stages] == ["chain", "random_op", "random_op"]
    assert [s.options.get("op") for s in stages[1:]] == ["RandomGrayscale", "RandomSolarize"]
    assert len({s.seed for s in stages}) == 3  # each stage its own draws
    x = images(6, 3, 24, 20).permute(0, 2, 3, 1).contiguous()
    position = BatchPosition(1, 2, 0)
    images_out = view((x, torch.arange(6)), position)[0]
    assert images_out.shape == (6, 3, 16, 16) and images_out.dtype == torch.float32

    # The same uint8 window through the stages by hand, then normalised: the same batch.
    window = view.transforms[0].apply((x, torch.arange(6)), position)[0]
    for stage in stages:
        window = stage.apply((window,), position)[0]
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    want = (window.float() / 255 - mean) / std
    assert torch.allclose(images_out, want, atol=1e-5)


@pytest.mark.parametrize("make,match", [
    (lambda: T.RandomSolarize(256), "RandomSolarize threshold must be a number at most 255"),
    (lambda: T.RandomSolarize(float("nan")), "RandomSolarize threshold"),
    (lambda: T.RandomPosterize(9), "RandomPosterize bits must be"),
    (lambda: T.RandomPosterize(4.0), "RandomPosterize bits must be"),
    (lambda: T.RandomAdjustSharpness(-0.5), "RandomAdjustSharpness sharpness_factor must be a number >= 0"),
    (lambda: T.RandomGrayscale(p=1.5), "RandomGrayscale p must be a probability"),
    (lambda: T.RandomInvert(p="0.5"), "RandomInvert p must be a probability"),
    (lambda: T.Grayscale(), "Grayscale num_output_channels must be 3"),
    (lambda: T.Grayscale(num_output_channels=1), "Grayscale num_output_channels must be 3"),
    (lambda: T.RandomApply([T.RandomResizedCrop(8)]), r"RandomApply transforms\[0\] must be ColorJitter or one of"),
    (lambda: T.RandomApply([T.ColorJitter(0.2), T.TrivialAugmentWide()]), r"transforms\[1\] must be"),
    (lambda: T.RandomApply(T.ColorJitter(0.2)), "RandomApply transforms must be a list of steps"),
    (lambda: T.RandomApply([T.ColorJitter(0.2)], p=-0.1), "RandomApply p must be a probability"),
])
def test_arguments_outside_torchvisions_or_the_subset_are_refused_naming_them(make, match):
    with pytest.raises(ArgumentError, match=match):
        make()


def test_the_steps_may_repeat_and_go_before_to_dtype_only():
    T.Compose([T.RandomCrop(8), T.RandomGrayscale(0.1), T.RandomGrayscale(0.3), T.RandomInvert(),
               T.RandomApply([T.RandomEqualize(1.0)]), T.ToDtype(torch.float32, scale=True)], seed=0)
    with pytest.raises(ValueError, match=r"step 2 \(RandomInvert\) comes after ToDtype"):
        T.Compose([T.RandomCrop(8), T.ToDtype(torch.float32, scale=True), T.RandomInvert()])


# ---- RandomChoice and RandomOrder over photometric steps -----------------------------------------

ALWAYS = [("random_op", dict(op="RandomInvert", p=1.0)),
          ("random_op", dict(op="RandomSolarize", p=1.0, parameter=128.0)),
          ("random_op", dict(op="RandomGrayscale", p=1.0))]


@pytest.mark.parametrize("weights", [None, [3.0, 1.0, 0.0], [1.0, 1.0, 2.0]])
def test_random_choice_gives_each_image_one_step_by_the_weights(weights):
    n = 20000
    table = P.choice(n, torch.Generator().manual_seed(6), steps=ALWAYS, p=weights)
    identity = P.OP_CODES["Identity"]
    on = table.ops != identity
    assert bool((on.sum(1) == 1).all())  # each step always applies: exactly one column a row
    chosen = on.long().argmax(1)
    w = torch.tensor(weights or [1.0, 1.0, 1.0], dtype=torch.float64)
    for j in range(3):
        k = int((chosen == j).sum())
        q = float(w[j] / w.sum())
        assert (k == 0) if q == 0 else _binomial_ok(k, n, q), (weights, j, k)


def test_random_choice_keeps_the_chosen_steps_own_draws():
    steps = [("color_jitter", dict(brightness=0.4, hue=0.1)),
             ("random_op", dict(op="RandomSolarize", p=0.5, parameter=99.0))]
    table = P.choice(500, torch.Generator().manual_seed(8), steps=steps)
    alone = P._step_tables(500, torch.Generator().manual_seed(8), steps, "RandomChoice")
    jitter_rows = (table.ops[:, :4] != P.OP_CODES["Identity"]).any(1)
    assert torch.equal(table.ops[jitter_rows, :4], alone[0].ops[jitter_rows])
    assert torch.equal(table.parameters[jitter_rows, :4], alone[0].parameters[jitter_rows])
    solarized = table.ops[:, 4] == P.OP_CODES["Solarize"]
    assert not bool((solarized & jitter_rows).any())
    assert torch.equal(table.ops[solarized, 4], alone[1].ops[solarized, 0])


def test_random_order_puts_each_images_steps_in_a_uniform_random_order():
    n = 12000
    table = P.random_order(n, torch.Generator().manual_seed(7), steps=ALWAYS)
    names = {P.OP_CODES["Invert"]: "I", P.OP_CODES["Solarize"]: "S", P.OP_CODES["Color"]: "G"}
    orders = ["".join(names[c] for c in row) for row in table.ops.tolist()]
    counts = {o: orders.count(o) for o in set(orders)}
    assert sorted(counts) == sorted(["ISG", "IGS", "SIG", "SGI", "GIS", "GSI"])
    assert all(_binomial_ok(k, n, 1 / 6) for k in counts.values()), counts
    # A group of several columns (the jitter) keeps its own columns together and in order.
    steps = [("color_jitter", dict(brightness=0.4, contrast=0.3)), ALWAYS[0]]
    t = P.random_order(200, torch.Generator().manual_seed(1), steps=steps)
    alone = P._step_tables(200, torch.Generator().manual_seed(1), steps, "RandomOrder")
    first = t.ops[:, 0] == P.OP_CODES["Invert"]
    assert torch.equal(t.ops[first, 1:], alone[0].ops[first])
    assert torch.equal(t.ops[~first, :4], alone[0].ops[~first])


def test_random_order_of_invert_and_solarize_applies_each_images_own_order():
    x = images(40, 3, 6, 7, seed=3)
    step = T.RandomOrder([T.RandomInvert(1.0), T.RandomSolarize(128, 1.0)])
    stage = step.policy(2)
    out = stage.apply((x,), BatchPosition(0, 0, 0))[0]
    table = stage.draws(40, 6, 7)
    invert_first = table.ops[:, 0] == P.OP_CODES["Invert"]
    assert 0 < int(invert_first.sum()) < 40
    for i in range(40):
        xi = x[i:i + 1]
        want = solarize_ref(invert_ref(xi), 128) if invert_first[i] else invert_ref(solarize_ref(xi, 128))
        assert torch.equal(out[i:i + 1], want), i


def test_v2_random_choice_of_photometric_steps_goes_before_to_dtype_and_of_mixes_last():
    recipe = T.Compose([T.RandomCrop(8), T.RandomChoice([T.RandomGrayscale(1.0), T.RandomInvert(1.0)]),
                        T.RandomOrder([T.ColorJitter(0.3), T.RandomEqualize()]),
                        T.ToDtype(torch.float32, scale=True),
                        T.RandomChoice([T.MixUp(num_classes=3), T.CutMix(num_classes=3)])], seed=0)
    stages = [t for t in recipe.transforms if isinstance(t, PolicyAugment)]
    assert [s.policy for s in stages] == ["choice", "random_order"]
    with pytest.raises(ValueError, match=r"step 2 \(RandomChoice\) comes after ToDtype"):
        T.Compose([T.RandomCrop(8), T.ToDtype(torch.float32, scale=True),
                   T.RandomChoice([T.RandomInvert()])])
    with pytest.raises(ValueError, match="or between photometric steps .* not both; got RandomInvert"):
        T.RandomChoice([T.RandomInvert(), T.MixUp(num_classes=3)])
    with pytest.raises(ArgumentError, match="RandomChoice p must be one weight >= 0 per transform"):
        T.RandomChoice([T.RandomInvert(), T.RandomEqualize()], p=[1.0])
    with pytest.raises(ArgumentError, match=r"RandomOrder transforms\[0\] must be ColorJitter or one of"):
        T.RandomOrder([T.RandomCrop(8)])
    assert repr(T.RandomChoice([T.RandomInvert()], p=[2])) == "RandomChoice(transforms=[RandomInvert(p=0.5)], p=[2])"
