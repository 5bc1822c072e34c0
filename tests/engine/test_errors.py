"""Errors reach the consumer (never a hang), bad batches are named precisely, and every thread
the Prefetcher started is joined when it goes away."""
import gc
import os
import subprocess
import sys
import textwrap
import time
import traceback

import numpy as np
import pytest
import torch

import prefetch

from ..conftest import thread_count


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
        assert "producer thread" in text  # the note says where it happened
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
    import weakref

    before = thread_count()
    pf = prefetch.Prefetcher(FailingSource(2), device="cpu", depth=2, num_threads=3)
    ref = weakref.ref(pf)
    for _ in range(2):
        with pytest.raises(Boom):
            list(pf)
    del pf
    assert _wait_for_threads(before), "threads left: %d, before: %d" % (thread_count(), before)
    assert ref() is None, "the Prefetcher is still referenced after a failed epoch"


def test_ragged_samples_name_the_sample_and_both_shapes():
    bad = [prefetch.Samples([torch.zeros(3, 4), torch.zeros(3, 4), torch.zeros(3, 5)])]
    with prefetch.Prefetcher([bad], device="cpu") as pf:
        with pytest.raises(prefetch.CollateError) as info:
            list(pf)
        msg = str(info.value)
        assert "sample 2" in msg and "[3, 5]" in msg and "[3, 4]" in msg and "batch[0]" in msg


def test_mixed_dtypes_name_the_sample_and_both_dtypes():
    bad = {"x": prefetch.Samples([torch.zeros(2), torch.zeros(2, dtype=torch.float64)])}
    with prefetch.Prefetcher([bad], device="cpu") as pf:
        with pytest.raises(prefetch.CollateError) as info:
            list(pf)
    msg = str(info.value)
    assert "sample 1" in msg and "torch.float64" in msg and "torch.float32" in msg
    assert "batch['x']" in msg


@pytest.mark.parametrize("bad,match", [
    (prefetch.Samples([]), "empty Samples"),
    (prefetch.Samples([torch.zeros(2), np.zeros(2)]), "sample 1 is a ndarray"),
    (prefetch.Samples(["a", "b"]), "sample 0 is a str"),
    (np.array([object(), 1]), "dtype object"),
    (torch.zeros(3).to_sparse(), "layout"),
])
def test_bad_leaves_raise_clear_errors_and_the_next_epoch_works(bad, match):
    class Source:
        def __init__(self):
            self.first = True

        def __iter__(self):
            yield torch.ones(3)
            if self.first:
                self.first = False
                yield [bad]
            yield torch.full((3,), 2.0)

    with prefetch.Prefetcher(Source(), device="cpu") as pf:
        it = iter(pf)
        assert torch.equal(next(it), torch.ones(3))
        with pytest.raises(prefetch.CollateError, match=match):
            next(it)
        assert [b.tolist() for b in pf] == [[1.0] * 3, [2.0] * 3]


def test_a_batch_over_the_memory_cap_is_refused():
    batches = [torch.zeros(100, dtype=torch.uint8), torch.zeros(10_000, dtype=torch.uint8)]
    with prefetch.Prefetcher(batches, device="cpu", max_batch_bytes=4096) as pf:
        it = iter(pf)
        next(it)
        with pytest.raises(prefetch.CollateError, match="max_batch_bytes=4096"):
            next(it)


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


def _wait_for_threads(target, deadline_s=5.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s:
        gc.collect()
        if thread_count() <= target:
            return True
        time.sleep(0.02)
    return thread_count() <= target


@pytest.mark.parametrize("how", ["del", "close", "with"])
def test_break_then_cleanup_joins_every_thread(how):
    batches = [torch.full((50_000,), i) for i in range(50)]
    before = thread_count()
    if how == "with":
        with prefetch.Prefetcher(batches, device="cpu", depth=2, num_threads=3) as pf:
            for i, _ in enumerate(pf):
                if i == 3:
                    break
            assert thread_count() > before  # pool, stream and producer threads exist
    else:
        pf = prefetch.Prefetcher(batches, device="cpu", depth=2, num_threads=3)
        for i, _ in enumerate(pf):
            if i == 3:
                break
        assert thread_count() > before
        if how == "close":
            pf.close()
        del pf
    assert _wait_for_threads(before), "threads left: %d, before: %d" % (thread_count(), before)


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
