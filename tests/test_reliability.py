"""Reliability: no hang, no leak, same batches under every way of starting DataLoader workers.

Hang-prone cases run in a subprocess with a hard timeout; the child arms faulthandler so that,
if it ever hangs, every thread's stack is printed before it is killed.
"""
import gc
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

import prefetch

from .conftest import SANITIZED, thread_count
from .helpers import ROOT, WAIT_PRODUCER_BLOCKED, assert_same, run_child  # noqa: F401 (ROOT: re-exported)

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


def test_a_killed_dataloader_worker_surfaces_as_an_error():
    out = run_child("""
        import os, signal, torch, prefetch
        from torch.utils.data import DataLoader, Dataset

        class Dies(Dataset):
            def __len__(self):
                return 64
            def __getitem__(self, i):
                if i == 20:
                    os.kill(os.getpid(), signal.SIGKILL)
                return torch.full((4,), i)

        loader = DataLoader(Dies(), batch_size=4, num_workers=2)
        with prefetch.Prefetcher(loader, device="cpu") as pf:
            try:
                for _ in pf:
                    pass
            # DataLoader's own error: usually RuntimeError("DataLoader worker ... exited
            # unexpectedly"), sometimes ConnectionResetError or EOFError from its queue, by timing.
            except (RuntimeError, OSError, EOFError) as e:
                print("surfaced: %s: %s" % (type(e).__name__, (str(e).splitlines() or [""])[0]), flush=True)
    """, timeout=90)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "surfaced:" in out.stdout


@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
def test_worker_start_methods_with_the_pool_alive(context):
    if context == "fork" and SANITIZED:
        pytest.skip("fork() of a threaded process can deadlock in ASan's allocator (conftest.py)")
    # The engine's C++ pool and stream thread exist (a first epoch ran) before workers start.
    ds = [(torch.full((3, 4), i, dtype=torch.uint8), i) for i in range(24)]
    expected = list(DataLoader(ds, batch_size=5))
    loader = DataLoader(ds, batch_size=5, num_workers=2, multiprocessing_context=context,
                        collate_fn=prefetch.collate.samples)
    with prefetch.Prefetcher(loader, device="cpu", num_threads=2) as pf:
        for _ in range(2):
            got = list(pf)
            assert len(got) == len(expected)
            for g, e in zip(got, expected):
                assert_same(g, e, torch.device("cpu"))


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def assert_flat_over_epochs(loader, warmup=10, epochs=90):
    """Threads and file descriptors must not grow at all (they may shrink: threads left by
    earlier tests finish meanwhile); resident memory may move by the allocator's noise, bounded
    at 16 MiB (the loaders here move ~3 MiB an epoch, so leaking one batch per epoch would
    exceed it over 90 epochs)."""
    for _ in range(warmup):
        for _ in loader:
            pass
    threads, fds, rss = thread_count(), len(os.listdir("/proc/self/fd")), _rss_bytes()
    for _ in range(epochs):
        for _ in loader:
            pass
    # A CPU op run on an epoch's producer thread starts an OpenMP team owned by that thread; the
    # team's workers exit shortly after the (joined) producer does, not at once. Give them 5 s:
    # a leak never settles, a team being torn down does.
    deadline = time.monotonic() + 5.0
    while thread_count() > threads and time.monotonic() < deadline:
        time.sleep(0.02)
    assert thread_count() <= threads
    assert len(os.listdir("/proc/self/fd")) <= fds
    # Under ASan freed memory waits in its quarantine (256 MiB) before reuse, so resident memory
    # grows by design there; the regular run checks it.
    if not SANITIZED:
        assert _rss_bytes() - rss < 16 * 2**20, "RSS grew by %d bytes" % (_rss_bytes() - rss)


def test_hundred_epochs_stay_flat():
    batches = [torch.full((256 * 1024,), i, dtype=torch.uint8) for i in range(12)]
    gc.collect()
    with prefetch.Prefetcher(batches, device="cpu", depth=3) as pf:
        assert_flat_over_epochs(pf)


_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
           torch.bfloat16, torch.float32, torch.float64, torch.bool, torch.complex64]


@st.composite
def tensors(draw):
    dtype = draw(st.sampled_from(_DTYPES))
    shape = draw(st.lists(st.integers(0, 5), min_size=0, max_size=3))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    t = (torch.randn(shape, generator=g) * 50).to(dtype) if dtype != torch.bool else \
        torch.rand(shape, generator=g) < 0.5
    if t.dim() >= 2 and draw(st.booleans()):
        t = t.transpose(0, 1)  # non-contiguous
    return t


leaves = st.one_of(tensors(), st.integers(-5, 5), st.text(max_size=3), st.none())
batches = st.recursive(leaves, lambda children: st.one_of(
    st.lists(children, max_size=3), st.tuples(children, children),
    st.dictionaries(st.text("abc", min_size=1, max_size=2), children, max_size=3)), max_leaves=8)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(batches, min_size=0, max_size=4))
def test_property_output_equals_plain_iteration(source):
    with prefetch.Prefetcher(source, device="cpu", depth=2) as pf:
        got = list(pf)
    assert len(got) == len(source)
    for g, e in zip(got, source):
        assert_same(g, e, torch.device("cpu"))


# ---- the same promises for ArrayLoader (issue 7 after the fast-sources issue) ----------------


@pytest.mark.parametrize("state", ["held", "mid-epoch", "blocked-producer"])
def test_interpreter_exit_with_a_live_array_loader(state):
    assert_interpreter_exits_with_a_live_loader(
        "images = torch.zeros(5000, 32, 32, 3, dtype=torch.uint8)\n"
        "loader = prefetch.ArrayLoader((images, torch.arange(5000)), 64, depth=2)", state)


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
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and thread_count() > before:
        gc.collect()
        time.sleep(0.02)
    assert thread_count() <= before, "threads left: %d, before: %d" % (thread_count(), before)


@pytest.mark.parametrize("resident", ["host", "device"])
def test_array_loader_hundred_epochs_stay_flat(resident):
    images = torch.randint(0, 256, (1000, 32, 32, 3), dtype=torch.uint8)
    aug = prefetch.FusedAugment([0.5] * 3, [0.2] * 3, crop=32, padding=4, seed=0)
    gc.collect()
    with prefetch.ArrayLoader((images, torch.arange(1000)), 100, resident=resident,
                              transform=aug) as loader:
        assert_flat_over_epochs(loader)


_ARRAY_DTYPES = [torch.uint8, torch.int16, torch.int64, torch.float16, torch.float32, torch.bool]


@st.composite
def array_sets(draw):
    n = draw(st.integers(1, 40))
    arrays = []
    for _ in range(draw(st.integers(1, 3))):
        dtype = draw(st.sampled_from(_ARRAY_DTYPES))
        shape = (n,) + tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
        t = (torch.rand(shape) * 100).to(dtype)
        if draw(st.booleans()) and len(shape) >= 3:
            t = t.transpose(1, 2)  # rows that are not dense
        arrays.append(t)
    return tuple(arrays)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arrays=array_sets(), batch_size=st.integers(1, 12), shuffle=st.booleans(),
       drop_last=st.booleans(), resident=st.sampled_from(["host", "device"]),
       world=st.integers(1, 3), epoch=st.integers(0, 3))
def test_property_array_loader_equals_a_reference_gather(arrays, batch_size, shuffle, drop_last,
                                                          resident, world, epoch):
    n = arrays[0].shape[0]
    rank = epoch % world
    with prefetch.ArrayLoader(arrays, batch_size, shuffle=shuffle, drop_last=drop_last, seed=epoch,
                              rank=rank, world_size=world, resident=resident) as loader:
        loader.set_epoch(epoch)
        got = list(loader)
        order = loader.epoch_indices(epoch)
    assert len(order) == (n // world if drop_last else -(-n // world))
    assert set(order.tolist()) <= set(range(n))
    expected = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    if drop_last and expected and len(expected[-1]) < batch_size:
        expected.pop()
    assert len(got) == len(expected) == len(loader)
    for batch, idx in zip(got, expected):
        assert isinstance(batch, tuple) and len(batch) == len(arrays)
        for g, a in zip(batch, arrays):
            assert g.dtype == a.dtype and g.shape == a[idx].shape
            assert torch.equal(g, a[idx])


# ---- items 1 and 2 again, each in its own interpreter with a hard timeout ---------------------
# (tests/test_errors_and_shutdown.py checks the same in-process, with finer messages; here a
# hang cannot stall the suite: the child dumps every thread's stack and is killed.)

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
