"""The typed boundary between Python and the C++ engine: Leaf (what flatten builds and the engine
takes), _C.NextStatus (what Engine.next returns first), and stats() naming the engine's fields."""
import threading

import numpy as np
import pytest
import torch

import prefetch
from prefetch import _C
from prefetch._core.tree import Leaf, flatten, ndarray_to_tensor


@pytest.fixture
def engine():
    e = _C.Engine("cpu", -1, 2, 1, 0)
    yield e
    e.close()


def test_flatten_builds_leaves_with_names_values_and_no_rows():
    samples = prefetch.Samples([torch.ones(2), torch.zeros(2)])
    spec, leaves, moves = flatten({"x": torch.arange(3), "y": [np.zeros(2), samples], "n": 1})
    assert moves == []
    assert all(isinstance(leaf, Leaf) for leaf in leaves)
    assert [leaf.name for leaf in leaves] == ["batch['x']", "batch['y'][0]", "batch['y'][1]"]
    assert all(leaf.rows is None for leaf in leaves)
    assert torch.equal(leaves[0].value, torch.arange(3))
    assert isinstance(leaves[2].value, list) and len(leaves[2].value) == 2


def test_leaf_documents_its_fields():
    assert Leaf._fields == ("name", "value", "rows", "mapped")
    assert Leaf("a", torch.ones(1)).rows is None and Leaf("a", torch.ones(1)).mapped is None
    for word in ("name", "value", "rows", "gather", "check_rows", "mapped", "StoreError"):
        assert word in Leaf.__doc__


def test_a_leaf_over_a_mapped_file_is_checked_before_it_is_read(engine, tmp_path):
    """`mapped` = (fd, size, path): the engine compares the file's size now (fstat) with `size`
    before its threads read the leaf; another size is prefetch.store.StoreError naming the path
    and both sizes (here the file is whole and the size given is wrong: nothing can fault)."""
    from prefetch.store import StoreError

    path = tmp_path / "values.bin"
    path.write_bytes(bytes(range(64)))
    data = ndarray_to_tensor(np.memmap(path, np.uint8, mode="r"), "v")
    spans = torch.tensor([[3, 5], [10, 2]])
    with open(path, "rb") as f:
        token = engine.start_epoch()
        _C._testing.submit(engine, token, [Leaf("v", data, spans, (f.fileno(), 64, str(path)))])
        assert engine.next(token, 5.0)[2][0].tolist() == [3, 4, 5, 6, 7, 10, 11]
        with pytest.raises(StoreError, match=r"store file %s is 64 bytes now, 65 when it was "
                                             r"opened" % str(path)):
            _C._testing.submit(engine, token, [Leaf("v", data, spans, (f.fileno(), 65, str(path)))])
        for bad, error in (((f.fileno(), 64), TypeError), ("x", TypeError),
                           ((-1, 64, "p"), ValueError), ((f.fileno(), -1, "p"), ValueError)):
            with pytest.raises(error, match="mapped"):
                _C._testing.submit(engine, token, [Leaf("v", data, spans, bad)])


def test_next_status_is_an_enum_with_every_outcome(engine):
    assert set(_C.NextStatus.__members__) == {"BATCH", "END", "FAILED", "TIMEOUT", "CANCELLED"}
    token = engine.start_epoch()
    assert engine.next(token, 0.0)[0] == _C.NextStatus.TIMEOUT
    _C._testing.submit(engine, token, [Leaf("x", torch.arange(4))])
    status, seq, tensors = engine.next(token, 5.0)
    assert status == _C.NextStatus.BATCH and seq == 0
    assert torch.equal(tensors[0], torch.arange(4))
    engine.finish(token, False)
    assert engine.next(token, 5.0) == (_C.NextStatus.END, 0, [])
    failed = engine.start_epoch()
    engine.finish(failed, True)
    assert engine.next(failed, 5.0)[0] == _C.NextStatus.FAILED
    assert engine.next(token, 5.0)[0] == _C.NextStatus.CANCELLED  # an older epoch
    assert _C.NextStatus.BATCH != "batch"  # no string statuses left


def test_engine_takes_leaves_of_every_form(engine):
    token = engine.start_epoch()
    data = torch.arange(12).reshape(6, 2)
    leaves = [
        Leaf("t", torch.ones(3)),
        Leaf("s", [torch.full((2,), float(i)) for i in range(3)]),
        Leaf("g", data, torch.tensor([5, 0, 5])),
    ]
    _C._testing.submit(engine, token, leaves)
    _, _, (t, s, g) = engine.next(token, 5.0)
    assert torch.equal(t, torch.ones(3))
    assert torch.equal(s, torch.tensor([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]))
    assert torch.equal(g, data[[5, 0, 5]])


def test_engine_refuses_what_is_not_a_leaf(engine):
    token = engine.start_epoch()
    with pytest.raises(TypeError, match=r"leaf 1 \(a tuple\) has no attribute 'name'.*Leaf"):
        _C._testing.submit(engine, token, [Leaf("ok", torch.ones(1)), ("x", torch.ones(2))])
    with pytest.raises(TypeError, match=r"leaf 0 \(a int\) has no attribute 'name'"):
        _C._testing.submit(engine, token, [3])


def test_gather_rows_out_of_range_name_the_leaf_position_and_index(engine):
    token = engine.start_epoch()
    with pytest.raises(prefetch.CollateError,
                       match=r"^prefetch: arrays\['x'\]: index 7 \(position 1 of the batch\) "
                             r"is out of range for 5 rows$"):
        _C._testing.submit(engine, token, [Leaf("arrays['x']", torch.zeros(5, 3), torch.tensor([0, 7]))])
    with pytest.raises(prefetch.CollateError, match=r"index -1 \(position 0 of the batch\)"):
        engine.stage(token, [Leaf("y", torch.zeros(5), torch.tensor([-1]))])


def test_stats_keys_are_the_public_names(engine):
    token = engine.start_epoch()
    blocked = threading.Event()

    def produce():
        for _ in range(3):  # depth 2: the third waits for the consumer
            _C._testing.submit(engine, token, [Leaf("x", torch.ones(4))])
        blocked.set()
        engine.finish(token, False)

    t = threading.Thread(target=produce)
    t.start()
    try:
        assert not blocked.wait(0.2)
        while engine.next(token, 5.0)[0] == _C.NextStatus.BATCH:
            pass
    finally:
        t.join()
    stats = engine.stats()
    assert set(stats) == {"submitted", "delivered", "bytes_collated", "collate_s", "slot_wait_s",
                          "allocate_s", "producer_blocked_s", "ring_growths", "packed_bytes"}
    assert stats["submitted"] == stats["delivered"] == 3
    assert stats["producer_blocked_s"] >= 0.1
