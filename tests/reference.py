"""Float64 pure-torch references for the fused ops, written independently of the kernels."""
import torch


def reference_geometry(x, hflip, vflip, crop, offsets, fill):
    """x: [N, C, H, W] (any dtype) -> float64 [N, C, h, w]: window, fill outside, flips."""
    N, C, H, W = x.shape
    h, w = crop if crop is not None else (H, W)
    out = torch.full((N, C, h, w), float(fill), dtype=torch.float64)
    for n in range(N):
        if offsets is not None:
            top, left = int(offsets[n, 0]), int(offsets[n, 1])
        else:
            top, left = (H - h) // 2, (W - w) // 2
        for y in range(h):
            sy = top + y
            if not 0 <= sy < H:
                continue
            for xx in range(w):
                sx = left + xx
                if 0 <= sx < W:
                    out[n, :, y, xx] = x[n, :, sy, sx].double()
        if vflip is not None and bool(vflip[n]):
            out[n] = out[n].flip(1)
        if hflip is not None and bool(hflip[n]):
            out[n] = out[n].flip(2)
    return out


def reference(images, mean, std, hflip=None, vflip=None, crop=None, offsets=None, fill=0,
              layout="NHWC"):
    x = images.cpu()
    if layout == "NHWC":
        x = x.permute(0, 3, 1, 2)
    win = reference_geometry(x, None if hflip is None else hflip.cpu(),
                             None if vflip is None else vflip.cpu(), crop,
                             None if offsets is None else offsets.cpu(), fill)
    C = x.shape[1]
    m = torch.tensor(mean[:C], dtype=torch.float64).view(1, C, 1, 1)
    s = torch.tensor(std[:C], dtype=torch.float64).view(1, C, 1, 1)
    return (win / 255.0 - m) / s
