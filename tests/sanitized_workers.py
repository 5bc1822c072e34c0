"""How DataLoader workers start when the extension runs under ASan (scripts/sanitize.sh python).

fork() of a threaded process can deadlock the child inside ASan's allocator: GCC 12's runtime
takes no lock around fork, so a lock that another thread (a pool thread freeing a batch, a
queue's feeder) holds at that moment stays held in the child, whose first allocation then waits
forever — a DataLoader worker that never answers, and an epoch that never ends (seen once in CI:
a test child of test_failed_epoch_release hung 360 s). Under the sanitizers, workers therefore
start by forkserver, both in the pytest processes (conftest.py) and in the fresh interpreters of
helpers.run_child. The forkserver stays single-threaded, as fork() under ASan needs: with
OPENBLAS_NUM_THREADS=1 (set in conftest.py, inherited by every child and the forkserver) the
numpy that torch imports starts no BLAS thread server, and neither import starts another thread.
torch and prefetch are preloaded there, sparing every worker their import (seconds each under
the sanitizers). What a forkserver worker unpickles must be importable: a child's datasets live
in a test module, not in its ``-c`` code. The regular run covers fork itself.
"""
import multiprocessing


def start_workers_by_forkserver():
    """multiprocessing's default start method forkserver, with torch and prefetch preloaded in
    the forkserver (see the module docstring)."""
    multiprocessing.set_start_method("forkserver", force=True)
    multiprocessing.set_forkserver_preload(["torch", "prefetch"])
