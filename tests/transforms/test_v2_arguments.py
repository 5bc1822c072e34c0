"""Every argument of prefetch.transforms.v2's classes, FusedAugment and the crop specs is checked
when the step is built (issue 43, item 8), as torchvision checks its own — finite, in range, of
the right type (a bool is not an int, a fraction is not truncated) — with a message naming the
class and the argument: ``prefetch: <Class> <arg> must be <expected>, got <actual!r>``. And the
messages that used to stop a user without a next step now give one: a torchvision object in the
Compose, a torchvision v2 name prefetch does not compile, uint16 and ``[N, H, W]`` images."""
import math
import re

import numpy as np
import pytest
import torch

import prefetch
from prefetch import FusedAugment
from prefetch.transforms import PolicyAugment, RandomErasing, RollMix, v2 as T
from prefetch.transforms.arguments import ArgumentTypeError
from prefetch.transforms.crop_boxes import center_boxes, random_resized_boxes

INF, NAN = math.inf, math.nan
MEAN, STD = (0.5, 0.5, 0.5), (0.2, 0.2, 0.2)
F32 = T.ToDtype(torch.float32, scale=True)

# (class, how to build it with the bad argument, argument, bad value)
CASES = [
    ("Compose", lambda v: T.Compose([F32], seed=v), "seed", 1.5),
    ("Compose", lambda v: T.Compose([F32], seed=v), "seed", True),
    ("Compose", lambda v: T.Compose([F32], seed=v), "seed", 2 ** 64),
    ("Compose", lambda v: T.Compose([F32], decode=v), "decode", "yes"),
    ("Compose", lambda v: T.Compose([F32], layout=v), "layout", "CHW"),
    ("Compose", lambda v: T.Compose([F32], channels=v), "channels", 0),
    ("Compose", lambda v: T.Compose(v), "transforms", F32),
    ("RandomResizedCrop", lambda v: T.RandomResizedCrop(v), "size", 0),
    ("RandomResizedCrop", lambda v: T.RandomResizedCrop(v), "size", 24.5),
    ("RandomResizedCrop", lambda v: T.RandomResizedCrop(v), "size", True),
    ("RandomResizedCrop", lambda v: T.RandomResizedCrop(v), "size", (1, 2, 3)),
    ("RandomResizedCrop", lambda v: T.RandomResizedCrop(8, scale=v), "scale", (0.5, INF)),
    ("RandomResizedCrop", lambda v: T.RandomResizedCrop(8, scale=v), "scale", (0.9, 0.1)),
    ("RandomResizedCrop", lambda v: T.RandomResizedCrop(8, ratio=v), "ratio", (NAN, 1)),
    ("RandomResizedCrop", lambda v: T.RandomResizedCrop(8, ratio=v), "ratio", (0, 1)),
    ("RandomResizedCrop", lambda v: T.RandomResizedCrop(8, interpolation=v), "interpolation", "nearest"),
    ("RandomResizedCrop", lambda v: T.RandomResizedCrop(8, antialias=v), "antialias", "no"),
    ("Resize", lambda v: T.Resize(v), "size", -3),
    ("Resize", lambda v: T.Resize(v), "size", 232.0),
    ("Resize", lambda v: T.Resize(232, max_size=v), "max_size", 232),
    ("Resize", lambda v: T.Resize(232, max_size=v), "max_size", 300.5),
    ("CenterCrop", lambda v: T.CenterCrop(v), "size", (24, 0)),
    ("CenterCrop", lambda v: T.CenterCrop(v), "size", False),
    ("RandomCrop", lambda v: T.RandomCrop(v), "size", "32"),
    ("RandomCrop", lambda v: T.RandomCrop(32, padding=v), "padding", -4),
    ("RandomCrop", lambda v: T.RandomCrop(32, padding=v), "padding", (1, 2, 3)),
    ("RandomCrop", lambda v: T.RandomCrop(32, padding=v), "padding", 2.5),
    ("RandomCrop", lambda v: T.RandomCrop(32, pad_if_needed=v), "pad_if_needed", 1),
    ("RandomCrop", lambda v: T.RandomCrop(32, fill=v), "fill", 256),
    ("RandomCrop", lambda v: T.RandomCrop(32, fill=v), "fill", (1, 2, 3)),
    ("RandomCrop", lambda v: T.RandomCrop(32, padding_mode=v), "padding_mode", "reflect"),
    ("Pad", lambda v: T.Pad(v), "padding", -4),
    ("Pad", lambda v: T.Pad(v), "padding", (1, 2, 3)),
    ("Pad", lambda v: T.Pad(v), "padding", 2.5),
    ("Pad", lambda v: T.Pad(v), "padding", None),
    ("Pad", lambda v: T.Pad(4, fill=v), "fill", 256),
    ("Pad", lambda v: T.Pad(4, fill=v), "fill", (1, 2, 3)),
    ("Pad", lambda v: T.Pad(4, padding_mode=v), "padding_mode", "symmetric"),
    ("RandomHorizontalFlip", lambda v: T.RandomHorizontalFlip(v), "p", 1.5),
    ("RandomHorizontalFlip", lambda v: T.RandomHorizontalFlip(v), "p", NAN),
    ("RandomHorizontalFlip", lambda v: T.RandomHorizontalFlip(v), "p", True),
    ("RandomVerticalFlip", lambda v: T.RandomVerticalFlip(v), "p", -0.1),
    ("RandomVerticalFlip", lambda v: T.RandomVerticalFlip(v), "p", "0.5"),
    ("TrivialAugmentWide", lambda v: T.TrivialAugmentWide(num_magnitude_bins=v), "num_magnitude_bins", 0),
    ("TrivialAugmentWide", lambda v: T.TrivialAugmentWide(num_magnitude_bins=v), "num_magnitude_bins", 31.0),
    ("TrivialAugmentWide", lambda v: T.TrivialAugmentWide(fill=v), "fill", INF),
    ("TrivialAugmentWide", lambda v: T.TrivialAugmentWide(fill=v), "fill", 300),
    ("TrivialAugmentWide", lambda v: T.TrivialAugmentWide(interpolation=v), "interpolation", 2),
    ("RandAugment", lambda v: T.RandAugment(num_ops=v), "num_ops", -1),
    ("RandAugment", lambda v: T.RandAugment(num_ops=v), "num_ops", 1.5),
    ("RandAugment", lambda v: T.RandAugment(magnitude=v), "magnitude", 31),
    ("RandAugment", lambda v: T.RandAugment(magnitude=v), "magnitude", True),
    ("RandAugment", lambda v: T.RandAugment(num_magnitude_bins=v), "num_magnitude_bins", 0),
    ("RandAugment", lambda v: T.RandAugment(fill=v), "fill", (1, NAN, 3)),
    ("AutoAugment", lambda v: T.AutoAugment(v), "policy", "cifar10"),
    ("AutoAugment", lambda v: T.AutoAugment(fill=v), "fill", -1),
    ("ColorJitter", lambda v: T.ColorJitter(brightness=v), "brightness", INF),
    ("ColorJitter", lambda v: T.ColorJitter(brightness=v), "brightness", -0.1),
    ("ColorJitter", lambda v: T.ColorJitter(contrast=v), "contrast", (1.5, 0.5)),
    ("ColorJitter", lambda v: T.ColorJitter(saturation=v), "saturation", "1"),
    ("ColorJitter", lambda v: T.ColorJitter(hue=v), "hue", 0.6),
    ("ColorJitter", lambda v: T.ColorJitter(hue=v), "hue", (-0.6, 0.1)),
    ("ToDtype", lambda v: T.ToDtype(v, scale=True), "dtype", torch.int32),
    ("ToDtype", lambda v: T.ToDtype(torch.float32, scale=v), "scale", "True"),
    ("Normalize", lambda v: T.Normalize(v, STD), "mean", (0.5, INF, 0.5)),
    ("Normalize", lambda v: T.Normalize(MEAN, v), "std", (0.2, 0.0, 0.2)),
    ("Normalize", lambda v: T.Normalize(MEAN, v), "std", (0.2, 0.2)),
    ("Normalize", lambda v: T.Normalize(MEAN, STD, inplace=v), "inplace", None),
    ("RandomErasing", lambda v: T.RandomErasing(v), "p", 2),
    ("RandomErasing", lambda v: T.RandomErasing(scale=v), "scale", (0.1, 1.5)),
    ("RandomErasing", lambda v: T.RandomErasing(ratio=v), "ratio", (1, INF)),
    ("RandomErasing", lambda v: T.RandomErasing(value=v), "value", "noise"),
    ("RandomErasing", lambda v: T.RandomErasing(value=v), "value", NAN),
    ("MixUp", lambda v: T.MixUp(alpha=v, num_classes=10), "alpha", INF),
    ("MixUp", lambda v: T.MixUp(alpha=v, num_classes=10), "alpha", 0.0),
    ("MixUp", lambda v: T.MixUp(alpha=1.0, num_classes=v), "num_classes", 0),
    ("CutMix", lambda v: T.CutMix(alpha=v, num_classes=10), "alpha", NAN),
    ("CutMix", lambda v: T.CutMix(alpha=1.0, num_classes=v), "num_classes", 10.0),
    ("RandomChoice", lambda v: T.RandomChoice([T.MixUp(num_classes=3), T.CutMix(num_classes=3)], p=v),
     "p", [1.0]),
    ("RandomChoice", lambda v: T.RandomChoice([T.MixUp(num_classes=3), T.CutMix(num_classes=3)], p=v),
     "p", [0.5, -0.5]),
    ("FusedAugment", lambda v: FusedAugment(MEAN, STD, hflip=v), "hflip", True),
    ("FusedAugment", lambda v: FusedAugment(MEAN, STD, vflip=v), "vflip", INF),
    ("FusedAugment", lambda v: FusedAugment(MEAN, STD, center_crop=v), "center_crop", "yes"),
    ("FusedAugment", lambda v: FusedAugment(MEAN, STD, channels_last=v), "channels_last", 1),
    ("FusedAugment", lambda v: FusedAugment(MEAN, STD, crop=8, padding=v), "padding", True),
    ("FusedAugment", lambda v: FusedAugment(MEAN, STD, crop=8, padding=v), "padding", (1, 2, 3)),
    ("FusedAugment", lambda v: FusedAugment(MEAN, STD, crop=8, pad_if_needed=v), "pad_if_needed", "no"),
    ("FusedAugment", lambda v: FusedAugment(MEAN, STD, fill=v), "fill", 2.5),
    ("FusedAugment", lambda v: FusedAugment(MEAN, STD, mask_fill=v), "mask_fill", True),
    ("FusedAugment", lambda v: FusedAugment(MEAN, STD, random_resized_crop=8, scale=v), "scale", (0.1, INF)),
    ("FusedAugment", lambda v: FusedAugment(MEAN, STD, random_resized_crop=8, ratio=v), "ratio", (True, 2)),
    ("FusedAugment", lambda v: FusedAugment(MEAN, STD, random_resized_crop=8, antialias=v), "antialias", None),
    ("FusedAugment", lambda v: FusedAugment(MEAN, STD, crop=8, center_crop=True, resize=v), "resize", 8.5),
    ("FusedAugment", lambda v: FusedAugment(MEAN, STD, crop=8, center_crop=True, resize=v), "resize", 6),
    ("FusedAugment", lambda v: FusedAugment(MEAN, STD, crop=8, center_crop=True, resize=10, max_size=v),
     "max_size", 10),
    ("FusedAugment", lambda v: FusedAugment(MEAN, STD, random_resized_crop=8, decode=v), "decode", "True"),
    # a bool or a string is no channel's value (float() took both)
    ("FusedAugment", lambda v: FusedAugment((v, 0.4, 0.3), STD), "mean", True),
    ("FusedAugment", lambda v: FusedAugment(MEAN, (0.2, v, 0.2)), "std", "0.5"),
]


@pytest.mark.parametrize("cls,build,arg,bad", CASES,
                         ids=["%s-%s-%r" % (c[0], c[2], c[3]) for c in CASES])
def test_a_bad_argument_is_refused_when_built_naming_the_class_and_argument(cls, build, arg, bad):
    with pytest.raises((ValueError, TypeError)) as info:
        build(bad)
    message = str(info.value)
    assert message.startswith("prefetch: "), message
    assert re.search(r"\b%s\b" % cls, message) and re.search(r"\b%s\b" % arg, message), message
    assert "invalid" not in message.lower()
    # one exception scheme with the other transforms (prefetch.transforms.arguments): a value of
    # the wrong type (a bool, a string where no string goes) is a TypeError that is also a
    # ValueError
    if (isinstance(bad, bool) or (isinstance(bad, str) and arg not in STRING_ARGUMENTS)) \
            and (cls, arg) not in WHOLE_NUMBER_ARGUMENTS:
        assert isinstance(info.value, ArgumentTypeError), type(info.value)
        assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)


# Arguments whose right values are strings: a wrong string is a ValueError only.
STRING_ARGUMENTS = {"layout", "interpolation", "policy", "padding_mode", "value"}
# FusedAugment's whole-number arguments take a whole float, as the ops' do
# (prefetch._core.checks.whole: a plain TypeError, or a ValueError naming the range).
WHOLE_NUMBER_ARGUMENTS = {("FusedAugment", "padding"), ("FusedAugment", "mask_fill"),
                          ("FusedAugment", "fill")}


# (a v2 step, the transform it compiles to, built with the same bad argument): one check each,
# so both refuse it with the same message.
SAME_CHECK = [
    (lambda v: T.RandomErasing(p=v), lambda v: RandomErasing(p=v), 1.5),
    (lambda v: T.RandomErasing(ratio=v), lambda v: RandomErasing(ratio=v), (1, INF)),
    (lambda v: T.RandomErasing(scale=v), lambda v: RandomErasing(scale=v), (0.5, 0.1)),
    (lambda v: T.RandomErasing(value=v), lambda v: RandomErasing(value=v), "noise"),
    (lambda v: T.ColorJitter(brightness=v), lambda v: PolicyAugment("color_jitter", brightness=v),
     INF),
    (lambda v: T.ColorJitter(hue=v), lambda v: PolicyAugment("color_jitter", hue=v), (-0.6, 0.1)),
    (lambda v: T.ColorJitter(contrast=v), lambda v: PolicyAugment("color_jitter", contrast=v), "1"),
    (lambda v: T.RandAugment(num_ops=v), lambda v: PolicyAugment("rand_augment", num_ops=v), 1.5),
    (lambda v: T.MixUp(alpha=v), lambda v: RollMix([("mixup", v)]), NAN),
    (lambda v: T.CutMix(alpha=v), lambda v: RollMix([("cutmix", v)]), True),
]


@pytest.mark.parametrize("k", range(len(SAME_CHECK)))
def test_a_v2_step_and_the_transform_it_compiles_to_refuse_a_value_alike(k):
    v2_step, compiled, bad = SAME_CHECK[k]
    with pytest.raises(ValueError) as v2_error:
        v2_step(bad)
    with pytest.raises(ValueError) as compiled_error:
        compiled(bad)
    assert type(v2_error.value) is type(compiled_error.value)
    assert str(v2_error.value) == str(compiled_error.value)


def test_good_arguments_of_every_form_are_taken():
    T.Compose([T.RandomCrop([32], padding=[4], pad_if_needed=True, fill=np.int64(3)), F32],
              seed=np.int64(5))
    T.Compose([T.Resize([232], max_size=300, antialias=None), T.CenterCrop((224, 200)), F32], seed=8)
    T.RandomHorizontalFlip(np.float32(0.25))
    T.RandomHorizontalFlip(torch.tensor(0.5))
    T.ColorJitter(brightness=(0.5, 1.5), hue=(-0.1, 0.1))
    # None is torchvision's "no jitter" (ColorJitter._check_input returns None for it)
    T.ColorJitter(brightness=None, contrast=None, saturation=None, hue=None)
    T.ColorJitter(brightness=np.float32(0.4), hue=np.float64(0.5))
    T.RandAugment(num_ops=0, magnitude=0)
    T.RandomErasing(value="random")
    T.RandomErasing(value=(1, 2, 3))
    T.AutoAugment(T.AutoAugmentPolicy.IMAGENET, interpolation=T.InterpolationMode.BILINEAR)
    FusedAugment(MEAN, STD, crop=8, padding=(1, 2), pad_if_needed=np.bool_(True))
    FusedAugment(MEAN, STD, crop=8, center_crop=True, resize=10.0, max_size=12)


def test_the_crop_specs_refuse_bad_numbers_naming_them():
    with pytest.raises(ValueError, match=r"scale must be a pair"):
        random_resized_boxes([4], [4], scale=(True, 1.0))
    with pytest.raises(ValueError, match=r"resize .* must be >= the crop .*, got 8.5"):
        center_boxes([10], [10], 8, 8.5)
    with pytest.raises(ValueError, match=r"max_size must be a whole number > resize"):
        center_boxes([10], [10], 8, 9, max_size=9)


# ---- messages with a next step ----------------------------------------------------------------

def torchvision_like(name, module="torchvision.transforms.v2._geometry"):
    """An object whose class comes from torchvision's modules, as the Compose sees one."""
    return type(name, (), {"__module__": module})()


def test_a_torchvision_step_says_what_to_build_instead():
    with pytest.raises(ValueError) as info:
        T.Compose([torchvision_like("RandomResizedCrop"), F32])
    message = str(info.value)
    assert "torchvision's RandomResizedCrop" in message
    assert "prefetch.transforms.v2.RandomResizedCrop(...) with the same arguments" in message
    with pytest.raises(ValueError, match=r"torchvision's ElasticTransform .*does not compile: keep it "
                                         r"in the DataLoader's workers"):
        T.Compose([torchvision_like("ElasticTransform"), F32])


def test_a_real_torchvision_step_is_named():
    v2 = pytest.importorskip("torchvision.transforms.v2")
    with pytest.raises(ValueError, match=r"prefetch.transforms.v2.CenterCrop\(\.\.\.\) with the same"):
        T.Compose([v2.CenterCrop(8), F32])


def test_a_torchvision_name_prefetch_does_not_compile_says_to_keep_it_in_the_workers():
    with pytest.raises(AttributeError, match=r"no ElasticTransform: it is a torchvision.transforms.v2 "
                                             r"transform prefetch does not compile .*workers"):
        T.ElasticTransform
    assert not hasattr(T, "RandomPerspective")
    with pytest.raises(AttributeError, match=r"^module 'prefetch.transforms.v2' has no attribute "
                                             r"'Elastictransform'$"):
        T.Elastictransform  # not a torchvision name: the plain error
    # and every name it compiles is there
    for name in T.__all__:
        assert getattr(T, name) is not None


def test_uint16_images_are_refused_saying_how_to_convert_them():
    x = torch.zeros(2, 8, 8, 3, dtype=torch.uint16)
    for aug in (FusedAugment(MEAN, STD, crop=4), FusedAugment(MEAN, STD, random_resized_crop=4)):
        with pytest.raises(TypeError, match=r"uint16.*\(images.to\(torch.int32\) >> 8\).to\(torch.uint8\)"):
            aug(x, epoch=0, index=0)
    # the conversion it gives works and is torchvision's ToDtype(torch.uint8, scale=True)
    y = torch.tensor([0, 255, 256, 65535], dtype=torch.int32).to(torch.uint16)
    assert (y.to(torch.int32) >> 8).to(torch.uint8).tolist() == [0, 0, 1, 255]


def test_images_without_a_channel_dimension():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (3, 10, 9), dtype=torch.uint8, generator=g)
    # one value of mean and std: one-channel images, as [N, H, W, 1]
    for kw in (dict(crop=6, padding=1, hflip=0.5), dict(random_resized_crop=5, hflip=0.5),
               dict(crop=5, resize=6, center_crop=True)):
        aug = FusedAugment((0.5,), (0.25,), seed=1, **kw)
        assert torch.equal(aug(x, epoch=0, index=2), aug(x.unsqueeze(-1), epoch=0, index=2))
        # and a list of [H, W] samples (a user's collate) as the same batch
        assert torch.equal(aug((list(x),), epoch=0, index=2)[0], aug(x.unsqueeze(-1), epoch=0, index=2))
    # a device-resident dataset of [N, H, W] gathered by the kernels: the same batches
    aug = FusedAugment((0.5,), (0.25,), crop=6, padding=1, hflip=0.5, seed=1)
    batches = []
    for data in (x, x.unsqueeze(-1)):
        with prefetch.ArrayLoader([data], batch_size=2, resident="device", transform=aug,
                                  device="cpu") as loader:
            batches.append([b[0] for b in loader])
    assert len(batches[0]) == 2 and all(torch.equal(a, b) for a, b in zip(*batches))
    # three values: refused, saying how to add the dimension
    for kw in (dict(crop=6), dict(random_resized_crop=5)):
        with pytest.raises((TypeError, ValueError), match=r"no channel dimension.*one value.*"
                                                          r"images.unsqueeze\(-1\)"):
            FusedAugment(MEAN, STD, **kw)(x, epoch=0, index=0)
