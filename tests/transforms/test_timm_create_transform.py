"""prefetch.transforms.timm.create_transform: timm's recipes (timm/data/transforms_factory.py,
written out here step by step from its code) compiled into the v2 steps they are made of; each
compiled recipe gives the batches of the same steps built by hand; what is not compiled is
refused by name. Where timm is installed, its own create_transform is read for the steps."""
import math

import pytest
import torch

from prefetch.transforms import BatchPosition, FusedAugment, v2 as T
from prefetch.transforms.timm import (DEFAULT_CROP_PCT, IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD,
                                      RandomErasing, RandomResizedCropAndInterpolation,
                                      create_transform)

MEAN, STD = IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD


def images(n=6, h=60, w=50, seed=0):
    return torch.randint(0, 256, (n, h, w, 3), dtype=torch.uint8,
                         generator=torch.Generator().manual_seed(seed))


def names(recipe):
    return [type(s).__name__ for s in recipe.steps]


def same_batches(a, b, positions=((0, 0), (1, 3))):
    x = images()
    for epoch, index in positions:
        at = BatchPosition(epoch, index, 0)
        assert torch.equal(a.apply((x, 1), at)[0], b.apply((x, 1), at)[0])


def test_the_train_recipe_is_timms_steps():
    recipe = create_transform(32, is_training=True, interpolation="random", re_prob=0.25,
                              re_mode="pixel", re_count=2, seed=5)
    assert names(recipe) == ["RandomResizedCropAndInterpolation", "RandomHorizontalFlip", "ColorJitter",
                             "ToDtype", "Normalize", "RandomErasingStep"]
    rrc, flip, jitter = recipe.steps[:3]
    assert rrc.size == (32, 32) and rrc.scale == (0.08, 1.0) and rrc.interpolation == "random"
    assert flip.p == 0.5
    assert (jitter.brightness, jitter.contrast, jitter.saturation, jitter.hue) == (0.4, 0.4, 0.4, 0)
    erasing = recipe.steps[-1]
    assert (erasing.probability, erasing.mode, erasing.max_count) == (0.25, "pixel", 2)
    by_hand = T.Compose([RandomResizedCropAndInterpolation(32, interpolation="random"),
                         T.RandomHorizontalFlip(0.5), T.ColorJitter(0.4, 0.4, 0.4),
                         T.ToDtype(torch.float32, scale=True), T.Normalize(list(MEAN), list(STD)),
                         recipe.steps[-1]], seed=5)
    same_batches(recipe, by_hand)
    out = recipe.apply((images(), 1), BatchPosition(0, 0, 0))[0]
    assert out.shape == (6, 3, 32, 32) and out.dtype == torch.float32


def test_the_ssl_options_and_vflip():
    recipe = create_transform((3, 24, 24), is_training=True, vflip=0.5, color_jitter=(0.4, 0.4, 0.2, 0.1),
                              color_jitter_prob=0.8, grayscale_prob=0.2, gaussian_blur_prob=0.5,
                              interpolation="bicubic", scale=(0.2, 1.0))
    assert names(recipe) == ["RandomResizedCropAndInterpolation", "RandomHorizontalFlip",
                             "RandomVerticalFlip", "RandomApply", "RandomGrayscale", "RandomApply",
                             "ToDtype", "Normalize"]
    assert recipe.steps[0].scale == (0.2, 1.0) and recipe.steps[0].interpolation == "bicubic"
    assert recipe.steps[3].p == 0.8 and recipe.steps[5].p == 0.5


@pytest.mark.parametrize("crop_pct,size", [(None, 224), (0.9, 224), (0.95, 384), (1.0, 224)])
def test_the_eval_recipe_resizes_to_floor_size_over_crop_pct(crop_pct, size):
    recipe = create_transform(size, interpolation="bicubic", crop_pct=crop_pct)
    assert names(recipe) == ["Resize", "CenterCrop", "ToDtype", "Normalize"]
    pct = DEFAULT_CROP_PCT if crop_pct is None else crop_pct
    assert recipe.steps[0].size == math.floor(size / pct) and recipe.steps[0].interpolation == "bicubic"
    (fused,) = recipe.transforms
    assert isinstance(fused, FusedAugment) and fused.resize == math.floor(size / pct)
    assert fused.interpolation == "bicubic" and fused.output_size == (size, size)


def test_eval_and_no_aug_give_the_same_windows_as_the_hand_built_recipe():
    recipe = create_transform(32, crop_pct=0.875, interpolation="bicubic")
    by_hand = T.Compose([T.Resize(36, interpolation="bicubic"), T.CenterCrop(32),
                         T.ToDtype(torch.float32, scale=True), T.Normalize(list(MEAN), list(STD))])
    same_batches(recipe, by_hand)
    no_aug = create_transform(32, is_training=True, no_aug=True, interpolation="bilinear")
    assert names(no_aug) == ["Resize", "CenterCrop", "ToDtype", "Normalize"]
    assert no_aug.steps[0].size == 32
    # timm's train.py default interpolation is 'random': its no-aug transform takes it as bilinear
    random = create_transform(32, is_training=True, no_aug=True, interpolation="random")
    assert random.steps[0].interpolation == "bilinear"
    # crop_pct 0, as None, is timm's default 0.875
    assert create_transform(32, crop_pct=0).steps[0].size == math.floor(32 / DEFAULT_CROP_PCT)


def test_the_transform_erases_whole_batches_without_a_split():
    """timm's transform erases one image at a time, so its re_num_splits does nothing there."""
    recipe = create_transform(16, is_training=True, re_prob=1.0, re_num_splits=2, color_jitter=None,
                              hflip=0.0, seed=1)
    assert recipe.steps[-1].num_splits == 0
    x = recipe.apply((images(n=8), 1), BatchPosition(0, 0, 0))[0]
    assert bool((x == 0).flatten(1).any(1).all())  # every image erased, the first half too


def test_timms_positional_order_after_naflex():
    recipe = create_transform(32, False, False, None, None, None, 0.5, 0.0, 0.4, None, 0.0, 0.0, None,
                              "bicubic", MEAN, STD, 0.0, "const", 1, 0, 0.9, None, None, False, False,
                              True, False, False, 16, 576, False, True, True)
    assert recipe.steps[0].interpolation == "bicubic" and recipe.steps[0].size == math.floor(32 / 0.9)


def test_use_prefetcher_leaves_the_erasing_to_the_loader_as_timm():
    recipe = create_transform(32, is_training=True, re_prob=0.25, use_prefetcher=True)
    assert "RandomErasingStep" not in names(recipe)


@pytest.mark.parametrize("kwargs,match", [
    (dict(crop_mode="squash"), "crop_mode: 'center' is compiled .*got 'squash'"),
    (dict(is_training=True, train_crop_mode="rkrc"), "train_crop_mode: .*got 'rkrc'"),
    (dict(naflex=True), "naflex: NaFlex"),
    (dict(separate=True), "separate: "),
    (dict(tf_preprocessing=True), "tf_preprocessing: "),
    (dict(crop_border_pixels=4), "crop_border_pixels: TrimBorder"),
    (dict(normalize=False), "normalize: False keeps timm's uint8 tensors"),
    (dict(is_training=True, interpolation="lanczos"), "interpolation: 'bilinear', 'bicubic', 'random' are compiled"),
    (dict(interpolation="random"), "interpolation: 'bilinear', 'bicubic' are compiled"),
    (dict(input_size=(32, 48)), "the eval transform is compiled for a square size"),
    (dict(crop_pct=1.2), r"crop_pct: a fraction in \(0, 1\]"),
    (dict(is_training=True, color_jitter=(0.1, 0.2)), "color_jitter: a number or 3 or 4 factors"),
    (dict(is_training=True, re_prob=0.5, re_mode="zeros"), "mode must be 'const', 'rand' or 'pixel'"),
])
def test_what_is_not_compiled_is_refused_by_name(kwargs, match):
    kwargs = dict(kwargs)
    size = kwargs.pop("input_size", 32)
    with pytest.raises(ValueError, match=match):
        create_transform(size, **kwargs)
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        create_transform(32, interpolaton="bicubic")


def test_timm_itself_where_installed_builds_the_same_steps():
    """timm's own create_transform (it needs torchvision): the same steps, the same arguments."""
    factory = pytest.importorskip("timm.data.transforms_factory")
    theirs = factory.create_transform(224, is_training=True, interpolation="random", re_prob=0.25,
                                      re_mode="pixel", re_count=1, hflip=0.5, color_jitter=0.4)
    kinds = [type(t).__name__ for t in theirs.transforms]
    assert kinds[:3] == ["RandomResizedCropAndInterpolation", "RandomHorizontalFlip", "ColorJitter"]
    assert kinds[-1] == "RandomErasing"
    rrc = theirs.transforms[0]
    ours = create_transform(224, is_training=True, interpolation="random", re_prob=0.25, re_mode="pixel")
    assert tuple(rrc.scale) == ours.steps[0].scale and tuple(rrc.ratio) == pytest.approx(ours.steps[0].ratio)
    assert isinstance(RandomErasing(0.25, mode="pixel"), RandomErasing)
    evaluation = factory.create_transform(224, crop_pct=0.9, interpolation="bicubic")
    assert evaluation.transforms[0].size == create_transform(224, crop_pct=0.9).steps[0].size
