"""The store's command line, ``python -m prefetch.store SRC DEST`` (``python -m prefetch.pack``
is its alias): packs a folder of JPEGs (ImageFolder layout: one subfolder per class) into a store
— or, with ``--encoding raw``, the decoded pixels of any image Pillow opens — and prints what it
wrote and how fast; a refused source or destination exits with status 1 and the reason, without
a traceback."""
import argparse
import os
import sys
import time
from typing import Optional, Sequence

from .format import HEADER
from .writer import extensions, pack

__all__ = ["main", "PROG"]

PROG = "python -m prefetch.store"


def _parser(prog):
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Pack a folder of JPEGs (one subfolder per class, as torchvision's "
                    "ImageFolder; or JPEGs directly, without labels) into a prefetch store, "
                    "which prefetch.open_store maps. Only *.jpg/*.jpeg/*.jpe/*.jfif files are "
                    "taken; with --encoding raw, every image Pillow opens (*.png, *.bmp, *.webp, "
                    "*.tif... too), decoded once and stored as pixels.")
    parser.add_argument("src", help="the folder of JPEGs")
    parser.add_argument("dest", help="the store to write (a directory; must not exist unless "
                                     "--overwrite)")
    parser.add_argument("--workers", type=int, default=None,
                        help="threads reading files (default: the number of cores)")
    parser.add_argument("--skip-bad", action="store_true",
                        help="leave out unreadable or non-JPEG files (with --encoding raw: files "
                             "Pillow cannot decode) (listed) instead of stopping")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing store at DEST")
    parser.add_argument("--encoding", choices=("jpeg", "raw"), default="jpeg",
                        help="jpeg (default): store the files' bytes as they are; raw: decode "
                             "each image once (Pillow, RGB) and store its pixels, HWC uint8: no "
                             "decode per epoch, ~5-10x the disk space")
    parser.add_argument("--quiet", action="store_true", help="no progress line and no summary")
    return parser


def main(argv: Optional[Sequence[str]] = None, prog: str = PROG) -> int:
    """Runs the command line.

    Args:
        argv: the arguments after the program's name (None: ``sys.argv[1:]``); ``--help`` says
            which.
        prog: the program's name, in the usage line and the messages.

    Returns:
        The exit status: 0 once packed; 1 for a refused source, destination or argument value
        (the reason on stderr, no traceback); 130 when interrupted (``dest`` left as it was).

    Raises:
        SystemExit: from argparse, for ``--help`` (status 0) or arguments it cannot parse (2).
    """
    args = _parser(prog).parse_args(argv)
    started = time.perf_counter()
    try:
        store = pack(args.src, args.dest, workers=args.workers, overwrite=args.overwrite,
                     on_error="skip" if args.skip_bad else "raise",
                     progress=False if args.quiet else None, encoding=args.encoding)
    except (ValueError, TypeError, OSError, ImportError) as exc:  # FileExistsError, StoreError too
        print("%s: error: %s" % (prog, exc), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("%s: interrupted; %s was left as it was" % (prog, args.dest), file=sys.stderr)
        return 130
    seconds = time.perf_counter() - started
    if args.quiet:
        return 0
    data = int(store.values.numel())
    on_disk = sum(e["bytes"] for e in store.header["files"].values()) + os.path.getsize(
        os.path.join(store.path, HEADER))
    what = "JPEGs" if args.encoding == "jpeg" else "images as raw pixels"
    print("packed %d %s (%.1f MB) from %s into %s in %.2f s: %.0f files/s, %.0f MB/s"
          % (store.count, what, data / 1e6, args.src, store.path, seconds, store.count / seconds,
             data / 1e6 / seconds))
    print("  %s; store %.1f MB on disk (%+.2f%% over the images' bytes)" % (
        "%d classes" % len(store.classes) if store.classes is not None else "no labels",
        on_disk / 1e6, 100.0 * (on_disk - data) / max(data, 1)))
    if store.skipped:
        print("  skipped %d:" % len(store.skipped))
        for name, reason in store.skipped:
            print("    %s: %s" % (name, reason))
    if store.ignored:
        print("  ignored %d files not named %s (e.g. %s)"
              % (len(store.ignored), "/".join("*" + e for e in extensions(args.encoding)),
                 store.ignored[0]))
    return 0
