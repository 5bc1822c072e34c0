"""A store's values.bin truncated while a loader reads it (a cp or rsync --inplace over a store in
use) raises a StoreError naming the file and both sizes — it killed the process with SIGBUS: the
mapped pages past the new end fault when read. Each case runs in a child interpreter (a SIGBUS
would kill pytest), and the child then opens a good copy of the store and reads all of it."""
import pytest

from ..helpers import WAIT_PRODUCER_BLOCKED, run_child

pytest.importorskip("PIL.Image")

SETUP = WAIT_PRODUCER_BLOCKED + """
import io, os, shutil, sys
import numpy as np
import torch
from PIL import Image
import prefetch
from prefetch.store import StoreError

def jpeg(seed):
    rng = np.random.default_rng(seed)
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(out, "JPEG")
    return out.getvalue()

root = ROOT_DIR
files = [jpeg(k) for k in range(64)]
good = prefetch.pack([(d, k % 5) for k, d in enumerate(files)], os.path.join(root, "good"),
                     progress=False)
shutil.copytree(os.path.join(root, "good"), os.path.join(root, "used"))
used = prefetch.open_store(os.path.join(root, "used"))
values = os.path.join(root, "used", "values.bin")
size = os.path.getsize(values)

def expect_store_error(fn):
    try:
        fn()
    except StoreError as e:
        assert values in str(e) and "%d bytes now" % os.path.getsize(values) in str(e), e
        assert "%d when it was opened" % size in str(e), e
        return e
    raise AssertionError("no StoreError")

def whole_store_reads_back(path):
    store = prefetch.open_store(path, verify=True)
    loader = prefetch.ArrayLoader(store, 8, shuffle=True, seed=3)
    got = {}
    for images, labels in loader:
        for k, sample in enumerate(images.tensors()):
            got[len(got)] = bytes(sample.numpy())
    assert sorted(got.values()) == sorted(files)
    loader.close()
"""


def run(tmp_path, body):
    setup = SETUP.replace("ROOT_DIR", repr(str(tmp_path)))
    out = run_child(setup + body + "\nprint('done')\n", timeout=90)
    assert out.returncode == 0, "exit %d (-7 is SIGBUS)\n%s\n%s" % (out.returncode, out.stdout,
                                                                     out.stderr)
    assert "done" in out.stdout, out.stdout
    return out


def test_truncated_while_the_producer_waits_for_room_is_a_store_error(tmp_path):
    """The hardest moment: the producer has taken the next batch from the source and waits for a
    free slot (the ring is full) when the file is cut. The check runs once there is room, right
    before the engine's threads read: a StoreError, where the batch read the cut pages (SIGBUS)."""
    run(tmp_path, """
loader = prefetch.ArrayLoader(used, 8, shuffle=False, depth=2)
it = iter(loader)
first = next(it)
wait_producer_blocked(loader, 2)
os.truncate(values, size // 3)
got = 1
def rest():
    global got
    for _ in it:
        got += 1
e = expect_store_error(rest)
print("after", got, "batches:", e)
assert got < len(loader)
# Every later epoch and store[i] refuse as well, naming the file; nothing faults.
expect_store_error(lambda: list(loader))
expect_store_error(lambda: used[0])
expect_store_error(used.check_values_file)
loader.close()
whole_store_reads_back(os.path.join(root, "good"))
""")


@pytest.mark.parametrize("resident", ["host", "device"])
def test_truncated_between_epochs_is_a_store_error_on_both_residencies(tmp_path, resident):
    """Cut between two epochs (and on the device path on the CPU, where each batch gathers from
    the mapping in the consumer's thread): the next epoch raises before reading; a store opened
    again after the file was restored reads back whole."""
    run(tmp_path, """
loader = prefetch.ArrayLoader(used, 8, shuffle=True, resident=%r)
assert len(list(loader)) == len(loader)
with open(values, "r+b") as f:
    f.truncate(size - 1)
expect_store_error(lambda: list(loader))
loader.close()
# Grown back to its size (rsync finishing): the old loader would read a rewritten file; a new
# open of the now whole store reads it.
shutil.copyfile(os.path.join(root, "good", "values.bin"), values)
whole_store_reads_back(os.path.join(root, "used"))
""" % resident)


def test_a_file_replaced_by_rename_is_not_an_error(tmp_path):
    """Writing the new store beside the old one and renaming it into place (what pack does, and
    rsync without --inplace) leaves the mapped inode whole: the open store keeps reading its own
    bytes, with no error."""
    run(tmp_path, """
loader = prefetch.ArrayLoader(used, 8, shuffle=False)
it = iter(loader)
next(it)
tmp = values + ".new"
with open(tmp, "wb") as f:
    f.write(b"x" * 10)
os.replace(tmp, values)
rest = [bytes(s.numpy()) for images, _ in it for s in images.tensors()]
assert rest == files[8:]
loader.close()
""")


def test_a_store_opened_in_memory_is_not_touched_by_a_truncation(tmp_path):
    """open_store(in_memory=True) reads values.bin instead of mapping it: cut afterwards, the
    store still reads back whole, with no error and no fault."""
    run(tmp_path, """
store = prefetch.open_store(os.path.join(root, "used"), in_memory=True)
os.truncate(values, 0)
loader = prefetch.ArrayLoader(store, 8, shuffle=False)
got = [bytes(s.numpy()) for images, _ in loader for s in images.tensors()]
assert got == files
assert [bytes(store[i][0].numpy()) for i in range(len(store))] == files
loader.close()
""")


def test_the_host_stage_reads_check_the_file_too(tmp_path):
    """Before a copy to a GPU, a decode transform runs as a host stage: the batch's byte ranges
    are read from the mapping in Python (tree.host_batch), not by the engine. That read checks
    the file first, as the engine does (the leaf's MappedGuard)."""
    run(tmp_path, """
from prefetch._core.tree import Leaf, PreparedBatch, flatten, host_batch
from prefetch.store import mapped_file
guard = mapped_file(used.values).leaf_guard()
spans = torch.tensor([[int(used.offsets[3]), int(used.offsets[4] - used.offsets[3])]])
spec, _, _ = flatten(torch.zeros(1))
batch = PreparedBatch(spec, [Leaf("values", used.values, spans, guard)], [])
assert bytes(host_batch(batch).numpy()) == files[3]
os.truncate(values, 10)
expect_store_error(lambda: host_batch(batch))
""")


def test_the_mapped_file_is_closed_with_its_mapping(tmp_path):
    """Each open store holds values.bin open for the size check; dropping the store (and the
    loader over it) closes it: 50 opens leave the process's descriptors as they were and no
    mapping registered."""
    import gc
    import io
    import os

    import numpy as np
    from PIL import Image

    import prefetch
    from prefetch.store import mapped

    out = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(out, "JPEG")
    prefetch.pack([out.getvalue()] * 3, tmp_path / "s", progress=False)
    gc.collect()
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        store = prefetch.open_store(tmp_path / "s")
        with prefetch.ArrayLoader(store, 2) as loader:
            assert sum(len(images) for (images,) in loader) == 3
        del store, loader
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) == before
    assert not mapped._MAPPED
