"""How often one batch crosses from Python into C++ on the worker-ring path (issue 25): at most 10
times per batch, the worker's calls and the main process's together, on the CPU device's lease
path and on the CUDA device's path run on the host (``LEASE_ON_CPU = False``).

A crossing is a call from Python into ``prefetch._C``: a module function, or a method, property
or operator of one of its classes (the engine, the slot table; ``_C.NextStatus`` is a Python
IntEnum, whose ``==`` stays in Python). The test wraps
every one of them in a counter, in the main process before the Prefetcher starts and in each
DataLoader worker by its ``worker_init_fn`` (a hook the DataLoader honours for any start method),
and divides the calls of one whole epoch — its set-up and end included — by its batches. Calls
into torch's own operators are not counted: they are the user's side of the batch, not the
ring's protocol.
"""
import collections
import functools
import os
import threading

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import prefetch
from prefetch._core.extension import _C
from prefetch.sources import worker_ring as _worker_ring

BATCHES, BATCH = 24, 8
LIMIT = 10


class Images(Dataset):
    """What the bench's workers section reads: a uint8 HWC image and an int label, plus a float
    vector (a second sample leaf, as many datasets have)."""

    def __len__(self):
        return BATCHES * BATCH

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return (torch.randint(0, 256, (16, 16, 3), dtype=torch.uint8, generator=g), i,
                torch.rand(4, generator=g, dtype=torch.float64))


def _entry_points():
    """Sorted names of every callable _C offers to Python ("fn", "Class.method", "Class.prop"),
    the same in every process (the index of a name is its counter)."""
    names = []
    for name in dir(_C):
        obj = getattr(_C, name)
        if isinstance(obj, type) and type(obj).__name__ == "pybind11_type":
            for attr, value in vars(obj).items():
                kind = type(value).__name__
                if kind in ("instancemethod", "property") and attr != "_pybind11_conduit_v1_":
                    names.append("%s.%s" % (name, attr))
        elif type(obj).__name__ == "builtin_function_or_method":
            names.append(name)
    return sorted(names)


NAMES = _entry_points()


def install(counts, main_pid):
    """Wraps every entry point of _C (in this process) so that each call adds one to its counter
    in ``counts`` (a shared int64 tensor [2, len(NAMES)]: row 0 the main process, row 1 the
    workers). Idempotent: a forked worker inherits the parent's wrappers."""
    if getattr(_C, "_counted_by", None) is not None:
        _C._counted_by[0] = counts
        return
    box = [counts, threading.Lock()]
    # A worker forked while another thread of the parent held the lock would inherit it held and
    # wait forever (the CI run of cae5686 hung here): every child starts with a fresh one.
    os.register_at_fork(after_in_child=lambda: box.__setitem__(1, threading.Lock()))

    def bump(k):
        with box[1]:
            box[0][0 if os.getpid() == main_pid else 1, k] += 1

    for k, qualified in enumerate(NAMES):
        owner_name, _, attr = qualified.rpartition(".")
        owner = getattr(_C, owner_name) if owner_name else _C
        original = vars(owner)[attr] if owner_name else getattr(_C, attr)
        if isinstance(original, property):
            getter = original.fget

            def fget(self, getter=getter, k=k):
                bump(k)
                return getter(self)
            setattr(owner, attr, property(fget))
            continue
        function = getattr(owner, attr)  # an instancemethod read on its class: the function

        def counted(*args, function=function, k=k, **kwargs):
            bump(k)
            return function(*args, **kwargs)
        functools.update_wrapper(counted, function)
        setattr(owner, attr, counted)
    _C._counted_by = box


def count_in_worker(counts, main_pid, worker_id):
    """The DataLoader's worker_init_fn: the same counters in the worker."""
    install(counts, main_pid)


def _per_batch(counts, row, batches):
    return {NAMES[k]: int(n) / batches for k, n in enumerate(counts[row].tolist()) if n}


@pytest.mark.parametrize("context", ["fork", "spawn"])
@pytest.mark.parametrize("lease", [True, False], ids=["lease", "copy_from_slot"])
def test_one_batch_crosses_into_cpp_at_most_ten_times(lease, context, monkeypatch):
    from ..conftest import SANITIZED
    if context == "fork" and SANITIZED:
        pytest.skip("fork() under ASan: conftest")
    monkeypatch.setattr(_worker_ring, "LEASE_ON_CPU", lease)
    counts = torch.zeros(2, len(NAMES), dtype=torch.int64).share_memory_()
    main_pid = os.getpid()
    dl = DataLoader(Images(), batch_size=BATCH, num_workers=2, collate_fn=prefetch.collate.samples,
                    persistent_workers=True, multiprocessing_context=context,
                    worker_init_fn=functools.partial(count_in_worker, counts, main_pid))
    saved = {name: vars(getattr(_C, name.rpartition(".")[0]))[name.rpartition(".")[2]]
             if "." in name else getattr(_C, name) for name in NAMES}
    install(counts, main_pid)
    try:
        with prefetch.Prefetcher(dl, device="cpu", depth=2) as pf:
            for _ in range(2):  # makes the block (the first batches take the usual path), and
                for batch in pf:  # every worker has it
                    del batch
            before = pf.stats()
            counts.zero_()
            n = 0
            for batch in pf:
                n += 1
                del batch
            worker, main = counts[1].sum().item() / n, counts[0].sum().item() / n
            after = pf.stats()
            report = {"worker": _per_batch(counts, 1, n), "main": _per_batch(counts, 0, n)}
    finally:
        _C._counted_by = None
        del _C._counted_by
        for name, original in saved.items():
            owner_name, _, attr = name.rpartition(".")
            setattr(getattr(_C, owner_name) if owner_name else _C, attr, original)
    print("crossings per batch (%s, %s): worker %.2f, main %.2f, total %.2f\n%s"
          % ("lease" if lease else "copy from slot", context, worker, main, worker + main, report))
    assert n == BATCHES
    # No batch of the measured epoch fell back. The first tasks of an epoch are dispatched by
    # iter() of the DataLoader, before the ring opens the epoch (it refills only once every task
    # of the earlier epoch is done), so a worker may run up to num_workers * prefetch_factor of
    # them while the ring is still paused: those go the usual way, uncounted.
    ring = after["worker_ring_batches"] - before["worker_ring_batches"]
    paused = BATCHES - ring
    assert after["worker_ring_fallbacks"] == before["worker_ring_fallbacks"], (before, after)
    assert 0 <= paused <= dl.num_workers * dl.prefetch_factor, (before, after)
    # A paused batch skips the calls only a placed one makes (the worker's place; the main
    # process's packed_views, or stage_packed instead of stage): counted as 2 more for each, the
    # bound holds for an epoch of placed batches only.
    assert worker + main + 2 * paused / n <= LIMIT, (paused, report)
