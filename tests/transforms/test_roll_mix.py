"""MixUp / CutMix with torchvision v2's semantics (prefetch/transforms/roll_mix.py) and their v2
front-end names: the pixels and targets against float64 references written from torchvision's
formulas, the CutMix box against a hand-computed case, the draws' distributions, the order rules
of the front end, and a recipe through a Prefetcher. torchvision is not needed."""
import numpy as np
import pytest
import torch

import prefetch
from prefetch.transforms import BatchPosition
from prefetch.transforms import roll_mix as _roll_mix
from prefetch.transforms import v2 as T
from prefetch.transforms.roll_mix import RollMix


def _batch(n=6, c=3, h=8, w=10, classes=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, c, h, w, generator=g), torch.randint(0, classes, (n,), generator=g)


def _targets64(labels, classes, lam):
    one = torch.nn.functional.one_hot(labels, classes).double()
    return lam * one + (1 - lam) * one.roll(1, 0)


def test_mixup_mixes_each_sample_with_the_one_before_it():
    x, y = _batch()
    mix = RollMix([("mixup", 0.4)], num_classes=5, seed=3, layout="NCHW")
    pos = BatchPosition(1, 2, 0)
    kind, lam, box = mix.params(8, 10, *pos)
    assert kind == "mixup" and box is None and 0 < lam < 1
    out, targets = mix.apply((x, y), pos)
    ref = lam * x.double() + (1 - lam) * x.double().roll(1, 0)
    torch.testing.assert_close(out.double(), ref, rtol=0, atol=1e-6)
    torch.testing.assert_close(targets.double(), _targets64(y, 5, lam), rtol=0, atol=1e-7)
    assert targets.dtype == torch.float32 and targets.shape == (6, 5)


class _Scripted:
    """numpy's generator with scripted draws: choice, beta, then the integers in order."""

    def __init__(self, choice, beta, integers):
        self._choice, self._beta, self._integers = choice, beta, list(integers)

    def choice(self, n, p):
        return self._choice

    def beta(self, a, b):
        return self._beta

    def integers(self, low, high):
        value = self._integers.pop(0)
        assert low <= value < high
        return value


def test_the_cutmix_box_is_torchvisions(monkeypatch):
    # λ = 0.36: r = 0.5 * sqrt(0.64) = 0.4; W = 10, H = 8 give half-sides int(4.0) = 4 and
    # int(3.2) = 3; centre (x 1, y 7): x in [max(-3, 0), min(5, 10)) = [0, 5), y in [4, 8);
    # λ corrected to 1 - 5 * 4 / 80 = 0.75.
    monkeypatch.setattr(_roll_mix.np.random, "default_rng", lambda seed: _Scripted(1, 0.36, [1, 7]))
    mix = RollMix([("mixup", 1.0), ("cutmix", 1.0)], num_classes=5, seed=0, layout="NCHW")
    assert mix.params(8, 10) == ("cutmix", 0.75, (4, 8, 0, 5))
    x, y = _batch()
    out, targets = mix.apply((x, y), BatchPosition(0, 0, 0))
    expected = x.clone()
    expected[:, :, 4:8, 0:5] = x.roll(1, 0)[:, :, 4:8, 0:5]
    assert torch.equal(out, expected)
    torch.testing.assert_close(targets.double(), _targets64(y, 5, 0.75), rtol=0, atol=1e-7)


def test_channels_last_images_are_mixed_in_place_of_their_layout():
    x, y = _batch(h=6, w=7)
    mix = RollMix([("cutmix", 1.0)], num_classes=5, seed=1)
    nchw, _ = mix.apply((x, y), BatchPosition(0, 4, 0))
    nhwc, _ = mix.apply((x.permute(0, 2, 3, 1).contiguous(), y), BatchPosition(0, 4, 0))
    assert torch.equal(nhwc, nchw.permute(0, 2, 3, 1))


def test_draws_follow_torchvisions_distributions():
    # Beta(0.2, 0.2): mean 1/2, variance 1 / (4 (2α + 1)) = 0.1786; the choice with p.
    mix = RollMix([("mixup", 0.2), ("cutmix", 1.0)], num_classes=10, p=[0.25, 0.75], seed=7)
    draws = [mix.params(32, 32, 0, i) for i in range(3000)]
    lam = np.array([d[1] for d in draws if d[0] == "mixup"])
    share = 1 - len(lam) / len(draws)
    assert abs(share - 0.75) < 0.03
    assert abs(lam.mean() - 0.5) < 0.03 and abs(lam.var() - 1 / (4 * 1.4)) < 0.02
    # CutMix's corrected λ against torchvision's own draws (torch's Beta and randint, its box
    # formula) simulated here: clipping at the borders raises the mean above 1/2.
    cut = np.array([d[1] for d in draws if d[0] == "cutmix"])
    g = torch.Generator().manual_seed(0)
    beta = torch.distributions.Beta(torch.tensor([1.0]), torch.tensor([1.0]))
    torch.manual_seed(1)
    reference = []
    for _ in range(20000):
        lam0 = float(beta.sample(()))
        r_x, r_y = int(torch.randint(32, (1,), generator=g)), int(torch.randint(32, (1,), generator=g))
        r = 0.5 * (1.0 - lam0) ** 0.5
        half = int(r * 32)
        x1, y1 = max(r_x - half, 0), max(r_y - half, 0)
        x2, y2 = min(r_x + half, 32), min(r_y + half, 32)
        reference.append(1.0 - (x2 - x1) * (y2 - y1) / (32 * 32))
    reference = np.array(reference)
    assert abs(cut.mean() - reference.mean()) < 0.02 and abs(cut.std() - reference.std()) < 0.02
    assert cut.min() >= 0 and cut.max() <= 1


def test_the_draws_are_a_function_of_the_position():
    mix = RollMix([("mixup", 1.0), ("cutmix", 1.0)], num_classes=3, seed=11)
    again = RollMix([("mixup", 1.0), ("cutmix", 1.0)], num_classes=3, seed=11)
    assert mix.params(16, 16, 2, 5, 1) == again.params(16, 16, 2, 5, 1)
    assert len({mix.params(16, 16, 0, i) for i in range(20)}) == 20


@pytest.mark.parametrize("images, labels, match", [
    (torch.zeros(4, 3, 8, 8, dtype=torch.uint8), torch.zeros(4, dtype=torch.int64), "float image batch"),
    (torch.zeros(4, 3, 8, 8), torch.zeros(4), "float32 labels .4.; class indices must be integers"),
    (torch.zeros(4, 3, 8, 8), torch.tensor([0, 1, 7, 2]), "label 7 of sample 2 is outside"),
])
def test_bad_batches_are_refused_naming_what_is_wrong(images, labels, match):
    mix = RollMix([("mixup", 1.0)], num_classes=5, seed=0)
    with pytest.raises(ValueError, match=match):
        mix.apply((images, labels), BatchPosition(0, 0, 0))


def test_an_odd_batch_is_fine_as_in_torchvision():
    x, y = _batch(n=5)
    out, targets = RollMix([("mixup", 1.0)], num_classes=5, seed=0, layout="NCHW").apply(
        (x, y), BatchPosition(0, 0, 0))
    assert out.shape == x.shape and targets.shape == (5, 5)


# --- the v2 front end ----------------------------------------------------------------------------

RECIPE = [T.RandomResizedCrop(16), T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True),
          T.Normalize((0.5,) * 3, (0.25,) * 3), T.RandomErasing(0.1)]


def test_v2_compiles_random_choice_of_mixup_and_cutmix_last():
    choice = T.RandomChoice([T.MixUp(alpha=0.2, num_classes=10), T.CutMix(alpha=1.0, num_classes=10)])
    compose = T.Compose(RECIPE + [choice], seed=0)
    mix = compose.transforms[-1]
    assert isinstance(mix, RollMix)
    assert mix.choices == [("mixup", 0.2), ("cutmix", 1.0)] and mix.p == [0.5, 0.5]
    assert mix.num_classes == 10 and mix.label_key == 1


@pytest.mark.parametrize("steps, match", [
    ([T.MixUp(num_classes=3)] + RECIPE, "MixUp/CutMix come last"),
    (RECIPE[:2] + [T.CutMix(num_classes=3)] + RECIPE[2:], "MixUp/CutMix come last"),
    (RECIPE + [T.MixUp(num_classes=3), T.RandomErasing(0.1)], "comes after MixUp"),
])
def test_v2_refuses_a_mix_out_of_place_naming_it(steps, match):
    with pytest.raises(ValueError, match=match):
        T.Compose(steps, seed=0)


def test_v2_mixup_without_num_classes_takes_one_hot_labels_and_refuses_class_indices():
    """As torchvision's v2 MixUp (since 0.20): num_classes is optional when the labels are
    one-hot or soft [N, K]; class indices then need it, refused naming it when the batch comes."""
    compose = T.Compose([T.ToDtype(torch.float32, scale=True), T.MixUp(alpha=1.0)], seed=0)
    images = torch.randint(0, 256, (4, 3, 8, 8), dtype=torch.uint8)
    one_hot = torch.nn.functional.one_hot(torch.tensor([0, 1, 2, 1]), 3).float()
    mixed, targets = compose((images, one_hot))
    assert targets.shape == (4, 3) and torch.allclose(targets.sum(1), torch.ones(4))
    # Each row mixes its own one-hot row and its roll's with one lambda (torchvision pairs a batch
    # with its roll); no two neighbours share a class here, so each row's own class reads lambda.
    rolled = one_hot.roll(1, 0)
    lam = targets[torch.arange(4), one_hot.argmax(1)]
    assert torch.allclose(lam, lam[0].expand(4))
    assert torch.allclose(targets, lam[0] * one_hot + (1 - lam[0]) * rolled, atol=1e-6)
    with pytest.raises(ValueError, match="needs num_classes for class-index labels"):
        compose((images, torch.tensor([0, 1, 2, 1])))


def test_v2_random_choice_takes_only_mixup_and_cutmix():
    with pytest.raises(ValueError, match="between MixUp and CutMix, or between photometric steps .*; got RandomErasing"):
        T.RandomChoice([T.MixUp(num_classes=3), T.RandomErasing(0.1)])
    with pytest.raises(ValueError, match="same num_classes"):
        T.RandomChoice([T.MixUp(num_classes=3), T.CutMix(num_classes=4)])


def test_a_v2_recipe_with_mixing_through_a_prefetcher():
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randint(0, 256, (4, 24, 24, 3), dtype=torch.uint8, generator=g),
                torch.randint(0, 10, (4,), generator=g)) for _ in range(3)]
    choice = T.RandomChoice([T.MixUp(alpha=0.2, num_classes=10), T.CutMix(alpha=1.0, num_classes=10)])
    compose = T.Compose(RECIPE + [choice], seed=5)
    mix = compose.transforms[-1]
    with prefetch.Prefetcher(batches, device="cpu", transform=compose) as loader:
        got = [(x.clone(), t.clone()) for x, t in loader]
    assert len(got) == 3
    for index, ((x, targets), (_, labels)) in enumerate(zip(got, batches)):
        assert x.shape == (4, 3, 16, 16) and targets.shape == (4, 10)
        _, lam, _ = mix.params(16, 16, 0, index, 0)
        torch.testing.assert_close(targets.double(), _targets64(labels, 10, lam), rtol=0, atol=1e-6)
