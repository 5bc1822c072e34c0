"""The workers section's CPU time of the DataLoader workers (``epochs.children_cpu_s``): a worker
that ends between two reads — an epoch's non-persistent workers — still counts (a new user's
trial saw 0 µs an image for a pipeline with 2 workers: their time left with them).

Each scenario runs in a fresh interpreter, whose only children are the scenario's own (a pytest
worker may have other children from earlier tests). The kernel counts CPU time in 10 ms ticks,
sampled, so a child that used 0.2 s of CPU may show 0.18 or 0.21: the bounds leave that margin."""
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="children_cpu_s reads /proc")

SCENARIO = textwrap.dedent('''
    import multiprocessing, time
    from prefetch.bench.epochs import children_cpu_s

    def spin(seconds):  # CPU time, not wall
        end = time.process_time() + seconds
        while time.process_time() < end:
            pass

    def work(ready, go, pause):
        spin(0.2)
        if pause:
            ready.set()
            go.wait(30)
            spin(0.2)

    ctx = multiprocessing.get_context("fork")
    ready, go = ctx.Event(), ctx.Event()
    pause = {pause}
    before = children_cpu_s()
    child = ctx.Process(target=work, args=(ready, go, pause))
    child.start()
    if pause:
        assert ready.wait(30)
        middle = children_cpu_s()
        go.set()
    child.join()
    assert child.exitcode == 0
    after = children_cpu_s()
    print(round((middle if pause else after) - before, 3), round(after - before, 3))
''')


def _run(pause):
    out = subprocess.run([sys.executable, "-c", SCENARIO.format(pause=pause)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [float(x) for x in out.stdout.split()]


def test_a_child_that_ends_between_two_reads_counts_its_whole_cpu_time():
    # 0.2 s of CPU, the child gone at the second read: only the reaped children's time
    # (os.times()) can hold it.
    _, total = _run(pause=False)
    assert total >= 0.15


def test_a_live_child_counts_and_is_not_counted_twice_once_it_ends():
    # 0.2 s read while it lives (/proc), 0.4 s in all once it has ended (os.times()); counted
    # twice, the second read would be 0.6.
    middle, total = _run(pause=True)
    assert middle >= 0.15
    assert 0.33 <= total <= 0.5
