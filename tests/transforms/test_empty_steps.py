"""A parameter set with nothing in it is the identity on every path (issue 43:
``v2.RandAugment(num_ops=0)`` raised "prefetch internal error: color_jitter's CPU kernel arguments
are incomplete"; torchvision returns the image): RandAugment with no op, a policy table with no
step (no column, or only Identity), an AutoAugment policy with no step, ColorJitter with every
argument 0 or None (torchvision's ``_check_input`` makes None of both), the fused
``color_jitter`` op given chains of no step, the policies, erasing and mixing with probability 0,
and an empty batch (N = 0) through each policy, each policy op and each batch transform. The
reference is the input itself (torchvision returns the image unchanged): equal bytes, a new
tensor."""
import pytest
import torch

import prefetch.ops
from prefetch.transforms import (BatchPosition, MixUpCutMix, PolicyAugment, RandomErasing,
                                 RollMix, policy_ops)
from prefetch.transforms.policies import OpTable, auto_augment
from prefetch.transforms.policy_ops import apply_table
from prefetch.transforms import v2 as T

POS = BatchPosition(1, 2, 0)


def _images(n, c=3, h=8, w=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, c, h, w), dtype=torch.uint8, generator=g)


def _assert_identity(out, x):
    assert out.shape == x.shape and out.dtype == x.dtype
    assert torch.equal(out, x)
    assert x.numel() == 0 or out.data_ptr() != x.data_ptr()  # a result, not the input


IDENTITY_POLICIES = [
    ("rand_augment", {"num_ops": 0}),
    ("color_jitter", {}),
    ("color_jitter", {"brightness": 0, "contrast": 0, "saturation": 0, "hue": 0}),
    ("color_jitter", {"brightness": None, "contrast": None, "saturation": None, "hue": None}),
    ("color_jitter", {"brightness": (1, 1), "contrast": (1.0, 1.0), "hue": (0, 0)}),
]


@pytest.mark.parametrize("n", [4, 1, 0])
@pytest.mark.parametrize("c", [3, 1])
@pytest.mark.parametrize("policy, options", IDENTITY_POLICIES,
                         ids=["%s%s" % p for p in IDENTITY_POLICIES])
def test_a_policy_with_no_step_returns_the_images(policy, options, c, n):
    x = _images(n, c)
    for layout, batch in (("NCHW", x), ("NHWC", x.permute(0, 2, 3, 1).contiguous())):
        aug = PolicyAugment(policy, seed=0, layout=layout, **options)
        _assert_identity(aug.apply((batch,), POS)[0], batch)


@pytest.mark.parametrize("n", [3, 1, 0])
def test_a_table_with_no_column_or_only_identity_is_the_identity(n):
    x = _images(n)
    for k in (0, 1, 3):
        table = OpTable(torch.zeros(n, k, dtype=torch.int64), torch.zeros(n, k))
        _assert_identity(apply_table(x, table), x)


@pytest.mark.parametrize("policy", [(), ((),), ((), ())])
def test_an_auto_augment_policy_with_no_step_draws_the_identity(policy):
    g = torch.Generator().manual_seed(0)
    table = auto_augment(4, g, height=8, width=9, policy=policy)
    assert table.ops.shape == (4, 0)
    x = _images(4)
    _assert_identity(apply_table(x, table), x)


def test_auto_augment_sub_policies_of_other_lengths_draw_a_column_each():
    """A sub-policy of one step, next to one of three (the table is as wide as the longest; a
    shorter one ends with Identity); each step applied with its probability (here 1 and 0)."""
    g = torch.Generator().manual_seed(0)
    policy = ((("Invert", 1.0, None),), (("Equalize", 1.0, None), ("Invert", 0.0, None),
                                         ("Posterize", 1.0, 3)))
    table = auto_augment(64, g, height=8, width=9, policy=policy)
    assert table.ops.shape == (64, 3)
    for i in range(64):
        # Posterize's bin 3 of 10: 8 - round(3 / (9 / 4)) = 7 bits (torchvision's magnitudes)
        assert table.steps(i) in ([("Invert", 0.0)], [("Equalize", 0.0), ("Posterize", 7.0)])
    assert {len(table.steps(i)) for i in range(64)} == {1, 2}


@pytest.mark.parametrize("n", [2, 0])
def test_the_color_jitter_op_with_chains_of_no_step_copies_the_images(n):
    x = _images(n)
    out = prefetch.ops.color_jitter(x, torch.zeros(n, 0, dtype=torch.int64),
                                    torch.zeros(n, 0, dtype=torch.float64))
    _assert_identity(out, x)
    _assert_identity(prefetch.ops.color_jitter(x, [[]] * n, [[]] * n), x)
    out = torch.ops.prefetch.color_jitter(x, torch.zeros(n, 0, dtype=torch.int64),
                                          torch.zeros(n, 0, dtype=torch.float64))
    _assert_identity(out, x)


def test_v2_rand_augment_with_no_op_is_the_identity_through_compose():
    x = _images(3)
    recipe = T.Compose([T.RandAugment(num_ops=0), T.ToDtype(torch.float32, scale=True)], seed=0)
    out = recipe.apply((x,), POS)[0]
    torch.testing.assert_close(out, x.float() / 255, rtol=0, atol=1e-7)


@pytest.mark.parametrize("policy, options", [("trivial_augment_wide", {}), ("rand_augment", {}),
                                             ("auto_augment", {}),
                                             ("color_jitter", {"brightness": 0.5, "hue": 0.2})])
def test_an_empty_batch_goes_through_every_policy(policy, options):
    x = _images(0)
    _assert_identity(PolicyAugment(policy, seed=0, layout="NCHW", **options).apply((x,), POS)[0], x)


OPS_WITH_FACTORS = ["adjust_brightness", "adjust_saturation", "adjust_contrast", "adjust_sharpness",
                    "adjust_hue", "posterize", "solarize"]


@pytest.mark.parametrize("op", OPS_WITH_FACTORS + ["autocontrast", "equalize", "invert", "affine"])
def test_an_empty_batch_goes_through_every_policy_op(op):
    x = _images(0)
    fn = getattr(policy_ops, op)
    out = fn(x, []) if op in OPS_WITH_FACTORS else fn(x, angle=[]) if op == "affine" else fn(x)
    _assert_identity(out, x)


@pytest.mark.parametrize("n", [0, 2])
def test_batch_transforms_with_nothing_to_do_return_the_batch(n):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 3, 6, 7, generator=g)
    labels = torch.randint(0, 4, (n,), generator=g)
    out = RandomErasing(0.0, seed=0, layout="NCHW").apply((x,), POS)[0]
    assert torch.equal(out, x)
    if n == 0:
        assert RandomErasing(1.0, seed=0, layout="NCHW").apply((x,), POS)[0].shape == x.shape
    for mix in [MixUpCutMix(num_classes=4, prob=0.0, mode=m, seed=0, layout="NCHW")
                for m in ("batch", "pair", "elem")]:
        out, targets = mix.apply((x, labels), POS)
        assert torch.equal(out, x)  # prob 0: λ = 1, timm's smoothed one-hot targets
        ref = torch.nn.functional.one_hot(labels, 4).double() * 0.9 + 0.1 / 4
        torch.testing.assert_close(targets.double(), ref, rtol=0, atol=1e-7)
    if n == 0:
        for mix in [MixUpCutMix(num_classes=4, cutmix_alpha=1.0, mode=m, seed=0, layout="NCHW")
                    for m in ("batch", "pair", "elem")] + [
                RollMix([("mixup", 1.0), ("cutmix", 1.0)], num_classes=4, seed=0, layout="NCHW")]:
            out, targets = mix.apply((x, labels), POS)
            assert out.shape == x.shape and targets.shape == (0, 4)
