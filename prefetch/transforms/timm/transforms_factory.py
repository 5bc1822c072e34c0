"""timm's ``create_transform`` (``timm/data/transforms_factory.py``) with timm's arguments,
compiled into one prefetch recipe (:class:`prefetch.transforms.v2.Compose`): the window
resampled once with the flips, the colour steps on the uint8 window, the normalisation and the
erasing on the device, each image its own draws. What it does not compile yet is refused by
name, before any batch."""
import math
from typing import Optional, Sequence, Tuple, Union

import torch

from .. import arguments, v2
from .steps import (AugMixStep, AutoAugmentStep, RandAugmentStep, RandomErasingStep,
                    RandomResizedCropAndInterpolation)

__all__ = ["create_transform", "IMAGENET_DEFAULT_MEAN", "IMAGENET_DEFAULT_STD", "DEFAULT_CROP_PCT"]

# timm/data/constants.py
IMAGENET_DEFAULT_MEAN = (0.485, 0.456, 0.406)
IMAGENET_DEFAULT_STD = (0.229, 0.224, 0.225)
DEFAULT_CROP_PCT = 0.875

# The arguments of timm's create_transform that this port refuses at anything but timm's default,
# and what to do instead.
_NOT_YET = {
    "train_crop_mode": (None, "rrc", "timm's RandomResizedCropAndInterpolation ('rrc') is compiled; "
                        "ResizeKeepRatio + crop-or-pad ('rkrc', 'rkrr') is not"),
    "crop_border_pixels": (None, 0, "TrimBorder is not compiled"),
    "tf_preprocessing": (False, None, "TensorFlow's preprocessing is not compiled"),
    "separate": (False, None, "the 3-part transforms (AugMix's split dataset) are not compiled"),
    "naflex": (False, None, "NaFlex's sequence transforms are not compiled"),
    "patchify": (False, None, "Patchify is not compiled; patchify the batch in the model"),
}


def _refuse(name, message):
    raise ValueError("prefetch.transforms.timm.create_transform: %s: %s" % (name, message))


def _image_size(input_size) -> Tuple[int, int]:
    """timm's ``input_size``: an int, (h, w), or (C, h, w) -> (h, w)."""
    if isinstance(input_size, (tuple, list)):
        if len(input_size) == 3:
            input_size = input_size[-2:]
        if len(input_size) != 2:
            _refuse("input_size", "an int, (h, w) or (C, h, w), got %r" % (input_size,))
        return int(input_size[0]), int(input_size[1])
    return int(input_size), int(input_size)


def _interpolation(value, training):
    allowed = ("bilinear", "bicubic", "random") if training else ("bilinear", "bicubic")
    try:
        return arguments.interpolation("create_transform", value, allowed)
    except arguments.ArgumentError:  # (refused in create_transform's own words, as the others)
        _refuse("interpolation", "%s are compiled (timm's 'nearest', 'lanczos', 'box' and "
                "'hamming' are not), got %r" % (", ".join(repr(a) for a in allowed), value))


def create_transform(input_size: Union[int, Tuple[int, int], Tuple[int, int, int]] = 224,
                     is_training: bool = False, no_aug: bool = False,
                     train_crop_mode: Optional[str] = None,
                     scale: Optional[Tuple[float, float]] = None,
                     ratio: Optional[Tuple[float, float]] = None, hflip: float = 0.5,
                     vflip: float = 0.0, color_jitter: Union[float, Sequence[float], None] = 0.4,
                     color_jitter_prob: Optional[float] = None, grayscale_prob: float = 0.0,
                     gaussian_blur_prob: float = 0.0, auto_augment: Optional[str] = None,
                     interpolation: str = "bilinear",
                     mean: Sequence[float] = IMAGENET_DEFAULT_MEAN,
                     std: Sequence[float] = IMAGENET_DEFAULT_STD, re_prob: float = 0.0,
                     re_mode: str = "const", re_count: int = 1, re_num_splits: int = 0,
                     crop_pct: Optional[float] = None, crop_mode: Optional[str] = None,
                     crop_border_pixels: Optional[int] = None, tf_preprocessing: bool = False,
                     use_prefetcher: bool = False, normalize: bool = True, separate: bool = False,
                     naflex: bool = False, patch_size: Union[int, Tuple[int, int]] = 16,
                     max_seq_len: int = 576, patchify: bool = False,
                     patchify_channels_last: bool = True, patchify_flatten: bool = True, *,
                     seed: Optional[int] = None, decode: bool = False,
                     dtype: torch.dtype = torch.float32) -> v2.Compose:
    """timm's ``create_transform`` compiled into one prefetch recipe: train (``is_training``) or
    eval, from timm's arguments and defaults (timm 1.0's ``transforms_factory.py``).

    Training: timm's ``RandomResizedCropAndInterpolation(input_size, scale, ratio,
    interpolation)`` (``"random"``: bilinear or bicubic per image), ``RandomHorizontalFlip(hflip)``,
    ``RandomVerticalFlip(vflip)``, timm's RandAugment for an ``auto_augment`` string ``"rand-..."``,
    its AugMix for ``"augmix-..."`` or its AutoAugment for ``"original"``, ``"originalr"``,
    ``"v0"``, ``"v0r"``
    (its geometric ops with ``interpolation`` unless ``"random"``, filled with
    ``round(255 * mean)``, TranslateRel by 0.45 of the side, 0.3 for AugMix; ColorJitter then off,
    as timm's create_transform does), ``ColorJitter`` (a number ``c`` is ``(c, c, c)``, no hue; under
    ``RandomApply`` with ``color_jitter_prob``), ``RandomGrayscale(grayscale_prob)``,
    ``RandomApply([GaussianBlur(23)], gaussian_blur_prob)``, the normalisation with ``mean`` and
    ``std``, then timm's ``RandomErasing(re_prob, re_mode, max_count=re_count)`` (1 to
    ``re_count`` boxes an image). ``no_aug``: ``Resize(input_size) + CenterCrop(input_size)``
    (``"random"`` interpolation bilinear there, as timm's ``transforms_noaug_train``).
    Eval: ``Resize(floor(size / crop_pct), interpolation) + CenterCrop(size)`` (``crop_pct``
    0.875 by default; ``crop_mode`` ``"center"``).

    As timm's, ``use_prefetcher=True`` leaves the erasing out (timm's ``PrefetchLoader`` erases,
    with ``create_loader``'s ``re_*``); unlike timm's, the normalisation is always in the recipe
    (timm's prefetcher does it on the GPU, and so does this recipe, where the loader copies).

    Args:
        input_size: an int, ``(h, w)`` or ``(C, h, w)`` (C is read from ``mean``).
        is_training, no_aug, scale, ratio, hflip, vflip, color_jitter, color_jitter_prob,
            grayscale_prob, gaussian_blur_prob, interpolation, mean, std, re_prob, re_mode,
            re_count, crop_pct, crop_mode, use_prefetcher, normalize: timm's (``crop_pct`` None
            or 0: 0.875).
        re_num_splits: accepted and, as in timm's transform (which erases one image at a
            time), without effect; timm's loader applies it (``create_loader``'s ``re_split``).
        auto_augment: None, timm's RandAugment string (``"rand-m9-mstd0.5-inc1"``:
            :class:`prefetch.transforms.timm.RandAugment`), AugMix string (``"augmix-m5-w4-d2"``:
            :class:`prefetch.transforms.timm.AugMix`) or AutoAugment string (``"original"``,
            ``"v0r-mstd0.5"``, ``"3a"``: :class:`prefetch.transforms.timm.AutoAugment`).
        train_crop_mode, crop_border_pixels, tf_preprocessing, separate, naflex, patchify:
            timm's defaults only (refused otherwise, saying what is not compiled).
        patch_size, max_seq_len, patchify_channels_last, patchify_flatten: read only by the
            refused NaFlex and patchify modes.
        seed: the recipe's draws are a function of ``(seed, rank, epoch, batch index)``; None
            draws one (a loader's state saves it).
        decode: the image leaf holds encoded JPEGs, decoded window by window
            (``FusedAugment(decode=True)``).
        dtype: the output dtype, float32 (timm's), float16 or bfloat16.

    Returns:
        prefetch.transforms.v2.Compose: the compiled recipe; ``.steps`` lists its steps.

    Raises:
        ValueError: an argument this port does not compile (naming it and saying why), or one
            the steps refuse (naming the step and the argument; TypeError too for a value of the
            wrong type).
    """
    given = dict(train_crop_mode=train_crop_mode, crop_border_pixels=crop_border_pixels,
                 tf_preprocessing=tf_preprocessing, separate=separate, naflex=naflex,
                 patchify=patchify)
    for name, value in given.items():
        default, also, why = _NOT_YET[name]
        if value != default and (also is None or value != also):
            _refuse(name, "%s (got %r)" % (why, value))
    if not normalize:
        _refuse("normalize", "False keeps timm's uint8 tensors; this recipe always ends with the "
                "normalisation (pass normalize=True and mean/std)")
    h, w = _image_size(input_size)
    steps = []
    if is_training and not no_aug:
        steps.append(RandomResizedCropAndInterpolation(
            (h, w), scale=tuple(scale or (0.08, 1.0)), ratio=tuple(ratio or (3 / 4, 4 / 3)),
            interpolation=_interpolation(interpolation, True)))
        if hflip > 0.0:
            steps.append(v2.RandomHorizontalFlip(hflip))
        if vflip > 0.0:
            steps.append(v2.RandomVerticalFlip(vflip))
        if auto_augment:  # timm's aa_params
            if not isinstance(auto_augment, str):
                _refuse("auto_augment", "a timm config string ('rand-...', 'augmix-...', "
                        "'original', ...), got %r" % (auto_augment,))
            fill = tuple(min(255, round(255 * float(x))) for x in mean)
            shared = dict(interpolation=_interpolation(interpolation, True), fill=fill,
                          translate_const=int(min(h, w) * 0.45))
            if auto_augment.startswith("rand"):
                step = RandAugmentStep(auto_augment, **shared)
            elif auto_augment.startswith("augmix"):  # (timm's aa_params["translate_pct"] = 0.3)
                step = AugMixStep(auto_augment, translate_pct=0.3, **shared)
            else:
                step = AutoAugmentStep(auto_augment, **shared)
            steps.append(step)
            if "3a" not in auto_augment:  # (timm's force_color_jitter: not create_transform's)
                color_jitter = None
        if color_jitter is not None:
            jitter = (tuple(color_jitter) if isinstance(color_jitter, (list, tuple))
                      else (float(color_jitter),) * 3)
            if len(jitter) not in (3, 4):
                _refuse("color_jitter", "a number or 3 or 4 factors, got %r" % (color_jitter,))
            if any(float(j) != 0.0 for j in jitter):
                step = v2.ColorJitter(*jitter)
                steps.append(step if color_jitter_prob is None else
                             v2.RandomApply([step], p=color_jitter_prob))
        if grayscale_prob:
            steps.append(v2.RandomGrayscale(p=grayscale_prob))
        if gaussian_blur_prob:
            steps.append(v2.RandomApply([v2.GaussianBlur(kernel_size=23)], p=gaussian_blur_prob))
    elif is_training:  # no_aug: timm's transforms_noaug_train ('random' is bilinear there)
        if h != w:
            _refuse("input_size", "no_aug's Resize + CenterCrop is compiled for a square size, got "
                    "%r" % ((h, w),))
        name = getattr(interpolation, "value", interpolation)
        mode = "bilinear" if isinstance(name, str) and name.lower() == "random" else interpolation
        steps += [v2.Resize(h, interpolation=_interpolation(mode, False)), v2.CenterCrop(h)]
    else:
        mode = crop_mode or "center"
        if mode != "center":
            _refuse("crop_mode", "'center' is compiled ('squash' and 'border' are not), got %r"
                    % (crop_mode,))
        pct = float(crop_pct or DEFAULT_CROP_PCT)  # (timm's: None and 0 are the default)
        if not 0.0 < pct <= 1.0:  # (timm takes any; above 1 its Resize is below the crop)
            _refuse("crop_pct", "a fraction in (0, 1], got %r" % (crop_pct,))
        if h != w:
            _refuse("input_size", "the eval transform is compiled for a square size (timm's "
                    "ResizeKeepRatio for (h, w) is not), got %r" % ((h, w),))
        steps += [v2.Resize(math.floor(h / pct), interpolation=_interpolation(interpolation, False)),
                  v2.CenterCrop(h)]
    steps += [v2.ToDtype(dtype, scale=True), v2.Normalize(list(mean), list(std))]
    if is_training and not no_aug and re_prob > 0.0 and not use_prefetcher:
        steps.append(RandomErasingStep(re_prob, mode=re_mode, max_count=re_count))
    return v2.Compose(steps, seed=seed, decode=decode, channels=len(mean))
