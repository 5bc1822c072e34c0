"""``python -m prefetch.pack SRC DEST``: an alias of ``python -m prefetch.store SRC DEST``
(:mod:`prefetch.store.cli`), under its old name in the usage line and the messages."""
import sys

from ..store.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m prefetch.pack"))
