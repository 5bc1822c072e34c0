"""A loader inherited by a forked child works there (CPU): the inherited engine, whose threads do
not exist in the child and whose locks they may hold, is never cancelled, joined or destroyed; the
child's first iter() builds a fresh engine, and the child exits cleanly. An epoch started before
the fork raises RuntimeError naming the fork in the child and goes on in the parent. On CUDA the
child's iter() raises a clear RuntimeError, as torch does.

Every case runs in a child interpreter with a hard timeout (run_child)."""
import textwrap

import pytest

from ..conftest import require_cuda
from ..helpers import WAIT_PRODUCER_BLOCKED, run_child


_FORK_PRELUDE = """
    import os, sys, threading, time, torch, prefetch

    def wait_child(pid, seconds=20):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.02)
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        return "hung"

    import faulthandler

    def fork():
        # faulthandler's watchdog thread (run_child's) does not exist in a forked child, and
        # the child's exit would wait for it forever: disarm it around the fork, re-arm both.
        # Under ASan (GCC 12's runtime takes no lock around fork) a child forked while another
        # thread is inside the allocator inherits the allocator's lock held and hangs at its
        # first allocation of that size (gdb: the child's threads in GetFromAllocator); glibc's
        # fork makes that safe in the plain run. Two threads can be there: the watchdog, whose
        # cancel returns before it has exited, and the Prefetcher's threads, which its
        # constructor starts ("fresh": they may still be starting). So the fork waits until the
        # watchdog is gone and every other thread sleeps, three looks in a row (at most 5 s).
        tasks = len(os.listdir("/proc/self/task"))
        faulthandler.cancel_dump_traceback_later()
        me = str(threading.get_native_id())
        deadline, calm = time.monotonic() + 5, 0
        while calm < 3 and time.monotonic() < deadline:
            others = [t for t in os.listdir("/proc/self/task") if t != me]
            states = []
            for t in others:
                try:
                    with open("/proc/self/task/%s/stat" % t) as f:
                        states.append(f.read().rsplit(")", 1)[1].split()[0])
                except OSError:  # exited since the listing
                    pass
            quiet = len(others) < tasks - 1 and all(s == "S" for s in states)
            calm = calm + 1 if quiet else 0
            time.sleep(0.002)
        pid = os.fork()
        faulthandler.dump_traceback_later(40, exit=True)
        return pid

    batches = [{"x": torch.full((1000,), i), "i": i} for i in range(20)]

    def check(got):
        assert len(got) == len(batches), len(got)
        for g, e in zip(got, batches):
            assert torch.equal(g["x"], e["x"]) and g["i"] == e["i"]
"""


@pytest.mark.parametrize("state", ["iterated", "mid-epoch", "blocked-producer", "fresh"])
@pytest.mark.parametrize("child_exit", ["sys.exit", "os._exit"])
def test_a_forked_child_gets_its_batches_and_exits(state, child_exit):
    out = run_child(WAIT_PRODUCER_BLOCKED + textwrap.dedent(_FORK_PRELUDE + """
    pf = prefetch.Prefetcher(batches, device="cpu", depth=2, num_threads=2)
    if "{state}" == "iterated":
        check(list(pf))
    it = None
    if "{state}" in ("mid-epoch", "blocked-producer"):
        it = iter(pf)
        next(it)
        if "{state}" == "blocked-producer":
            wait_producer_blocked(pf, 2)  # blocked on the full ring, holding engine locks
    pid = fork()
    if pid == 0:
        code = 0
        try:
            if it is not None:
                try:
                    next(it)
                    print("child: the inherited epoch went on", flush=True)
                    code = 3
                except RuntimeError as exc:
                    assert "fork" in str(exc), exc
            check(list(pf))
            check(list(pf))  # and the next epoch
            print("child ok", flush=True)
        except BaseException as exc:
            print("child failed: %r" % (exc,), flush=True)
            code = 2
        if "{child_exit}" == "os._exit":
            os._exit(code)
        sys.exit(code)  # the interpreter's exit, finalizers included
    print("child exit code", wait_child(pid), flush=True)
    if it is not None:  # the parent's epoch is still its own
        rest = list(it)
        assert len(rest) == len(batches) - 1, len(rest)
    check(list(pf))
    pf.close()
    print("parent ok", flush=True)
    """.format(state=state, child_exit=child_exit)), timeout=60)
    assert "child ok" in out.stdout, out.stdout + out.stderr
    assert "child exit code 0" in out.stdout, out.stdout + out.stderr
    assert "parent ok" in out.stdout and out.returncode == 0, out.stdout + out.stderr


def test_a_multiprocessing_fork_child_iterates_an_inherited_prefetcher():
    out = run_child(_FORK_PRELUDE + """
    import multiprocessing as mp
    pf = prefetch.Prefetcher(batches, device="cpu", depth=2)
    check(list(pf))

    def work(q):
        got = list(pf)
        q.put([(int(b["x"][0]), b["i"]) for b in got])

    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=work, args=(q,))
    p.start()
    got = q.get(timeout=20)
    p.join(20)
    assert got == [(i, i) for i in range(20)], got
    assert p.exitcode == 0, p.exitcode
    print("ok", flush=True)
    """, timeout=60)
    assert "ok" in out.stdout and out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("state", ["iterated", "mid-epoch"])
def test_a_forked_child_iterates_an_inherited_array_loader(state):
    out = run_child(_FORK_PRELUDE + """
    images = torch.arange(600 * 4, dtype=torch.uint8).reshape(600, 4)
    labels = torch.arange(600)
    loader = prefetch.ArrayLoader((images, labels), 50, shuffle=True, seed=3, depth=2)
    ref = [(x.clone(), y.clone()) for x, y in loader]
    loader.set_epoch(0)
    if "{state}" == "mid-epoch":
        it = iter(loader)
        next(it)
        time.sleep(0.2)
    pid = fork()
    if pid == 0:
        try:
            loader.set_epoch(0)
            got = list(loader)
            assert len(got) == len(ref)
            for (x, y), (rx, ry) in zip(got, ref):
                assert torch.equal(x, rx) and torch.equal(y, ry)
            print("child ok", flush=True)
            sys.exit(0)
        except Exception as exc:
            print("child failed: %r" % (exc,), flush=True)
            sys.exit(2)
    print("child exit code", wait_child(pid), flush=True)
    loader.close()
    """.format(state=state), timeout=60)
    assert "child ok" in out.stdout and "child exit code 0" in out.stdout, out.stdout + out.stderr
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.cuda
def test_a_forked_child_of_a_cuda_prefetcher_gets_a_clear_error():
    require_cuda()
    out = run_child(_FORK_PRELUDE + """
    pf = prefetch.Prefetcher(batches, device="cuda", depth=2)
    assert len(list(pf)) == len(batches)
    pid = fork()
    if pid == 0:
        try:
            iter(pf)
            print("child: no error", flush=True)
        except RuntimeError as exc:
            print("child error:", exc, flush=True)
        pf.close()
        os._exit(0)
    print("child exit code", wait_child(pid), flush=True)
    got = list(pf)
    assert len(got) == len(batches) and got[0]["x"].is_cuda
    print("parent ok", flush=True)
    """, timeout=60)
    assert "child error:" in out.stdout and "fork" in out.stdout, out.stdout + out.stderr
    assert "child exit code 0" in out.stdout and "parent ok" in out.stdout, out.stdout + out.stderr


def test_a_forked_child_of_a_cuda_process_never_frees_what_it_inherited():
    """prefetch/_engine/forked_children.py: a child forked while CUDA is initialised collects
    none of the objects it inherited (freeing an inherited CUDA tensor there aborts the child: a
    DataLoader worker on the second H200 run); a child of a process without CUDA still does, and
    so does the parent. CUDA's state is simulated (this runs without a GPU): the hook asks torch
    whether CUDA is initialised, and the garbage is a cycle whose finaliser writes to a pipe."""
    out = run_child("""
        import gc, os, torch, prefetch

        r, w = os.pipe()

        class Marker:
            def __del__(self):
                os.write(w, b"x")

        def finalised_in_a_forked_child(cuda):
            torch.cuda.is_initialized = lambda: cuda
            gc.disable()
            m = Marker()
            m.cycle = m
            del m  # garbage, in a cycle: only the collector frees it
            pid = os.fork()
            if pid == 0:
                gc.enable()
                gc.collect()
                os._exit(0)
            os.waitpid(pid, 0)
            os.set_blocking(r, False)
            try:
                got = os.read(r, 16)
            except BlockingIOError:
                got = b""
            gc.enable()
            gc.collect()  # the parent frees it: the marker works
            os.set_blocking(r, True)
            assert os.read(r, 16) == b"x"
            return got

        print("with cuda", finalised_in_a_forked_child(True))
        print("without cuda", finalised_in_a_forked_child(False))
    """)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "with cuda b''" in out.stdout and "without cuda b'x'" in out.stdout, out.stdout
