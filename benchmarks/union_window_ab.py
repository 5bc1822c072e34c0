"""MultiView's shared decode over the union of the views' windows against the same decode over
each whole image (issue 47 item 2): what decoding only the windows' bounding box buys, measured.

Both sides are the same pipeline as ``ssl_views_bench.py``'s prefetch row (a DataLoader of N
workers reading the files' bytes, a Prefetcher of N threads whose transform is
``ssl.simclr_views`` or ``ssl.dino_views`` with ``decode=True``), built twice in one process:

- union: MultiView as it is (each image's decoded box the union of its views' windows);
- whole: the same, with the box widened to the whole image (``union_boxes`` answered with each
  image's header size for this pipeline's views only; the views then resample their windows
  from the whole image, as before the union was built).

Same files, same draws, same threads; interleaved rounds in the counterbalanced order (union,
whole, whole, union, ...), images/s per round, the ratio the median of per-round ratios. Writes a
JSON result with ``--out``. Run: ``python benchmarks/union_window_ab.py [--recipe simclr|dino]
[--files 256] [--rounds 15]``.
"""
import argparse
import os
import statistics
import sys
import tempfile
import threading

import torch

import prefetch
from prefetch.bench.datasets import write_jpegs
from prefetch.bench.provenance import script_record, write_record
from prefetch.bench.timing import interleaved, spread
from prefetch.ops import decode as decode_module
from prefetch.transforms import multi_view
from ssl_views_bench import prefetch_views, with_prefetch


def widen_to_whole(whole_views):
    """Makes MultiView decode each whole image for the MultiView whose ``views`` list is
    ``whole_views`` (the others keep the union): the headers' sizes are kept per thread as
    ``_decode_union`` reads them, and ``union_boxes`` answers (0, 0, height, width) there."""
    state = threading.local()
    decode_union, jpeg_sizes, union_boxes = (multi_view._decode_union, decode_module.jpeg_sizes,
                                             multi_view.union_boxes)

    def decode_union_marked(views_, encoded, position, device):
        state.whole = views_ is whole_views
        try:
            return decode_union(views_, encoded, position, device)
        finally:
            state.whole = False

    def jpeg_sizes_kept(data):
        state.sizes = jpeg_sizes(data)
        return state.sizes

    def union_or_whole(boxes):
        if not getattr(state, "whole", False):
            return union_boxes(boxes)
        hw = state.sizes[:, :2]
        return torch.cat([torch.zeros_like(hw), hw], 1)

    multi_view._decode_union = decode_union_marked
    decode_module.jpeg_sizes = jpeg_sizes_kept
    multi_view.union_boxes = union_or_whole


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", choices=["dino", "simclr"], default="simclr")
    ap.add_argument("--files", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--local", type=int, default=96)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    if not prefetch.built_with_jpeg():
        print("union_window_ab: prefetch is built without libjpeg-turbo; skipped")
        return 0
    paths = write_jpegs(tempfile.mkdtemp(prefix="prefetch-union-"), args.files)
    common = (paths, args.batch, args.workers, args.recipe, args.size, args.local)
    union_mv, whole_mv = (prefetch_views(args.recipe, args.size, args.local) for _ in range(2))
    widen_to_whole(whole_mv.views)
    pipelines = {"union": with_prefetch(*common, mv=union_mv),
                 "whole": with_prefetch(*common, mv=whole_mv)}
    seconds = interleaved({k: epoch for k, (epoch, _) in pipelines.items()}, args.rounds,
                          alternate=True)
    for _, close in pipelines.values():
        close()
    rates = {k: [args.files / t for t in v] for k, v in seconds.items()}
    ratios = [u / w for u, w in zip(rates["union"], rates["whole"])]
    for k, v in rates.items():
        print("%-6s images/s median %.1f (%.1f-%.1f)" % (k, statistics.median(v), min(v), max(v)))
    print("union / whole: %.3fx (%.3f-%.3f), %s, %d rounds, %d files, batch %d, %d workers = "
          "threads" % (statistics.median(ratios), min(ratios), max(ratios), args.recipe,
                       args.rounds, args.files, args.batch, args.workers))
    if args.out:
        record = script_record("benchmarks/union_window_ab.py")
        record.update(recipe=args.recipe, files=args.files, batch=args.batch, rounds=args.rounds,
                      resources="%d DataLoader workers reading bytes + %d prefetch threads, each "
                                "side" % (args.workers, args.workers),
                      order="counterbalanced (ABBA...)",
                      images_per_s={k: dict(spread(v), rounds=v) for k, v in rates.items()},
                      ratio=spread(ratios))
        write_record(args.out, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
