"""Fused-op benchmark (issue: fused augment ops). A thin script over prefetch.bench.ops:

    python benchmarks/bench_ops.py [--device cpu|cuda] [--n 256]

256 images 224x224x3 uint8, crop 224 with padding 4, random flips, to float32/float16/bfloat16,
NCHW and channels_last: the fused op against the plain torch chain and against a copy of the
same bytes (memcpy on CPU, device-to-device on GPU), in the same run. GB/s = bytes read + written.
"""
import argparse
import json

from prefetch.bench import ops

if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu")
    p.add_argument("--n", type=int, default=256)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    for row in ops.measure(a.device, n=a.n, repeats=a.repeats):
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}))
