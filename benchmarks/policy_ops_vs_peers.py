"""The policies' fused ops against their peers on the CPU, same batch, same per-sample parameters,
same output (issue 27's per-op goal: >= 10x torchvision's per-sample loop, >= 3x kornia).

For each op — the geometric ones (Rotate, ShearX, TranslateY, through
``prefetch.transforms.policy_ops.affine`` and its fused ``affine_warp`` kernel), Sharpness
(``policy_ops.adjust_sharpness``, the fused ``sharpness`` kernel), the value-wise ones
(Brightness, Solarize, Equalize, Contrast, AutoContrast: a table per image and the fused
``lookup`` kernel; Posterize, Invert: one torch op), Color and Hue, and ColorJitter(0.4, 0.4, 0.4,
0.1)'s chains in each image's own order (the fused ``color_jitter`` kernel) — a batch
of uint8 ``[N, 3, S, S]`` images and one parameter per sample, timed interleaved (prefetch,
torchvision, kornia, prefetch, ...), median (min-max) of ``--rounds`` rounds:

- torchvision: its ``transforms.v2.functional`` op on each uint8 image in a loop — what a user
  writes to get per-sample parameters (v2 on a batch draws one for all);
- kornia: ``kornia.geometry.transform.warp_affine`` with one matrix per sample,
  ``kornia.enhance.sharpness``, ``solarize``, ``adjust_contrast_with_mean_subtraction``,
  ``adjust_saturation_with_gray_subtraction`` (torchvision's blends), ``adjust_hue`` and
  ``posterize`` with one parameter per sample, ``equalize`` and ``invert``, on the float batch
  (their per-sample paths), back to uint8. kornia's brightness is another operation (it adds)
  and it has no autocontrast of torchvision's rule: left out.

Each peer's output is compared with prefetch's (the fraction of values that differ, and by how
much) so that the ratio is between the same results, and with the time of a copy of the batch
(into a batch allocated once: one read and one write a value, no page faults): an op that writes
a new batch cannot beat it, so "at most Nx" is the ratio a peer's time allows. torchvision and kornia are benchmark peers,
never dependencies: torchvision's pure-Python transforms are imported with
``torch.library.register_fake`` stubbed (its native ops are a CUDA build that does not load next
to a CPU torch). Run: ``python benchmarks/policy_ops_vs_peers.py [--batch 64] [--size 176]
[--threads 1] [--rounds 7]``.
"""
import argparse
import statistics
import time

import torch

from prefetch.ops import color_jitter, cpu_kernel_build
from prefetch.transforms import policy_ops
from torchvision_peer import import_torchvision as import_torchvision_module

FILL = None  # zeros outside: kornia has no torchvision fill blend, so all three pad with zeros


def import_torchvision():
    try:
        modes = import_torchvision_module("torchvision.transforms").InterpolationMode
        return import_torchvision_module("torchvision.transforms.v2.functional"), modes
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return None, None


def import_kornia():
    try:
        import kornia
    except Exception:  # noqa: BLE001
        return None
    return kornia


def cases(x, g, F, I, K):
    """[(op, {contender: call})]: one parameter per sample, in the policies' ranges; each call
    returns the uint8 batch."""
    n, s = x.shape[0], x.shape[-1]
    angles = ((torch.rand(n, generator=g) - 0.5) * 60).double()
    shears = torch.rad2deg(torch.atan((torch.rand(n, generator=g) - 0.5) * 0.6)).double()
    shifts = ((torch.rand(n, generator=g) - 0.5) * 60).round().double()
    factors = (torch.rand(n, generator=g) * 1.8 + 0.1).double()
    geometry = [
        ("Rotate", dict(angle=-angles),  # rotate(angle) is affine(-angle)
         lambda img, i: F.rotate(img, float(angles[i]), interpolation=I.BILINEAR, fill=FILL)),
        ("ShearX", dict(shear=(shears, 0.0), center=(0.0, 0.0)),
         lambda img, i: F.affine(img, angle=0.0, translate=[0, 0], scale=1.0,
                                 shear=[float(shears[i]), 0.0], interpolation=I.BILINEAR,
                                 fill=FILL, center=[0, 0])),
        ("TranslateY", dict(translate=(0.0, shifts)),
         lambda img, i: F.affine(img, angle=0.0, translate=[0, float(shifts[i])], scale=1.0,
                                 shear=[0.0, 0.0], interpolation=I.BILINEAR, fill=FILL)),
    ]
    out = []
    for name, kwargs, tv in geometry:
        calls = {"prefetch": lambda kwargs=kwargs: policy_ops.affine(
            x, interpolation="bilinear", fill=FILL, **kwargs)}
        if F is not None:
            calls["torchvision loop"] = lambda tv=tv: torch.stack([tv(x[i], i) for i in range(n)])
        if K is not None:
            forward = kornia_matrices(policy_ops.pixel_maps(n, s, s, **kwargs))
            calls["kornia"] = lambda forward=forward: K.geometry.transform.warp_affine(
                x.float(), forward, (s, s), mode="bilinear", padding_mode="zeros",
                align_corners=True).round_().clamp_(0, 255).to(torch.uint8)
        out.append((name, calls))
    calls = {"prefetch": lambda: policy_ops.adjust_sharpness(x, factors)}
    if F is not None:
        calls["torchvision loop"] = lambda: torch.stack(
            [F.adjust_sharpness(x[i], float(factors[i])) for i in range(n)])
    if K is not None:  # per-sample factors; float in [0, 1], truncated back as torchvision does
        calls["kornia"] = lambda: K.enhance.sharpness(x.float() / 255, factors.float()).mul_(
            255).add_(1e-3).clamp_(0, 255).to(torch.uint8)
    out.append(("Sharpness", calls))
    thresholds = (torch.rand(n, generator=g) * 255).double()
    value_wise = [  # fused as one table per image (prefetch.ops.lookup)
        ("Brightness", lambda: policy_ops.adjust_brightness(x, factors),
         lambda img, i: F.adjust_brightness(img, float(factors[i])),
         None),  # kornia's adjust_brightness adds, torchvision's multiplies: not the same op
        ("Solarize", lambda: policy_ops.solarize(x, thresholds),
         lambda img, i: F.solarize(img, float(thresholds[i])),
         lambda: K.enhance.solarize(x.float() / 255, (thresholds / 255).float()).mul_(255).round_().to(
             torch.uint8)),
        ("Equalize", lambda: policy_ops.equalize(x), lambda img, i: F.equalize(img),
         lambda: K.enhance.equalize(x.float() / 255).mul_(255).round_().to(torch.uint8)),
    ]
    hues = (torch.rand(n, generator=g) - 0.5).double()  # [-0.5, 0.5)
    bits = torch.randint(1, 9, (n,), generator=g)
    value_wise += [  # the rest of the policies' colour ops (Contrast: a table; Color, Hue: color_jitter)
        ("Contrast", lambda: policy_ops.adjust_contrast(x, factors),
         lambda img, i: F.adjust_contrast(img, float(factors[i])),
         lambda: K.enhance.adjust_contrast_with_mean_subtraction(x.float() / 255, factors.float())
         .mul_(255).to(torch.uint8)),
        ("Color", lambda: policy_ops.adjust_saturation(x, factors),
         lambda img, i: F.adjust_saturation(img, float(factors[i])),
         lambda: K.enhance.adjust_saturation_with_gray_subtraction(x.float() / 255, factors.float())
         .mul_(255).to(torch.uint8)),
        ("Hue", lambda: policy_ops.adjust_hue(x, hues),
         lambda img, i: F.adjust_hue(img, float(hues[i])),
         lambda: K.enhance.adjust_hue(x.float() / 255, (hues * 2 * torch.pi).float()).mul_(
             255.999).to(torch.uint8)),
        ("Posterize", lambda: policy_ops.posterize(x, bits),
         lambda img, i: F.posterize(img, int(bits[i])),
         lambda: K.enhance.posterize(x.float() / 255, bits.float()).mul_(255).round_().to(torch.uint8)),
        ("AutoContrast", lambda: policy_ops.autocontrast(x), lambda img, i: F.autocontrast(img),
         None),  # kornia has no per-channel autocontrast of torchvision's rule
        ("Invert", lambda: policy_ops.invert(x), lambda img, i: F.invert(img),
         lambda: K.enhance.invert(x.float() / 255).mul_(255).round_().to(torch.uint8)),
    ]
    # ColorJitter(0.4, 0.4, 0.4, 0.1) as it draws: each image its four steps in its own order.
    order = torch.stack([torch.randperm(4, generator=g) + 1 for _ in range(n)])  # COLOR_STEPS codes
    jitter = torch.where(order == 4, (torch.rand(n, 4, generator=g) - 0.5) * 0.2,
                         torch.rand(n, 4, generator=g) * 0.8 + 0.6).double()
    adjust = {1: "adjust_brightness", 2: "adjust_contrast", 3: "adjust_saturation", 4: "adjust_hue"}

    def tv_jitter(img, i):
        for code, f in zip(order[i].tolist(), jitter[i].tolist()):
            img = getattr(F, adjust[code])(img, f)
        return img
    value_wise.append(("ColorJitter", lambda: color_jitter(x, order, jitter), tv_jitter, None))
    for name, ours, tv, kornia in value_wise:
        calls = {"prefetch": ours}
        if F is not None:
            calls["torchvision loop"] = lambda tv=tv: torch.stack([tv(x[i], i) for i in range(n)])
        if K is not None and kornia is not None:
            calls["kornia"] = kornia
        out.append((name, calls))
    return out


def kornia_matrices(maps):
    """kornia's warp_affine takes the forward map (source to output pixel): the inverse of each
    of prefetch's maps (output pixel to source)."""
    m = torch.zeros(maps.shape[0], 3, 3, dtype=torch.float64)
    m[:, :2] = maps.view(-1, 2, 3)
    m[:, 2, 2] = 1
    return torch.linalg.inv(m)[:, :2].float()


def compare(got, ref):
    d = (got.int() - ref.int()).abs()
    return "%.2f%% of values differ, max %d" % (100.0 * float((d > 0).double().mean()), int(d.max()))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=176)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    F, I = import_torchvision()
    K = import_kornia()
    g = torch.Generator().manual_seed(0)
    n, s = args.batch, args.size
    x = torch.randint(0, 256, (n, 3, s, s), dtype=torch.uint8, generator=g)
    print("batch %d x 3 x %d x %d uint8, %d thread(s), torch %s, prefetch's CPU kernels: %s build "
          "(PREFETCH_CPU_CAPABILITY); medians (min-max) of %d rounds"
          % (n, s, s, args.threads, torch.__version__, cpu_kernel_build(), args.rounds))
    # The floor of any op that writes a new batch: a copy of it (one read, one write per value),
    # into a batch allocated once (x.clone()'s fresh 6 MB page-faulted differently every call:
    # 13-58 us an image on one run, a "floor" that ops beat).
    copy, into = [], torch.empty_like(x)
    for _ in range(args.rounds + 1):
        t0 = time.perf_counter()
        into.copy_(x)
        copy.append((time.perf_counter() - t0) / n * 1e6)
    copy = copy[1:]  # the first touches the new pages
    copy_us = statistics.median(copy)
    print("copy of the batch (into one allocated once, the floor of an op's pass): %.1f us/img (%.1f-%.1f)"
          % (copy_us, min(copy), max(copy)))
    for name, contenders in cases(x, g, F, I, K):
        outputs = {k: f() for k, f in contenders.items()}  # warm-up, and the outputs compared
        times = {k: [] for k in contenders}
        for _ in range(args.rounds):
            for k, f in contenders.items():
                t0 = time.perf_counter()
                f()
                times[k].append((time.perf_counter() - t0) / n * 1e6)
        ours_median = statistics.median(times["prefetch"])
        for k, ts in times.items():
            med = statistics.median(ts)
            ratios = sorted(t / o for t, o in zip(ts, times["prefetch"]))
            line = "%-11s %-17s %8.1f us/img (%.1f-%.1f)" % (name, k, med, min(ts), max(ts))
            if k == "prefetch":
                line += "  %.1f copies" % (med / copy_us)
            else:
                # (a peer's time over the copy's: the ratio no pass over the pixels can beat)
                line += "  prefetch %.1fx (%.1f-%.1f), at most %.0fx; %s" % (
                    med / ours_median, ratios[0], ratios[-1], med / copy_us,
                    compare(outputs["prefetch"], outputs[k]))
            print(line)


if __name__ == "__main__":
    main()
