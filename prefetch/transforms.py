"""FusedAugment: the transform a Prefetcher applies on the device, on its copy stream.

It draws every sample's flips and crop window itself, from a generator keyed by
``(seed, epoch, batch index)``, so a run is reproducible whatever the number of DataLoader
workers, and applies :func:`prefetch.ops.normalize_flip` to the image leaf (and the same
geometry, through :func:`prefetch.ops.flip_crop`, to a mask leaf) in one pass.
"""
import secrets

import torch

from .ops import flip_crop, normalize_flip

__all__ = ["FusedAugment"]

_MASK64 = (1 << 64) - 1


def _mix(*values):
    """splitmix64 over the values: independent 63-bit seeds for neighbouring (epoch, index)."""
    h = 0x9E3779B97F4A7C15
    for v in values:
        h = (h ^ (v & _MASK64)) & _MASK64
        h = (h + 0x9E3779B97F4A7C15) & _MASK64
        h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _MASK64
        h ^= h >> 31
    return h & ((1 << 63) - 1)


def _get(batch, key):
    if isinstance(batch, torch.Tensor):
        if key != 0:
            raise KeyError("prefetch: the batch is a single tensor; key %r does not apply" % (key,))
        return batch
    try:
        return batch[key]
    except (KeyError, IndexError, TypeError):
        raise KeyError("prefetch: the batch (%s) has no leaf %r; set image_key/mask_key"
                       % (type(batch).__name__, key)) from None


def _set(batch, key, value):
    if isinstance(batch, torch.Tensor):
        return value
    if isinstance(batch, tuple):
        items = list(batch)
        items[key] = value
        return type(batch)(*items) if hasattr(batch, "_fields") else type(batch)(items)
    if isinstance(batch, list):
        batch = list(batch)
        batch[key] = value
        return batch
    batch = dict(batch) if type(batch) is not dict else batch.copy()
    batch[key] = value
    return batch


class FusedAugment:
    """Random crop (with padding), flips, normalization and cast in one kernel, on the device.

    Args:
        mean, std: per-channel, torchvision's convention (fractions of 1).
        hflip, vflip: probability of mirroring each sample horizontally / vertically.
        crop: output ``(h, w)`` (an int means square); None keeps the input size.
        center_crop: take the centred window instead of a random one (validation); the window is
            ``((H - h) // 2, (W - w) // 2)``, as torchvision's ``CenterCrop`` for ``h <= H``.
        padding: as torchvision's ``RandomCrop(padding=...)``: the window is drawn from the image
            padded by this many ``fill`` pixels on every side. With ``crop=None`` and
            ``padding=0`` the window is the whole image.
        fill: uint8 value of padding pixels; ``mask_fill`` the mask's.
        dtype: float32, float16 or bfloat16 output; ``channels_last`` its memory format.
        seed: the draws are a function of ``(seed, epoch, batch index)``; None picks a fresh seed.
        image_key, mask_key: which leaf of the batch is the uint8 image batch (index or dict
            key) and, optionally, the integer mask batch ``[N, H, W]`` or ``[N, 1, H, W]``.
        layout: ``"NHWC"``, ``"NCHW"`` or ``"auto"`` (NHWC unless dim 1 looks like channels).
    """

    #: The Prefetcher passes ``epoch=`` and ``index=`` (the batch's position in the epoch).
    positional_draws = True

    def __init__(self, mean, std, *, hflip=0.5, vflip=0.0, crop=None, center_crop=False,
                 padding=0, fill=0, dtype=torch.float32, channels_last=False, seed=None,
                 image_key=0, mask_key=None, mask_fill=0, layout="auto"):
        self.mean = [float(m) for m in mean]
        self.std = [float(s) for s in std]
        if len(self.mean) != len(self.std):
            raise ValueError("prefetch: mean has %d values, std has %d" % (len(self.mean), len(self.std)))
        for name, p in (("hflip", hflip), ("vflip", vflip)):
            if not 0.0 <= float(p) <= 1.0:
                raise ValueError("prefetch: %s must be a probability in [0, 1], got %r" % (name, p))
        if isinstance(crop, int):
            crop = (crop, crop)
        if crop is not None and (len(crop) != 2 or min(crop) < 1):
            raise ValueError("prefetch: crop must be (h, w) of positive ints, got %r" % (crop,))
        if not isinstance(padding, int) or padding < 0:
            raise ValueError("prefetch: padding must be an int >= 0, got %r" % (padding,))
        if layout not in ("auto", "NHWC", "NCHW"):
            raise ValueError("prefetch: layout must be 'auto', 'NHWC' or 'NCHW', got %r" % (layout,))
        self.hflip, self.vflip = float(hflip), float(vflip)
        self.crop = None if crop is None else (int(crop[0]), int(crop[1]))
        self.center_crop = bool(center_crop)
        self.padding, self.fill, self.mask_fill = padding, int(fill), int(mask_fill)
        self.dtype, self.channels_last = dtype, bool(channels_last)
        self.seed = secrets.randbits(63) if seed is None else int(seed)
        self.image_key, self.mask_key, self.layout = image_key, mask_key, layout

    def __repr__(self):
        return ("FusedAugment(crop=%s%s, padding=%d, hflip=%g, vflip=%g, dtype=%s, seed=%d)"
                % (self.crop, " centred" if self.center_crop else "", self.padding, self.hflip,
                   self.vflip, self.dtype, self.seed))

    def _layout(self, images):
        if images.dim() != 4:
            raise ValueError("prefetch: FusedAugment expects 4-D uint8 images, got shape %s"
                             % (tuple(images.shape),))
        if self.layout != "auto":
            return self.layout
        channels = (1, 2, 3, 4)
        if images.shape[-1] not in channels and images.shape[1] in channels:
            return "NCHW"
        return "NHWC"

    def draws(self, n, height, width, epoch=0, index=0):
        """The geometry of batch `index` of `epoch`: dict(hflip, vflip, crop, offsets), on the CPU."""
        g = torch.Generator().manual_seed(_mix(self.seed, epoch, index))
        hflip = torch.rand(n, generator=g) < self.hflip
        vflip = torch.rand(n, generator=g) < self.vflip
        h, w = self.crop if self.crop is not None else (height, width)
        if self.center_crop or (self.crop is None and self.padding == 0):
            return {"hflip": hflip, "vflip": vflip, "crop": (h, w), "offsets": None}
        span_h = height + 2 * self.padding - h
        span_w = width + 2 * self.padding - w
        if span_h < 0 or span_w < 0:
            raise ValueError(
                "prefetch: crop %s is larger than the image %dx%d padded by %d"
                % ((h, w), height, width, self.padding))
        top = torch.randint(0, span_h + 1, (n,), generator=g) - self.padding
        left = torch.randint(0, span_w + 1, (n,), generator=g) - self.padding
        return {"hflip": hflip, "vflip": vflip, "crop": (h, w),
                "offsets": torch.stack([top, left], dim=1)}

    def image_size(self, images):
        """(height, width) of a uint8 image batch in this transform's layout."""
        layout = self._layout(images)
        return (images.shape[1], images.shape[2]) if layout == "NHWC" else tuple(images.shape[2:])

    def __call__(self, batch, *, epoch=0, index=0):
        images = _get(batch, self.image_key)
        height, width = self.image_size(images)
        d = self.draws(images.shape[0], height, width, epoch, index)
        device = images.device
        if device.type == "cuda":  # through pinned memory: no host synchronisation
            d = {k: (v.pin_memory().to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v)
                 for k, v in d.items()}
        return self.apply(batch, d)

    def apply(self, batch, d, indices=None):
        """Applies draws ``d`` (from :meth:`draws`, on the batch's device). With ``indices``, the
        image and mask leaves are whole datasets and the kernels gather those samples in the same
        pass (the ArrayLoader's device-resident path); the caller gathers the other leaves."""
        images = _get(batch, self.image_key)
        layout = self._layout(images)
        out = normalize_flip(images, self.mean, self.std, hflip=d["hflip"], vflip=d["vflip"],
                             crop=d["crop"], offsets=d["offsets"], fill=self.fill, dtype=self.dtype,
                             layout=layout, channels_last=self.channels_last, indices=indices)
        batch = _set(batch, self.image_key, out)
        if self.mask_key is not None:
            masks = _get(batch, self.mask_key)
            squeeze = masks.dim() == 4 and masks.shape[1] == 1
            m = flip_crop(masks[:, 0] if squeeze else masks, hflip=d["hflip"], vflip=d["vflip"],
                          crop=d["crop"], offsets=d["offsets"], fill=self.mask_fill, indices=indices)
            batch = _set(batch, self.mask_key, m.unsqueeze(1) if squeeze else m)
        return batch
