"""``python -m prefetch.store SRC DEST``: the store's command line (:mod:`prefetch.store.cli`)."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
