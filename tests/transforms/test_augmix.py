"""AugMixAugment and the v2 front end AugMix (prefetch/transforms/augmix.py).

References, from torchvision's ``AugMix`` (``torchvision/transforms/v2/_auto_augment.py``, 0.28):
its magnitude bins written out by hand (10 bins; Posterize ``4 - floor(k / 2.25)``); the draws'
distributions (ops uniform over its 9 or 13, bins uniform in [0, severity), signs, depths uniform
in [1, 3], Beta and Dirichlet weights); each image's result against ``m0 * x + sum w_i *
chain_i(x)`` in float32, truncated, with each chain applied to that image alone (the ops'
exactness: test_policy_ops.py)."""
import math
import weakref

import pytest
import torch

from prefetch.transforms import AugMixAugment, BatchPosition, v2 as T
from prefetch.transforms import policies as P
from prefetch.transforms import policy_ops as O
from prefetch.transforms.arguments import ArgumentError
from prefetch.transforms.augmix import AUGMIX_ALL_OPS, AUGMIX_OPS


def images(n, c, h, w, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, c, h, w), dtype=torch.uint8, generator=g)


H, W = 30, 45
# torchvision's AugMix bins (10 of them), by hand: linspace(0, top, 10) is k * top / 9.
BINS = {
    "ShearX": [k * 0.3 / 9 for k in range(10)], "ShearY": [k * 0.3 / 9 for k in range(10)],
    "TranslateX": [k * (W / 3) / 9 for k in range(10)],
    "TranslateY": [k * (H / 3) / 9 for k in range(10)],
    "Rotate": [k * 30.0 / 9 for k in range(10)],
    "Posterize": [4, 4, 4, 3, 3, 2, 2, 1, 1, 0],
    "Solarize": [1.0 - k / 9 for k in range(10)],
    "Brightness": [k * 0.9 / 9 for k in range(10)], "Color": [k * 0.9 / 9 for k in range(10)],
    "Contrast": [k * 0.9 / 9 for k in range(10)], "Sharpness": [k * 0.9 / 9 for k in range(10)],
}
SIGNED = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color",
          "Contrast", "Sharpness"}


def test_the_op_spaces_are_torchvisions():
    assert AUGMIX_OPS == ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Posterize",
                          "Solarize", "AutoContrast", "Equalize")
    assert AUGMIX_ALL_OPS == AUGMIX_OPS + ("Brightness", "Color", "Contrast", "Sharpness")


@pytest.mark.parametrize("severity", [1, 3, 10])
@pytest.mark.parametrize("all_ops", [True, False])
def test_each_drawn_op_is_uniform_with_a_bin_below_the_severity_and_torchvisions_sign(severity, all_ops):
    n = 4000
    d = AugMixAugment(severity=severity, all_ops=all_ops, seed=1).draws(n, H, W)
    space = AUGMIX_ALL_OPS if all_ops else AUGMIX_OPS
    names, signs = [], {}
    for chain in d.chains:
        for code, mag in zip(chain.ops.flatten().tolist(), chain.magnitudes.flatten().tolist()):
            name = P.OPS[code]
            if name == "Identity":
                continue
            names.append(name)
            assert name in space
            if name in BINS:
                allowed = BINS[name][:severity]
                assert min(abs(abs(mag) - a) for a in allowed) < 1e-5, (name, mag, allowed)
                if name in SIGNED and mag != 0:
                    signs.setdefault(name, []).append(mag < 0)
                assert name in SIGNED or mag >= 0
            else:
                assert mag == 0.0
    total = len(names)
    for name in space:
        k = names.count(name)
        q = 1 / len(space)
        assert abs(k - total * q) <= 5 * math.sqrt(total * q * (1 - q)), (name, k, total)
    for name, s in signs.items():  # negated with probability 1/2
        assert abs(sum(s) - len(s) / 2) <= 5 * math.sqrt(len(s) / 4) + 1, name


def test_chain_depths_are_uniform_in_one_to_three_or_fixed():
    n = 6000
    d = AugMixAugment(chain_depth=-1, mixture_width=2, seed=2).draws(n, H, W)
    for chain in d.chains:
        depth = (chain.ops != P.OP_CODES["Identity"]).sum(1)
        # the ops taken are always the first columns
        assert bool(((chain.ops != P.OP_CODES["Identity"]).long().diff(dim=1) <= 0).all())
        for k in (1, 2, 3):
            assert abs(int((depth == k).sum()) - n / 3) <= 5 * math.sqrt(n * 2 / 9)
    for fixed in (1, 2, 5):
        d = AugMixAugment(chain_depth=fixed, seed=3).draws(200, H, W)
        assert all(bool(((c.ops != P.OP_CODES["Identity"]).sum(1) == fixed).all()) for c in d.chains)


@pytest.mark.parametrize("alpha", [1.0, 0.5, 4.0])
def test_the_weights_are_a_beta_split_then_a_dirichlet(alpha):
    n, k = 20000, 4
    d = AugMixAugment(mixture_width=k, alpha=alpha, seed=4).draws(n, H, W)
    assert d.original.dtype == torch.float32 and d.weights.shape == (n, k)
    assert torch.allclose(d.original + d.weights.sum(1), torch.ones(n), atol=1e-5)
    # m0 ~ Beta(alpha, alpha): mean 1/2, variance 1 / (4 (2 alpha + 1))
    sd = math.sqrt(1 / (4 * (2 * alpha + 1)))
    assert abs(float(d.original.mean()) - 0.5) < 5 * sd / math.sqrt(n)
    assert abs(float(d.original.std()) - sd) < 0.05 * sd
    # each chain's share of the augmented part: Dirichlet(alpha, ..., alpha), mean 1/k
    share = d.weights / (1 - d.original).unsqueeze(1)
    assert torch.allclose(share.mean(0), torch.full((k,), 1 / k), atol=0.02)


@pytest.mark.parametrize("c", [1, 3])
@pytest.mark.parametrize("hw", [(1, 1), (7, 9), (24, 24)])
def test_each_image_is_its_weighted_mix_of_its_own_chains_truncated(c, hw):
    x = images(10, c, *hw, seed=c)
    t = AugMixAugment(severity=5, mixture_width=3, seed=6, interpolation="bilinear")
    out = t.apply((x,), BatchPosition(1, 2, 0))[0]
    d = t.draws(10, *hw, 1, 2, 0)
    for i in range(10):
        xi = x[i:i + 1]
        mix = d.original[i] * xi.float()
        for j, chain in enumerate(d.chains):
            row = P.OpTable(chain.ops[i:i + 1], chain.magnitudes[i:i + 1])
            mix = mix + d.weights[i, j] * O.apply_table(xi, row, interpolation="bilinear").float()
        want = mix.to(torch.uint8)
        assert torch.equal(out[i:i + 1], want), i


@pytest.mark.parametrize("chunk_rows", [1, 3, 10, 64])
def test_the_mix_a_few_images_at_a_time_is_torchvisions_float32_sum(monkeypatch, chunk_rows):
    """mix_chains on the CPU mixes ``_MIX_CHUNK_ELEMENTS`` worth of images at a time (here 1, 3
    — a last chunk of 1 — 10 and more than the batch), the chains given as a generator: every
    byte is torchvision's whole-batch float32 sum m0 * x + w_0 * c_0 + ..., truncated."""
    from prefetch.transforms import augmix

    n, c, h, w = 10, 3, 5, 7
    monkeypatch.setattr(augmix, "_MIX_CHUNK_ELEMENTS", chunk_rows * c * h * w)
    x = images(n, c, h, w, seed=1)
    chains = [images(n, c, h, w, seed=10 + k) for k in range(3)]
    g = torch.Generator().manual_seed(2)
    original, weights = torch.rand(n, generator=g), torch.rand(n, 3, generator=g) * 0.5
    want = original.reshape(n, 1, 1, 1) * x.float()
    for k, chain in enumerate(chains):
        want = want + weights[:, k].reshape(n, 1, 1, 1) * chain.float()
    got = augmix.mix_chains(x, (t for t in chains), original, weights)
    assert got.dtype == torch.uint8 and torch.equal(got, want.to(torch.uint8))
    # One chain's images alive at a time: each is dropped before the generator makes the next.
    made, alive_while_making = [], []

    def make(k):
        alive_while_making.append([r() is not None for r in made])
        t = chains[k].clone()
        made.append(weakref.ref(t))
        return t

    again = augmix.mix_chains(x, (make(k) for k in range(3)), original, weights)
    assert torch.equal(again, got)
    assert alive_while_making == [[], [False], [False, False]]
    empty = torch.empty(0, c, h, w, dtype=torch.uint8)
    assert augmix.mix_chains(empty, [empty], torch.empty(0), torch.empty(0, 1)).shape == empty.shape


def test_nhwc_batches_keep_their_layout_and_the_draws_follow_the_position():
    x = images(4, 3, 12, 10)
    t = AugMixAugment(seed=7)
    nchw = t.apply((x,), BatchPosition(0, 0, 0))[0]
    nhwc = t.apply((x.permute(0, 2, 3, 1).contiguous(),), BatchPosition(0, 0, 0))[0]
    assert torch.equal(nhwc.permute(0, 3, 1, 2), nchw)
    assert not torch.equal(t.apply((x,), BatchPosition(0, 1, 0))[0], nchw)


def test_v2_augmix_is_a_policy_with_torchvisions_arguments():
    recipe = T.Compose([T.RandomResizedCrop(16), T.AugMix(severity=4, mixture_width=2),
                        T.ToDtype(torch.float32, scale=True)], seed=0)
    stage = recipe.transforms[1]
    assert isinstance(stage, AugMixAugment) and stage.severity == 4 and stage.mixture_width == 2
    assert stage.interpolation == "bilinear"  # torchvision's AugMix default
    with pytest.raises(ValueError, match=r"step 2 \(TrivialAugmentWide\) sets the policy"):
        T.Compose([T.RandomCrop(8), T.AugMix(), T.TrivialAugmentWide(),
                   T.ToDtype(torch.float32, scale=True)])


@pytest.mark.parametrize("make,match", [
    (lambda: T.AugMix(severity=0), "AugMix severity must be an int in"),
    (lambda: T.AugMix(severity=11), "AugMix severity must be an int in"),
    (lambda: T.AugMix(mixture_width=0), "AugMix mixture_width must be"),
    (lambda: T.AugMix(chain_depth=1.5), "AugMix chain_depth must be"),
    (lambda: T.AugMix(alpha=0.0), "AugMix alpha must be"),
    (lambda: T.AugMix(all_ops="yes"), "AugMix all_ops must be"),
    (lambda: T.AugMix(interpolation="bicubic"), "AugMix interpolation must be"),
    (lambda: T.AugMix(fill=[1, 2]), "AugMix fill"),
])
def test_arguments_outside_torchvisions_are_refused_naming_them(make, match):
    with pytest.raises(ArgumentError, match=match):
        make()
