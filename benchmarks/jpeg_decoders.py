"""JPEG decoder candidates on the bench's photo-like files (issue 16 part 4: "compare the
candidates"): CPU microseconds per image on one thread, interleaved rounds, median and spread.

  pil           Pillow's Image.open + convert("RGB") (its bundled libjpeg-turbo)
  simplejpeg    simplejpeg.decode_jpeg (pip wheel, its bundled libjpeg-turbo)
  opencv        cv2.imdecode + cvtColor to RGB (pip wheel, its bundled libjpeg(-turbo))
  ours_full     prefetch.ops.decode_jpeg (the system's libjpeg-turbo, whole image)
  ours_window   prefetch.ops.decode_jpeg with RandomResizedCrop windows (only the window)
  ours_fused    prefetch.ops.decode_resized_crop: the window decoded, resized to 224, flipped,
                normalized (what FusedAugment(decode=True) runs per image)
  dali_window   DALI's CPU decoders.image_random_crop alone (ROI decode, libjpeg-turbo), when
                nvidia-dali-cuda130 is installed

Not part of CI (simplejpeg, OpenCV and DALI are optional). Usage:
  python benchmarks/jpeg_decoders.py [files=128] [rounds=7]
"""
import io
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import torch

import prefetch
from prefetch.bench.workers import write_jpegs
from prefetch.transforms.crop_boxes import random_resized_boxes


def candidates(files, boxes):
    from PIL import Image

    encoded = prefetch.ops.decode.encoded_batch(files)
    out = {}

    def pil():
        for f in files:
            with Image.open(io.BytesIO(f)) as im:
                im.convert("RGB")
    out["pil"] = pil
    try:
        import simplejpeg
        out["simplejpeg"] = lambda: [simplejpeg.decode_jpeg(f, colorspace="RGB") for f in files]
    except ImportError:
        pass
    try:
        import cv2
        cv2.setNumThreads(1)
        arrays = [np.frombuffer(f, np.uint8) for f in files]
        out["opencv"] = lambda: [cv2.cvtColor(cv2.imdecode(a, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
                                 for a in arrays]
    except ImportError:
        pass
    out["ours_full"] = lambda: prefetch.ops.decode_jpeg(encoded)
    out["ours_window"] = lambda: prefetch.ops.decode_jpeg(encoded, boxes)
    out["ours_fused"] = lambda: prefetch.ops.decode_resized_crop(
        encoded, boxes, 224, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225], antialias=True)
    dali = dali_window(files)
    if dali is not None:
        out["dali_window"] = dali
    return out


def dali_window(files):
    try:
        from nvidia.dali import fn, pipeline_def, types
    except ImportError:
        return None
    n = len(files)

    @pipeline_def(batch_size=n, num_threads=1, device_id=None, seed=0, prefetch_queue_depth=1)
    def pipe():
        jpegs = fn.external_source(name="jpegs", dtype=types.UINT8)
        return fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                             random_area=(0.08, 1.0), random_aspect_ratio=(3 / 4, 4 / 3))
    p = pipe()
    p.build()
    arrays = [np.frombuffer(f, np.uint8) for f in files]

    def run():
        p.feed_input("jpegs", arrays)
        p.run()
    return run


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 128
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    torch.set_num_threads(1)
    directory = tempfile.mkdtemp(prefix="prefetch-jpeg-decoders-")
    try:
        paths = write_jpegs(directory, n)
        files = [open(p, "rb").read() for p in paths]
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    sizes = prefetch.ops.jpeg_sizes(files)
    boxes = random_resized_boxes(sizes[:, 0].tolist(), sizes[:, 1].tolist(), (0.08, 1.0), (3 / 4, 4 / 3),
                                 generator=torch.Generator().manual_seed(0))
    area = (boxes[:, 2] * boxes[:, 3]).sum().item() / (sizes[:, 0] * sizes[:, 1]).sum().item()
    fns = candidates(files, boxes)
    us = {k: [] for k in fns}
    for f in fns.values():  # warm-up
        f()
    for _ in range(rounds):
        for k, f in fns.items():
            t = time.process_time()
            f()
            us[k].append((time.process_time() - t) / n * 1e6)
    print("%d files of %.0f kB on average, windows %.0f%% of the pixels, %d rounds, one thread, "
          "load %.1f" % (n, sum(map(len, files)) / n / 1e3, 100 * area, rounds, os.getloadavg()[0]))
    pil = np.median(us["pil"])
    for k, v in us.items():
        print("  %-12s %6.0f us/img (%.0f-%.0f)  %.2fx Pillow's time" % (
            k, np.median(v), min(v), max(v), np.median(v) / pil))


if __name__ == "__main__":
    main()
