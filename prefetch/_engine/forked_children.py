"""A forked child of a process that has used CUDA never collects the objects it inherited.

Such a child cannot use CUDA (torch refuses it there), yet it holds copies of the parent's objects.
When its garbage collector frees one that owns CUDA memory (a tensor in a reference cycle that was
already garbage at the fork), torch's caching allocator calls the CUDA runtime, which fails in the
child, and the error thrown from a destructor aborts the process. The second H200 run lost a
DataLoader worker that way (2026-11-27: "CUDA error: initialization error", then "Fatal Python
error: Aborted" while garbage-collecting inside ``collate.samples``' pickling), after earlier tests
had left such cycles in the parent. ``gc.freeze()`` at the fork moves every inherited object to
the permanent generation: the child still collects what it makes itself; what it inherited stays
the parent's to free (its pages stay shared, too).

Registered once, when prefetch is imported (os.register_at_fork); a parent that never initialised
CUDA is left alone.
"""
import gc
import os
import sys

_cuda_at_fork = False
_registered = False


def _before_fork():
    global _cuda_at_fork
    torch = sys.modules.get("torch")
    _cuda_at_fork = bool(torch is not None and torch.cuda.is_initialized())


def _after_fork_in_child():
    if _cuda_at_fork:
        gc.freeze()


def register():
    """Installs the fork hooks (once per process; a no-op where os has no register_at_fork)."""
    global _registered
    if not _registered and hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
        _registered = True
