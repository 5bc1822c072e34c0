"""Every label form a user passes to a mixing transform (issue 43): RollMix (torchvision v2's MixUp
/ CutMix, which take one-hot and soft labels ``[N, K]`` since 0.20) and MixUpCutMix (timm's).
Class indices of any integer dtype, one-hot (integer, bool, float), soft labels of every float
dtype: the targets against a float64 reference computed from the transform's own drawn λ
(torchvision's ``_mixup_label``: ``λ y + (1 - λ) y.roll(1, 0)``; timm's ``mixup_target``:
``λ_i y_i + (1 - λ_i) y_{N-1-i}`` of the smoothed one-hot ``y (1 - s) + s / K``), the same λ as
the images'. Forms that are not labels are refused naming what to pass."""
import pytest
import torch

from prefetch.transforms import BatchPosition, MixUpCutMix, RollMix
from prefetch.transforms import v2 as T

N, K, H, W = 6, 5, 8, 10
POS = BatchPosition(2, 3, 0)


def _data(seed=0):
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(N, 3, H, W, generator=g)
    index = torch.tensor([0, 3, 4, 1, 3, 2])
    soft = torch.rand(N, K, generator=g, dtype=torch.float64)
    return images, index, soft / soft.sum(1, keepdim=True)


def _forms():
    """(name, labels, the float64 rows they stand for, the targets' dtype)."""
    _, index, soft = _data()
    one_hot = torch.nn.functional.one_hot(index, K)
    forms = [("int64 [N]", index, one_hot.double(), torch.float32)]
    for dtype in (torch.int32, torch.int16, torch.uint8, torch.int8):
        forms.append(("%s [N]" % dtype, index.to(dtype), one_hot.double(), torch.float32))
    forms += [("one-hot int64 [N, K]", one_hot, one_hot.double(), torch.float32),
              ("one-hot bool [N, K]", one_hot.bool(), one_hot.double(), torch.float32),
              ("one-hot float32", one_hot.float(), one_hot.double(), torch.float32)]
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        labels = soft.to(dtype)
        forms.append(("soft %s" % dtype, labels, labels.double(), dtype))
    return forms


FORMS = _forms()
# The targets' rounding, relative to values at most 1: float32's, float64's, the labels' own.
TOL = {torch.float32: 1e-6, torch.float64: 1e-12, torch.float16: 1e-3, torch.bfloat16: 8e-3}


def _roll_mixes():
    return {"mixup": RollMix([("mixup", 0.4)], num_classes=K, seed=3, layout="NCHW"),
            "cutmix": RollMix([("cutmix", 1.0)], num_classes=K, seed=4, layout="NCHW"),
            "either, num_classes None": RollMix([("mixup", 1.0), ("cutmix", 1.0)], seed=5,
                                                layout="NCHW")}


@pytest.mark.parametrize("form", range(len(FORMS)), ids=[f[0] for f in FORMS])
@pytest.mark.parametrize("which", ["mixup", "cutmix", "either, num_classes None"])
def test_roll_mix_mixes_every_label_form_with_the_images_lambda(which, form):
    name, labels, rows, dtype = FORMS[form]
    mix = _roll_mixes()[which]
    if mix.num_classes is None and labels.dim() == 1:
        pytest.skip("class indices need num_classes (tested below)")
    images, _, _ = _data()
    out, targets = mix.apply((images, labels), POS)
    kind, lam, box = mix.params(H, W, *POS)
    reference = lam * rows + (1 - lam) * rows.roll(1, 0)  # torchvision's _mixup_label, float64
    assert targets.dtype == dtype and targets.shape == (N, K)
    torch.testing.assert_close(targets.double(), reference, rtol=0, atol=TOL[dtype])
    # the images were mixed with that λ (and box): the same output as with class indices
    expected = images.clone()
    if kind == "mixup":
        expected = lam * images.double() + (1 - lam) * images.double().roll(1, 0)
    else:
        y1, y2, x1, x2 = box
        expected[..., y1:y2, x1:x2] = images.roll(1, 0)[..., y1:y2, x1:x2]
    torch.testing.assert_close(out.double(), expected.double(), rtol=0, atol=1e-6)


def _timm_mixes():
    return {mode: MixUpCutMix(num_classes=K, mixup_alpha=0.8, cutmix_alpha=1.0, mode=mode,
                              label_smoothing=0.1, seed=7, layout="NCHW")
            for mode in ("batch", "pair", "elem")}


@pytest.mark.parametrize("form", range(len(FORMS)), ids=[f[0] for f in FORMS])
@pytest.mark.parametrize("mode", ["batch", "pair", "elem"])
def test_mixup_cutmix_mixes_every_label_form_with_the_images_lambda(mode, form):
    name, labels, rows, dtype = FORMS[form]
    mix = _timm_mixes()[mode]
    images, _, _ = _data()
    _, targets = mix.apply((images, labels), POS)
    lam, _, _ = mix.params(N, H, W, *POS)
    lam = torch.tensor(lam, dtype=torch.float64).view(N, 1)
    smooth = rows * (1 - 0.1) + 0.1 / K  # timm's on/off values where the rows are one-hot
    reference = lam * smooth + (1 - lam) * smooth.flip(0)  # timm's mixup_target, float64
    assert targets.dtype == dtype and targets.shape == (N, K)
    torch.testing.assert_close(targets.double(), reference, rtol=0, atol=TOL[dtype])


def test_one_hot_labels_give_the_class_indices_targets():
    images, index, _ = _data()
    one_hot = torch.nn.functional.one_hot(index, K)
    for mix in list(_roll_mixes().values())[:2] + list(_timm_mixes().values()):
        out_i, t_i = mix.apply((images, index), POS)
        out_h, t_h = mix.apply((images, one_hot), POS)
        assert torch.equal(out_i, out_h)
        torch.testing.assert_close(t_h, t_i, rtol=0, atol=1e-7)


def test_num_classes_is_optional_for_dense_labels_and_checked_against_k():
    images, index, soft = _data()
    for mix in (RollMix([("mixup", 1.0)], seed=0), MixUpCutMix(seed=0)):
        _, targets = mix.apply((images, soft.float()), POS)
        assert targets.shape == (N, K)
        with pytest.raises(ValueError, match=r"needs num_classes for class-index labels \[6\]"):
            mix.apply((images, index), POS)
    for mix in (RollMix([("mixup", 1.0)], num_classes=7, seed=0),
                MixUpCutMix(num_classes=7, seed=0)):
        with pytest.raises(ValueError, match=r"K = 5 classes \(\[6, 5\]\) but num_classes = 7"):
            mix.apply((images, soft.float()), POS)


def test_v2_mixup_takes_one_hot_labels():
    images, index, _ = _data()
    one_hot = torch.nn.functional.one_hot(index, K).float()
    mix = T.Compose([T.ToDtype(torch.float32, scale=True), T.MixUp(alpha=1.0, num_classes=K)],
                    seed=0).transforms[-1]
    _, targets = mix.apply((images, one_hot), POS)
    assert targets.shape == (N, K)
    torch.testing.assert_close(targets.sum(1), torch.ones(N))


REFUSED = [
    ("int64 [N, 1]", lambda idx, soft: idx.view(-1, 1), r"integers \[6, 1\], a column of class "
                                                        r"indices: pass labels.view\(-1\)"),
    ("float [N]", lambda idx, soft: idx.float(), r"class indices must be integers \(labels.long"),
    ("bool [N]", lambda idx, soft: idx > 1, r"bool labels; pass class indices as integers"),
    ("[N, K, 1]", lambda idx, soft: soft.unsqueeze(-1), r"got a torch.float64 tensor of shape "
                                                        r"\[6, 5, 1\]"),
    ("[N + 1]", lambda idx, soft: torch.cat([idx, idx[:1]]), r"shape \[7\]"),
    ("a scalar", lambda idx, soft: idx[0], r"shape \[\]"),
    ("a list", lambda idx, soft: idx.tolist(), r"got a list"),
    ("complex", lambda idx, soft: soft.to(torch.complex64), r"complex labels"),
    ("out of range", lambda idx, soft: idx + 1, r"label 5 of sample 2 is outside \[0, "
                                                r"num_classes = 5\)"),
    ("negative", lambda idx, soft: idx - 1, r"label -1 of sample 0 is outside"),
]


@pytest.mark.parametrize("case", range(len(REFUSED)), ids=[r[0] for r in REFUSED])
@pytest.mark.parametrize("which", ["RollMix", "MixUpCutMix"])
def test_forms_that_are_not_labels_are_refused_naming_what_to_pass(which, case):
    images, index, soft = _data()
    _, make, match = REFUSED[case]
    mix = (RollMix([("mixup", 1.0)], num_classes=K, seed=0) if which == "RollMix"
           else MixUpCutMix(num_classes=K, seed=0))
    with pytest.raises(ValueError, match=match):
        mix.apply((images, make(index, soft)), POS)
