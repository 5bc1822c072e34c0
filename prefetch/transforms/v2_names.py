"""What :mod:`prefetch.transforms.v2` knows of torchvision's v2 without importing it: the names
torchvision's v2 has (for the module's ``__getattr__``: a missing name in this list is a step
prefetch does not compile yet, not a typo) and how to tell one of torchvision's objects (for
Compose's refusal of one). The argument checks of v2's steps are
:mod:`prefetch.transforms.arguments`', shared with every other transform.
"""

__all__ = ["TORCHVISION_V2_NAMES", "is_torchvision_object"]

# torchvision.transforms.v2's public names (torchvision 0.15 to 0.23).
TORCHVISION_V2_NAMES = frozenset("""
    AugMix AutoAugment AutoAugmentPolicy CenterCrop ClampBoundingBoxes ClampKeyPoints ColorJitter
    Compose ConvertBoundingBoxFormat ConvertImageDtype CutMix ElasticTransform FiveCrop
    GaussianBlur GaussianNoise Grayscale Identity InterpolationMode JPEG Lambda
    LinearTransformation MixUp Normalize PILToTensor Pad RGB RandAugment RandomAdjustSharpness
    RandomAffine RandomApply RandomAutocontrast RandomChannelPermutation RandomChoice RandomCrop
    RandomEqualize RandomErasing RandomGrayscale RandomHorizontalFlip RandomInvert RandomIoUCrop
    RandomOrder RandomPerspective RandomPhotometricDistort RandomPosterize RandomResize
    RandomResizedCrop RandomRotation RandomShortestSize RandomSolarize RandomVerticalFlip
    RandomZoomOut Resize SanitizeBoundingBoxes SanitizeKeyPoints ScaleJitter TenCrop ToDtype
    ToImage ToPILImage ToPureTensor ToTensor Transform TrivialAugmentWide
    UniformTemporalSubsample
""".split())


def is_torchvision_object(step):
    """Whether ``step`` is one of torchvision's objects (told by its class's module, without
    importing torchvision)."""
    return type(step).__module__.split(".")[0] == "torchvision"
