"""A pytest plugin for gpu_check.sh's tests stage: a time limit per test instead of one for the
whole stage, and the number of tests collected (so the stage can say how many of them ran).

    python -m pytest -p pytest_limits --test-limit 60 --collected-file F -n 1 ...
    (benchmarks/gpu on PYTHONPATH)

The limit is the suite's own mechanism, made to end the test: the suite's pytest configuration
bounds a stuck test with faulthandler_timeout (it prints every thread's stack); here
faulthandler.dump_traceback_later(limit, exit=True) does that and then ends the process. Its
watchdog is a C thread that needs no GIL, so it also ends a test stuck in C++ or CUDA with the
GIL held, where pytest-timeout's signal (a Python handler) or thread method (a Python thread)
would wait. Under pytest-xdist (the stage runs `-n 1 --max-worker-restart`) the ended worker is
reported as a failure of that test ("worker crashed") and replaced, and the next tests run; without
xdist the whole run ends there. The limit covers a test's setup, call and teardown. The suite's
faulthandler_timeout must be off (-o faulthandler_timeout=0): faulthandler keeps one timer per
process, and pytest's would replace this one.
"""
import faulthandler
import os
import sys

import pytest

_stderr = []  # a copy of the real stderr: pytest's capture points fd 2 elsewhere during a test


def pytest_addoption(parser):
    group = parser.getgroup("gpu_check")
    group.addoption("--test-limit", type=float, default=None,
                    help="seconds a test (setup, call, teardown) may take before its process is "
                         "ended with every thread's stack printed")
    group.addoption("--collected-file", default=None,
                    help="a file to write the number of tests collected to")


def pytest_configure(config):
    # As pytest's own faulthandler plugin does: capture is suspended here, fd 2 is the real one.
    if config.getoption("test_limit"):
        _stderr.append(os.fdopen(os.dup(sys.stderr.fileno()), "w"))


def pytest_unconfigure(config):
    faulthandler.cancel_dump_traceback_later()
    while _stderr:
        _stderr.pop().close()


def pytest_collection_finish(session):
    # Under xdist the workers collect (the controller has no items); each writes the same count.
    path = session.config.getoption("collected_file")
    if path and session.items:
        tmp = "%s.%d.tmp" % (path, os.getpid())
        with open(tmp, "w") as f:
            f.write("%d\n" % len(session.items))
        os.replace(tmp, path)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    limit = item.config.getoption("test_limit")
    if limit and limit > 0 and _stderr:
        # faulthandler heads the stacks with "Timeout (0:01:00)!"; xdist names the test.
        faulthandler.dump_traceback_later(limit, exit=True, file=_stderr[0])
    # None: pytest's own protocol runs the test; the timer is cancelled in the hook below.


def pytest_runtest_logfinish(nodeid, location):
    faulthandler.cancel_dump_traceback_later()
