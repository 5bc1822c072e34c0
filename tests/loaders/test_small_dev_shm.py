"""Under Docker's default 64 MB /dev/shm (a private tmpfs of that size mounted in a new mount
namespace: needs root and unshare, skipped otherwise): collate.samples's batches and the worker
ring's memory come from memfd_create and work; where /dev/shm is still used, a batch it cannot
hold is a clear error within seconds — naming /dev/shm, its size, what the batch needs and the
fixes — never a hang (the DataLoader's queue feeder thread used to die, and the consumer waited
for good)."""
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest

from ..conftest import SANITIZED

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _can_mount():
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m none /dev/shm"],
                           capture_output=True, timeout=30)
    return probe.returncode == 0


pytestmark = [
    pytest.mark.skipif(not _can_mount(), reason="needs root and unshare -m to mount a small /dev/shm"),
    # Children in their own mount namespace, workers of every start method: the regular run's.
    pytest.mark.skipif(SANITIZED, reason="multi-process: regular run only"),
]


def run_with_small_shm(body, size="64m", timeout=90):
    code = textwrap.dedent("""
        import faulthandler
        faulthandler.dump_traceback_later(%d, exit=True)
    """ % (timeout - 10)) + textwrap.dedent(body)
    # A file, not -c: spawned children import the script's __main__ again.
    fd, path = tempfile.mkstemp(suffix=".py")
    with os.fdopen(fd, "w") as f:
        f.write(code)
    script = "mount -t tmpfs -o size=%s none /dev/shm && exec \"$0\" \"$1\"" % size
    try:
        return subprocess.run(["unshare", "-m", "sh", "-c", script, sys.executable, path],
                              capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                              env=dict(os.environ, PYTHONPATH=ROOT))
    except subprocess.TimeoutExpired as exc:
        pytest.fail("hung under a small /dev/shm; output:\n%s\n%s" % (exc.stdout, exc.stderr))
    finally:
        os.unlink(path)


_DATASET = """
    import time, torch, prefetch
    from torch.utils.data import DataLoader, Dataset

    class Images(Dataset):
        def __len__(self):
            return 256 * 6

        def __getitem__(self, i):
            return torch.full((224, 224, 3), i % 251, dtype=torch.uint8), i
"""


def _iterate_a_dataloader(collate_fn, timeout=0):
    return run_with_small_shm(_DATASET + """
    loader = DataLoader(Images(), batch_size=256, num_workers=2, collate_fn=%s, timeout=%d)
    try:
        seen = []
        for images, index in loader:
            images = torch.stack(list(images)) if loader.collate_fn is prefetch.collate.samples else images
            assert torch.equal(images[:, 100, 100, 1], (index %% 251).to(torch.uint8))
            seen += index.tolist()
        print("complete" if seen == list(range(256 * 6)) else "wrong indices")
    except RuntimeError as e:
        print("failed:", type(e).__name__)
    """ % (collate_fn, timeout))


def test_a_dataloader_with_collate_samples_works_where_default_collate_cannot():
    """Six batches of 256 224x224x3 images (36.8 MB each) with two workers: default_collate's
    batches do not fit a 64 MB /dev/shm; collate.samples's travel in memfd blocks, exact. Each in
    a /dev/shm of its own: what the failed loader's workers leave there (their batches in flight)
    would otherwise decide whether the next loader can make even its queue's semaphore.
    default_collate fails in one of two ways, by the timing of the workers' batches: a worker's
    allocation raises (RuntimeError in the loop), or the worker queue's feeder thread dies pickling
    the batch and the loop waits for good (seen once with 4 pytest processes beside it); the
    DataLoader's own timeout turns the second into its RuntimeError too."""
    default = _iterate_a_dataloader("None", timeout=20)
    assert default.returncode == 0, default.stdout + default.stderr
    assert default.stdout.split("\n")[0] == "failed: RuntimeError", default.stdout + default.stderr
    samples = _iterate_a_dataloader("prefetch.collate.samples")
    assert samples.returncode == 0, samples.stdout + samples.stderr
    assert samples.stdout.split("\n")[0] == "complete", samples.stdout + samples.stderr


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_prefetcher_over_two_workers_completes_its_epochs_exactly(context):
    """The issue's case: it hung. Two epochs of six 36.8 MB batches through the worker ring under
    a 64 MB /dev/shm, every image checked, most batches through the ring itself."""
    out = run_with_small_shm(_DATASET + """
    if __name__ == "__main__":
        loader = DataLoader(Images(), batch_size=256, num_workers=2,
                            collate_fn=prefetch.collate.samples, multiprocessing_context=%r)
        with prefetch.Prefetcher(loader, device="cpu") as pf:
            for epoch in range(2):
                seen = []
                for images, index in pf:
                    assert torch.equal(images[:, ::37, ::37, :],
                                       (index %% 251).to(torch.uint8).view(-1, 1, 1, 1).expand(-1, 7, 7, 3))
                    seen += index.tolist()
                assert seen == list(range(256 * 6)), seen[:10]
            print("ring batches", pf.stats()["worker_ring_batches"])
    """ % context, timeout=150)
    assert out.returncode == 0, out.stdout + out.stderr
    assert int(out.stdout.split()[-1]) >= 6, out.stdout


def test_without_memfd_a_full_dev_shm_is_a_clear_error_instead_of_a_hang():
    """Where memfd_create is missing, the samples go to /dev/shm in the worker itself, so a full
    one raises SharedMemoryError there (naming /dev/shm's size, what the batch needs and the
    fixes) instead of killing the queue's feeder thread while the consumer waits forever."""
    out = run_with_small_shm("""
    import os
    del os.memfd_create  # before prefetch looks for it; forked workers inherit the absence
    """ + _DATASET + """
    loader = DataLoader(Images(), batch_size=256, num_workers=2, collate_fn=prefetch.collate.samples)
    start = time.monotonic()
    try:
        for batch in loader:
            pass
        print("no error")
    except prefetch.SharedMemoryError as e:
        print("raised after %.1f s" % (time.monotonic() - start))
        print(str(e).splitlines()[-1])
    """)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("raised after") and float(lines[0].split()[2]) < 20, out.stdout
    message = lines[1]
    assert "/dev/shm holds 64.0 MB" in message and "this batch needs 36.8 MB" in message, message
    assert "--shm-size" in message, message


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_a_shared_block_is_not_bounded_by_dev_shm_and_reaches_every_kind_of_worker(method):
    """The worker ring's memory (memfd_create): 256 MB under a 64 MB /dev/shm, written by a child
    of each start method and read back by the parent."""
    out = run_with_small_shm("""
    import multiprocessing as mp
    from prefetch.sources.shared_block import SharedBlock

    def child(block, q):
        block.tensor[-4096:] = 7
        q.put(int(block.tensor[:4096].sum()))

    if __name__ == "__main__":
        block = SharedBlock(256 << 20)
        block.tensor[:4096] = 1
        ctx = mp.get_context(%r)
        q = ctx.Queue()
        p = ctx.Process(target=child, args=(block, q))
        p.start()
        print(block.memfd, q.get(timeout=60), int(block.tensor[-4096:].sum()))
        p.join()
    """ % method)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.split() == ["True", "4096", str(7 * 4096)], out.stdout + out.stderr
