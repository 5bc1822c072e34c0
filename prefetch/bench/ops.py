"""The fused op against the torch op chain users write, and against a plain copy of as many bytes.

Workload (the fused-ops issue): N uint8 HWC images, random crop of `crop` from the image padded by
`padding`, random horizontal flips, normalization, cast to float32/float16/bfloat16, NCHW or
channels_last output. GB/s counts bytes moved: uint8 read plus output written. The copy moves as
many bytes (memcpy on the CPU, device-to-device on a GPU): a reference for the memory system's
speed, not a bound the op cannot pass (``ops_fraction_of_copy`` = fused / copy).

The policies' kernels (``policy_kernels``: affine_warp, sharpness, lookup, color_jitter,
histograms, each image its own parameters) are timed the same way on the same images as NCHW
uint8, against a copy of as many bytes: the figures a GPU run's predictions are checked against
(the GPU check's profile stage runs the same calls under Nsight Compute).

Each comparison is timed in interleaved rounds (copy, fused op, torch chain, copy, ...; a policy
kernel and its copy likewise), ``repeats`` rounds (at least 5) after a warm-up round; figures are
medians (ranges) and ratios medians of per-round ratios. On the CPU every call runs on torch's N
intra-op threads (``--workers``).
"""
import torch
import torch.nn.functional as F

import prefetch

from . import text, timing
from .constants import MEAN, STD
from .kernel_rounds import interleaved_kernels
from .section import SectionResult, Section, resources

# The section's pipelines, as results.json's resources name them.
PIPELINES = ("fused op", "torch op chain", "copy", "policy kernels")


def torch_chain(images, draws, padding, dtype, channels_last):
    """What a user writes with torch ops: float, scale, normalize, pad and per-sample crop,
    per-sample flip, cast, memory format."""
    x = images.permute(0, 3, 1, 2).float().div(255)
    mean = torch.tensor(MEAN, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=x.device).view(1, 3, 1, 1)
    x = x.sub(mean).div(std)
    h, w = draws.crop
    # The op's fill is pixel value 0, i.e. (0 - mean) / std after normalization.
    x = torch.cat([F.pad(x[:, c:c + 1], (padding,) * 4, value=-MEAN[c] / STD[c]) for c in range(3)], 1)
    offsets = (draws.offsets + padding).tolist()
    x = torch.stack([x[n, :, t:t + h, l:l + w] for n, (t, l) in enumerate(offsets)])
    flip = draws.hflip.view(-1, 1, 1, 1)
    x = torch.where(flip, x.flip(3), x)
    x = x.to(dtype)
    return x.contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)


def workload(device, n=256, size=224, crop=224, padding=4):
    """The section's inputs on ``device``: N random uint8 HWC images and FusedAugment's draws for
    them (crop windows of the padded image, horizontal flips); also what the GPU check profiles."""
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, size, size, 3), dtype=torch.uint8, generator=g).to(device)
    aug = prefetch.FusedAugment(MEAN, STD, crop=crop, padding=padding, hflip=0.5, seed=1)
    return images, aug.draws(n, size, size).to(device)


def policy_kernels(images):
    """[(name, call, bytes moved)] of the policies' kernels on ``images`` (N uint8 HWC images, as
    ``workload`` makes them), each image its own parameters: a rotation (bilinear, a fill), a
    sharpness factor (in torchvision's arithmetic and in Pillow's), a table, an order of
    brightness, saturation and hue, Pillow's Color (color_jitter's ``pillow_color`` step); and the
    histograms; and timm's rotation with Pillow's conventions (bicubic, float64)."""
    from ..transforms.policy_ops import pixel_maps
    from ..transforms.timm.pil_ops import rotate_matrix

    n, h, w = images.shape[:3]
    device = images.device
    nchw = images.permute(0, 3, 1, 2).contiguous()
    g = torch.Generator().manual_seed(2)
    maps = pixel_maps(n, h, w, angle=torch.linspace(-30, 30, n)).float().to(device)
    pil_maps = torch.tensor([rotate_matrix(a, w, h) for a in torch.linspace(-30, 30, n).tolist()],
                            dtype=torch.float64).to(device)
    factors = torch.linspace(0.1, 1.9, n, dtype=torch.float64).to(device)
    tables = torch.randint(0, 256, (n, 1, 256), dtype=torch.uint8, generator=g).to(device)
    steps = torch.stack([torch.tensor([1, 3, 4])[torch.randperm(3, generator=g)] for _ in range(n)]).to(device)
    jitter = torch.where(steps == 4, 0.05, 1.2).to(torch.float64)
    pillow_color = torch.full((n, 1), prefetch.ops.COLOR_STEPS.index("pillow_color"), device=device)
    both = 2 * nchw.numel()  # uint8 read and written
    ops = prefetch.ops
    return [
        ("affine_warp bilinear", lambda: ops.affine_warp(nchw, maps, interpolation="bilinear", fill=[0, 0, 0]), both),
        ("pil_affine bicubic", lambda: ops.pil_affine(nchw, pil_maps, interpolation="bicubic",
                                                      fill=[124, 116, 104]), both),
        ("sharpness", lambda: ops.sharpness(nchw, factors), both),
        ("sharpness pillow", lambda: ops.sharpness(nchw, factors, pillow=True), both),
        ("lookup", lambda: ops.lookup(nchw, tables), both),
        ("color_jitter b/s/h", lambda: ops.color_jitter(nchw, steps, jitter), both),
        ("color_jitter pillow", lambda: ops.color_jitter(nchw, pillow_color, factors.view(n, 1)), both),
        ("histograms", lambda: ops.histograms(nchw), nchw.numel()),
    ]


def _per_round(a, b):
    """Median, min and max of a[r] / b[r] over the rounds."""
    s = timing.Summary.of([x / y for x, y in zip(a, b)])
    return {"median": s.median, "low": s.low, "high": s.high}


def measure_policy_kernels(images, repeats=5):
    """Each policy kernel's rows: µs an image, GB/s moved and the fraction of a copy of as many
    bytes, medians (ranges) of ``repeats`` rounds, the kernel and the copy interleaved."""
    device, n = images.device, images.shape[0]
    rows = []
    for name, call, moved in policy_kernels(images):
        src = torch.empty(images.numel(), dtype=torch.uint8, device=device)  # a rate to compare with
        dst = torch.empty_like(src)
        got = interleaved_kernels({"copy": lambda: dst.copy_(src), "kernel": call}, repeats, device)
        copies, kernel = got["copy"], got["kernel"]
        copy_s, kernel_s = timing.median(copies), timing.median(kernel)
        row = {"kernel": name, "us_per_image": kernel_s * 1e6 / n,
               "us_per_image_range": [min(kernel) * 1e6 / n, max(kernel) * 1e6 / n],
               "gbps": moved / kernel_s / 1e9, "copy_gbps": 2 * src.numel() / copy_s / 1e9,
               "repeats": repeats}
        # kernel GB/s over copy GB/s, per round
        row["fraction_of_copy_per_round"] = _per_round(
            [moved / k for k in kernel], [2 * src.numel() / c for c in copies])
        row["fraction_of_copy"] = row["gbps"] / row["copy_gbps"]
        rows.append(row)
    return rows


def policy_table(rows, n, size):
    lines = ["", "policy kernels (%d uint8 3x%dx%d NCHW images, each its own parameters; medians of %d "
             "rounds, kernel and copy interleaved; GB/s moved: uint8 read + written, histograms read only)" % (n, size, size, rows[0]["repeats"])]
    lines += text.columns(
        ["kernel", "us an image", "GB/s", "copy of as many bytes", "kernel / copy"],
        [[r["kernel"], text.spread(r["us_per_image"], *r["us_per_image_range"], fmt="%.2f"),
          "%.1f" % r["gbps"], "%.1f" % r["copy_gbps"], "%.3f" % r["fraction_of_copy"]] for r in rows])
    return "\n".join(lines)


# Every output the op makes: dtype x layout (channels_last or not).
FORMS = [(dtype, channels_last) for dtype in (torch.float32, torch.float16, torch.bfloat16)
         for channels_last in (False, True)]
# --quick: the headline form and the other extreme (the torch chain takes ~1 s a call for 64
# images of 224x224 on the 2-core VM: all six forms of it were most of a quick run).
QUICK_FORMS = [(torch.float32, False), (torch.bfloat16, True)]


def measure(device, n=256, size=224, crop=224, padding=4, repeats=5, forms=FORMS):
    """Rows of the fused op against the torch chain and a copy, one per (dtype, channels_last)
    of ``forms``: ``repeats`` interleaved rounds each."""
    device = torch.device(device)
    images, draws = workload(device, n, size, crop, padding)

    rows = []
    for dtype, channels_last in forms:
        def fused():
            return prefetch.ops.normalize_flip(
                images, MEAN, STD, hflip=draws.hflip, crop=draws.crop,
                offsets=draws.offsets, dtype=dtype, channels_last=channels_last)

        out_bytes = n * 3 * crop * crop * torch.empty((), dtype=dtype).element_size()
        moved = images.numel() + out_bytes
        src = torch.empty(out_bytes, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        got = interleaved_kernels({
            "copy": lambda: dst.copy_(src),
            "fused op": fused,
            "torch op chain": lambda: torch_chain(images, draws, padding, dtype, channels_last),
        }, repeats, device)
        copies, fuseds, chains = got["copy"], got["fused op"], got["torch op chain"]
        copy_s, fused_s, chain_s = (timing.median(v) for v in (copies, fuseds, chains))
        row = {
            "dtype": str(dtype).replace("torch.", ""),
            "channels_last": channels_last,
            "ops_gbps": moved / fused_s / 1e9,
            # a copy moves 2 bytes (read + write) per byte copied
            "copy_gbps": 2 * out_bytes / copy_s / 1e9,
            "repeats": repeats,
            "ops_gbps_range": [moved / max(fuseds) / 1e9, moved / min(fuseds) / 1e9],
            "copy_gbps_range": [2 * out_bytes / max(copies) / 1e9, 2 * out_bytes / min(copies) / 1e9],
            "chain_gbps": moved / chain_s / 1e9,
            "chain_repeats": len(chains),
            "chain_gbps_range": [moved / max(chains) / 1e9, moved / min(chains) / 1e9],
            "threads": torch.get_num_threads(),
        }
        # Ratios: per round (the same round's calls, back to back), median and range.
        vs_chain = _per_round(chains, fuseds)
        fraction = _per_round([moved / f for f in fuseds], [2 * out_bytes / c for c in copies])
        row["ops_vs_torch_chain"], row["ops_vs_torch_chain_range"] = (
            vs_chain["median"], [vs_chain["low"], vs_chain["high"]])
        row["ops_fraction_of_copy"], row["ops_fraction_of_copy_range"] = (
            fraction["median"], [fraction["low"], fraction["high"]])
        rows.append(row)
    return rows


def table(rows, n, size):
    def cell(r, key, fmt):
        return text.spread(r[key], *r[key + "_range"], fmt=fmt)

    lines = ["", "ops (%d uint8 %dx%dx3 images, crop %d, padding 4, random flips; GB/s moved, median "
             "(range) of %d interleaved rounds; ratios: medians of per-round ratios; %d threads)"
             % (n, size, size, size, rows[0]["repeats"], rows[0]["threads"])]
    lines += text.columns(
        ["dtype", "layout", "fused", "copy of as many bytes", "torch chain", "fused / copy",
         "fused / torch chain"],
        [[r["dtype"], "channels_last" if r["channels_last"] else "contiguous",
          cell(r, "ops_gbps", "%.2f"), cell(r, "copy_gbps", "%.2f"), cell(r, "chain_gbps", "%.3f"),
          "%.3f" % r["ops_fraction_of_copy"],
          text.spread(r["ops_vs_torch_chain"], *r["ops_vs_torch_chain_range"], fmt="%.1f")]
         for r in rows])
    return "\n".join(lines)


def run(config):
    n = 8 if config.quick else max(config.batch_sizes)
    config.progress("ops: %d images on %s" % (n, config.device))
    repeats = 5 if config.quick else 7  # interleaved rounds after a warm-up round
    rows = measure(config.device, n=n, size=config.image_size, crop=config.image_size, repeats=repeats,
                   forms=QUICK_FORMS if config.quick else FORMS)
    main_row = next(r for r in rows if r["dtype"] == "float32" and not r["channels_last"])
    metrics = {k: main_row[k] for k in ("ops_gbps", "ops_fraction_of_copy", "ops_vs_torch_chain")}
    images, _ = workload(config.device, n, config.image_size, config.image_size)
    policy = measure_policy_kernels(images, repeats)
    threads = torch.get_num_threads()  # N: set by python -m prefetch.bench for the run
    return SectionResult(rows, metrics, table(rows, n, config.image_size) + "\n" +
                         policy_table(policy, n, config.image_size),
                         details={"ops_config": {"images": n, "dtype": "float32", "layout": "contiguous",
                                                 "threads": threads},
                                  "policy_kernels": policy},
                         resources={name: resources(threads=threads) for name in PIPELINES})


SECTION = Section("ops", "fused normalize/flip/crop vs the torch op chain and a copy of the same bytes; "
                  "the policies' kernels vs a copy", run)
