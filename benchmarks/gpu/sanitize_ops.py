"""One op, a few calls, every argument path: small enough to run under compute-sanitizer.

    python benchmarks/gpu/sanitize_ops.py normalize_flip|flip_crop|resized_crop|affine_warp|pil_affine|sharpness|gaussian_blur|lookup|color_jitter|histograms|decode|all [--device cuda]
    python benchmarks/gpu/sanitize_ops.py color_jitter,lookup --device cpu     # several, by commas

Each case runs the op on the device and on the CPU and compares (the CPU op is the reference the
CPU suite checks against torch): a memory error is compute-sanitizer's to find, a wrong value is
this script's. The cases reach each kernel's paths: windows partly and wholly outside the image,
both flips, every output dtype and memory format, NCHW input, more than 64 channels (constants
uploaded instead of passed inline), gathers by index, ragged images with and without antialias,
JPEG regions. Exit 0 when every case matched, 1 on a mismatch or an error, 77 when the op cannot
run here (decode without libjpeg-turbo or Pillow), with the reason.
"""
import io
import sys
import time

import _common  # noqa: F401  (puts the checkout's prefetch first on sys.path)
from _common import MEAN, STD, require_built_for, resolve_device, sync

OPS = ("normalize_flip", "flip_crop", "resized_crop", "affine_warp", "pil_affine", "sharpness", "gaussian_blur",
       "lookup", "color_jitter", "histograms", "decode")
SKIP = 77
# The kernels now round alike on both devices (nvcc --fmad=false; the AVX2 builds contract nothing:
# docs/custom_ops.md). The second H200 run, whose CPU side still contracted, saw float32 at most
# 6e-7 apart (normalize_flip, resized_crop) and every policy op's bytes equal; the tolerances stay
# until a run shows zeros everywhere. Half types: their rounding of the same value.
TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}


class Unavailable(Exception):
    """The op cannot run in this build or environment (the message says why)."""


def compare(name, got, expected, tol, mean_tol=None):
    import torch

    got = got.cpu()
    if got.shape != expected.shape or got.dtype != expected.dtype:
        raise AssertionError("%s: got %s %s, the CPU gave %s %s"
                             % (name, tuple(got.shape), got.dtype, tuple(expected.shape),
                                expected.dtype))
    if got.is_floating_point():
        diff = (got.float() - expected.float()).abs().max().item() if got.numel() else 0.0
    else:
        diff = int((got.to(torch.int64) - expected.to(torch.int64)).abs().max()) if got.numel() else 0
    mean = (got.double() - expected.double()).abs().mean().item() if got.numel() else 0.0
    print("  %-44s max |device - cpu| = %g, mean %.3g" % (name, diff, mean), flush=True)
    if diff > tol:
        raise AssertionError("%s: max difference %g from the CPU result is over %g" % (name, diff, tol))
    if mean_tol is not None and mean > mean_tol:
        raise AssertionError("%s: mean difference %g from the CPU result is over %g"
                             % (name, mean, mean_tol))
    return diff


def _geometry(n, H, W, crop, g):
    import torch

    hflip = torch.rand(n, generator=g) < 0.5
    vflip = torch.rand(n, generator=g) < 0.5
    # Windows partly outside, and one wholly outside (fill only).
    offsets = torch.randint(-6, 7, (n, 2), generator=g)
    offsets[0] = torch.tensor([H + 3, -W - 2])
    return hflip, vflip, offsets


def case_normalize_flip(device):
    import torch

    from prefetch.ops import normalize_flip

    g = torch.Generator().manual_seed(1)
    n, H, W = 8, 37, 41
    images = torch.randint(0, 256, (n, H, W, 3), dtype=torch.uint8, generator=g)
    hflip, vflip, offsets = _geometry(n, H, W, (32, 36), g)
    on = lambda t: t.to(device)  # noqa: E731
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for channels_last in (False, True):
            kw = dict(hflip=hflip, vflip=vflip, crop=(32, 36), offsets=offsets, fill=7,
                      dtype=dtype, channels_last=channels_last)
            expected = normalize_flip(images, MEAN, STD, **kw)
            got = normalize_flip(on(images), MEAN, STD, **{k: on(v) if isinstance(v, torch.Tensor)
                                                            else v for k, v in kw.items()})
            compare("NHWC %s%s, crop+offsets+fill" % (str(dtype)[6:], " CL" if channels_last else ""),
                    got, expected, TOLERANCE[str(dtype)[6:]])
    # NCHW input, 70 channels: the per-channel constants do not fit inline (> 64) and are uploaded.
    C = 70
    wide = torch.randint(0, 256, (4, C, 9, 11), dtype=torch.uint8, generator=g)
    mean = (torch.rand(C, generator=g) * 0.5 + 0.25).tolist()
    std = (torch.rand(C, generator=g) * 0.3 + 0.1).tolist()
    flips = torch.tensor([True, False, True, False])
    compare("NCHW, 70 channels (uploaded constants)",
            normalize_flip(on(wide), mean, std, hflip=on(flips), layout="NCHW"),
            normalize_flip(wide, mean, std, hflip=flips, layout="NCHW"), TOLERANCE["float32"])
    # A gather: output k from input indices[k], as ArrayLoader's device path does.
    indices = torch.tensor([5, 0, 7, 7, 2, 3])
    hf, vf, off = hflip[:6], vflip[:6], offsets[:6]
    compare("gather by indices",
            normalize_flip(on(images), MEAN, STD, hflip=on(hf), vflip=on(vf), crop=24,
                           offsets=on(off), indices=on(indices)),
            normalize_flip(images, MEAN, STD, hflip=hf, vflip=vf, crop=24, offsets=off,
                           indices=indices), TOLERANCE["float32"])


def case_flip_crop(device):
    import torch

    from prefetch.ops import flip_crop

    g = torch.Generator().manual_seed(2)
    n, H, W = 8, 37, 41
    hflip, vflip, offsets = _geometry(n, H, W, (32, 36), g)
    on = lambda t: t.to(device)  # noqa: E731
    for dtype in (torch.uint8, torch.int16, torch.int32, torch.int64):
        masks = torch.randint(0, 100, (n, H, W), generator=g).to(dtype)
        compare("%s masks, crop+offsets+fill" % str(dtype)[6:],
                flip_crop(on(masks), hflip=on(hflip), vflip=on(vflip), crop=(32, 36),
                          offsets=on(offsets), fill=9),
                flip_crop(masks, hflip=hflip, vflip=vflip, crop=(32, 36), offsets=offsets, fill=9), 0)
    masks = torch.randint(0, 100, (n, H, W), generator=g).to(torch.int64)
    indices = torch.tensor([3, 3, 1, 6])
    compare("gather by indices",
            flip_crop(on(masks), hflip=on(hflip[:4]), crop=20, offsets=on(offsets[:4]),
                      indices=on(indices)),
            flip_crop(masks, hflip=hflip[:4], crop=20, offsets=offsets[:4], indices=indices), 0)


def case_resized_crop(device):
    import torch

    import prefetch
    from prefetch.ops import resized_crop

    g = torch.Generator().manual_seed(3)
    shapes = [(37, 41), (12, 90), (64, 64), (5, 7), (101, 33), (24, 24)]
    images = [torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, generator=g) for h, w in shapes]
    boxes = []
    for h, w in shapes:
        bh, bw = max(1, h // 2), max(1, (2 * w) // 3)
        boxes.append([(h - bh) // 2, w - bw, bh, bw])
    boxes = torch.tensor(boxes)
    hflip = torch.tensor([True, False, False, True, True, False])
    vflip = torch.tensor([False, False, True, True, False, True])
    cpu = prefetch.Ragged.from_tensors(images)
    dev = prefetch.Ragged.from_tensors(images, device=device)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for antialias in (False, True):
            for channels_last in (False, True):
                kw = dict(dtype=dtype, antialias=antialias, channels_last=channels_last)
                compare("%s%s%s" % (str(dtype)[6:], " antialias" if antialias else "",
                                    " CL" if channels_last else ""),
                        resized_crop(dev, boxes, (24, 28), MEAN, STD, hflip=hflip.to(device),
                                     vflip=vflip.to(device), **kw),
                        resized_crop(cpu, boxes, (24, 28), MEAN, STD, hflip=hflip, vflip=vflip, **kw),
                        TOLERANCE[str(dtype)[6:]])
    # Upscaling (a box smaller than the output) and boxes given on the device.
    small = torch.tensor([[0, 0, 3, 4]] * len(shapes))
    compare("upscale, boxes on the device",
            resized_crop(dev, small.to(device), 16, MEAN, STD),
            resized_crop(cpu, small, 16, MEAN, STD), TOLERANCE["float32"])
    # Bicubic: every sample, and a per-sample mix with bilinear (timm's "random"), its table on
    # the device; down and up (the 4-tap path and the antialias filter's wider support).
    mixed = torch.tensor([True, False, True, True, False, False])
    for antialias in (False, True):
        for dtype in (torch.float32, torch.bfloat16):
            kw = dict(dtype=dtype, antialias=antialias)
            name = "bicubic %s%s" % (str(dtype)[6:], " antialias" if antialias else "")
            compare(name, resized_crop(dev, boxes, (24, 28), MEAN, STD, interpolation="bicubic", **kw),
                    resized_crop(cpu, boxes, (24, 28), MEAN, STD, interpolation="bicubic", **kw),
                    TOLERANCE[str(dtype)[6:]])
            compare(name + " mixed, table on the device",
                    resized_crop(dev, boxes, (24, 28), MEAN, STD, interpolation=mixed.to(device), **kw),
                    resized_crop(cpu, boxes, (24, 28), MEAN, STD, interpolation=mixed, **kw),
                    TOLERANCE[str(dtype)[6:]])
    compare("bicubic upscale", resized_crop(dev, small, 16, MEAN, STD, interpolation="bicubic"),
            resized_crop(cpu, small, 16, MEAN, STD, interpolation="bicubic"), TOLERANCE["float32"])


def case_affine_warp(device):
    import torch

    from prefetch.ops import affine_warp
    from prefetch.transforms.policy_ops import pixel_maps

    g = torch.Generator().manual_seed(4)
    n, H, W = 12, 37, 41
    images = torch.randint(0, 256, (n, 3, H, W), dtype=torch.uint8, generator=g)
    angles = (torch.rand(n, generator=g) - 0.5) * 90
    maps = pixel_maps(n, H, W, angle=angles, translate=(torch.randint(-9, 9, (n,), generator=g), 0.0),
                      shear=((torch.rand(n, generator=g) - 0.5) * 40, 0.0)).float()
    maps[0] = torch.tensor([1.0, 0.0, 3.0, 0.0, 1.0, -2.0])  # a whole-pixel shift
    wide = torch.randint(0, 256, (n, 16, H, W), dtype=torch.uint8, generator=g)
    for mode in ("nearest", "bilinear"):
        for fill in (None, [1.0, 2.0, 3.0]):
            # Both kernels round every product and sum on its own: the same bytes.
            compare("affine_warp %s fill=%s" % (mode, fill),
                    affine_warp(images.to(device), maps.to(device), interpolation=mode, fill=fill),
                    affine_warp(images, maps, interpolation=mode, fill=fill), 0)
        compare("affine_warp %s 16 channels, channels_last" % mode,
                affine_warp(wide.to(device).contiguous(memory_format=torch.channels_last),
                            maps.to(device), interpolation=mode, fill=7),
                affine_warp(wide, maps, interpolation=mode, fill=7), 0)


def case_pil_affine(device):
    import torch

    from prefetch.ops import pil_affine
    from prefetch.transforms.timm.pil_ops import rotate_matrix

    g = torch.Generator().manual_seed(5)
    n, H, W = 12, 37, 41
    images = torch.randint(0, 256, (n, 3, H, W), dtype=torch.uint8, generator=g)
    angles = ((torch.rand(n, generator=g) - 0.5) * 60).tolist()
    maps = torch.tensor([rotate_matrix(a, W, H) for a in angles], dtype=torch.float64)
    maps[0] = torch.tensor([1.0, 0.3, 0.0, 0.0, 1.0, 0.0])  # timm's ShearX
    maps[1] = torch.tensor([1.0, 0.0, -17.5, 0.0, 1.0, 0.0])  # TranslateXRel, most of it outside
    wide = torch.randint(0, 256, (n, 16, H, W), dtype=torch.uint8, generator=g)
    for mode in ("bilinear", "bicubic"):
        # float64, every product and sum rounded on its own on both devices: the same bytes.
        compare("pil_affine %s" % mode, pil_affine(images.to(device), maps.to(device), interpolation=mode,
                                                   fill=[124, 116, 104]),
                pil_affine(images, maps, interpolation=mode, fill=[124, 116, 104]), 0)
        compare("pil_affine %s 16 channels, channels_last" % mode,
                pil_affine(wide.to(device).contiguous(memory_format=torch.channels_last), maps.to(device),
                           interpolation=mode, fill=7),
                pil_affine(wide, maps, interpolation=mode, fill=7), 0)


def case_sharpness(device):
    import torch

    from prefetch.ops import sharpness

    g = torch.Generator().manual_seed(5)
    n, H, W = 12, 37, 41
    images = torch.randint(0, 256, (n, 3, H, W), dtype=torch.uint8, generator=g)
    factors = torch.rand(n, generator=g, dtype=torch.float64) * 3
    # One rounding of an exact double on both: the same bytes.
    compare("sharpness", sharpness(images.to(device), factors.to(device)), sharpness(images, factors), 0)
    strided = images.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    compare("sharpness channels_last", sharpness(strided.to(device), factors.to(device)),
            sharpness(images, factors), 0)
    # Pillow's arithmetic: each float32 operation rounded alone on both (nvcc contracts none).
    compare("sharpness pillow", sharpness(images.to(device), factors.to(device), pillow=True),
            sharpness(images, factors, pillow=True), 0)
    compare("sharpness pillow channels_last", sharpness(strided.to(device), factors.to(device), pillow=True),
            sharpness(images, factors, pillow=True), 0)


def case_gaussian_blur(device):
    import torch

    from prefetch.ops import gaussian_blur

    g = torch.Generator().manual_seed(6)
    n, H, W = 12, 37, 41
    images = torch.randint(0, 256, (n, 3, H, W), dtype=torch.uint8, generator=g)
    sigmas = torch.rand(n, 2, generator=g, dtype=torch.float64) * 3 + 0.1
    # Exact products summed in double in one order on both: the same bytes. The widest kernel
    # reflect padding allows reads every row and column of the images (the row pass's buffer).
    for ksize in ((23, 23), (2 * W - 1, 2 * H - 1), (1, 1)):
        compare("gaussian_blur %s" % (ksize,), gaussian_blur(images.to(device), ksize, sigmas.to(device)),
                gaussian_blur(images, ksize, sigmas), 0)
    strided = images.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    compare("gaussian_blur channels_last", gaussian_blur(strided.to(device), 9, sigmas.to(device)),
            gaussian_blur(images, 9, sigmas), 0)


def case_lookup(device):
    import torch

    from prefetch.ops import lookup

    g = torch.Generator().manual_seed(6)
    n, H, W = 9, 29, 43
    images = torch.randint(0, 256, (n, 3, H, W), dtype=torch.uint8, generator=g)
    for name, tables in (("one table an image", torch.randint(0, 256, (n, 1, 256), dtype=torch.uint8, generator=g)),
                         ("one a channel", torch.randint(0, 256, (n, 3, 256), dtype=torch.uint8, generator=g))):
        compare("lookup %s" % name, lookup(images.to(device), tables.to(device)), lookup(images, tables), 0)
    strided = images.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    compare("lookup channels_last", lookup(strided.to(device), tables.to(device)), lookup(images, tables), 0)


def case_color_jitter(device):
    import torch

    from prefetch.ops import COLOR_STEPS, color_jitter

    g = torch.Generator().manual_seed(7)
    n, H, W = 10, 23, 37
    images = torch.randint(0, 256, (n, 3, H, W), dtype=torch.uint8, generator=g)
    # Every image its own order of four of the steps (torchvision's four, Pillow's Color, the
    # identity), repeated Contrasts (one grey-sum launch per chain position); hue factors in
    # [-0.5, 0.5], the others in [0, 2]; image 1's Pillow Color at the factor where a contracted
    # multiply-add would write other bytes (tests/ops/test_sharpness.py's witness).
    pillow = COLOR_STEPS.index("pillow_color")
    steps = torch.stack([torch.randperm(len(COLOR_STEPS), generator=g)[:4] for _ in range(n)])
    steps[0] = torch.tensor([2, 2, 2, 2])
    steps[1] = torch.tensor([pillow, 2, pillow, 3])
    factors = torch.rand(n, 4, generator=g, dtype=torch.float64) * 2
    factors[steps == 4] = torch.rand(int((steps == 4).sum()), generator=g, dtype=torch.float64) - 0.5
    factors[1, 0] = 1.030302882194519
    # The thread work rounds each operation as the CPU twin does (round_each.h): the same bytes
    # are expected (the second H200 run: 0); 1 is allowed for a contraction this check would then
    # report.
    compare("color_jitter 3 channels", color_jitter(images.to(device), steps.to(device), factors.to(device)),
            color_jitter(images, steps, factors), 1)
    grey = images[:, :1].contiguous()
    compare("color_jitter 1 channel", color_jitter(grey.to(device), steps.to(device), factors.to(device)),
            color_jitter(grey, steps, factors), 1)
    # Pillow's Color alone, any factor (negative, past 1, large, the witness): its two roundings
    # are mul_rn and add_rn on the device, so no difference at all is allowed.
    pillow_steps = torch.full((n, 1), pillow)
    pillow_factors = torch.tensor([[-1.0], [0.0], [0.1], [1.030302882194519], [1.0], [1.3], [1.9], [2.7],
                                   [40.0], [1e39]], dtype=torch.float64)
    compare("color_jitter pillow_color", color_jitter(images.to(device), pillow_steps.to(device),
                                                      pillow_factors.to(device)),
            color_jitter(images, pillow_steps, pillow_factors), 0)


def case_histograms(device):
    import torch

    from prefetch.ops import histograms

    g = torch.Generator().manual_seed(8)
    images = torch.randint(0, 256, (7, 3, 41, 300), dtype=torch.uint8, generator=g)
    images[0] = 17  # a flat image: every add of its blocks on one shared bin
    compare("histograms", histograms(images.to(device)), histograms(images), 0)
    strided = images.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    compare("histograms channels_last", histograms(strided.to(device)), histograms(images), 0)
    many = torch.randint(0, 256, (70000, 1, 2, 3), dtype=torch.uint8, generator=g)  # > 65535 planes
    compare("histograms many planes", histograms(many.to(device)), histograms(many), 0)


def _jpegs():
    import numpy as np

    try:
        from PIL import Image
    except ImportError:
        raise Unavailable("Pillow is not installed: no JPEG to decode") from None
    out = []
    rng = np.random.default_rng(4)
    # 4:4:4, 4:2:2, 4:2:0, grayscale, and CMYK (which nvJPEG refuses: the per-image fallback to
    # the CPU decoder, issue 24 item 4).
    for i, (h, w) in enumerate([(40, 56), (33, 17), (64, 48), (21, 30), (26, 35)]):
        y, x = np.mgrid[0:h, 0:w]
        smooth = np.stack([(x * 4 + i * 9) % 256, (y * 5) % 256, ((x + y) * 3) % 256], -1)
        noise = rng.integers(0, 16, (h, w, 3))
        image = Image.fromarray((smooth + noise).clip(0, 255).astype(np.uint8), "RGB")
        if i == 3:
            image = image.convert("L")
        if i == 4:
            image = image.convert("CMYK")
        buf = io.BytesIO()
        image.save(buf, format="JPEG", quality=90, **({"subsampling": i % 3} if i < 4 else {}))
        out.append(buf.getvalue())
    return out


def case_decode(device):
    import torch

    import prefetch
    from prefetch.ops import decode_jpeg, decode_resized_crop

    if not prefetch.built_with_jpeg():
        raise Unavailable("prefetch was built without libjpeg-turbo (%s)"
                          % torch.ops.prefetch._jpeg_decoder_library())
    data = _jpegs()
    boxes = torch.tensor([[4, 6, 20, 30], [0, 0, 33, 17], [10, 8, 40, 32], [2, 3, 9, 11], [5, 0, 21, 35]])
    cpu = decode_jpeg(data)
    got = decode_jpeg(data, device=device)
    if got.values.device.type != device.type:
        raise AssertionError("decode_jpeg(device=%s) returned values on %s" % (device, got.values.device))
    # nvJPEG's IDCT and chroma upsampling are not libjpeg-turbo's: a few levels apart on
    # average, much more at a sharp colour edge (83 on an H200, 2026-11-27: the upsampling smears
    # a chroma step over other pixels), never a different picture (that is ~100 apart on
    # average): the mean is the check, the maximum only that a value is a byte.
    for k in range(len(data)):
        compare("decode_jpeg image %d (%s)" % (k, "x".join(map(str, cpu[k].shape))),
                got[k], cpu[k], 255, mean_tol=4)
    regions = decode_jpeg(data, boxes, device=device)
    for k in range(len(data)):
        t, l, h, w = boxes[k].tolist()
        compare("decode_jpeg region %d" % k, regions[k], cpu[k][t:t + h, l:l + w], 255, mean_tol=4)
    flips = torch.tensor([True, False, True, False, True])
    compare("decode_resized_crop",
            decode_resized_crop(data, boxes, (16, 20), MEAN, STD, hflip=flips.to(device), device=device),
            decode_resized_crop(data, boxes, (16, 20), MEAN, STD, hflip=flips), 0.8, mean_tol=0.07)


CASES = {"normalize_flip": case_normalize_flip, "flip_crop": case_flip_crop,
         "resized_crop": case_resized_crop, "affine_warp": case_affine_warp, "pil_affine": case_pil_affine,
         "sharpness": case_sharpness, "gaussian_blur": case_gaussian_blur, "lookup": case_lookup, "color_jitter": case_color_jitter,
         "histograms": case_histograms, "decode": case_decode}


def main(argv=None):
    p = _common.parser(__doc__)
    _common.names_argument(p, "op", OPS, "op")
    _common.device_argument(p)
    p.add_argument("--repeat", type=int, default=2, help="runs of every case (default 2)")
    args = p.parse_args(argv)
    import torch

    import prefetch

    device = resolve_device(args.device)
    if require_built_for(device, "sanitize_ops"):
        return 1
    print("sanitize_ops: %s on %s (torch %s, prefetch %s)" % (",".join(args.op), device,
                                                             torch.__version__, prefetch.__version__),
          flush=True)
    names = args.op
    failed, skipped = [], []
    for name in names:
        t0 = time.perf_counter()
        try:
            for r in range(args.repeat):
                print("%s, run %d:" % (name, r + 1), flush=True)
                CASES[name](device)
            sync(device)
            print("%s: ok in %.1f s" % (name, time.perf_counter() - t0), flush=True)
        except Unavailable as why:
            print("%s: SKIPPED: %s" % (name, why), flush=True)
            skipped.append(name)
        except Exception:  # noqa: BLE001 - report every op, then fail
            import traceback

            traceback.print_exc()
            print("%s: FAILED" % name, flush=True)
            failed.append(name)
    if failed:
        return 1
    return SKIP if skipped and len(skipped) == len(names) else 0


if __name__ == "__main__":
    sys.exit(main())
