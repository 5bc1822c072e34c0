"""One launch of each fused op on the bench's workload, for Nsight Compute (gpu_check's `profile`
stage runs this under ``ncu``): the first GPU run measured normalize_flip at 0.31-0.47 of a device
copy where 0.85 was predicted, and NOTES.md names the suspects (single-byte loads, occupancy);
ncu's memory throughput, occupancy and warp stall reasons per launch say which.

    ncu --kernel-name-base demangled -k regex:"normalize_flip|flip_crop|resized_crop|AffineWarpThread|PilAffineThread|SharpnessThread|GaussianBlur|LookupThread|ColorJitterThread|histogram_kernel" ... python benchmarks/gpu/profile_ops.py

(the ops whose threads are common/launch_plane_rows.cuh's all run `plane_rows_kernel<Thread>`: their
demangled names tell them apart; color_jitter's grey-sum launches, `grey_sums_kernel`, are left
out, so that every variant is one profiled launch)

Each op runs once untimed (a warm-up, so ncu sees no first-call effects), then once per variant,
in the order the ``--launches`` list prints. ``--device cpu`` runs the same calls on the CPU (CI).
"""
import argparse
import json
import sys

import _common  # noqa: F401  (puts the checkout's prefetch first on sys.path)
from _common import MEAN, STD, device_argument, resolve_device


def variants(device, n=256, size=224, crop=224, padding=4):
    """[(name, call)]: normalize_flip for every output dtype and layout (the `ops` bench section's
    workload), flip_crop on masks of the same windows, resized_crop on a ragged batch, affine_warp (a
    rotation per image), pil_affine (timm's rotation, Pillow's bicubic), sharpness (a factor per image), lookup (a table per image), color_jitter
    (each image its order of brightness, saturation and hue), histograms and gaussian_blur (23
    taps, a sigma per image) on the images as NCHW."""
    import torch

    import prefetch
    from prefetch.bench.ops import policy_kernels, workload

    images, draws = workload(device, n, size, crop, padding)
    out = []
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for channels_last in (False, True):
            name = "normalize_flip %s%s" % (str(dtype).split(".")[1],
                                            " channels_last" if channels_last else "")
            out.append((name, lambda dtype=dtype, cl=channels_last: prefetch.ops.normalize_flip(
                images, MEAN, STD, hflip=draws.hflip, crop=draws.crop, offsets=draws.offsets,
                dtype=dtype, channels_last=cl)))
    masks = images[..., 0].contiguous()
    out.append(("flip_crop uint8", lambda: prefetch.ops.flip_crop(
        masks, hflip=draws.hflip, crop=draws.crop, offsets=draws.offsets)))
    ragged = prefetch.Ragged.from_tensors([images[k] for k in range(64)])
    boxes = torch.tensor([[0, 0, size, size]] * 64, dtype=torch.int64, device=device)
    out.append(("resized_crop 224 -> 176 float32", lambda: prefetch.ops.resized_crop(
        ragged, boxes, (176, 176), MEAN, STD)))
    out.append(("resized_crop 224 -> 176 float32 bicubic", lambda: prefetch.ops.resized_crop(
        ragged, boxes, (176, 176), MEAN, STD, interpolation="bicubic")))
    # The policies' kernels, each image its own parameters (the ops bench section times the same).
    out += [(name, call) for name, call, _ in policy_kernels(images)]
    # The self-supervised recipes' blur: 23 taps, each image its own sigma (two launches).
    nchw = images.permute(0, 3, 1, 2).contiguous()  # workload() makes HWC images
    sigmas = torch.linspace(0.1, 2.0, nchw.shape[0], dtype=torch.float64)  # CPU: no sync a call
    out.append((BLUR, lambda: prefetch.ops.gaussian_blur(nchw, 23, sigmas)))
    return out


BLUR = "gaussian_blur 23 taps"
# The variants that launch more than one kernel, their launches' names in order: ncu counts
# launches, so the stage's --launch-skip and --launch-count take every one (launch_names).
LAUNCHES = {BLUR: (BLUR + " row pass", BLUR + " column pass")}


def launch_names(calls):
    """Every launch the variants make, in order (a variant of one launch: its own name)."""
    return [launch for name, _ in calls for launch in LAUNCHES.get(name, (name,))]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    device_argument(p)
    p.add_argument("--launches", action="store_true", help="print the variants' order and exit")
    args = p.parse_args(argv)
    import torch

    device = resolve_device(args.device)
    calls = variants(device)
    if args.launches:
        print(json.dumps(launch_names(calls)))
        return 0
    for _, call in calls:  # warm-up, not profiled by the stage (ncu --launch-skip)
        call()
    for name, call in calls:
        torch.cuda.nvtx.range_push(name) if device.type == "cuda" else None
        call()
        torch.cuda.nvtx.range_pop() if device.type == "cuda" else None
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    print("profile_ops: %d variants on %s: %s" % (len(calls), device,
                                                  ", ".join(name for name, _ in calls)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
