"""Float64 pure-torch references for the fused ops, written independently of the kernels."""
import torch
import torch.nn.functional as F


def reference_geometry(x, hflip, vflip, crop, offsets, fill):
    """x: [N, C, H, W] (any dtype) -> float64 [N, C, h, w]: window, fill outside, flips."""
    N, C, H, W = x.shape
    h, w = crop if crop is not None else (H, W)
    out = torch.full((N, C, h, w), float(fill), dtype=torch.float64)
    for n in range(N):
        if offsets is not None:
            top, left = int(offsets[n, 0]), int(offsets[n, 1])
        else:  # torchvision's CenterCrop (transforms/v2/functional/_geometry.py): the crop
            # anchor int(round((H - h) / 2.0)), or (h - H) // 2 pixels of padding before the image
            top = int(round((H - h) / 2.0)) if h <= H else -((h - H) // 2)
            left = int(round((W - w) / 2.0)) if w <= W else -((w - W) // 2)
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


# prefetch.ops.resized_crop's reference (tests/ops/test_resized_crop.py, tests/ops/test_decode.py): crop,
# F.interpolate in float64, flip, normalize, one sample at a time.
def interpolate64(crop, size, antialias, mode="bilinear"):
    """F.interpolate of a float64 [1, C, H, W] crop to size (h, w), align_corners=False, mode
    "bilinear" or "bicubic" (then clamped to [0, 255], as torchvision's uint8 result is).

    torch's CPU antialias kernel (2.13) is wrong when the output width is 1 and the output height
    is not: every output row gets the same value. Height and width are resampled independently,
    so that case is computed on the transposed crop, where torch is right."""
    h, w = size
    if antialias and w == 1 and h > 1:
        out = F.interpolate(crop.transpose(-1, -2), size=(w, h), mode=mode,
                            align_corners=False, antialias=True).transpose(-1, -2)
    else:
        out = F.interpolate(crop, size=(h, w), mode=mode, align_corners=False, antialias=antialias)
    return out.clamp(0.0, 255.0) if mode == "bicubic" else out


def resized_reference(images, boxes, size, mean, std, hflip=None, vflip=None, antialias=False,
                      bicubic=None):
    """images: list of HWC uint8 tensors -> float64 [N, C, h, w] (mean, std: at least C values);
    ``bicubic``: None (every sample bilinear) or one boolean per sample."""
    C = images[0].shape[-1] if images else len(mean)
    outs = []
    for n, image in enumerate(images):
        top, left, height, width = (int(v) for v in boxes[n])
        crop = image.cpu()[top:top + height, left:left + width].permute(2, 0, 1).double()[None]
        mode = "bicubic" if bicubic is not None and bool(bicubic[n]) else "bilinear"
        out = interpolate64(crop, size, antialias, mode)[0]
        if vflip is not None and bool(vflip[n]):
            out = out.flip(1)
        if hflip is not None and bool(hflip[n]):
            out = out.flip(2)
        outs.append(out)
    x = torch.stack(outs) if outs else torch.empty(0, C, *size, dtype=torch.float64)
    m = torch.tensor(mean[:C], dtype=torch.float64).view(1, C, 1, 1)
    s = torch.tensor(std[:C], dtype=torch.float64).view(1, C, 1, 1)
    return (x / 255.0 - m) / s


# A GPU's float32 results may differ from the CPU op's in their last bits: the kernels share their
# math (csrc/kernels), but ptxas contracts a multiply and an add into one fused multiply-add where
# the CPU's baseline build rounds twice (docs/custom_ops.md, "CPU and GPU results"). The bound the
# docs state: float32 within GPU_F32_REL relative to the larger of the value and 1 (the same order
# as both kernels' distance to a float64 reference); float16 and bfloat16 within one unit in the
# last place of the output dtype (a tie may round the other way).
GPU_F32_REL = 1e-6
_ULP = {torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}


def assert_close_across_devices(got, expected):
    """``got`` (a GPU op's output) against ``expected`` (the same op on the CPU) within the bound
    above; identical values (infinities included) always pass."""
    got, expected = got.cpu(), expected.cpu()
    assert got.shape == expected.shape and got.dtype == expected.dtype
    a, b = got.double(), expected.double()
    same = (a == b) | (a.isnan() & b.isnan())
    if expected.dtype == torch.float32:
        bound = GPU_F32_REL * b.abs().clamp(min=1.0)
    elif expected.dtype in _ULP:
        bound = b.abs() * _ULP[expected.dtype] + 2.0 ** -24
    else:  # integers (masks): moved, never computed on
        bound = torch.zeros_like(b)
    err = (a - b).abs()
    ok = same | (err <= bound)
    assert bool(ok.all()), "max error %g beyond the GPU/CPU bound" % float((err - bound)[~ok].max())
