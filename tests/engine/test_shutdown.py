"""Shutdown: `break` then `del`, `close()` or `with` joins every thread a loader started; Ctrl-C
during next() raises promptly; the interpreter exits cleanly with a loader held, mid-epoch or
with its producer blocked on a full ring. For the Prefetcher and the ArrayLoader.

Anything that could hang runs in a child interpreter with a hard timeout (run_child)."""
import textwrap
import time

import pytest
import torch

import prefetch

from ..conftest import thread_count
from ..helpers import WAIT_PRODUCER_BLOCKED, run_child, wait_for_threads


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
    assert wait_for_threads(before), "threads left: %d, before: %d" % (thread_count(), before)


@pytest.mark.parametrize("how", ["del", "close", "with"])
def test_array_loader_break_then_cleanup_joins_every_thread(how):
    images = torch.zeros(4000, 16, 16, 3, dtype=torch.uint8)
    before = thread_count()

    def consume_some(loader):
        for i, _ in enumerate(loader):
            if i == 3:
                break
        time.sleep(0.05)  # the producer fills the ring and blocks
        assert thread_count() > before

    if how == "with":
        with prefetch.ArrayLoader((images, torch.arange(4000)), 32, depth=2, num_threads=3) as loader:
            consume_some(loader)
    else:
        loader = prefetch.ArrayLoader((images, torch.arange(4000)), 32, depth=2, num_threads=3)
        consume_some(loader)
        if how == "close":
            loader.close()
        del loader
    assert wait_for_threads(before), "threads left: %d, before: %d" % (thread_count(), before)


def assert_interpreter_exits_with_a_live_loader(make_loader, state):
    """A child builds `loader` (depth 2) with the code `make_loader`, leaves it in `state`
    (held: never iterated; mid-epoch: one batch taken; blocked-producer: and the ring full) and
    exits: it must exit cleanly, not hang or crash."""
    out = run_child(WAIT_PRODUCER_BLOCKED + "import time, torch, prefetch\n" + make_loader + "\n"
                    + textwrap.dedent("""
        if "%s" != "held":
            it = iter(loader)
            next(it)
        if "%s" == "blocked-producer":
            wait_producer_blocked(loader, 2)
        print("exiting", flush=True)
    """ % (state, state)), timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "exiting" in out.stdout


@pytest.mark.parametrize("state", ["held", "mid-epoch", "blocked-producer"])
def test_interpreter_exit_with_a_live_prefetcher(state):
    assert_interpreter_exits_with_a_live_loader(
        "batches = [torch.full((100_000,), i) for i in range(50)]\n"
        "loader = prefetch.Prefetcher(batches, device='cpu', depth=2)", state)


@pytest.mark.parametrize("state", ["held", "mid-epoch", "blocked-producer"])
def test_interpreter_exit_with_a_live_array_loader(state):
    assert_interpreter_exits_with_a_live_loader(
        "images = torch.zeros(5000, 32, 32, 3, dtype=torch.uint8)\n"
        "loader = prefetch.ArrayLoader((images, torch.arange(5000)), 64, depth=2)", state)


def test_keyboard_interrupt_during_next_does_not_hang():
    out = run_child("""
        import os, signal, threading, time, torch, prefetch

        def stalled():
            yield torch.zeros(1)
            time.sleep(60)
            yield torch.zeros(1)

        pf = prefetch.Prefetcher(stalled(), device="cpu")
        it = iter(pf)
        next(it)
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        t0 = time.monotonic()
        try:
            next(it)
        except KeyboardInterrupt:
            print("interrupted after %.1f s" % (time.monotonic() - t0), flush=True)
        pf.close()
    """, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "interrupted after" in out.stdout
    assert float(out.stdout.split("after ")[1].split(" s")[0]) < 5
