"""Errors reach the consumer instead of hanging it: an exception in the source or a transform is
re-raised from next() with its own traceback, after the batches before it, and the next epoch
works; a failed epoch leaves nothing alive; a killed DataLoader worker surfaces as DataLoader's
own error; a thread the OS refuses to start is a Python exception, not an abort; a stalled source
raises PrefetchTimeout; a missing extension fails the import."""
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import traceback
import weakref

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import prefetch

from ..conftest import SANITIZED, thread_count
from ..helpers import run_child, run_child_to_done, wait_for_threads


class Boom(Exception):
    pass


class FailingSource:
    """Yields `fail_at` good batches, then raises Boom from a line the traceback must show."""

    def __init__(self, fail_at, n=10, in_iter=False):
        self.fail_at, self.n, self.in_iter = fail_at, n, in_iter

    def __iter__(self):
        if self.in_iter:
            raise Boom("broken __iter__")
        for i in range(self.n):
            if i == self.fail_at:
                raise Boom("source failed at %d" % i)  # ORIGINAL-RAISE-LINE
            yield torch.full((4,), i)

    def __len__(self):
        return self.n


@pytest.mark.parametrize("fail_at,in_iter", [(0, False), (4, False), (None, True)])
def test_source_errors_reach_the_consumer_with_their_traceback(device, fail_at, in_iter):
    pf = prefetch.Prefetcher(FailingSource(fail_at, in_iter=in_iter), device=device, depth=2)
    for epoch in range(2):  # the same Prefetcher starts a new epoch after a failure
        got = []
        with pytest.raises(Boom) as info:
            for b in pf:
                got.append(int(b[0]))
        assert got == list(range(fail_at or 0))
        text = "".join(traceback.format_exception(info.value))
        if in_iter:
            assert "raise Boom(\"broken __iter__\")" in text
        else:
            assert "ORIGINAL-RAISE-LINE" in text
        assert "producer thread while fetching batch %d of the epoch from the source" % (fail_at or 0) in text
    pf.close()


def test_next_epoch_works_after_a_source_error():
    class Flaky:
        def __init__(self):
            self.epoch = 0

        def __iter__(self):
            self.epoch += 1
            for i in range(5):
                if self.epoch == 1 and i == 2:
                    raise Boom("first epoch only")
                yield torch.tensor([i])

    with prefetch.Prefetcher(Flaky(), device="cpu") as pf:
        with pytest.raises(Boom):
            list(pf)
        assert [int(b) for b in pf] == list(range(5))


def test_a_failed_epoch_leaves_nothing_alive():
    # The exception travels with a traceback that holds the epoch's iterator; the Prefetcher
    # must still be collectable (and its threads joined) once the user drops it.
    before = thread_count()
    pf = prefetch.Prefetcher(FailingSource(2), device="cpu", depth=2, num_threads=3)
    ref = weakref.ref(pf)
    for _ in range(2):
        with pytest.raises(Boom):
            list(pf)
    del pf
    assert wait_for_threads(before), "threads left: %d, before: %d" % (thread_count(), before)
    assert ref() is None, "the Prefetcher is still referenced after a failed epoch"


def test_transform_errors_reach_the_consumer():
    def broken(batch):
        raise ArithmeticError("transform failed")  # TRANSFORM-RAISE-LINE

    with prefetch.Prefetcher([torch.zeros(3)] * 4, device="cpu", transform=broken) as pf:
        with pytest.raises(ArithmeticError) as info:
            list(pf)
        assert "TRANSFORM-RAISE-LINE" in "".join(traceback.format_exception(info.value))
        assert info.value.__notes__[-1].startswith(
            "[prefetch] raised in the Prefetcher's producer thread in the transform, on batch 0 "
            "of the epoch")


def test_a_decode_error_names_the_dataset_index_and_the_transform_and_the_next_epoch_works():
    """A file that is not a JPEG, sample 1 of batch 1 of an in-order DataLoader, under
    FusedAugment(decode=True): the error names the sample as the op sees it, the dataset index
    (5), and the transform as the stage that failed (not the source)."""
    Image = pytest.importorskip("PIL.Image")
    import io

    if not prefetch.built_with_jpeg():
        pytest.skip("prefetch was built without libjpeg-turbo")

    def jpeg(seed):
        out = io.BytesIO()
        pixels = np.random.default_rng(seed).integers(0, 256, (32, 32, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(out, "JPEG")
        return torch.frombuffer(bytearray(out.getvalue()), dtype=torch.uint8)

    files = [jpeg(i) for i in range(12)]
    files[5] = torch.frombuffer(bytearray(b"not a jpeg" * 8), dtype=torch.uint8)
    loader = DataLoader(files, batch_size=4, collate_fn=prefetch.collate.samples)
    aug = prefetch.FusedAugment([0.5] * 3, [0.2] * 3, random_resized_crop=16, decode=True)
    with prefetch.Prefetcher(loader, device="cpu", transform=aug) as pf:
        with pytest.raises(RuntimeError, match=r"sample 1 .*cannot be decoded: Not a JPEG") as info:
            list(pf)
        notes = info.value.__notes__
        assert "[prefetch] sample 1 of batch 1 is dataset index 5" in notes[0]
        assert "producer thread in the transform, on batch 1 of the epoch; 1 batches" in notes[-1]
        files[5] = jpeg(5)
        assert [tuple(b.shape) for b in pf] == [(4, 3, 16, 16)] * 3


def test_a_collation_error_names_the_collation_as_the_stage():
    loader = DataLoader([torch.zeros(3)] * 3 + [torch.zeros(3, dtype=torch.int64)], batch_size=2,
                        collate_fn=prefetch.collate.samples)
    with prefetch.Prefetcher(loader, device="cpu") as pf:
        with pytest.raises(prefetch.CollateError) as info:
            list(pf)
    assert "[prefetch] sample 1 of batch 1 is dataset index 3" in info.value.__notes__[0]
    assert "producer thread while collating and copying batch 1 of the epoch" in info.value.__notes__[-1]


# In a child interpreter with a hard timeout, for the Prefetcher and the ArrayLoader: the same
# errors as above, then break and every thread joined. A hang there cannot stall the suite: the
# child dumps every thread's stack and is killed.
_ERROR_AND_CLEANUP_CHILD = """
    import gc, os, time, traceback, torch, prefetch

    class Boom(Exception):
        pass

    def threads():
        return len(os.listdir("/proc/self/task"))

    class Source:
        def __init__(self, fail_at, in_iter):
            self.fail_at, self.in_iter = fail_at, in_iter
        def __iter__(self):
            if self.in_iter:
                raise Boom("broken __iter__")
            for i in range(20):
                if i == self.fail_at:
                    raise Boom("failed at %d" % i)
                yield torch.full((1000,), i)

    class FailingTransform(prefetch.transforms.Transform):
        def apply(self, batch, position):
            if position.index == FAIL_AT:
                raise Boom("failed at %d" % position.index)
            return batch

    def make():
        if KIND == "array_loader":
            return prefetch.ArrayLoader((torch.zeros(400, 100), torch.arange(400)), 20, depth=2,
                                        transform=FailingTransform())
        return prefetch.Prefetcher(Source(FAIL_AT, FAIL_AT is None), depth=2, num_threads=3)

    # torch starts its own intra-op thread at the first tensor op: count from after it.
    torch.zeros(400, 100).sum(), torch.full((1000,), 1).sum()
    before = threads()
    loader = make()
    for epoch in range(2):  # 1: the error, its type and traceback; the next epoch starts
        got = 0
        try:
            for _ in loader:
                got += 1
            raise SystemExit("no error raised")
        except Boom as exc:
            # Code run with -c has no source lines: the original frame shows by its name.
            text = "".join(traceback.format_exception(exc))
            frame = "in __call__" if KIND == "array_loader" else "in __iter__"
            assert frame in text and "producer thread" in text, text
            assert got == (FAIL_AT or 0), (got, FAIL_AT)
    # 2: break after a few batches, then drop everything: every thread joined within 5 s.
    if KIND == "array_loader":
        loader = prefetch.ArrayLoader((torch.zeros(400, 100), torch.arange(400)), 20, depth=2)
    else:
        loader = prefetch.Prefetcher([torch.full((1000,), i) for i in range(50)], depth=2, num_threads=3)
    for i, _ in enumerate(loader):
        if i == 3:
            break
    time.sleep(0.05)
    assert threads() > before
    HOW
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and threads() > before:
        gc.collect()
        time.sleep(0.02)
    assert threads() <= before, (threads(), before)
    print("ok", flush=True)
"""


@pytest.mark.parametrize("kind,fail_at", [("prefetcher", 0), ("prefetcher", 4),
                                          ("prefetcher", None), ("array_loader", 0),
                                          ("array_loader", 3)])
@pytest.mark.parametrize("how", ["del loader", "loader.close(); del loader",
                                 "with loader:\n    pass\ndel loader"])
def test_errors_and_cleanup_in_a_child_with_a_hard_timeout(kind, fail_at, how):
    body = textwrap.dedent(_ERROR_AND_CLEANUP_CHILD).replace("HOW", how)
    out = run_child("KIND = %r\nFAIL_AT = %r\n" % (kind, fail_at) + body, timeout=60)
    assert out.returncode == 0 and "ok" in out.stdout, out.stdout + out.stderr


class Dies(torch.utils.data.Dataset):
    """Its worker kills itself at sample 20 (batch 5 of 4): here, not in the child's code, so that
    a forkserver worker (the sanitized run's) can unpickle it."""

    def __len__(self):
        return 64

    def __getitem__(self, i):
        if i == 20:
            os.kill(os.getpid(), signal.SIGKILL)
        return torch.full((4,), i)


def test_a_killed_dataloader_worker_surfaces_as_an_error():
    out = run_child("""
        import torch, prefetch
        from torch.utils.data import DataLoader
        from tests.engine.test_errors import Dies

        loader = DataLoader(Dies(), batch_size=4, num_workers=2)
        delivered = 0
        with prefetch.Prefetcher(loader, device="cpu") as pf:
            try:
                for _ in pf:
                    delivered += 1
            # DataLoader's own error: usually RuntimeError("DataLoader worker ... exited
            # unexpectedly"), sometimes ConnectionResetError or EOFError from its queue, by timing.
            except (RuntimeError, OSError, EOFError) as e:
                print("surfaced after %d batches: %s: %s" % (
                    delivered, type(e).__name__, (str(e).splitlines() or [""])[0]), flush=True)
    """, timeout=90)
    assert out.returncode == 0, out.stdout + out.stderr
    # The workers ran (batches arrived: the dataset reached them) and the kill surfaced.
    assert re.search(r"surfaced after [1-9]\d* batches", out.stdout), out.stdout + out.stderr


# ---- threads the OS refuses to start -------------------------------------------------------------

# A child lowers RLIMIT_AS to the address space in use plus `headroom` bytes and asks for a
# Prefetcher with `num_threads` threads: a RuntimeError containing `expected`. With the limit lifted
# again, a Prefetcher with `then_threads` threads (None: the default) works.
def _assert_refused_thread_is_a_python_exception(headroom, num_threads, expected, then_threads):
    run_child_to_done(f"""
import resource, torch, prefetch

def vm_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024

resource.setrlimit(resource.RLIMIT_AS, (vm_bytes() + {headroom}, resource.RLIM_INFINITY))
try:
    prefetch.Prefetcher([torch.ones(3)], device="cpu", num_threads={num_threads})
except RuntimeError as exc:
    print("refused:", exc, flush=True)
    assert {expected!r} in str(exc), exc
else:
    raise AssertionError("{num_threads} thread(s) started under the limit; the test proves nothing")
resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
out = list(prefetch.Prefetcher([torch.ones(3)], device="cpu", num_threads={then_threads!r}))
assert torch.equal(out[0], torch.ones(3)), out
print("done", flush=True)
""", "refused:")


# ASan reserves terabytes of shadow address space, so RLIMIT_AS cannot be lowered under it; the
# core's ThreadPoolStart test covers the same path under the sanitizers.
@pytest.mark.skipif(SANITIZED, reason="RLIMIT_AS and AddressSanitizer's shadow memory")
def test_a_thread_the_os_refuses_to_start_is_a_python_exception():
    # Address space for a few more thread stacks, not for 64 (root ignores RLIMIT_NPROC).
    _assert_refused_thread_is_a_python_exception(
        64 << 20, num_threads=64, expected="could not start", then_threads=4)


# The host backend's copy thread, the first thread an engine starts: with no room for even one
# more thread stack, a RuntimeError naming it (it was "Resource temporarily unavailable").
@pytest.mark.skipif(SANITIZED, reason="RLIMIT_AS and AddressSanitizer's shadow memory")
def test_a_refused_host_copy_thread_is_a_python_exception_naming_it():
    _assert_refused_thread_is_a_python_exception(
        2 << 20, num_threads=1, expected="host copy thread", then_threads=None)



# ---- timeouts ----------------------------------------------------------------------------------

def test_timeout_raises_when_the_source_stalls():
    def stalled():
        yield torch.zeros(1)
        time.sleep(3)
        yield torch.ones(1)

    with prefetch.Prefetcher(stalled(), device="cpu", timeout=0.3) as pf:
        it = iter(pf)
        next(it)
        t0 = time.monotonic()
        with pytest.raises(prefetch.PrefetchTimeout, match="timeout=0.3"):
            next(it)
        assert time.monotonic() - t0 < 2.0


@pytest.mark.parametrize("timeout", [float("inf"), 1e10, 1e300, 2.0 ** 63])
def test_infinite_and_huge_timeouts_wait(timeout):
    def slow():
        time.sleep(0.3)
        yield torch.arange(3)
        time.sleep(0.2)
        yield torch.arange(3) + 1

    with prefetch.Prefetcher(slow(), device="cpu", timeout=timeout) as pf:
        got = list(pf)
    assert len(got) == 2 and torch.equal(got[1], torch.arange(3) + 1)


@pytest.mark.parametrize("timeout", [float("nan"), -1.0, 0, -float("inf"), "5", True, [1]])
def test_nonsense_timeouts_are_refused(timeout):
    with pytest.raises(ValueError, match="timeout"):
        prefetch.Prefetcher([torch.zeros(1)], device="cpu", timeout=timeout)


def test_engine_next_treats_an_unrepresentable_deadline_as_forever():
    from prefetch._core.tree import Leaf

    # The binding itself: a huge or non-finite timeout must not become a deadline in the past.
    engine = prefetch._C.Engine("cpu", -1, 2, 1, 0)
    token = engine.start_epoch()

    def later():
        time.sleep(0.3)
        prefetch._C._testing.submit(engine, token, [Leaf("x", torch.ones(2))])
        engine.finish(token, False)

    t = threading.Thread(target=later)
    t.start()
    try:
        for timeout in (float("inf"), 1e300, float("nan")):
            status, _, _ = engine.next(token, timeout)
            assert status in (prefetch._C.NextStatus.BATCH, prefetch._C.NextStatus.END), (timeout, status)
    finally:
        t.join()
        engine.close()



# ---- the extension -----------------------------------------------------------------------------

def test_import_without_the_extension_says_how_to_build(tmp_path):
    # A copy of the package without the compiled _C must fail loudly, never fall back.
    import shutil

    pkg = os.path.dirname(prefetch.__file__)
    # Under another name, so the editable install's finder cannot hand back the built package.
    shutil.copytree(pkg, tmp_path / "prefetch_unbuilt",
                    ignore=shutil.ignore_patterns("_C*.so", "__pycache__"))
    code = textwrap.dedent("""
        try:
            import prefetch_unbuilt
        except ImportError as e:
            print("IMPORT-ERROR:", e)
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert "IMPORT-ERROR" in out.stdout, out.stdout + out.stderr
    assert "pip install --no-build-isolation -e ." in out.stdout
