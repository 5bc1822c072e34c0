"""What the tests in every folder share: reference comparisons (structure, types, dtypes and exact
values), a stateful source, the engine under a loader, and child interpreters for the cases that
could hang or crash."""
import collections.abc
import gc
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch

from .conftest import SANITIZED, thread_count

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def assert_same(got, expected, device, path="batch"):
    """`got` (from the Prefetcher) equals `expected` (plain iteration) exactly, with every tensor
    on `device` and every ndarray turned into the equal tensor."""
    if isinstance(expected, np.ndarray):
        expected = torch.from_numpy(expected)
    if isinstance(expected, torch.Tensor):
        assert isinstance(got, torch.Tensor), "%s: %r is not a tensor" % (path, type(got))
        assert got.device == device, "%s on %s, expected %s" % (path, got.device, device)
        assert got.dtype == expected.dtype, "%s: dtype %s != %s" % (path, got.dtype, expected.dtype)
        assert got.shape == expected.shape, "%s: shape %s != %s" % (path, got.shape, expected.shape)
        assert torch.equal(got.cpu(), expected.cpu()), "%s: values differ" % path
        return
    assert type(got) is type(expected), "%s: type %s != %s" % (path, type(got), type(expected))
    if isinstance(expected, collections.abc.Mapping):
        assert list(got.keys()) == list(expected.keys()), path
        for k in expected:
            assert_same(got[k], expected[k], device, "%s[%r]" % (path, k))
    elif isinstance(expected, (list, tuple)):
        assert len(got) == len(expected), path
        for i, (g, e) in enumerate(zip(got, expected)):
            assert_same(g, e, device, "%s[%d]" % (path, i))
    else:
        assert got == expected, "%s: %r != %r" % (path, got, expected)


def snapshot(batch):
    """A deep CPU copy, to compare later against what a held batch still contains."""
    if isinstance(batch, torch.Tensor):
        return batch.detach().cpu().clone()
    if isinstance(batch, collections.abc.Mapping):
        return {k: snapshot(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return [snapshot(v) for v in batch]
    return batch


def assert_snapshot_equal(batch, snap):
    if isinstance(batch, torch.Tensor):
        assert torch.equal(batch.cpu(), snap)
    elif isinstance(batch, collections.abc.Mapping):
        for k in batch:
            assert_snapshot_equal(batch[k], snap[k])
    elif isinstance(batch, (list, tuple)):
        for b, s in zip(batch, snap):
            assert_snapshot_equal(b, s)


class StatefulSource:
    """The smallest stateful source: batch i is ``make_batch(i)``; its state is the next batch and
    whether its epoch has ended. As torchdata's StatefulDataLoader: a state taken after the last
    batch but before the ``StopIteration`` resumes into that epoch's empty remainder (its next
    ``iter()`` yields nothing); one taken after the ``StopIteration`` resumes with a new epoch."""

    def __init__(self, make_batch, batches=12):
        self.make_batch, self.batches = make_batch, batches
        self.pos, self.finished, self.start = 0, False, None

    def __len__(self):
        return self.batches

    def __iter__(self):
        loaded, self.start = self.start, None
        self.pos, self.finished = (0, False) if loaded is None or loaded["finished"] else (
            loaded["pos"], False)
        while self.pos < self.batches:
            i = self.pos
            self.pos += 1
            yield self.make_batch(i)
        self.finished = True

    def state_dict(self):
        return {"pos": self.pos, "finished": self.finished}

    def load_state_dict(self, state):
        self.start = dict(state)


def engine_of(loader):
    """The ``_C.Engine`` under a Prefetcher or a host-resident ArrayLoader (its Pipeline's), for
    tests that inject delays or read the ring's capacities (``_C._testing``'s functions of it)."""
    return loader._pipeline.engine


# What a child interpreter runs first: under the sanitizers, its DataLoader workers start by
# forkserver, as in pytest's processes (tests/sanitized_workers.py); cwd must be ROOT.
CHILD_SETUP = ("from tests.sanitized_workers import start_workers_by_forkserver\n"
               "start_workers_by_forkserver()\n") if SANITIZED else ""


def run_child(body, timeout=60):
    """Runs `body` in a fresh interpreter; its stacks are dumped if it outlives `timeout - 5` s.
    Anything that could hang or crash runs there, so a hang or a SIGSEGV fails one test instead
    of stalling or killing pytest. Under the sanitizers (scripts/sanitize.sh python) its DataLoader
    workers start by forkserver (what they unpickle must then be importable: define datasets in a
    test module, not in `body`), and the limit is four times longer: an instrumented child, and
    each DataLoader worker it starts, runs several times slower (a worker-ring test of 16 worker
    start-ups took 65 s there against 5 s plain), and a hang is still caught, later."""
    if SANITIZED:
        timeout *= 4
    code = textwrap.dedent("""
        import faulthandler, sys
        faulthandler.dump_traceback_later(%d, exit=True)
    """ % max(1, timeout - 5))
    code += CHILD_SETUP + textwrap.dedent(body)
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired as exc:
        pytest.fail("child hung past %d s; output:\n%s\n%s" % (timeout, exc.stdout, exc.stderr))


def native_backtrace(body, timeout=120):
    """`body` run again under cuda-gdb (or gdb) in batch mode: the native stack where a child
    died of a signal, for the failure message (the GPU image has cuda-gdb and no gdb); "" when
    neither debugger is installed."""
    import shutil

    debugger = shutil.which("cuda-gdb") or shutil.which("gdb")
    if debugger is None:
        return ""
    try:
        out = subprocess.run([debugger, "-batch", "-ex", "run", "-ex", "bt 40", "--args",
                              sys.executable, "-c", textwrap.dedent(body)], capture_output=True,
                             text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return "%s: no result within %d s" % (debugger, timeout)
    # The innermost frames say where; each frame's line cut short, so that all of them fit.
    frames = [line[:300] for line in out.stdout.splitlines()
              if line.startswith("#") or "signal" in line.lower()]
    return "\n--- %s backtrace ---\n%s" % (debugger, "\n".join(frames)[:9000])


def run_child_to_done(script, *tags, timeout=60):
    """Runs `script` with run_child; it prints "done" as its last act: the child must exit 0 having
    printed that and each of `tags` (the failures it expected to see)."""
    out = run_child(script, timeout=timeout)
    assert out.returncode == 0, out.stdout + out.stderr
    assert all(tag in out.stdout for tag in tags) and "done" in out.stdout, out.stdout
    return out


# Child code: returns once `depth` batches wait for the consumer (the engine's counters) and every
# producer thread is asleep in the kernel (/proc: its blocked submit), at most 10 s. A test of the
# "blocked producer" state then has that state, however slow the machine, where a fixed sleep
# could leave the producer still filling the ring.
WAIT_PRODUCER_BLOCKED = """
def wait_producer_blocked(loader, depth):
    import threading, time

    def asleep(thread):
        with open("/proc/self/task/%d/stat" % thread.native_id) as f:
            return f.read().rpartition(")")[2].split()[0] == "S"

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        stats = loader.stats()
        producers = [t for t in threading.enumerate() if t.name == "prefetch-producer"]
        if (stats["submitted"] - stats["delivered"] >= depth and producers
                and all(asleep(t) for t in producers)):
            return
        time.sleep(0.001)
    raise SystemExit("the producer did not block on the full ring within 10 s")
"""


def wait_for_threads(before, seconds=5.0):
    """Whether the process is back to `before` threads within `seconds` (collecting garbage
    meanwhile: a dropped loader's threads are joined when it is collected)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        gc.collect()
        if thread_count() <= before:
            return True
        time.sleep(0.02)
    return thread_count() <= before
