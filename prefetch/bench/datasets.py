"""The bench's synthetic datasets: uint8 HWC images made in memory (a fresh tensor per sample, as
a decode makes, or views of a stored array), photo-like JPEG files, a dataset that decodes them
with PIL (RandomResizedCrop: torchvision's, else its algorithm with PIL), a dataset of their
encoded bytes, and the same files as webdataset tar shards or a prefetch store.

Every sample is ``(image, label)`` with the label ``index % CLASSES``, so that every form of the
same files carries the same labels.
"""
import io
import math
import os
import time
from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np
import torch
from torch.utils.data import Dataset

import prefetch

from .constants import CLASSES, MEAN, STD


def random_hflip(x: torch.Tensor, dim: int) -> torch.Tensor:
    """The usual per-sample random horizontal flip, with ``torch.flip``.

    Args:
        x (Tensor): an image (uint8 HWC here, any dtype and layout).
        dim (int): its width's dimension (1 for HWC).

    Returns:
        Tensor: ``x`` mirrored along ``dim`` with probability 0.5 (torch's global generator), else
        ``x`` itself.
    """
    return torch.flip(x, (dim,)) if torch.rand(()) < 0.5 else x


# --- in-memory uint8 images ----------------------------------------------------------------

class FreshImages(Dataset):
    """uint8 HWC images, each ``__getitem__`` a fresh tensor (as a decode makes), and a label;
    with ``flip`` the usual per-sample random horizontal flip, with ``torch.flip``.

    Args:
        n (int): the samples; sample ``i`` is stored image ``i % pool`` with label
            ``i % CLASSES``.
        size (int): the images' side: each is uint8 ``[size, size, 3]``, uniform random values.
        flip (bool): flip each sample at random (:func:`random_hflip`) in ``__getitem__``.
        pool (int): distinct images stored (``min(pool, n)``).
        seed (int): the seed of the images' generator.
    """

    def __init__(self, n: int, size: int, flip: bool, pool: int = 64, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.pool = torch.randint(0, 256, (min(pool, n), size, size, 3), dtype=torch.uint8, generator=g)
        self.n, self.flip = n, flip

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = self.pool[i % len(self.pool)].clone()
        return (random_hflip(x, 1) if self.flip else x), i % CLASSES


class StoredImages(FreshImages):
    """The same images, returned as views of the stored array (a dataset decoded into RAM)."""

    def __getitem__(self, i):
        return self.pool[i % len(self.pool)], i % CLASSES


# --- JPEG files -------------------------------------------------------------------------------

def write_jpegs(directory: str, n: int, scale: float = 1.0, seed: int = 0,
                quality: int = 90) -> List[str]:
    """`n` photo-like JPEGs of random sizes around 500x375 (a quarter portrait), times `scale`:
    colour fields at four scales plus mild noise, so that they compress like photos (~105 kB at
    500x375 and quality 90, about ImageNet's average; ~1.2 ms to decode on the 2-core VM).

    Args:
        directory (str): an existing folder; the files are ``NNNNN.jpg`` in it.
        n (int): how many.
        scale (float): their sides' factor (each side 300-450 by 400-600 pixels times it, at
            least 8).
        seed (int): the seed of their sizes and pixels (numpy's ``default_rng``).
        quality (int): Pillow's JPEG quality.

    Returns:
        list[str]: their paths, in order.

    Raises:
        ImportError: Pillow is not installed.
    """
    from PIL import Image

    rng = np.random.default_rng(seed)
    octaves = (((6, 8), 0.7), ((24, 32), 0.4), ((96, 128), 0.4), ((190, 250), 0.3))
    paths = []
    for k in range(n):
        h, w = int(rng.integers(300, 451)), int(rng.integers(400, 601))
        if rng.random() < 0.25:
            h, w = w, h
        h, w = max(8, round(h * scale)), max(8, round(w * scale))
        pixels = 128 + rng.normal(0.0, 8.0, (h, w, 3)).astype(np.float32)
        for grid, amplitude in octaves:
            field = Image.fromarray(rng.integers(0, 256, grid + (3,), dtype=np.uint8))
            pixels += amplitude * (np.asarray(field.resize((w, h), Image.BICUBIC), np.float32) - 128)
        path = os.path.join(directory, "%05d.jpg" % k)
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(path, quality=quality)
        paths.append(path)
    return paths


class PilRandomResizedCrop:
    """torchvision's RandomResizedCrop on a PIL image (its get_params: scale and log-ratio drawn
    with torch's RNG, 10 attempts, then the centre crop within the ratio bounds), bilinear, for
    machines without torchvision.

    Args:
        size (int): the output's side in pixels.
        scale (tuple[float, float]): the window's area, a fraction of the image's, drawn uniformly.
        ratio (tuple[float, float]): the window's width / height bounds, drawn log-uniformly.
    """

    def __init__(self, size: int, scale: Tuple[float, float] = (0.08, 1.0),
                 ratio: Tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0)):
        self.size, self.scale, self.ratio = size, scale, ratio

    def params(self, width: int, height: int) -> Tuple[int, int, int, int]:
        """A window drawn as torchvision's ``RandomResizedCrop.get_params`` draws it.

        Args:
            width (int): the image's width in pixels.
            height (int): its height.

        Returns:
            tuple[int, int, int, int]: ``(top, left, height, width)`` of the window.
        """
        area = height * width
        log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        for _ in range(10):
            target_area = area * torch.empty(1).uniform_(self.scale[0], self.scale[1]).item()
            aspect = math.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1]).item())
            w = int(round(math.sqrt(target_area * aspect)))
            h = int(round(math.sqrt(target_area / aspect)))
            if 0 < w <= width and 0 < h <= height:
                i = torch.randint(0, height - h + 1, size=(1,)).item()
                j = torch.randint(0, width - w + 1, size=(1,)).item()
                return i, j, h, w
        in_ratio = float(width) / float(height)
        if in_ratio < min(self.ratio):
            w, h = width, int(round(width / min(self.ratio)))
        elif in_ratio > max(self.ratio):
            h, w = height, int(round(height * max(self.ratio)))
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def __call__(self, img: Any) -> Any:
        """``img`` (a PIL image) cropped to a drawn window and resized bilinearly to
        ``size x size`` (a PIL image)."""
        from PIL import Image

        i, j, h, w = self.params(*img.size)
        return img.resize((self.size, self.size), Image.BILINEAR, box=(j, i, j + w, i + h))


def random_resized_crop(size: int) -> Tuple[Callable[[Any], Any], str]:
    """torchvision.transforms.RandomResizedCrop(size) when torchvision is importable, else the
    same algorithm with PIL (:class:`PilRandomResizedCrop`).

    Args:
        size (int): the output's side in pixels.

    Returns:
        tuple: the crop (a callable on a PIL image) and which it is, ``"torchvision"`` or ``"pil"``.
    """
    try:
        from torchvision.transforms import RandomResizedCrop
        return RandomResizedCrop(size), "torchvision"
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return PilRandomResizedCrop(size), "pil"


def to_hwc_tensor(img: Any) -> torch.Tensor:
    """An HWC uint8 tensor of a PIL image (a copy, as torchvision's pil_to_tensor makes).

    Args:
        img (PIL.Image.Image): an RGB image.

    Returns:
        Tensor[H, W, 3]: uint8, its own memory.
    """
    return torch.from_numpy(np.array(img, dtype=np.uint8, copy=True))


class JpegImages(Dataset):
    """PIL decode + RandomResizedCrop, then per `mode`:
    "decoded": no crop: the decoded HWC uint8 image of its own size (the window, resize, flip and
    normalize come later, all in FusedAugment(random_resized_crop=...));
    "uint8": HWC uint8 (flip and normalize come later, in FusedAugment);
    "flip": per-sample random flip with torch.flip, HWC uint8 (normalize in the main process);
    "float": torchvision's recipe in the worker: flip, ToTensor (CHW float /255), Normalize.

    Args:
        paths (Sequence[str]): the JPEG files; sample ``i``'s label is ``i % CLASSES``.
        size (int): the crop's side in pixels.
        mode (str): one of the above.
    """

    def __init__(self, paths: Sequence[str], size: int, mode: str):
        self.paths, self.mode = paths, mode
        self.crop, self.crop_impl = random_resized_crop(size)
        self.mean = torch.tensor(MEAN).view(3, 1, 1)
        self.std = torch.tensor(STD).view(3, 1, 1)

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        from PIL import Image

        with Image.open(self.paths[i]) as f:
            img = f.convert("RGB")
        if self.mode == "decoded":
            return to_hwc_tensor(img), i % CLASSES
        x = to_hwc_tensor(self.crop(img))
        if self.mode == "uint8":
            return x, i % CLASSES
        x = random_hflip(x, 1)
        if self.mode == "float":
            x = x.permute(2, 0, 1).float().div_(255).sub_(self.mean).div_(self.std)
        return x, i % CLASSES


class JpegBytes(Dataset):
    """The files' bytes, read as a dataset of encoded images yields them: prefetch decodes them
    (FusedAugment(decode=True): only each random window, in C++ threads).

    Args:
        paths (Sequence[str]): the files; sample ``i`` is ``(Tensor[file size] uint8, i % CLASSES)``.
    """

    def __init__(self, paths: Sequence[str]):
        self.paths = paths

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        with open(self.paths[i], "rb") as f:
            return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8), i % CLASSES



# --- the same files in a peer's and in prefetch's format -----------------------------------------

def write_shards(paths: Sequence[str], directory: str, shards: int) -> List[str]:
    """The files as webdataset tar shards (``NNNNNN.jpg`` and ``NNNNNN.cls`` members, the
    labels JpegBytes gives them), ``shards`` of them so that every worker reads its own.

    Args:
        paths (Sequence[str]): the JPEG files; file ``i`` goes to shard ``i % shards``.
        directory (str): an existing folder; the shards are ``shard-NNN.tar`` in it.
        shards (int): how many.

    Returns:
        list[str]: the shards' paths.
    """
    import tarfile

    urls = []
    for s in range(shards):
        url = os.path.join(directory, "shard-%03d.tar" % s)
        with tarfile.open(url, "w") as tar:
            for i in range(s, len(paths), shards):
                tar.add(paths[i], arcname="%06d.jpg" % i)
                label = str(i % CLASSES).encode()
                info = tarfile.TarInfo("%06d.cls" % i)
                info.size = len(label)
                tar.addfile(info, io.BytesIO(label))
        urls.append(url)
    return urls



def pack_store(paths: Sequence[str], dest: str) -> Tuple[Dict[str, float], Any]:
    """The files packed into a store (their labels as JpegBytes gives them). The files were just
    written: they are in the page cache.

    Args:
        paths (Sequence[str]): the JPEG files.
        dest (str): the store's folder (``prefetch.pack``'s destination).

    Returns:
        tuple: what the pack measured (``files``, ``pack_s`` in seconds, ``pack_files_per_s``,
        ``files_bytes`` and ``store_bytes`` in bytes, ``store_overhead``: the store's bytes over
        the files' minus 1) and the opened store.
    """
    t0 = time.perf_counter()
    store = prefetch.pack(paths, dest, labels=[i % CLASSES for i in range(len(paths))],
                          progress=False)
    seconds = time.perf_counter() - t0
    files_bytes = sum(os.path.getsize(p) for p in paths)
    store_bytes = sum(os.path.getsize(os.path.join(dest, f)) for f in os.listdir(dest))
    return {"files": len(paths), "pack_s": seconds, "pack_files_per_s": len(paths) / seconds,
            "files_bytes": files_bytes, "store_bytes": store_bytes,
            "store_overhead": store_bytes / files_bytes - 1.0}, store

