"""Shutdown: `break` then `del`, `close()` or `with` joins every thread a loader started; Ctrl-C
during next() raises promptly; the interpreter exits cleanly with a loader held, mid-epoch or
with its producer blocked on a full ring, and within one bound however many producers are stuck
in their sources; close() racing iter() from another thread, or called from the producer thread
or a transform, raises only "closed" and joins every thread. For the Prefetcher and the
ArrayLoader; a loader inherited by a forked child: test_fork.py.

Anything that could hang runs in a child interpreter with a hard timeout (run_child)."""
import sys
import textwrap
import threading
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


@pytest.mark.parametrize("how", ["exit", "ctrl-c"])
def test_exit_with_three_stuck_sources_is_bounded_in_total(how):
    out = run_child("""
        import os, signal, threading, time, torch, prefetch

        entered = threading.Semaphore(0)

        def stuck():
            yield torch.zeros(1)
            entered.release()
            time.sleep(120)  # inside the source's own next(): nothing can interrupt it
            yield torch.zeros(1)

        loaders = [prefetch.Prefetcher(stuck(), device="cpu") for _ in range(3)]
        its = [iter(pf) for pf in loaders]
        for it in its:
            next(it)
        for _ in its:  # every producer is now inside (or entering) time.sleep
            assert entered.acquire(timeout=10), "a producer did not reach the stuck source"
        if "%s" == "ctrl-c":
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
            print("exiting at", time.time(), flush=True)
            next(its[0])  # interrupted: KeyboardInterrupt ends the interpreter
        print("exiting at", time.time(), flush=True)
    """ % how, timeout=40)
    ended = time.time()
    assert "exiting at" in out.stdout, out.stdout + out.stderr
    started = float(out.stdout.split("exiting at ")[1].split()[0])
    if how == "exit":
        assert out.returncode == 0, out.stdout + out.stderr
    else:
        assert "KeyboardInterrupt" in out.stderr, out.stderr
    # 5 s per stuck Prefetcher, one after the other, was 15 s; the bound is on the total.
    assert ended - started < 9.0, "exit took %.1f s" % (ended - started)


def test_close_racing_iter_raises_only_closed_and_joins_every_thread():
    before = thread_count()
    unexpected = []
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for round_ in range(60):
            pf = prefetch.Prefetcher([torch.zeros(10)] * 50, device="cpu", depth=2, num_threads=1)
            go = threading.Barrier(2)

            def iterate():
                go.wait()
                try:
                    for _ in range(20):
                        it = iter(pf)
                        next(it, None)
                except RuntimeError as exc:
                    if "closed" not in str(exc):
                        unexpected.append(repr(exc))
                except Exception as exc:  # noqa: BLE001
                    unexpected.append(repr(exc))

            def close():
                go.wait()
                time.sleep(0.0005 * (round_ % 10))
                try:
                    pf.close()
                except Exception as exc:  # noqa: BLE001
                    unexpected.append("close(): %r" % (exc,))

            threads = [threading.Thread(target=iterate), threading.Thread(target=close)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            assert pf.closed
            with pytest.raises(RuntimeError, match="closed"):
                iter(pf)
            del pf
    finally:
        sys.setswitchinterval(switch)
    assert not unexpected, unexpected[:5]
    assert wait_for_threads(before), "threads left: %d, before: %d" % (thread_count(), before)


def test_close_from_the_producer_thread_or_a_transform_ends_the_epoch():
    pf = None

    def source():
        yield torch.ones(2)
        pf.close()  # inside the source's own next(), on the producer thread
        yield torch.ones(2)

    before = thread_count()
    pf = prefetch.Prefetcher(source(), device="cpu")
    got = []
    try:
        for batch in pf:  # closing ends the epoch (or says "closed"), nothing else
            got.append(batch)
    except RuntimeError as exc:
        assert "closed" in str(exc)
    assert len(got) <= 2 and pf.closed
    del pf
    assert wait_for_threads(before)

    def closing_transform(batch):
        pf2.close()
        return batch

    pf2 = prefetch.Prefetcher([torch.ones(2)] * 5, device="cpu", transform=closing_transform)
    try:
        list(pf2)
    except RuntimeError as exc:
        assert "closed" in str(exc)
    assert pf2.closed
    del pf2
    assert wait_for_threads(before)
