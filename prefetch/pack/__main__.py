"""``python -m prefetch.pack SRC DEST``: packs a folder of JPEGs (ImageFolder layout: one
subfolder per class) into a store — or, with ``--encoding raw``, the decoded pixels of any image
Pillow opens — prints what it wrote and how fast; a refused source or destination exits with
status 1 and the reason, without a traceback."""
import argparse
import os
import sys
import time

from . import extensions, pack


def _parser():
    parser = argparse.ArgumentParser(
        prog="python -m prefetch.pack",
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


def main(argv=None):
    args = _parser().parse_args(argv)
    started = time.perf_counter()
    try:
        store = pack(args.src, args.dest, workers=args.workers, overwrite=args.overwrite,
                     on_error="skip" if args.skip_bad else "raise",
                     progress=False if args.quiet else None, encoding=args.encoding)
    except (ValueError, TypeError, OSError, ImportError) as exc:  # FileExistsError, StoreError too
        print("python -m prefetch.pack: error: %s" % exc, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("python -m prefetch.pack: interrupted; %s was left as it was" % args.dest, file=sys.stderr)
        return 130
    seconds = time.perf_counter() - started
    if args.quiet:
        return 0
    data = int(store.values.numel())
    on_disk = sum(e["bytes"] for e in store.header["files"].values()) + os.path.getsize(
        os.path.join(store.path, "header.json"))
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


if __name__ == "__main__":
    sys.exit(main())
