"""Issue 47: the host stage of the self-supervised views before a copy to a GPU, measured on the
CPU (no GPU needed: the host stage is host work). A GPU loader of ``ssl.dino_views`` /
``ssl.simclr_views`` with ``decode=True`` runs ``MultiView.host_apply`` on every batch before the
copy; it decodes each image once, over the union of its views' windows, for all the views (the
shared decode; whole before 2026-12-01), or each view its
own windows (``shared_decode=False``, what every GPU loader did before). This times both, with the
host's JPEG decoder (``PREFETCH_GPU_JPEG_DECODER=cpu``: what a GPU without torchvision's or
torchcodec's decoder uses), interleaved, N threads, on the bench's photo-like JPEGs; the figure is
host milliseconds an image, and the bytes each copies to the device an image.

Run: ``python benchmarks/ssl_host_stage.py [--rounds 9] [--out results/....json]``.
"""
import argparse
import os
import statistics
import sys
import tempfile

os.environ["PREFETCH_GPU_JPEG_DECODER"] = "cpu"  # before prefetch reads it

import torch  # noqa: E402

import prefetch  # noqa: E402
from prefetch.bench.datasets import write_jpegs  # noqa: E402
from prefetch.bench.provenance import script_record, write_record  # noqa: E402
from prefetch.bench.timing import interleaved, spread  # noqa: E402
from prefetch.transforms import BatchPosition, ssl  # noqa: E402


def copied_bytes(out):
    """The bytes of every tensor the host stage returns (what the loader copies)."""
    if isinstance(out, torch.Tensor):
        return out.numel() * out.element_size()
    if isinstance(out, prefetch.Ragged):
        return copied_bytes(out.values)
    if isinstance(out, dict):
        return sum(copied_bytes(v) for v in out.values())
    if isinstance(out, (list, tuple)):
        return sum(copied_bytes(v) for v in out)
    if hasattr(out, "__dataclass_fields__"):
        return sum(copied_bytes(getattr(out, f)) for f in out.__dataclass_fields__)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if not prefetch.built_with_jpeg():
        print("ssl_host_stage: prefetch was built without its JPEG decoder; skipped")
        return 0
    torch.set_num_threads(args.threads)
    paths = write_jpegs(tempfile.mkdtemp(prefix="prefetch-ssl-host-"), args.batch)
    data = prefetch.Ragged.from_tensors(
        [torch.frombuffer(bytearray(open(p, "rb").read()), dtype=torch.uint8) for p in paths])
    batch = (data, torch.arange(args.batch))
    recipes = {"dino": lambda shared: ssl.dino_views(224, 96, decode=True, seed=0,
                                                     shared_decode=shared),
               "simclr": lambda shared: ssl.simclr_views(224, decode=True, seed=0,
                                                         shared_decode=shared)}
    calls, sizes = {}, {}
    for name, make in recipes.items():
        for shared in (True, False):
            mv, key = make(shared), "%s_%s" % (name, "shared" if shared else "per_view")
            rounds = iter(range(10 ** 9))

            def call(mv=mv, rounds=rounds):
                return mv.host_apply(batch, BatchPosition(0, next(rounds), 0), "cuda")
            calls[key] = call
            sizes[key] = copied_bytes(call()) / args.batch
    seconds = interleaved(calls, args.rounds, alternate=True)
    ms = {k: [1000 * s / args.batch for s in v] for k, v in seconds.items()}
    ratios = {}
    for name in recipes:
        per_view, shared = ms[name + "_per_view"], ms[name + "_shared"]
        ratios[name] = [p / s for p, s in zip(per_view, shared)]
        print("%-7s host ms an image: shared %.2f (%.2f-%.2f), per view %.2f (%.2f-%.2f): %.1fx; "
              "copied an image: %.0f KB shared, %.0f KB per view" % (
                  name, statistics.median(shared), min(shared), max(shared),
                  statistics.median(per_view), min(per_view), max(per_view),
                  statistics.median(ratios[name]), sizes[name + "_shared"] / 1e3,
                  sizes[name + "_per_view"] / 1e3))
    if args.out:
        record = script_record("benchmarks/ssl_host_stage.py")
        record.update(batch=args.batch, rounds=args.rounds, threads=args.threads,
                      decoder="the host's (PREFETCH_GPU_JPEG_DECODER=cpu)",
                      host_ms_per_image={k: dict(spread(v), rounds=v) for k, v in ms.items()},
                      per_view_over_shared={k: spread(v) for k, v in ratios.items()},
                      copied_bytes_per_image=sizes)
        write_record(args.out, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
