"""MixUpCutMix (prefetch/transforms/mixup.py): timm's Mixup semantics. The mixing and the targets
against a per-sample loop written here from timm's code, given the drawn parameters; the draws'
distributions statistically (probability, switch probability, Beta(α, α), the boxes and the
corrected λ); through a loader, composed after FusedAugment. (Against timm 1.0 itself, with its
numpy draws routed to the same generator, 4,500 batches of every mode and configuration were equal
bit for bit: benchmarks/NOTES.md.)"""
import math

import numpy as np
import pytest
import torch

import prefetch
from prefetch.transforms import BatchPosition, Compose
from prefetch.transforms.mixup import MixUpCutMix

CONFIGS = [dict(mixup_alpha=0.8, cutmix_alpha=1.0), dict(mixup_alpha=0.2),
           dict(mixup_alpha=0.0, cutmix_alpha=1.0), dict(mixup_alpha=0.0, cutmix_minmax=(0.2, 0.8)),
           dict(mixup_alpha=1.0, cutmix_alpha=1.0, prob=0.5, switch_prob=0.3, correct_lam=False)]


def reference(x, y, lam, cut, boxes, num_classes, smoothing, batch_mode):
    """timm's per-sample mixing and mixup_target, written out, from the drawn parameters."""
    n = len(x)
    out = x.clone()
    for i in range(n):
        j = n - 1 - i
        if cut[i]:
            t, b, l, r = boxes[i].tolist()
            out[i, :, t:b, l:r] = x[j, :, t:b, l:r]
        elif lam[i] != 1.0:
            if batch_mode:
                out[i] = x[i] * float(lam[i]) + x[j] * (1.0 - float(lam[i]))
            else:
                l32 = np.float32(lam[i])
                out[i] = x[i] * l32 + x[j] * (np.float32(1) - l32)
    off = smoothing / num_classes
    targets = torch.full((n, num_classes), off, dtype=torch.float64)
    for i in range(n):
        w = float(np.float32(lam[i])) if not batch_mode else float(lam[i])
        targets[i, y[i]] += (1.0 - smoothing) * w
        targets[i, y[n - 1 - i]] += (1.0 - smoothing) * (1.0 - w)
    return out, targets


@pytest.mark.parametrize("mode", ["batch", "pair", "elem"])
@pytest.mark.parametrize("k", range(len(CONFIGS)))
def test_mixing_and_targets_are_timms_for_the_drawn_parameters(mode, k):
    for index in range(6):
        aug = MixUpCutMix(num_classes=7, mode=mode, seed=11, label_smoothing=0.1, **CONFIGS[k])
        g = torch.Generator().manual_seed(index)
        x = torch.randn(8, 3, 12, 10, generator=g)
        y = torch.randint(0, 7, (8,), generator=g)
        got_x, got_y = aug.apply((x, y), BatchPosition(1, index, 0))
        lam, cut, boxes = aug.params(8, 12, 10, 1, index, 0)
        want_x, want_y = reference(x, y, lam, cut, boxes, 7, 0.1, mode == "batch")
        assert torch.equal(got_x, want_x), (mode, CONFIGS[k], index)
        assert got_y.dtype == torch.float32 and torch.allclose(got_y.double(), want_y, atol=1e-6)
        assert torch.allclose(got_y.sum(1), torch.ones(8))
        if mode == "pair":
            assert np.array_equal(lam, lam[::-1]) and np.array_equal(cut, cut[::-1])


def test_the_draws_follow_timms_distributions():
    n = 4000
    aug = MixUpCutMix(num_classes=3, mixup_alpha=0.4, cutmix_alpha=1.0, prob=0.7, switch_prob=0.3,
                      mode="elem", seed=2)
    lam, cut, boxes = aug.params(n, 40, 30)
    mixed = lam != 1.0
    assert abs(mixed.mean() - 0.7) < 5 * math.sqrt(0.21 / n)
    assert abs(cut[mixed].mean() - 0.3) < 5 * math.sqrt(0.21 / mixed.sum()) + 0.01
    blend = lam[mixed & ~cut]  # Beta(0.4, 0.4): mean 1/2, variance 1 / (4 (2 * 0.4 + 1))
    assert abs(blend.mean() - 0.5) < 0.03 and abs(blend.var() - 1 / (4 * 1.8)) < 0.015
    t, b, left, r = boxes[cut].T
    assert (t >= 0).all() and (b <= 40).all() and (left >= 0).all() and (r <= 30).all()
    assert np.allclose(lam[cut], 1 - (b - t) * (r - left) / (40 * 30))  # λ corrected to the area
    batch = MixUpCutMix(num_classes=3, mixup_alpha=0.0, cutmix_minmax=(0.25, 0.75), seed=5)
    for index in range(200):
        lam, cut, boxes = batch.params(4, 40, 32, 0, index)
        assert cut.all() and (boxes == boxes[0]).all()  # one box for the batch
        t, b, left, r = boxes[0]
        assert 10 <= b - t < 30 and 8 <= r - left < 24


def test_through_an_array_loader_after_fused_augment_and_reproducible():
    images = torch.randint(0, 256, (32, 3, 10, 10), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(0))
    labels = torch.arange(32) % 5
    fused = prefetch.FusedAugment(mean=(0.5,) * 3, std=(0.25,) * 3, hflip=0.5, seed=1)

    def run(seed):
        mix = MixUpCutMix(num_classes=5, mixup_alpha=0.8, cutmix_alpha=1.0, mode="elem", seed=seed)
        loader = prefetch.ArrayLoader((images, labels), batch_size=8, device="cpu",
                                      transform=Compose([fused, mix]))
        return [(x.clone(), y.clone()) for x, y in loader], mix

    a, mix = run(3)
    b, _ = run(3)
    c, _ = run(4)
    assert all(torch.equal(p[0], q[0]) and torch.equal(p[1], q[1]) for p, q in zip(a, b))
    assert not all(torch.equal(p[0], q[0]) for p, q in zip(a, c))
    plain = list(prefetch.ArrayLoader((images, labels), batch_size=8, device="cpu", transform=fused))
    for index, ((x, y), (fx, fy)) in enumerate(zip(a, plain)):
        want = mix.apply((fx, fy), BatchPosition(0, index, 0))
        assert torch.equal(x, want[0]) and torch.equal(y, want[1]) and y.shape == (8, 5)


def test_bad_batches_and_arguments_are_named():
    aug = MixUpCutMix(num_classes=4, seed=0)
    with pytest.raises(ValueError, match="even batch size.*got 5"):
        aug.apply((torch.zeros(5, 3, 4, 4), torch.zeros(5, dtype=torch.int64)), BatchPosition(0, 0))
    with pytest.raises(ValueError, match="float image batch .* torch.uint8"):
        aug.apply((torch.zeros(4, 3, 4, 4, dtype=torch.uint8), torch.zeros(4)), BatchPosition(0, 0))
    with pytest.raises(ValueError, match=r"integer class indices \[4\] .* at leaf 1, got float32 "
                                         r"labels \[4\]; class indices must be integers"):
        aug.apply((torch.zeros(4, 3, 4, 4), torch.zeros(4)), BatchPosition(0, 0))
    with pytest.raises(ValueError, match="num_classes"):
        MixUpCutMix(num_classes=0)
    with pytest.raises(ValueError, match="mode"):
        MixUpCutMix(num_classes=3, mode="sample")
    with pytest.raises(ValueError, match="needs mixup_alpha > 0"):
        MixUpCutMix(num_classes=3, mixup_alpha=0.0)
    with pytest.raises(ValueError, match="cutmix_minmax"):
        MixUpCutMix(num_classes=3, cutmix_minmax=(0.9, 0.1))


def test_a_box_not_clipped_is_sqrt_one_minus_lambda_of_each_side():
    aug = MixUpCutMix(num_classes=3, mixup_alpha=0.0, cutmix_alpha=1.0, mode="elem",
                      correct_lam=False, seed=8)  # λ stays the drawn one
    lam, cut, boxes = aug.params(3000, 41, 37)
    t, b, left, r = boxes.T
    inside = cut & (t > 0) & (b < 41) & (left > 0) & (r < 37)
    assert inside.sum() > 100
    ratio = np.sqrt(1 - lam[inside])
    assert (b - t)[inside].tolist() == [int(41 * v) for v in ratio]
    assert (r - left)[inside].tolist() == [int(37 * v) for v in ratio]
