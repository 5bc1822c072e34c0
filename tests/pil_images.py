"""uint8 image tensors to and from Pillow images, for the tests that compare with Pillow (and
with timm, which runs Pillow): ``[C, H, W]`` with C 1 (mode L) or 3 (mode RGB)."""
import numpy as np
import torch
from PIL import Image


def to_pil(image: torch.Tensor) -> Image.Image:
    """A uint8 ``[C, H, W]`` tensor (C 1 or 3) as an L or RGB Pillow image."""
    arr = image.permute(1, 2, 0).contiguous().numpy()
    return Image.fromarray(arr[:, :, 0], "L") if image.shape[0] == 1 else Image.fromarray(arr, "RGB")


def from_pil(pil: Image.Image) -> torch.Tensor:
    """An L or RGB Pillow image as a uint8 ``[C, H, W]`` tensor."""
    t = torch.from_numpy(np.asarray(pil).copy())
    return t.unsqueeze(0) if t.dim() == 2 else t.permute(2, 0, 1)
