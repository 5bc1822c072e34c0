"""The test helpers that diagnose a crash on a machine we rarely get (tests/helpers.py)."""
import shutil

import pytest

from .conftest import SANITIZED
from .helpers import native_backtrace, run_child

CRASH = """
    import ctypes
    ctypes.string_at(0)
"""


@pytest.mark.skipif(not (shutil.which("cuda-gdb") or shutil.which("gdb")), reason="no debugger")
@pytest.mark.skipif(SANITIZED, reason="ASan turns the SIGSEGV into its own report and exit 1")
def test_native_backtrace_shows_where_a_child_died_of_a_signal():
    out = run_child(CRASH, timeout=60)
    assert out.returncode < 0  # the signal, not an exception
    trace = native_backtrace(CRASH, timeout=60)
    assert "backtrace ---" in trace and "SIGSEGV" in trace and "#0" in trace, trace


@pytest.mark.skipif(not SANITIZED, reason="the forkserver set-up of the sanitized run (conftest)")
def test_the_sanitized_runs_forkserver_has_torch_loaded_and_one_thread():
    # Workers forked from it skip importing torch (conftest); fork() under ASan is safe only
    # from a single-threaded process.
    import multiprocessing
    import os
    import time
    from multiprocessing import forkserver

    starter = multiprocessing.get_context("forkserver").Process(target=os.getpid)
    starter.start()  # starts the forkserver
    starter.join()
    pid = forkserver._forkserver._forkserver_pid
    deadline = time.monotonic() + 120
    while True:  # the preload runs after the forkserver starts
        with open("/proc/%d/maps" % pid) as f:
            maps = f.read()
        if "libtorch_cpu" in maps and "prefetch/_C." in maps:
            break
        assert time.monotonic() < deadline, "the forkserver never loaded torch and prefetch"
        time.sleep(0.2)
    time.sleep(1)  # any thread an import would start
    threads = os.listdir("/proc/%d/task" % pid)
    assert len(threads) == 1, threads


def test_a_childs_dataloader_workers_start_as_pytests_do():
    # A child interpreter (run_child) starts its DataLoader workers the way this process does:
    # by forkserver in the sanitized run, where a worker forked from a threaded child can
    # deadlock in ASan's allocator (tests/sanitized_workers.py; a CI run hung so once).
    import multiprocessing

    body = """
        import multiprocessing, torch
        from tests.engine.test_failed_epoch_release import Bad
        loader = torch.utils.data.DataLoader(Bad(), batch_size=4, num_workers=1)
        assert next(iter(loader)).tolist() == [[0], [1], [2], [3]]
        print("start method:", multiprocessing.get_start_method())
    """
    out = run_child(body, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "start method: %s" % multiprocessing.get_start_method() in out.stdout, out.stdout
    assert ("forkserver" in out.stdout) == SANITIZED, out.stdout
