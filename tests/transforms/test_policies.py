"""The per-sample draws of the automatic augmentation policies and ColorJitter
(prefetch/transforms/policies.py): torchvision's distributions — op lists, magnitude bins, signs,
sub-policy probabilities — checked statistically over many samples (fixed seeds, bounds of five
standard deviations), the magnitudes against values written here from torchvision's formulas
(torchvision.transforms.v2._auto_augment), and every draw a pure function of the batch position."""
import math

import pytest
import torch

from prefetch.transforms import BatchPosition
from prefetch.transforms import policies as P

N = 28000
RAND_AUGMENT_SPACE = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate",
                      "Brightness", "Color", "Contrast", "Sharpness", "Posterize", "Solarize",
                      "AutoContrast", "Equalize"]
SIGNED = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color",
          "Contrast", "Sharpness"}


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def assert_fraction(count, total, p, what):
    """``count`` of ``total`` draws within five standard deviations of probability ``p``."""
    sigma = math.sqrt(total * p * (1 - p)) if 0 < p < 1 else 0.0
    assert abs(count - total * p) <= 5 * sigma + 1e-9, "%s: %d of %d, expected %.4f" % (
        what, count, total, p)


def names_of(table, column=0):
    return [P.OPS[int(o)] for o in table.ops[:, column]]


def test_op_codes_name_every_op_once():
    assert len(set(P.OPS)) == len(P.OPS) and P.OP_CODES["Identity"] == 0
    assert list(P.OPS[:14]) == RAND_AUGMENT_SPACE


# ---- TrivialAugmentWide --------------------------------------------------------------------

def trivial_bins(name, bins=31):
    """TrivialAugmentWide's magnitude bins (torchvision v2), written out."""
    top = {"ShearX": 0.99, "ShearY": 0.99, "TranslateX": 32.0, "TranslateY": 32.0,
           "Rotate": 135.0, "Brightness": 0.99, "Color": 0.99, "Contrast": 0.99,
           "Sharpness": 0.99}
    if name in top:
        return [top[name] * b / (bins - 1) for b in range(bins)]
    if name == "Posterize":
        return [8 - round(b / ((bins - 1) / 6)) for b in range(bins)]
    if name == "Solarize":
        return [1.0 - b / (bins - 1) for b in range(bins)]
    return None


def test_trivial_augment_wide_draws_one_op_each_uniformly_with_uniform_bins_and_signs():
    t = P.trivial_augment_wide(N, gen(1), height=224, width=160)
    assert t.ops.shape == (N, 1) and t.magnitudes.shape == (N, 1)
    names = names_of(t)
    mags = t.magnitudes[:, 0].tolist()
    for op in RAND_AUGMENT_SPACE:
        picked = [m for n, m in zip(names, mags) if n == op]
        assert_fraction(len(picked), N, 1 / 14, op)
        bins = trivial_bins(op)
        if bins is None:
            assert all(m == 0 for m in picked), op
            continue
        # Every magnitude is one of the op's bins (in absolute value), and the bins are uniform.
        index = [min(range(31), key=lambda b: abs(abs(m) - bins[b])) for m in picked]
        assert all(abs(abs(m) - bins[b]) < 1e-5 for m, b in zip(picked, index)), op
        if op != "Posterize":  # Posterize's bins repeat values
            for b in (0, 15, 30):
                assert_fraction(sum(i == b for i in index), len(picked), 1 / 31, "%s bin %d" % (op, b))
        negative = sum(m < 0 for m in picked)
        if op in SIGNED:  # half negative (bin 0's magnitude is 0 either way)
            nonzero = sum(m != 0 for m in picked)
            assert_fraction(negative, nonzero, 0.5, op + " sign")
        else:
            assert negative == 0, op


def test_trivial_augment_wide_posterize_and_solarize_bins_are_torchvisions():
    t = P.trivial_augment_wide(N, gen(2), height=32, width=32)
    names, mags = names_of(t), t.magnitudes[:, 0].tolist()
    assert {int(m) for n, m in zip(names, mags) if n == "Posterize"} == {8, 7, 6, 5, 4, 3, 2}
    solarize = {round(m, 5) for n, m in zip(names, mags) if n == "Solarize"}
    assert min(solarize) == 0.0 and max(solarize) == 1.0 and len(solarize) == 31


# ---- RandAugment ---------------------------------------------------------------------------

def test_rand_augment_draws_num_ops_each_at_the_fixed_magnitude():
    h, w = 200, 331
    t = P.rand_augment(N // 2, gen(3), height=h, width=w, num_ops=2, magnitude=9)
    assert t.ops.shape == (N // 2, 2)
    expected = {"ShearX": 0.3 * 9 / 30, "ShearY": 0.3 * 9 / 30,
                "TranslateX": 150 / 331 * w * 9 / 30, "TranslateY": 150 / 331 * h * 9 / 30,
                "Rotate": 30 * 9 / 30, "Brightness": 0.9 * 9 / 30, "Color": 0.9 * 9 / 30,
                "Contrast": 0.9 * 9 / 30, "Sharpness": 0.9 * 9 / 30,
                "Posterize": 8 - round(9 / (30 / 4)), "Solarize": 1 - 9 / 30}
    for column in range(2):
        names, mags = names_of(t, column), t.magnitudes[:, column].tolist()
        for op in RAND_AUGMENT_SPACE:
            picked = [m for n, m in zip(names, mags) if n == op]
            assert_fraction(len(picked), len(names), 1 / 14, "%s column %d" % (op, column))
            want = expected.get(op, 0.0)
            assert all(abs(abs(m) - want) < 1e-4 for m in picked), (op, set(picked), want)
            if op in SIGNED:
                assert_fraction(sum(m < 0 for m in picked), len(picked), 0.5, op + " sign")
    # the two columns are drawn independently: the same op twice as often as chance says
    same = int((t.ops[:, 0] == t.ops[:, 1]).sum())
    assert_fraction(same, N // 2, 1 / 14, "repeats")


def test_rand_augment_per_sample_sizes_scale_each_translation():
    heights = torch.tensor([100, 331, 662])
    t = P.rand_augment(3, gen(4), height=heights, width=331, num_ops=40, magnitude=30)
    for i, h in enumerate(heights.tolist()):
        for name, m in t.steps(i):
            if name == "TranslateY":
                assert abs(abs(m) - 150.0 * h / 331) < 1e-3
            if name == "TranslateX":
                assert abs(abs(m) - 150.0) < 1e-3


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_ops=-1), "num_ops"), (dict(magnitude=31), "magnitude"),
    (dict(magnitude=1.5), "magnitude"), (dict(num_magnitude_bins=1), "num_magnitude_bins"),
    (dict(height=0), "height"), (dict(width=torch.ones(2)), "width")])
def test_rand_augment_refuses_bad_arguments(kwargs, match):
    args = dict(height=8, width=8)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        P.rand_augment(3, gen(), **args)


# ---- AutoAugment ---------------------------------------------------------------------------

def test_auto_augment_imagenet_policy_is_torchvisions():
    policy = P.AUTO_AUGMENT_IMAGENET
    assert len(policy) == 25 and all(len(sub) == 2 for sub in policy)
    assert policy[0] == (("Posterize", 0.4, 8), ("Rotate", 0.6, 9))
    assert policy[13] == (("Invert", 0.6, None), ("Equalize", 1.0, None))
    assert policy[24] == (("Equalize", 0.8, None), ("Equalize", 0.6, None))


def test_auto_augment_applies_each_step_with_its_probability():
    t = P.auto_augment(N, gen(5), height=224, width=224)
    # Column k names op X with probability sum over sub-policies (1/25) * p when step k is X.
    for column in range(2):
        names = names_of(t, column)
        expected = {}
        for sub in P.AUTO_AUGMENT_IMAGENET:
            name, p, _ = sub[column]
            expected[name] = expected.get(name, 0.0) + p / 25
        expected["Identity"] = 1 - sum(expected.values())
        for op, p in expected.items():
            assert_fraction(sum(n == op for n in names), N, p, "%s column %d" % (op, column))


def test_auto_augment_magnitudes_are_the_bins_of_ten():
    t = P.auto_augment(N, gen(6), height=224, width=224)
    allowed = {  # every (op, |magnitude|) the ImageNet policy can give, from torchvision's bins
        "Posterize": {8 - round(b / (9 / 4)) for b in (5, 6, 7, 8)},
        "Rotate": {30 * b / 9 for b in (3, 8, 9)},
        "Solarize": {1 - b / 9 for b in (3, 4, 5, 7, 8)},
        "Color": {0.9 * b / 9 for b in (0, 2, 4, 8)},
        "Contrast": {0.9 * 8 / 9}, "Sharpness": {0.9 * 7 / 9}, "ShearX": {0.3 * 5 / 9},
        "Equalize": {0.0}, "AutoContrast": {0.0}, "Invert": {0.0}, "Identity": {0.0}}
    for column in range(2):
        for name, m in zip(names_of(t, column), t.magnitudes[:, column].tolist()):
            assert any(abs(abs(m) - a) < 1e-5 for a in allowed[name]), (name, m)
    rotations = [m for n, m in zip(names_of(t, 1), t.magnitudes[:, 1].tolist()) if n == "Rotate"]
    assert_fraction(sum(m < 0 for m in rotations), len(rotations), 0.5, "Rotate sign")


# ---- ColorJitter ---------------------------------------------------------------------------

def test_color_jitter_orders_each_sample_at_random_and_draws_uniform_factors():
    t = P.color_jitter(N, gen(7), brightness=0.4, contrast=(0.5, 1.5), saturation=0.2, hue=0.1)
    codes = [P.OP_CODES[x] for x in ("Brightness", "Contrast", "Color", "Hue")]
    assert all(sorted(row) == sorted(codes) for row in t.ops.tolist())
    orders = {}
    for row in t.ops.tolist():
        orders[tuple(row)] = orders.get(tuple(row), 0) + 1
    assert len(orders) == 24
    for order, count in orders.items():
        assert_fraction(count, N, 1 / 24, "order %s" % (order,))
    for name, (low, high) in {"Brightness": (-0.4, 0.4), "Contrast": (-0.5, 0.5),
                              "Color": (-0.2, 0.2), "Hue": (-0.1, 0.1)}.items():
        m = t.magnitudes[t.ops == P.OP_CODES[name]].double()
        assert m.numel() == N and low <= m.min() and m.max() <= high
        # uniform: mean at the centre, variance (high - low)^2 / 12
        assert abs(m.mean().item() - (low + high) / 2) < 5 * (high - low) / math.sqrt(12 * N)
        assert abs(m.var().item() / ((high - low) ** 2 / 12) - 1) < 0.05


def test_color_jitter_leaves_out_identity_adjustments_and_refuses_bad_ranges():
    t = P.color_jitter(64, gen(8), brightness=0.3)
    assert all(t.steps(i)[0][0] == "Brightness" and len(t.steps(i)) == 1 for i in range(64))
    assert P.color_jitter(4, gen(), contrast=(1, 1)).steps(0) == []
    assert min(m for i in range(64) for _, m in t.steps(i)) >= -0.3
    assert P.color_jitter(500, gen(9), brightness=3).magnitudes.min() >= -1  # factor >= 0
    with pytest.raises(ValueError, match="hue"):
        P.color_jitter(2, gen(), hue=0.6)
    with pytest.raises(ValueError, match="brightness"):
        P.color_jitter(2, gen(), brightness=-1)
    with pytest.raises(TypeError, match="saturation"):
        P.color_jitter(2, gen(), saturation="a lot")


# ---- parameters and positions --------------------------------------------------------------

def test_op_parameters_are_what_torchvisions_functionals_receive():
    names = ["Brightness", "ShearX", "ShearY", "TranslateX", "Posterize", "Solarize", "Rotate",
             "Equalize", "Hue", "Sharpness"]
    mags = [0.27, 0.3, -0.99, -18.7, 7.0, 0.7, -26.5, 0.0, -0.05, -0.9]
    table = P.OpTable(torch.tensor([[P.OP_CODES[n] for n in names]]),
                      torch.tensor([mags], dtype=torch.float32))
    got = P.op_parameters(table)[0].tolist()
    want = [1.27, math.degrees(math.atan(0.3)), math.degrees(math.atan(-0.99)), -18.0, 7.0,
            178.5, -26.5, 0.0, -0.05, 0.1]
    assert got == pytest.approx(want, abs=1e-5)


@pytest.mark.parametrize("draw", [
    lambda n, g: P.trivial_augment_wide(n, g, height=64, width=48),
    lambda n, g: P.rand_augment(n, g, height=64, width=48, num_ops=3, magnitude=12),
    lambda n, g: P.auto_augment(n, g, height=64, width=48),
    lambda n, g: P.color_jitter(n, g, brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1)])
def test_draws_are_a_pure_function_of_the_batch_position(draw):
    at = lambda *p: draw(256, BatchPosition(*p).generator(11))  # noqa: E731
    a, b = at(2, 5, 1), at(2, 5, 1)
    assert torch.equal(a.ops, b.ops) and torch.equal(a.magnitudes, b.magnitudes)
    for other in (at(3, 5, 1), at(2, 6, 1), at(2, 5, 0)):
        assert not (torch.equal(a.ops, other.ops) and torch.equal(a.magnitudes, other.magnitudes))
    empty = draw(0, gen())
    assert empty.ops.shape[0] == 0 and len(empty) == 0
