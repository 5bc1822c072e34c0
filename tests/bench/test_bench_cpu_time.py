"""The workers section's CPU time of the DataLoader workers (``workers.children_cpu_s``): a worker
that ends between two reads — an epoch's non-persistent workers — still counts (a new user's
trial saw 0 µs an image for a pipeline with 2 workers: their time left with them)."""
import multiprocessing
import os
import time

import pytest

from prefetch.bench.workers import children_cpu_s


def _spin(seconds):
    # CPU time, not wall: spin until the process itself has used `seconds` of CPU.
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="children_cpu_s reads /proc")
def test_a_child_that_ends_between_two_reads_counts_its_whole_cpu_time():
    before = children_cpu_s()
    child = multiprocessing.get_context("fork").Process(target=_spin, args=(0.2,))
    child.start()
    child.join()
    assert child.exitcode == 0
    # The child used 0.2 s of CPU (10 ms ticks, so at least 0.19 counted) and is gone: only the
    # reaped children's time (os.times()) can hold it.
    assert children_cpu_s() - before >= 0.19


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="children_cpu_s reads /proc")
def test_a_live_child_counts_and_is_not_counted_twice_once_it_ends():
    ready, go = multiprocessing.get_context("fork").Event(), multiprocessing.get_context("fork").Event()

    def work():
        _spin(0.2)
        ready.set()
        go.wait(30)
        _spin(0.2)

    child = multiprocessing.get_context("fork").Process(target=work)
    before = children_cpu_s()
    child.start()
    assert ready.wait(30)
    middle = children_cpu_s()  # alive, 0.2 s used: read from /proc
    go.set()
    child.join()
    after = children_cpu_s()   # ended, 0.4 s in all: read from os.times()
    assert middle - before >= 0.19
    assert 0.38 <= after - before <= 0.6  # its whole time once, not 0.2 + 0.4
