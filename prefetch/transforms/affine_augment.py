"""AffineAugment: torchvision's ``RandomAffine`` (and ``RandomRotation``) with each sample's own
draw, applied to a batch of uint8 images on its device by one fused warp
(:func:`~prefetch.transforms.policy_ops.affine`, :func:`prefetch.ops.affine_warp`).

torchvision draws one angle, translation, scale and shear per call of ``RandomAffine`` (per
image in the DataLoader's workers; per batch when it is given a batch: pytorch/vision issue
8484). Here each sample draws its own from the batch's generator
(``BatchPosition(epoch, index, rank).generator(seed)``), with torchvision's distributions
(``torchvision/transforms/v2/_geometry.py``, ``RandomAffine.make_params``): the angle uniform in
``degrees``; the translation ``int(round(uniform(-t * size, t * size)))`` pixels (Python's
``round``, half to even); the scale uniform in ``scale``; the shear uniform in its x range and,
with four values, in its y range. The draws are a pure function of ``(seed, rank, epoch,
index)``, so resume, DataLoader workers and DDP keep working.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import torch

from . import arguments
from .contract import BatchPosition, LeafKey, check_image_layout
from .uint8_stage import Uint8Stage
from .policy_ops import Fill, _rotate, affine

__all__ = ["AffineAugment", "AffineDraws"]


@dataclass(frozen=True)
class AffineDraws:
    """Each sample's affine parameters (float64 ``[N]`` tensors on the CPU): ``angle`` (degrees,
    torchvision's ``affine`` convention), ``tx``/``ty`` (whole pixels), ``scale``, ``shear_x``/
    ``shear_y`` (degrees)."""

    angle: torch.Tensor
    tx: torch.Tensor
    ty: torch.Tensor
    scale: torch.Tensor
    shear_x: torch.Tensor
    shear_y: torch.Tensor


def _uniform(n, low, high, generator):
    """``n`` draws uniform in [low, high] (float64), as ``torch.empty(1).uniform_(low, high)``."""
    return low + (high - low) * torch.rand(n, generator=generator, dtype=torch.float64)


class AffineAugment(Uint8Stage):
    """Each sample of the batch's uint8 image leaf through its own draw of torchvision's
    ``RandomAffine`` (or ``RandomRotation``, ``rotation=True``): one fused warp for the batch.

    Args:
        degrees ((float, float)): the angle's range in degrees, min <= max.
        translate ((float, float), optional): the largest translation as a fraction of the
            width and of the height, each in [0, 1]; None: none.
        scale ((float, float), optional): the scale's range, 0 < min <= max; None: 1.
        shear ((float, float) or (float, float, float, float), optional): the x shear's range
            in degrees, then the y shear's; None: none.
        interpolation (str): ``"nearest"`` (torchvision's default) or ``"bilinear"``.
        fill (float or sequence of float, optional): where the warp leaves the image, in [0,
            255], one value or one per channel; None: 0 (torchvision's default).
        center ((float, float), optional): ``(x, y)`` in pixels; None: the image's centre.
        rotation (bool): torchvision's ``rotate`` (``RandomRotation``): the angle turns the other
            way (``rotate`` is ``affine`` with ``-angle``), and its exact quarter turns are
            copies, as torchvision's ``rotate`` makes them; only ``degrees`` then.
        seed (int, optional): the draws are a function of ``(seed, rank, epoch, batch index)``;
            None picks a fresh seed, which the loader's ``state_dict()`` saves.
        image_key (int or str): which leaf is the uint8 image batch.
        layout (str): ``"NCHW"``, ``"NHWC"`` or ``"auto"``; the result keeps the layout.
        name (str): the class its refusals name (a front end's: ``"RandomAffine"``).

    Raises:
        ValueError: an argument outside those, naming it (its TypeError subclass for a wrong
            type).
    """

    what_draws = "affine draws"

    def __init__(self, degrees: Tuple[float, float], *,
                 translate: Optional[Tuple[float, float]] = None,
                 scale: Optional[Tuple[float, float]] = None,
                 shear: Optional[Sequence[float]] = None, interpolation: str = "nearest",
                 fill: Fill = None, center: Optional[Tuple[float, float]] = None,
                 rotation: bool = False, seed: Optional[int] = None, image_key: LeafKey = 0,
                 layout: str = "auto", name: str = "AffineAugment") -> None:
        cls = name
        self.degrees = arguments.number_pair(cls, "degrees", degrees)
        self.translate = None
        if translate is not None:
            with arguments.reworded(cls, "translate", "(a, b): the largest translation as a "
                                    "fraction of the width and of the height, each in [0, 1]",
                                    translate):
                self.translate = arguments.number_pair(cls, "translate", translate, low=0.0,
                                                       high=1.0, ordered=False)
        self.scale = None if scale is None else arguments.number_pair(
            cls, "scale", scale, low=0.0, low_open=True)
        if shear is not None:
            values = list(shear) if isinstance(shear, (list, tuple)) else None
            if values is None or len(values) not in (2, 4):
                arguments.fail(cls, "shear", "None, (min, max) or (x min, x max, y min, y max)",
                               shear)
            shear = arguments.number_pair(cls, "shear", values[:2]) + (
                arguments.number_pair(cls, "shear", values[2:]) if len(values) == 4 else ())
        self.shear = shear
        arguments.one_of(cls, "interpolation", interpolation, ("nearest", "bilinear"))
        self.interpolation = interpolation
        self.fill = arguments.fill_value(cls, "fill", fill, channels=(1, 3))
        self.center = None
        if center is not None:
            with arguments.reworded(cls, "center", "None or (x, y) in pixels", center):
                self.center = arguments.number_pair(cls, "center", center, ordered=False)
        self.rotation = bool(rotation)
        if self.rotation and (translate is not None or scale is not None or shear is not None):
            arguments.fail(cls, "rotation", "False when translate, scale or shear is given "
                           "(RandomRotation takes degrees alone)", rotation)
        self.image_key = arguments.leaf_key(cls, "image_key", image_key)
        check_image_layout(layout)
        self.layout = layout
        self._set_seed(seed)

    def __repr__(self) -> str:
        return ("AffineAugment(degrees=%r, translate=%r, scale=%r, shear=%r, interpolation=%r, "
                "rotation=%r, seed=%d)" % (self.degrees, self.translate, self.scale, self.shear,
                                           self.interpolation, self.rotation, self.seed))

    def draws(self, n: int, height: int, width: int, epoch: int = 0, index: int = 0,
              rank: int = 0) -> AffineDraws:
        """Each sample's parameters for one batch.

        Args:
            n (int): the number of images.
            height, width (int): their size in pixels (the translations' bounds).
            epoch, index, rank (int): the batch's :class:`~prefetch.transforms.BatchPosition`.

        Returns:
            AffineDraws: float64 ``[n]`` tensors.
        """
        g = BatchPosition(epoch, index, rank).generator(self.seed)
        zeros = torch.zeros(n, dtype=torch.float64)
        angle = _uniform(n, *self.degrees, g)
        tx, ty = zeros, zeros
        if self.translate is not None:
            max_dx, max_dy = float(self.translate[0] * width), float(self.translate[1] * height)
            # Python's round (half to even) of each draw, as torchvision's int(round(x.item()))
            tx = torch.tensor([float(round(v)) for v in _uniform(n, -max_dx, max_dx, g).tolist()],
                              dtype=torch.float64)
            ty = torch.tensor([float(round(v)) for v in _uniform(n, -max_dy, max_dy, g).tolist()],
                              dtype=torch.float64)
        scale = zeros + 1.0 if self.scale is None else _uniform(n, *self.scale, g)
        shear_x, shear_y = zeros, zeros
        if self.shear is not None:
            shear_x = _uniform(n, self.shear[0], self.shear[1], g)
            if len(self.shear) == 4:
                shear_y = _uniform(n, self.shear[2], self.shear[3], g)
        return AffineDraws(angle, tx, ty, scale, shear_x, shear_y)

    def augment(self, x: torch.Tensor, position: BatchPosition) -> torch.Tensor:
        # each sample warped by its own draw
        n, _, h, w = x.shape
        d = self.draws(n, h, w, *position)
        if self.rotation and self.center is None:
            return _rotate(x, d.angle, self.interpolation, self.fill)
        return affine(x, angle=-d.angle if self.rotation else d.angle, translate=(d.tx, d.ty),
                      shear=(d.shear_x, d.shear_y), scale=d.scale, center=self.center,
                      interpolation=self.interpolation, fill=self.fill)
