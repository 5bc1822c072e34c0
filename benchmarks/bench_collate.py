"""Collation benchmark (issue: the engine). A thin script over prefetch.bench.collate:

    python benchmarks/bench_collate.py [--batches N]

Batches of 224x224x3 uint8 samples (64 and 256 per batch) collated by the engine, against
torch.utils.data.default_collate and a single memcpy of the same bytes into a preallocated
buffer, all in the same run. Prints GB/s and ratios as JSON lines.
"""
import argparse
import json

from prefetch.bench import collate

if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--batches", type=int, default=16)
    p.add_argument("--threads", type=int, default=None)
    a = p.parse_args()
    for row in collate.run((64, 256), 224, a.batches, a.threads):
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}))
