"""Per-op cost of prefetch.transforms.policy_ops on the CPU, one sample of 3x176x176 uint8, one
thread: what each of TrivialAugmentWide's 14 ops costs today (torch ops), so the fused kernel of
issue 27 knows which ops to take first. Median (min-max) of 7 timings of 20 calls each.

    python benchmarks/policy_op_costs.py [--size 176] [--threads 1]
"""
import argparse
import statistics
import time

import torch

from prefetch.transforms import policies, policy_ops

# One magnitude per op, inside its TrivialAugmentWide range (Solarize's is a fraction of 255).
MAGNITUDES = {"Identity": 0.0, "ShearX": 0.3, "ShearY": 0.3, "TranslateX": 20.0,
              "TranslateY": 20.0, "Rotate": 20.0, "Brightness": 0.3, "Color": 0.3,
              "Contrast": 0.3, "Sharpness": 0.3, "Posterize": 4.0, "Solarize": 0.5,
              "AutoContrast": 0.0, "Equalize": 0.0}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=176)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (1, 3, args.size, args.size), dtype=torch.uint8, generator=g)
    medians = []
    for name, magnitude in MAGNITUDES.items():
        table = policies.OpTable(torch.tensor([[policies.OP_CODES[name]]]), torch.tensor([[magnitude]]))

        def call():
            return policy_ops.apply_table(x, table, interpolation="bilinear", batched=False)

        for _ in range(5):
            call()
        times = []
        for _ in range(7):
            t0 = time.perf_counter()
            for _ in range(20):
                call()
            times.append((time.perf_counter() - t0) / 20 * 1e6)
        medians.append(statistics.median(times))
        print("%-13s %7.0f us (%.0f-%.0f)" % (name, medians[-1], min(times), max(times)))
    print("TrivialAugmentWide's mean over its 14 ops: %.0f us per image" % statistics.mean(medians))


if __name__ == "__main__":
    main()
