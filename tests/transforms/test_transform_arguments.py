"""Every argument of the transforms and policies in prefetch.transforms' mixup, roll_mix, erasing,
policy_augment and policies modules is checked when the transform is built (issue 43:
``MixUp(alpha=inf)`` was accepted and returned an all-NaN batch; RandomErasing ``ratio=(1, inf)``,
RollMix ``p=[inf, 1]`` and ColorJitter ``brightness=inf`` failed only when applied, with numpy's
and torch's messages), as torchvision's constructors check theirs and more strictly: finite, in
range, the right type (a bool is not a number, a float is not an int, a string is not a number).
The message names the class and the argument: ``prefetch: <Class> <arg> must be <expected>, got
<value>``; a wrong type raises a TypeError that is a ValueError too. The defaults (and the other
values torchvision takes: None for ColorJitter's arguments, numpy numbers) still build."""
import math

import numpy as np
import pytest

from prefetch.transforms import MixUpCutMix, PolicyAugment, RandomErasing, RollMix
from prefetch.transforms.arguments import ArgumentTypeError

INF, NAN = math.inf, math.nan


def mixup(**kw):
    return MixUpCutMix(**{"num_classes": 10, "seed": 0, **kw})


def roll(**kw):
    return RollMix(kw.pop("choices", [("mixup", 1.0)]), **{"num_classes": 10, "seed": 0, **kw})


def erasing(**kw):
    return RandomErasing(**{"seed": 0, **kw})


def policy(name):
    return lambda **kw: PolicyAugment(kw.pop("policy", name), **{"seed": 0, **kw})


# (builder, argument, bad value, the class the message names, the argument it names, the value
# shown) — the last three default to the builder's class, the argument and the bad value.
BAD = [
    (mixup, "mixup_alpha", INF), (mixup, "mixup_alpha", NAN), (mixup, "mixup_alpha", -1.0),
    (mixup, "mixup_alpha", True), (mixup, "mixup_alpha", "1"),
    (mixup, "cutmix_alpha", INF), (mixup, "cutmix_alpha", -0.5),
    (mixup, "cutmix_minmax", (0.2, INF)), (mixup, "cutmix_minmax", (0.0, 0.5)),
    (mixup, "cutmix_minmax", (0.5, 0.2)), (mixup, "cutmix_minmax", (0.1,)),
    (mixup, "cutmix_minmax", "ab"),
    (mixup, "prob", 1.5), (mixup, "prob", NAN), (mixup, "prob", True), (mixup, "prob", None),
    (mixup, "switch_prob", -0.1), (mixup, "switch_prob", INF),
    (mixup, "label_smoothing", INF), (mixup, "label_smoothing", -0.1),
    (mixup, "label_smoothing", 1.5),
    (mixup, "correct_lam", "False"), (mixup, "correct_lam", 1),
    (mixup, "mode", "batches"), (mixup, "mode", None),
    (mixup, "num_classes", 0), (mixup, "num_classes", 1.5), (mixup, "num_classes", 10.0),
    (mixup, "num_classes", True), (mixup, "num_classes", "10"),
    (mixup, "image_key", True), (mixup, "image_key", 0.0), (mixup, "image_key", [0]),
    (mixup, "label_key", False),
    (roll, "choices", [("mixup", INF)], "MixUp", "alpha", INF),
    (roll, "choices", [("cutmix", NAN)], "CutMix", "alpha", NAN),
    (roll, "choices", [("cutmix", 0.0)], "CutMix", "alpha", 0.0),
    (roll, "choices", [("mixup", True)], "MixUp", "alpha", True),
    (roll, "choices", [("blend", 1.0)], "RollMix", "choices' kind", "blend"),
    (roll, "p", [INF, 1.0]), (roll, "p", [True]), (roll, "p", [-1.0]), (roll, "p", [0.0]),
    (roll, "p", [0.5, 0.5]),
    (roll, "num_classes", 0), (roll, "num_classes", 2.0), (roll, "num_classes", True),
    (roll, "image_key", True), (roll, "label_key", 1.5),
    (erasing, "p", 1.5), (erasing, "p", NAN), (erasing, "p", True), (erasing, "p", "0.5"),
    (erasing, "scale", (0.02, INF)), (erasing, "scale", (-0.1, 0.3)),
    (erasing, "scale", (0.5, 0.1)), (erasing, "scale", (0.1,)), (erasing, "scale", 0.3),
    (erasing, "scale", (True, 0.5)),
    (erasing, "ratio", (1, INF)), (erasing, "ratio", (0, 1)), (erasing, "ratio", (2, 1)),
    (erasing, "ratio", (NAN, 1)),
    (erasing, "value", INF), (erasing, "value", "noise"), (erasing, "value", [1.0, INF]),
    (erasing, "value", True), (erasing, "value", None), (erasing, "value", []),
    (erasing, "image_key", True),
    (policy("rand_augment"), "policy", "randaugment", "PolicyAugment"),
    (policy("rand_augment"), "interpolation", "bicubic", "PolicyAugment"),
    (policy("rand_augment"), "fill", 300, "PolicyAugment"),
    (policy("rand_augment"), "fill", -1, "PolicyAugment"),
    (policy("rand_augment"), "fill", INF, "PolicyAugment"),
    (policy("rand_augment"), "fill", [0, 0, NAN], "PolicyAugment"),
    (policy("rand_augment"), "fill", True, "PolicyAugment"),
    (policy("rand_augment"), "fill", "white", "PolicyAugment"),
    (policy("trivial_augment_wide"), "fill", (1, 2), "PolicyAugment"),  # the ops take 1 or 3 channels
    (policy("rand_augment"), "image_key", True, "PolicyAugment"),
    (policy("rand_augment"), "num_ops", -1, "RandAugment"),
    (policy("rand_augment"), "num_ops", 1.5, "RandAugment"),
    (policy("rand_augment"), "num_ops", 2.0, "RandAugment"),
    (policy("rand_augment"), "num_ops", True, "RandAugment"),
    (policy("rand_augment"), "magnitude", 31, "RandAugment"),
    (policy("rand_augment"), "magnitude", 9.0, "RandAugment"),
    (policy("rand_augment"), "magnitude", -1, "RandAugment"),
    (policy("rand_augment"), "num_magnitude_bins", 1, "RandAugment"),
    (policy("trivial_augment_wide"), "num_magnitude_bins", 31.0, "TrivialAugmentWide"),
    (policy("trivial_augment_wide"), "num_magnitude_bins", True, "TrivialAugmentWide"),
    (policy("color_jitter"), "brightness", INF, "ColorJitter"),
    (policy("color_jitter"), "brightness", -0.1, "ColorJitter"),
    (policy("color_jitter"), "brightness", (0.5, INF), "ColorJitter"),
    (policy("color_jitter"), "brightness", (2, 1), "ColorJitter"),
    (policy("color_jitter"), "brightness", (-1, 1), "ColorJitter"),
    (policy("color_jitter"), "brightness", True, "ColorJitter"),
    (policy("color_jitter"), "brightness", "0.5", "ColorJitter"),
    (policy("color_jitter"), "contrast", NAN, "ColorJitter"),
    (policy("color_jitter"), "saturation", (1,), "ColorJitter"),
    (policy("color_jitter"), "saturation", (True, 2), "ColorJitter"),
    (policy("color_jitter"), "hue", 0.6, "ColorJitter"),
    (policy("color_jitter"), "hue", (-0.6, 0), "ColorJitter"),
    (policy("color_jitter"), "hue", INF, "ColorJitter"),
]


def _case(entry):
    build, arg, bad = entry[:3]
    cls = entry[3] if len(entry) > 3 else None
    named = entry[4] if len(entry) > 4 else arg
    shown = entry[5] if len(entry) > 5 else bad
    return build, arg, bad, cls, named, shown


def _id(entry):
    build, arg, bad, cls, _, _ = _case(entry)
    return "%s-%s=%r" % (cls or build.__name__, arg, bad)


@pytest.mark.parametrize("entry", BAD, ids=[_id(e) for e in BAD])
def test_a_bad_argument_is_refused_when_built_naming_class_and_argument(entry):
    build, arg, bad, cls, named, shown = _case(entry)
    with pytest.raises(ValueError) as info:
        build(**{arg: bad})
    default_cls = {mixup: "MixUpCutMix", roll: "RollMix", erasing: "RandomErasing"}.get(build)
    message = str(info.value)
    assert message.startswith("prefetch: %s %s must be " % (cls or default_cls, named)), message
    assert message.endswith(", got %r" % (shown,)), message
    if isinstance(shown, bool) or (isinstance(shown, str) and arg not in STRING_ARGUMENTS):
        assert isinstance(info.value, TypeError) and isinstance(info.value, ArgumentTypeError)


# Arguments whose right values are strings: a wrong string is a ValueError.
STRING_ARGUMENTS = {"mode", "policy", "interpolation", "value", "choices"}


def test_an_unknown_policy_option_is_a_type_error_naming_the_options():
    with pytest.raises(TypeError, match=r"PolicyAugment\('rand_augment'\) does not take nops; its "
                                        r"options are num_ops, magnitude, num_magnitude_bins"):
        PolicyAugment("rand_augment", nops=2)
    with pytest.raises(TypeError, match=r"PolicyAugment\('auto_augment'\) does not take policy"):
        PolicyAugment("auto_augment", **{"policy_table": ()})


GOOD = [
    lambda: MixUpCutMix(num_classes=10), lambda: MixUpCutMix(),
    lambda: MixUpCutMix(num_classes=np.int64(10), mixup_alpha=np.float32(0.2), cutmix_alpha=1,
                        cutmix_minmax=[0.2, 0.8], prob=np.float64(0.5), correct_lam=np.bool_(False),
                        mode="elem", label_smoothing=0, image_key="image", label_key="label"),
    lambda: RollMix([("mixup", 1.0)]), lambda: RollMix([("mixup", 1), ("cutmix", 1.0)], p=[0, 2],
                                                        num_classes=3),
    lambda: RandomErasing(), lambda: RandomErasing(1, (0, 1), [1, 1], "random"),
    lambda: RandomErasing(value=(0.1, 0.2, 0.3), image_key="x"),
    lambda: PolicyAugment("trivial_augment_wide"), lambda: PolicyAugment("rand_augment"),
    lambda: PolicyAugment("rand_augment", num_ops=np.int32(0), magnitude=30, fill=[1, 2, 3]),
    lambda: PolicyAugment("auto_augment", interpolation="bilinear", fill=255),
    lambda: PolicyAugment("color_jitter"),
    lambda: PolicyAugment("color_jitter", brightness=None, contrast=(0, 3), saturation=0.4,
                          hue=(-0.5, 0.5)),
]


@pytest.mark.parametrize("k", range(len(GOOD)))
def test_the_defaults_and_torchvisions_other_values_still_build(k):
    GOOD[k]()


@pytest.mark.parametrize("bad, named, shown", [
    ("imagenet", "policy", "imagenet"),
    (("Invert",), "policy[0]", "Invert"),
    ((("Invert", 0.5, None),), "policy[0][0]", "Invert"),  # a step where a sub-policy goes
    (((("Invert", 0.5),),), "policy[0][0]", ("Invert", 0.5)),
    (((("Hue", 0.5, 3),),), "policy[0][0]'s op", "Hue"),
    (((("Rotate", 1.5, 3),),), "policy[0][0]'s probability", 1.5),
    (((("Rotate", 0.5, 10),),), "policy[0][0]'s bin", 10),
    (((("Rotate", 0.5, 3.0),),), "policy[0][0]'s bin", 3.0),
])
def test_a_bad_auto_augment_policy_is_named_by_sub_policy_and_step(bad, named, shown):
    import torch

    from prefetch.transforms.policies import auto_augment

    with pytest.raises(ValueError) as info:
        auto_augment(2, torch.Generator().manual_seed(0), height=8, width=8, policy=bad)
    message = str(info.value)
    assert message.startswith("prefetch: AutoAugment %s must be " % named), message
    assert message.endswith(", got %r" % (shown,)), message


def test_a_per_channel_fill_that_does_not_fit_the_images_is_refused_naming_the_argument():
    """A fill of 3 values on 1-channel images: refused naming PolicyAugment's fill and both counts
    (it failed in the affine_warp op, named as an internal op, when a geometric op was drawn)."""
    import torch

    from prefetch.transforms import BatchPosition

    aug = PolicyAugment("trivial_augment_wide", fill=[1, 2, 3], seed=0)
    with pytest.raises(ValueError, match=r"PolicyAugment fill has 3 values .* have 1 channel"):
        aug.apply(torch.zeros(2, 1, 8, 8, dtype=torch.uint8), BatchPosition(0, 0))
    out = aug.apply(torch.zeros(2, 3, 8, 8, dtype=torch.uint8), BatchPosition(0, 0))
    assert out.shape == (2, 3, 8, 8)



def _interpolation_sites():
    """Every transform that takes an ``interpolation``, built with one (their one check:
    prefetch.transforms.arguments.interpolation)."""
    from prefetch.transforms import FusedAugment, v2
    from prefetch.transforms.timm import RandomResizedCropAndInterpolation

    return {
        "v2.RandomResizedCrop": lambda i: v2.RandomResizedCrop(8, interpolation=i),
        "v2.Resize": lambda i: v2.Resize(8, interpolation=i),
        "v2.RandAugment": lambda i: v2.RandAugment(interpolation=i),
        "FusedAugment": lambda i: FusedAugment((0.5,) * 3, (0.25,) * 3, random_resized_crop=8,
                                               interpolation=i),
        "RandomResizedCropAndInterpolation":
            lambda i: RandomResizedCropAndInterpolation(8, interpolation=i),
    }


@pytest.mark.parametrize("site", sorted(_interpolation_sites()))
def test_every_interpolation_argument_takes_any_case_and_the_enum_and_refuses_the_rest(site):
    import enum

    class Mode(enum.Enum):  # torchvision's InterpolationMode, as far as the check reads it
        BILINEAR = "bilinear"
        LANCZOS = "lanczos"

    build = _interpolation_sites()[site]
    for good in ("bilinear", "BiLinear", Mode.BILINEAR):
        assert build(good).interpolation == "bilinear"
    with pytest.raises(ValueError, match=r"interpolation must be .*'bilinear'.*, got 'lanczos'"):
        build("lanczos")
    with pytest.raises(ValueError, match=r"got <Mode.LANCZOS: 'lanczos'>"):
        build(Mode.LANCZOS)
    with pytest.raises(TypeError, match=r"interpolation must be .*, got 2"):
        build(2)
