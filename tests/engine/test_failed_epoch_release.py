"""After a failed epoch, a kept exception holds nothing of the loader: the failed epoch's
DataLoader workers are shut down when the error reaches the consumer, and once the loader is
closed (or dropped) the loader, its Pipeline and its source are freed while the exception is
still held — without a garbage collection (the children run with gc disabled). Before, they lived
in a reference cycle through the exception's traceback until a collection, which could run in a
forked worker of a later DataLoader and free the parent's worker handles there ("can only test a
child process"). For every failure a loader reports: a sample in a DataLoader worker (with and
without the worker ring), a sample without workers, the transform, the source's ``iter()``, and
an ArrayLoader's transform on either residency. (A source whose own ``__iter__`` raised is held by its own frame in
the traceback, as in a plain loop over it: only the loader must be freed then.)"""
import pytest
import torch

from ..helpers import run_child_to_done


# The failures, here rather than in the child's code: a forkserver worker (the sanitized run's,
# tests/sanitized_workers.py) unpickles the dataset by its module's name.
class Bad(torch.utils.data.Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        if i == 13:
            raise ValueError("sample 13 is bad")
        return torch.tensor([i])


class BadIter:
    def __len__(self):
        return 3

    def __iter__(self):
        raise ValueError("the source cannot start")


def failing_transform(batch):
    if int(batch[0].flatten()[0]) >= 8:
        raise ValueError("the transform failed")
    return batch


BODY = r"""
import gc, multiprocessing, sys, time, weakref
import torch, prefetch
from tests.engine.test_failed_epoch_release import Bad, BadIter, failing_transform
gc.disable()

def build():
    if KIND.startswith("array_loader"):
        loader = prefetch.ArrayLoader((torch.arange(32),), 4, shuffle=False,
                                      transform=failing_transform, resident=KIND.split("_")[-1])
        return loader, loader
    if KIND == "transform":
        source = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(32)),
                                             batch_size=4)
        return prefetch.Prefetcher(source, device="cpu", transform=failing_transform), source
    if KIND == "source_iter":
        source = BadIter()
        return prefetch.Prefetcher(source, device="cpu"), source
    workers = 0 if KIND == "no_workers" else 2
    collate = prefetch.collate.samples if KIND == "worker_ring" else None
    source = torch.utils.data.DataLoader(Bad(), batch_size=4, num_workers=workers,
                                         collate_fn=collate)
    return prefetch.Prefetcher(source, device="cpu", worker_ring=KIND == "worker_ring"), source

loader, source = build()
refs = [weakref.ref(loader)]
if KIND != "source_iter":  # (its own frame, in the traceback, holds it: as in a plain loop)
    refs.append(weakref.ref(source))
if getattr(loader, "_pipeline", None) is not None:  # (the device-resident path has none)
    refs.append(weakref.ref(loader._pipeline))
errors = []
for epoch in range(2):  # the second epoch fails the same way, after the first's failure
    try:
        for batch in loader:
            pass
    except ValueError as exc:
        errors.append(exc)
    assert len(errors) == epoch + 1, "epoch %d did not fail" % epoch
    # The failed epoch's workers are gone (not at a later collection).
    end = time.monotonic() + 15
    while multiprocessing.active_children() and time.monotonic() < end:
        time.sleep(0.05)
    assert not multiprocessing.active_children(), multiprocessing.active_children()
batch = None
if CLOSE:
    loader.close()
del loader, source
alive = [r() for r in refs if r() is not None]
assert not alive, "still alive while the exceptions are held: %r" % (alive,)
print(type(errors[0]).__name__, "|", str(errors[0]).splitlines()[0])
del errors
print("done")
"""

KINDS = ["dataloader_workers", "worker_ring", "no_workers", "transform", "source_iter",
         "array_loader_host", "array_loader_device"]


@pytest.mark.parametrize("close", [True, False], ids=["closed", "dropped"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_kept_exception_holds_nothing_of_a_closed_loader(kind, close):
    run_child_to_done("KIND = %r\nCLOSE = %r\n" % (kind, close) + BODY, "ValueError", timeout=90)


def _prefetch_frames_holding(exc):
    """The frames of prefetch's own code in ``exc``'s traceback that hold ``exc`` in a local: each
    a reference cycle (the traceback holds the frame) that only a garbage collection frees."""
    import os

    import prefetch

    package = os.path.dirname(prefetch.__file__)
    tb, out = exc.__traceback__, []
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_filename.startswith(package) and any(
                v is exc for v in frame.f_locals.values()):
            out.append("%s:%d" % (frame.f_code.co_name, tb.tb_lineno))
        tb = tb.tb_next
    return out


def test_no_frame_of_prefetch_that_re_raises_keeps_the_exception():
    """Where prefetch raises an exception it holds in a variable — the consumer's next() handing
    over the producer's error, a worker's failure to send a batch raised in the main process when
    its batch is unpickled — the frame does not keep it (no cycle through the traceback)."""
    import torch

    import prefetch
    from prefetch.collate import _raise

    def failing(batch):
        raise ValueError("the transform failed")

    raised = []
    try:
        _raise(RuntimeError("a worker could not send a batch"))
    except RuntimeError as exc:
        raised.append(exc)
    with prefetch.Prefetcher([torch.zeros(2)] * 3, device="cpu", transform=failing) as loader:
        try:
            list(loader)
        except ValueError as exc:
            raised.append(exc)
    assert len(raised) == 2
    for exc in raised:
        assert _prefetch_frames_holding(exc) == [], exc
