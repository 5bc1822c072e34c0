"""prefetch's CPU ops against NVIDIA DALI's CPU operators on the same data, threads and machine
(issue 16's goals). Not part of CI: DALI is a 200 MB wheel (`pip install nvidia-dali-cuda130`;
CPU pipelines run with device_id=None).

1. resize: 64 uint8 HWC images of ~375x500, one window each (RandomResizedCrop's boxes) ->
   224x224 float32 CHW, random flips, normalized. prefetch: ``ops.resized_crop`` (one op). DALI:
   ``fn.resize`` with a per-sample ROI (float output, so no uint8 rounding between the two steps)
   then ``fn.crop_mirror_normalize``.
2. normalize: 64 uint8 224x224x3 -> float32 CHW, random flips, normalized. prefetch:
   ``ops.normalize_flip``; DALI: ``fn.crop_mirror_normalize``.

Interleaved rounds (A, B, A, B ...) of `ITERS` batches each; medians and ranges of the per-round
ratios. Usage: python benchmarks/dali_cpu_compare.py [threads] [rounds]
"""
import statistics
import sys
import time

import numpy as np
import torch

import prefetch
from prefetch.transforms.crop_boxes import random_resized_boxes

N, SIZE, ITERS = 64, 224, 8
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def dali_pipelines(threads):
    from nvidia.dali import fn, pipeline_def, types

    mean = [m * 255 for m in MEAN]
    std = [s * 255 for s in STD]

    @pipeline_def(batch_size=N, num_threads=threads, device_id=None, prefetch_queue_depth=1)
    def resize(dtype):
        images = fn.external_source(name="images", layout="HWC")
        start = fn.external_source(name="start")
        end = fn.external_source(name="end")
        mirror = fn.external_source(name="mirror")
        x = fn.resize(images, size=[SIZE, SIZE], roi_start=start, roi_end=end, antialias=True,
                      interp_type=types.INTERP_LINEAR, dtype=dtype)
        return fn.crop_mirror_normalize(x, mean=mean, std=std, mirror=mirror, dtype=types.FLOAT,
                                        output_layout="CHW")

    @pipeline_def(batch_size=N, num_threads=threads, device_id=None, prefetch_queue_depth=1)
    def normalize():
        images = fn.external_source(name="images", layout="HWC")
        mirror = fn.external_source(name="mirror")
        return fn.crop_mirror_normalize(images, mean=mean, std=std, mirror=mirror,
                                        dtype=types.FLOAT, output_layout="CHW")

    # Float between the two steps (what one pass computes), and uint8 (DALI's default: faster,
    # but every resized pixel is rounded to an integer before the normalization).
    pipes = resize(types.FLOAT), resize(types.UINT8), normalize()
    for p in pipes:
        p.build()
    return pipes


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (int(rng.integers(330, 421)), int(rng.integers(450, 551)), 3),
                           dtype=np.uint8) for _ in range(N)]
    boxes = random_resized_boxes([i.shape[0] for i in images], [i.shape[1] for i in images],
                                 generator=torch.Generator().manual_seed(0))
    flips = rng.random(N) < 0.5
    ragged = prefetch.Ragged.from_tensors([torch.from_numpy(i) for i in images])
    hflip = torch.from_numpy(flips)
    fixed = rng.integers(0, 256, (N, SIZE, SIZE, 3), dtype=np.uint8)
    fixed_t = torch.from_numpy(fixed)
    start = [np.array([t, l], dtype=np.float32) for t, l, _, _ in boxes.tolist()]
    end = [np.array([t + h, l + w], dtype=np.float32) for t, l, h, w in boxes.tolist()]
    mirror = [np.array(int(f), dtype=np.int32) for f in flips]
    dali_resize, dali_resize_u8, dali_normalize = dali_pipelines(threads)

    def ours_resize():
        prefetch.ops.resized_crop(ragged, boxes, SIZE, MEAN, STD, hflip=hflip, antialias=True)

    def feed_resize(pipe):
        pipe.feed_input("images", images)
        pipe.feed_input("start", start)
        pipe.feed_input("end", end)
        pipe.feed_input("mirror", mirror)
        pipe.run()

    def theirs_resize():
        feed_resize(dali_resize)

    def theirs_resize_u8():
        feed_resize(dali_resize_u8)

    def ours_normalize():
        prefetch.ops.normalize_flip(fixed_t, MEAN, STD, hflip=hflip)

    def theirs_normalize():
        dali_normalize.feed_input("images", list(fixed))
        dali_normalize.feed_input("mirror", mirror)
        dali_normalize.run()

    def timed(fn):
        fn()  # warm
        t0 = time.perf_counter()
        for _ in range(ITERS):
            fn()
        return (time.perf_counter() - t0) / ITERS

    for name, ours, theirs in (("resize (roi) + normalize", ours_resize, theirs_resize),
                               ("  DALI uint8 in between", ours_resize, theirs_resize_u8),
                               ("normalize + flip", ours_normalize, theirs_normalize)):
        a, b = [], []
        for _ in range(rounds):
            a.append(timed(ours))
            b.append(timed(theirs))
        ratios = [y / x for x, y in zip(a, b)]
        print("%-26s prefetch %.2f ms, DALI %.2f ms (medians); DALI time / prefetch time %.2f "
              "(%.2f-%.2f), %d threads" % (name, 1e3 * statistics.median(a), 1e3 * statistics.median(b),
                                           statistics.median(ratios), min(ratios), max(ratios), threads))


if __name__ == "__main__":
    main()
