"""The e2e section's models: torchvision's ResNet-18 and ResNet-50 architectures (random init)
when torchvision imports, else timm's ``resnet18`` / ``resnet50``, else a tiny CNN; and on a CPU
run the tiny CNN alone, with tiny images (the section then exercises its loop for CI, and
measures nothing a user would train).

ResNet-18 shows what a pipeline gives when the input bounds the step; ResNet-50 whether it costs
anything when the model does. ``ROLES`` says which is which: the section's
headline metrics are named by role, so that they keep their meaning whichever model ran.
"""
from typing import Callable, Dict, List, NamedTuple

from torch import nn

# role -> the architecture that plays it on a GPU
ROLES = {"input_bound": "resnet18", "compute_bound": "resnet50"}


class ModelSpec(NamedTuple):
    """One model of the run: ``key`` (its name in results.json), ``role`` (a key of ``ROLES``),
    ``source`` ("torchvision", "timm" or "tiny") and ``build(classes) -> nn.Module``."""

    key: str
    role: str
    source: str
    build: Callable[[int], nn.Module]


def tiny_cnn(classes: int) -> nn.Module:
    """Two strided 3x3 convolutions with batch norm, pooled, then a linear layer: a few
    milliseconds a step on 2 cores at 32x32 (a CPU run's stand-in, not a measurement)."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, classes))


def _torchvision_models():
    try:
        from torchvision import models
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return None
    return models


def _timm():
    try:
        import timm
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return None
    return timm


def architecture(name: str):
    """``(source, build)`` for ResNet ``name`` ("resnet18" or "resnet50"): torchvision's
    (``weights=None``: random init) when torchvision imports, else timm's
    (``pretrained=False``), else None."""
    if name not in ROLES.values():
        raise ValueError("prefetch bench: e2e models are %s, got %r"
                         % (sorted(ROLES.values()), name))
    models = _torchvision_models()
    if models is not None:
        return "torchvision", lambda classes: getattr(models, name)(weights=None,
                                                                    num_classes=classes)
    timm = _timm()
    if timm is not None:
        return "timm", lambda classes: timm.create_model(name, pretrained=False,
                                                         num_classes=classes)
    return None


def plan(device_type: str) -> List[ModelSpec]:
    """The models a run trains, in order. On a CUDA device: ResNet-18 then ResNet-50 from
    torchvision or timm, or the tiny CNN alone (role input_bound) when neither imports; on any
    other device the tiny CNN alone."""
    if device_type == "cuda":
        found: Dict[str, tuple] = {role: architecture(name) for role, name in ROLES.items()}
        if all(found.values()):
            return [ModelSpec(ROLES[role], role, source, build)
                    for role, (source, build) in found.items()]
    return [ModelSpec("tiny_cnn", "input_bound", "tiny", tiny_cnn)]
