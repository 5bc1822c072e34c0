"""Faults of the worker ring (issue 15, prefetch/sources/worker_ring.py): a worker killed, an exception in
a worker, `break`, a Prefetcher dropped or closed mid-epoch, interpreter exit and Ctrl-C, ragged
samples, and a stress test for slots handed out twice or overwritten while read.

Every scenario runs in a child interpreter with a hard timeout (run_child), so a hang fails the
test instead of hanging the run. Every epoch is compared with plain iteration of a DataLoader with
``default_collate`` and no workers over the same (fault-free) data, and every test asserts that the
ring was really used (``stats()["worker_ring_batches"]`` grew).

The datasets are module-level (spawn workers unpickle them by name). A fault fires once: the test
arms it by creating a file, and the first worker that removes the file fires it, so the warm-up
epoch before arming and the epochs after the fault see good data.
"""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import prefetch

from ..conftest import SANITIZED
from ..helpers import assert_same
from ..helpers import CHILD_SETUP, ROOT, run_child

N, BATCH, SHAPE = 48, 4, (3, 16, 16)


class Samples(Dataset):
    """``{"image": uint8 (3, H, W), "label": int64 (), "index": int}``, content random but drawn
    from the index alone, so a batch written into a wrong slot, or overwritten while read, differs
    from the reference. Faults at one index each, fired once when ``flag`` exists (see the module
    docstring); ``slow`` indices sleep; ``pid_dir`` records the pid of every process that fetches."""

    def __init__(self, n=N, shape=SHAPE, flag=None, kill_at=None, raise_at=None, ragged_at=None,
                 slow=(), sleep=0.0, pid_dir=None):
        self.n, self.shape, self.flag = n, tuple(shape), flag
        self.kill_at, self.raise_at, self.ragged_at = kill_at, raise_at, ragged_at
        self.slow, self.sleep, self.pid_dir = frozenset(slow), sleep, pid_dir

    def __len__(self):
        return self.n

    def fire(self):
        """True once after the test armed the fault (created ``flag``)."""
        if self.flag is None:
            return False
        try:
            os.unlink(self.flag)
        except FileNotFoundError:
            return False
        return True

    def __getitem__(self, i):
        if self.pid_dir is not None:
            with open(os.path.join(self.pid_dir, "%d" % os.getpid()), "w") as f:
                f.write(_start_time(os.getpid()))
        if i in self.slow:
            time.sleep(self.sleep)
        if i == self.kill_at and self.fire():
            os.kill(os.getpid(), signal.SIGKILL)
        if i == self.raise_at and self.fire():
            raise ValueError("bad sample %d" % i)
        g = torch.Generator().manual_seed(1000 + i)
        shape = self.shape
        if i == self.ragged_at and self.fire():
            shape = shape[:-1]  # another rank: no Ragged holds it
        return {"image": torch.randint(0, 256, shape, dtype=torch.uint8, generator=g),
                "label": torch.randint(0, 1000, (), generator=g), "index": i}


def kill_while_writing(worker_id):
    """worker_init_fn: once armed, the worker dies inside the ring's write of a batch, after it
    claimed a slot and before it commits it (the slot is left WRITING by a dead pid). The write is
    one C++ call (SlotTable.place), so the batch carries the bomb: an image whose memory is a
    mapping of a file truncated underneath it, which every read turns into SIGBUS. Nothing reads
    an image's bytes before the write (collate.samples and flatten look at shapes only)."""
    import mmap
    import tempfile

    cls = type(torch.utils.data.get_worker_info().dataset)  # this worker's own class object
    fetch = cls.__getitem__

    def poisoned(self, i):
        sample = fetch(self, i)
        if not self.fire():
            return sample
        image = sample["image"]
        with tempfile.TemporaryFile() as f:
            f.truncate(image.nbytes)
            memory = mmap.mmap(f.fileno(), image.nbytes)
            f.truncate(0)  # the pages are gone: a read of them is SIGBUS
        sample["image"] = torch.frombuffer(memory, dtype=torch.uint8).view(image.shape)
        return sample

    cls.__getitem__ = poisoned


def _start_time(pid):
    """Field 22 of /proc/PID/stat (start time in clock ticks): a pid reused by another process
    has another start time."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rpartition(")")[2].split()[19]
    except OSError:
        return ""


def reference(n=N, shape=SHAPE, batch_size=BATCH):
    """Plain iteration: default_collate, no workers, no Prefetcher, no faults."""
    return list(DataLoader(Samples(n, shape), batch_size=batch_size))


def assert_epoch(got, expected):
    assert len(got) == len(expected), "%d batches, expected %d" % (len(got), len(expected))
    for k, (g, e) in enumerate(zip(got, expected)):
        assert_same(g, e, torch.device("cpu"), "batch %d" % k)


def assert_every_slot_free(pf):
    """After a complete epoch, with no batch of it held any more, every slot of the ring is FREE
    in its current generation: a slot still WRITING, SENT or LEASED is lost to every later batch
    (the slot table of docs/engine.md, read through the same bindings the ring uses). On the CPU
    device a batch the consumer holds may be its slot (LEASED until the batch dies): callers
    drop every batch first."""
    import gc

    from prefetch._core.extension import _C

    gc.collect()  # a batch in a reference cycle (an exception's traceback) holds its slot
    table = pf.source.ring.table
    generation = _C._testing.slot_generation(table)
    words = _C._testing.slot_words(table)
    lost = [(i, w) for i, w in enumerate(words) if w != (generation, 0, _C._testing.FREE)]
    assert not lost, ("slots not free after a complete epoch (slot, (generation, pid, state)); "
                      "generation %d: %s" % (generation, lost))


def stacked(batch):
    """A batch of ``collate.samples`` (what the DataLoader yields without a Prefetcher: its
    per-sample ``Samples`` lists) stacked as default_collate stacks them."""
    if isinstance(batch, prefetch.Samples):
        return torch.stack([torch.as_tensor(v) for v in batch])
    if isinstance(batch, dict):
        return {k: stacked(v) for k, v in batch.items()}
    return batch


def shm_entries():
    return set(os.listdir("/dev/shm"))


def fd_count():
    return len(os.listdir("/proc/self/fd"))


# What every child runs first: the names above, from this module (spawn workers need it importable).
PRELUDE = """
import gc, os, sys, time, warnings
import torch, prefetch
from torch.utils.data import DataLoader
from tests.loaders.test_worker_ring_faults import (
    BATCH, N, SHAPE, Samples, assert_epoch, assert_every_slot_free, fd_count,
    kill_while_writing, reference, shm_entries, stacked)

expected = reference()

def loader(dataset, **kw):
    kw.setdefault("num_workers", 2)
    return DataLoader(dataset, batch_size=BATCH, collate_fn=prefetch.collate.samples, **kw)

def ring_batches(pf):
    return pf.stats().get("worker_ring_batches", 0)  # no ring before the first epoch

def drain(pf):
    # An epoch, holding no batch afterwards (a held batch may hold its slot: see
    # assert_every_slot_free).
    for batch in pf:
        del batch

def good_epoch(pf, expected=expected, require_ring=True):
    # One complete epoch: equal to the reference, through the ring, no slot left taken. Each
    # batch is checked on arrival and dropped, as a training loop does (a consumer that keeps
    # every batch may keep its slot too, and later batches then take the per-sample path).
    before, count = ring_batches(pf), 0
    for i, batch in enumerate(pf):
        assert i < len(expected), "more than %d batches" % len(expected)
        assert_epoch([batch], [expected[i]])
        count += 1
        del batch
    assert count == len(expected), "%d batches, expected %d" % (count, len(expected))
    used = ring_batches(pf) - before
    if require_ring:
        assert used > 0, "RING NOT USED: %s" % pf.stats()
    if getattr(pf.source, "ring", None) is not None:
        assert_every_slot_free(pf)
    return used
"""


class SlotsLost(AssertionError):
    """A child failed on assert_every_slot_free (told apart, for an xfail of that failure only)."""


def child(body, timeout=60):
    """Runs PRELUDE + body in a fresh interpreter (run_child: faulthandler dumps the stacks of a
    hung child before the hard timeout); the body prints OK at its end."""
    out = run_child(PRELUDE + textwrap.dedent(body), timeout=timeout)
    text = out.stdout + out.stderr
    if out.returncode != 0 and "slots not free after a complete epoch" in text:
        raise SlotsLost(text)
    assert out.returncode == 0 and "OK" in out.stdout, text
    # An error in a finalizer (a DataLoader iterator collected in a process that did not make
    # it: "can only test a child process") is printed, not raised: it must not be there either.
    assert "Exception ignored" not in out.stderr, out.stderr
    return out


def needs_fork(context):
    if context == "fork" and SANITIZED:
        pytest.skip("fork() of a threaded process can deadlock in ASan's allocator (conftest.py)")


# ---- 1. a worker killed mid-epoch ------------------------------------------------------------

# With persistent_workers=True torch's DataLoader itself never recovers from a dead worker: its
# iterator stays the loader's `_iterator`, and every later iter() (`_reset`) waits for the dead
# worker's resume answer and raises "DataLoader worker (pid(s) P) exited unexpectedly" again. The
# Prefetcher made that iterator (with its RingCollate) and owns it, so the right behaviour is the
# issue's: the next epoch is complete and equal (fresh workers), not an error in every epoch.
@pytest.mark.parametrize("where", ["getitem", "write"])
@pytest.mark.parametrize("persistent", [False, True])
def test_a_killed_worker_raises_the_dataloader_error_and_the_next_epoch_is_complete(
        tmp_path, persistent, where):
    # The kill comes in the second epoch, when every batch goes through the ring (the first
    # epoch's first batches take the usual path while the block is made). "getitem": killed in
    # __getitem__ of index 21 (batch 5); "write": killed inside the slot write of some batch,
    # holding a slot in WRITING.
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    shm = shm_entries()
    out = child("""
    flag = {flag!r}
    ds = Samples(flag=flag, kill_at=21 if {where!r} == "getitem" else None, pid_dir={pid_dir!r})
    init = kill_while_writing if {where!r} == "write" else None
    dl = loader(ds, persistent_workers={persistent}, worker_init_fn=init)
    pf = prefetch.Prefetcher(dl, device="cpu", depth=2, timeout=20)
    good_epoch(pf)
    open(flag, "w").close()
    try:
        drain(pf)
        raise SystemExit("the epoch with a killed worker ended without an error")
    except (RuntimeError, ConnectionError) as exc:  # the DataLoader's own error
        text = str(exc)
        print("raised %s: %s" % (type(exc).__name__, text.splitlines()[0]), flush=True)
        assert isinstance(exc, ConnectionError) or "exited unexpectedly" in text \\
            or "killed by signal" in text, text
        assert not isinstance(exc, prefetch.PrefetchTimeout), text
    assert not os.path.exists(flag)  # the fault fired
    # The failed epoch's leftovers sit in the exception's reference cycle; collected during the
    # next epoch they pause the ring (test_a_failed_epoch_collected_during_the_next_...).
    gc.collect()
    for _ in range(2):
        try:
            good_epoch(pf)
        except RuntimeError as exc:
            if "exited unexpectedly" in str(exc):
                print("DEAD WORKER REUSED", flush=True)
            raise
    pf.close()
    print("OK")
    print("child", os.getpid())
    """.format(flag=str(tmp_path / "armed"), where=where, persistent=persistent,
               pid_dir=str(pid_dir)))
    assert "raised " in out.stdout, out.stdout
    # No shared memory named after the child or any of its workers (the killed one included) is
    # left: torch's names are torch_<pid>_... (see test_exit_or_ctrl_c_...).
    pids = [int(p) for p in os.listdir(pid_dir)] + [int(out.stdout.split("child ")[1].split()[0])]
    mine = [e for e in shm_entries() - shm if any("_%d_" % p in e for p in pids)]
    assert not mine, mine


@pytest.mark.parametrize("when", ["dead", "dying", "unseen"])
def test_a_persistent_worker_killed_between_epochs_is_replaced(when):
    # torch's own reset would wait for the dead worker's answer and fail every later epoch.
    # "dying": maybe not yet reaped when the next epoch starts; "unseen": the check before the
    # reset misses it, so the reset itself finds it dead (after torch's 5 s status interval)
    # and the ring starts fresh workers once more.
    child("""
    from prefetch.sources import worker_ring
    pf = prefetch.Prefetcher(loader(Samples(), persistent_workers=True), device="cpu")
    good_epoch(pf, require_ring=False)
    workers = list(pf.source.ring.loader._iterator._workers)
    os.kill(workers[0].pid, 9)
    if {when!r} != "dying":
        workers[0].join(timeout=10)
    calls = []
    if {when!r} == "unseen":
        check = worker_ring.WorkerRing._drop_dead_persistent_workers
        def misses_once(ring):
            calls.append(ring)
            return False if len(calls) == 1 else check(ring)
        worker_ring.WorkerRing._drop_dead_persistent_workers = misses_once
    for _ in range(2):
        good_epoch(pf)
    assert pf.source.ring.loader._iterator._workers[0] is not workers[0]
    assert {when!r} != "unseen" or len(calls) == 3, calls  # missed, after the reset, epoch 3
    pf.close()
    print("OK")
    """.format(when=when))


# ---- 2. an exception in a worker ------------------------------------------------------------

@pytest.mark.parametrize("persistent, keep", [
    (False, "held"), (False, "dropped"), (True, "held"), (True, "dropped")])
def test_an_exception_in_a_worker_is_reraised_and_the_next_epoch_is_complete(
        tmp_path, persistent, keep):
    # "held": the consumer keeps the exception (as pytest.raises, or a training loop that logs
    # errors later, does); its traceback holds the failed DataLoader iterator. "dropped": it is
    # let go and collected (gc.collect(): the traceback is in a reference cycle). Slow samples
    # keep the failed iterator's workers busy into the next epoch. With persistent workers the
    # DataLoader's reset waits for their outstanding tasks, so "held" is fine there.
    # The plain DataLoader's error over the same data is the reference for type and message.
    child("""
    flag = {flag!r}
    ds = Samples(flag=flag, raise_at=21, slow=range(22, N), sleep=0.05)
    dl = loader(ds, num_workers=3, persistent_workers={persistent})

    def plain_error():
        open(flag, "w").close()
        try:
            for _ in DataLoader(ds, batch_size=BATCH, num_workers=3,
                                collate_fn=prefetch.collate.samples):
                pass
        except Exception as exc:
            return exc
        raise SystemExit("plain iteration did not raise")

    want = plain_error()
    pf = prefetch.Prefetcher(dl, device="cpu", depth=1, timeout=20)
    good_epoch(pf)
    open(flag, "w").close()
    errors = []
    try:
        drain(pf)
        raise SystemExit("the epoch with a failing sample ended without an error")
    except Exception as exc:
        assert type(exc) is type(want) is ValueError, (type(exc), type(want))
        assert str(exc) == str(want), (str(exc), str(want))
        assert "bad sample 21" in str(exc) and "Caught ValueError in DataLoader worker" in str(exc)
        if {keep!r} == "held":
            errors.append(exc)
    gc.collect()
    for _ in range(2):
        good_epoch(pf)
    pf.close()
    print("OK")
    """.format(flag=str(tmp_path / "armed"), persistent=persistent, keep=keep))


def test_a_failed_epoch_collected_during_the_next_does_not_pause_the_ring(tmp_path):
    # The exception of a failed epoch sits in a reference cycle (its traceback holds the frame
    # that re-raised it), and with it the epoch's batches object and DataLoader iterator. When
    # the cyclic GC collects them in the middle of the next epoch, nothing of that epoch may
    # change: here gc.collect() after 2 of its 24 batches; at most W*P + depth + 2 = 8 were in
    # flight then, so the workers must write at least one of the other 14 into the ring.
    child("""
    flag = {flag!r}
    expected = reference(96)
    pf = prefetch.Prefetcher(loader(Samples(96, flag=flag, raise_at=21)), device="cpu", depth=2,
                             timeout=20)
    good_epoch(pf, expected)
    open(flag, "w").close()
    try:
        drain(pf)
        raise SystemExit("no error")
    except ValueError:
        pass
    it = iter(pf)
    for i in range(2):
        assert_epoch([next(it)], [expected[i]])
    gc.collect()
    at_gc = ring_batches(pf)
    for i, batch in enumerate(it, 2):  # checked on arrival, not kept (as good_epoch)
        assert_epoch([batch], [expected[i]])
        del batch
    assert i == len(expected) - 1, i
    assert ring_batches(pf) > at_gc, "RING NOT USED after the collection: %s" % pf.stats()
    assert_every_slot_free(pf)
    good_epoch(pf, expected)
    pf.close()
    print("OK")
    """.format(flag=str(tmp_path / "armed")))


# ---- 3. break, then a new epoch, several times -----------------------------------------------

@pytest.mark.parametrize("persistent", [False, True])
def test_break_then_new_epochs_lose_no_slot(persistent):
    child("""
    dl = loader(Samples(), persistent_workers={persistent}, prefetch_factor=2)
    pf = prefetch.Prefetcher(dl, device="cpu", depth=2, timeout=20)
    good_epoch(pf)  # makes the block: its first batches fall back
    for k in (0, 1, 3, 7, 1, 11, 2):
        fallbacks = pf.stats()["worker_ring_fallbacks"]
        it = iter(pf)
        for i, batch in zip(range(k), it):
            assert_epoch([batch], [expected[i]])
            del batch
        del it  # break
        good_epoch(pf)
        stats = pf.stats()
        # Only tasks the abandoned epoch had dispatched (at most num_workers * prefetch_factor
        # = 4) may fall back, when the ring pauses under them; the new epoch itself never does.
        assert stats["worker_ring_fallbacks"] <= fallbacks + 4, stats
    # Epochs with nothing in between: not one more fallback.
    fallbacks = pf.stats()["worker_ring_fallbacks"]
    good_epoch(pf)
    good_epoch(pf)
    assert pf.stats()["worker_ring_fallbacks"] == fallbacks, pf.stats()
    pf.close()
    print("OK")
    """.format(persistent=persistent))


# ---- 4. a Prefetcher dropped or closed mid-epoch, 20 times ------------------------------------

@pytest.mark.parametrize("persistent, how, lease", [
    (False, "drop", True), (False, "close", True), (True, "drop", True), (True, "close", True),
    # the CUDA device's single copy from the slot (the engine holds slots and blocks until its
    # copies have run), on the host
    (False, "drop", False), (True, "close", False)])
def test_prefetchers_dropped_or_closed_mid_epoch_leak_nothing(persistent, how, lease):
    # /dev/shm: the ring's block is shared by fd (share_memory_(), torch's file-descriptor
    # strategy: no name stays), so no name this child made may be left there. fds: counted after
    # 2 warm-up cycles (torch's and multiprocessing's lazily made pipes and the like); over 20
    # more cycles a slack of 4 allows for a worker's pipes still being torn down at the count,
    # while a leak of one fd a cycle (a mailbox queue, a block) shows as 20. Under the sanitizer
    # (forkserver workers, everything several times slower) 6 cycles: its job there is memory
    # errors, the count is this run's.
    cycles = 6 if SANITIZED else 20
    out = child("""
    prefetch.sources.worker_ring.LEASE_ON_CPU = {lease}
    dl = loader(Samples(), persistent_workers={persistent})
    how = {how!r}

    def cycle(batches=2):
        pf = prefetch.Prefetcher(dl, device="cpu", depth=2, timeout=20)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # told apart below: RING NOT USED
            used = good_epoch(pf, require_ring=False)
        it = iter(pf)
        for i, batch in zip(range(batches), it):
            assert_epoch([batch], [expected[i]])
        if how == "close":
            pf.close()
        del pf, it
        gc.collect()
        return used

    used = [cycle() for _ in range(2)]
    gc.collect()
    shm, fds = shm_entries(), fd_count()
    t0 = time.monotonic()
    used += [cycle() for _ in range({cycles})]
    for _ in range(100):  # workers of the last cycle may still be exiting (their pipes)
        gc.collect()
        if fd_count() <= fds:
            break
        time.sleep(0.05)
    # torch's names (torch_<pid>_...) of this child's: none left (sem.mp-* carry no pid and
    # other runs on this machine make them: see test_exit_or_ctrl_c_...).
    mine = [e for e in shm_entries() - shm if "_%d_" % os.getpid() in e]
    assert not mine, mine
    assert fd_count() <= fds + 4, (fd_count(), fds, sorted(os.listdir("/proc/self/fd")))
    numbers = "fds %d -> %d, new /dev/shm entries %d (any process), {cycles} cycles %.1f s" % (
        fds, fd_count(), len(shm_entries() - shm), time.monotonic() - t0)
    # The DataLoader iterated plainly afterwards is still a plain DataLoader.
    for _ in range(2):
        assert_epoch([stacked(b) for b in dl], expected)
    unused = [i for i, n in enumerate(used) if n == 0]
    assert not unused, "RING NOT USED in cycles %s of %d" % (unused, len(used))
    print("OK", numbers)
    """.format(how=how, persistent=persistent, cycles=cycles, lease=lease), timeout=90)
    print(out.stdout)


# ---- 5. interpreter exit and Ctrl-C mid-epoch --------------------------------------------------

def _gone(pid, start, seconds):
    """True once the process `pid` that started at `start` no longer exists (or is a zombie)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            return True
        if fields[19] != start or fields[0] == "Z":
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("how", ["exit", "SIGINT"])
@pytest.mark.parametrize("persistent", [False, True])
def test_exit_or_ctrl_c_mid_epoch_leaves_no_worker_and_no_shared_memory(tmp_path, how,
                                                                         persistent):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    code = CHILD_SETUP + PRELUDE + textwrap.dedent("""
    import faulthandler
    faulthandler.dump_traceback_later(40, exit=True)
    dl = loader(Samples(pid_dir={pid_dir!r}), persistent_workers={persistent})
    pf = prefetch.Prefetcher(dl, device="cpu", depth=2)
    good_epoch(pf)
    for i, batch in enumerate(pf):
        assert_epoch([batch], [expected[i]])
        if i == 3:
            print("MARK", flush=True)
            if {how!r} == "exit":
                sys.exit(0)  # without closing anything
        time.sleep(0.2)  # the slow consumer Ctrl-C interrupts
    print("the epoch ended before the signal", flush=True)
    """.format(pid_dir=str(pid_dir), persistent=persistent, how=how))
    shm = shm_entries()
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # MARK, or "" when the child died before it
        if how == "SIGINT" and line.startswith("MARK"):
            proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=45)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        pytest.fail("the child did not exit within 45 s:\n%s\n%s" % (stdout, stderr))
    stdout = line + stdout
    assert line.startswith("MARK"), stdout + stderr
    if how == "exit":
        assert proc.returncode == 0, stdout + stderr
    else:
        assert "KeyboardInterrupt" in stderr and proc.returncode != 0, stdout + stderr
    workers = {int(p): (pid_dir / p).read_text() for p in os.listdir(pid_dir)}
    assert len(workers) >= 2, workers  # the epoch's workers fetched (and recorded themselves)
    # Orphaned DataLoader workers notice their parent is gone within their watchdog's interval
    # (torch: 5 s); a worker still alive after 15 s is a leftover.
    left = [pid for pid, start in workers.items() if not _gone(pid, start, 15)]
    assert not left, "worker processes left after the child exited: %s" % left
    # torch names its shared memory torch_<pid>_...: none of the child's or its workers' may be
    # left. (multiprocessing's sem.mp-* names carry no pid, and other runs on this shared
    # machine make and leak them; the children here use fork, where multiprocessing unlinks its
    # semaphores at once: they are not counted.)
    pids = [proc.pid] + list(workers)
    mine = [e for e in shm_entries() - shm if any("_%d_" % p in e for p in pids)]
    assert not mine, mine
    assert "Exception ignored" not in stderr, stderr


# ---- 6. ragged samples in one batch ---------------------------------------------------------

def test_a_ragged_sample_raises_collate_error_as_without_workers(tmp_path):
    # Sample 21 (batch 5, sample 1 of it) of another rank: the worker cannot place the batch in
    # a slot, the main process collates it and raises the CollateError it raises without workers.
    child("""
    flag = {flag!r}
    ds = Samples(flag=flag, ragged_at=21)

    def collate_error(pf):
        open(flag, "w").close()
        try:
            drain(pf)
        except prefetch.CollateError as exc:
            return str(exc) + "\\n".join(getattr(exc, "__notes__", []))
        raise SystemExit("no CollateError")

    with prefetch.Prefetcher(loader(ds, num_workers=0), device="cpu") as pf:
        want = collate_error(pf)
        assert_epoch(list(pf), expected)
    pf = prefetch.Prefetcher(loader(ds), device="cpu", depth=2, timeout=20)
    good_epoch(pf)
    got = collate_error(pf)
    assert "image" in got and "sample 1" in got and "dataset index 21" in got, got
    # The same text, but for the note's count of batches delivered before it (the producer may
    # be further ahead with workers).
    strip = lambda text: [l for l in text.splitlines() if "were delivered before it" not in l]
    assert strip(got) == strip(want), (got, want)
    for _ in range(2):
        good_epoch(pf)
    pf.close()
    print("OK")
    """.format(flag=str(tmp_path / "armed")))


# ---- 7. slots never handed out twice, never overwritten while read ---------------------------

@pytest.mark.parametrize("context, lease", [("fork", True), ("spawn", True), ("fork", False)])
def test_stress_every_batch_equals_the_reference(context, lease):
    needs_fork(context)
    # 3 workers, prefetch_factor 1, depth 1: few slots (the bound), so workers keep waiting for
    # one; a slow consumer; 8 KiB random samples. A slot handed to two workers, or rewritten
    # before the main process read it, or while the consumer holds a batch that is the slot
    # itself (the CPU device may lease it), shows as a batch that differs from the reference,
    # checked on arrival and again while held.
    child("""
    shape = (8, 32, 32)
    expected = reference(96, shape)
    # (spawn with persistent workers: 3 spawned interpreters an epoch would cost most of the
    # test's time on a loaded 2-core machine; fork starts its workers every epoch.)
    dl = loader(Samples(96, shape), num_workers=3, prefetch_factor=1,
                multiprocessing_context={context!r}, persistent_workers={context!r} == "spawn")
    prefetch.sources.worker_ring.LEASE_ON_CPU = {lease}
    pf = prefetch.Prefetcher(dl, device="cpu", depth=1, timeout=20)
    if not {lease}:  # the single copy from the slot, on a copy stream slowed at random
        prefetch._C._testing.set_debug_delay(pf._pipeline.engine, 2000, 3)
    from collections import deque
    for epoch in range(4):
        # Epochs 0, 2, 3: the consumer holds its last 3 batches and checks them again at every
        # batch (the ring keeps cycling meanwhile); epoch 1: it holds every batch to the end.
        before, held = ring_batches(pf), deque(maxlen=None if epoch == 1 else 3)
        for i, batch in enumerate(pf):
            held.append((i, batch))
            for k, b in held if epoch != 1 else [(i, batch)]:
                assert_epoch([b], [expected[k]])
            time.sleep(0.004 if i % 3 else 0.02)
        del batch, b
        for k, b in held:  # still intact at the end of the epoch
            assert_epoch([b], [expected[k]])
        del held, b
        assert ring_batches(pf) > before, pf.stats()
        assert_every_slot_free(pf)
    stats = pf.stats()
    assert stats["worker_ring_slots"] == 3 * 1 + 1 + 2 + {lease}, stats  # W * P + depth + 2 (+ 1)
    print("OK", stats["worker_ring_batches"], stats["worker_ring_fallbacks"],
          "%.3f" % stats["worker_slot_wait_s"])
    pf.close()
    """.format(context=context, lease=lease), timeout=90)
