"""The worker ring (prefetch/sources/worker_ring.py): a Prefetcher over a DataLoader with workers and
``collate_fn=prefetch.collate.samples`` yields exactly what plain iteration yields, in every
DataLoader mode, with the batches really coming through the shared slots. Faults (killed
workers, exits, leaks) are in test_worker_ring_faults.py."""
import collections
import copy
import dataclasses
import functools
import gc
import os
import pickle
import time
import types
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

import prefetch
from prefetch.sources import worker_ring as _worker_ring
from prefetch._core.extension import _C
from prefetch._core.tree import flatten

from ..conftest import SANITIZED, require_cuda


class Images(Dataset):
    """Content derived from the index, so any slot overwritten or mixed up shows."""

    def __init__(self, n=96, shape=(6, 5, 3)):
        self.n, self.shape = n, shape

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        image = torch.randint(0, 256, self.shape, dtype=torch.uint8, generator=g)
        return image, i, torch.rand(2, generator=g, dtype=torch.float64)


class Shards(IterableDataset):
    def __init__(self, n=90):
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, self.n, step):
            yield Images()[i]


Pair = collections.namedtuple("Pair", "image label")


@dataclasses.dataclass
class Record:
    image: torch.Tensor
    label: int
    name: str


class Structured(Dataset):
    def __len__(self):
        return 40

    def __getitem__(self, i):
        image = Images()[i][0]
        return {"pair": Pair(image, i), "name": "s%d" % i,
                "mask": torch.full((4, 4), i % 7, dtype=torch.int16)}


def loader(ds, **kw):
    kw.setdefault("batch_size", 8)
    kw.setdefault("num_workers", 2)
    return DataLoader(ds, collate_fn=prefetch.collate.samples, **kw)


def reference(ds, **kw):
    kw.setdefault("batch_size", 8)
    return list(DataLoader(ds, num_workers=0, **kw))


def assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        gl, wl = flatten(g)[1], flatten(w)[1]
        assert flatten(g)[0] == flatten(w)[0] or type(g) is type(w)
        assert len(gl) == len(wl)
        for a, b in zip(gl, wl):
            assert a.value.dtype == b.value.dtype and torch.equal(a.value, b.value), a.name


def streamed(pf):
    """One epoch, each batch copied and let go at once, as a training loop does (on the CPU
    device a batch is its slot until dropped; list(pf) would keep every slot)."""
    return [copy.deepcopy(b) for b in pf]


def ring_batches(pf):
    return pf.stats().get("worker_ring_batches", 0)


@pytest.mark.parametrize("context", [
    pytest.param("fork", marks=pytest.mark.skipif(SANITIZED, reason="fork() under ASan: conftest")),
    "spawn", "forkserver"])
@pytest.mark.parametrize("persistent", [False, True])
def test_every_context_yields_plain_iteration(context, persistent):
    ds = Images()
    dl = loader(ds, multiprocessing_context=context, persistent_workers=persistent)
    with prefetch.Prefetcher(dl, device="cpu") as pf:
        for _ in range(3):
            assert_same(streamed(pf), reference(ds))
        # Blocks are made on the first epoch's first batches: the later epochs are ring but for
        # the W * P batches each primes while the ring is still paused, which may find it so
        # (test_the_ring_stays_in_use_across_epoch_changes).
        stats = pf.stats()
        assert stats["worker_ring_batches"] >= 2 * (len(dl) - 2 * 2)
        assert stats["worker_ring_fallbacks"] < len(dl)


@pytest.fixture
def copy_from_slot(monkeypatch):
    """The CUDA device's way on the CPU: each slot copied once by the engine (stage_packed) and
    freed when that copy has run, instead of handed out as the batch itself."""
    monkeypatch.setattr(_worker_ring, "LEASE_ON_CPU", False)


@pytest.mark.parametrize("prefetch_factor", [1, 4])
@pytest.mark.parametrize("lease", [True, False])
def test_prefetch_factor_sets_the_slots(prefetch_factor, lease, monkeypatch):
    monkeypatch.setattr(_worker_ring, "LEASE_ON_CPU", lease)
    ds = Images()
    dl = loader(ds, prefetch_factor=prefetch_factor, persistent_workers=True)
    with prefetch.Prefetcher(dl, device="cpu", depth=2) as pf:
        for _ in range(2):
            assert_same(streamed(pf), reference(ds))
        # W * P + depth + 2, and one more where the batch is the slot (docs/engine.md)
        assert pf.stats()["worker_ring_slots"] == 2 * prefetch_factor + 2 + 2 + lease
        assert ring_batches(pf) > 0


def test_iterable_dataset_with_workers():
    ds = Shards()
    dl = loader(ds)
    plain = list(DataLoader(ds, batch_size=8, num_workers=2))  # the same worker interleaving
    with prefetch.Prefetcher(dl, device="cpu") as pf:
        for _ in range(2):
            assert_same(streamed(pf), plain)
        assert ring_batches(pf) > 0


def _sorted_by_label(batches):
    return sorted(batches, key=lambda b: int(b[1][0]))


@pytest.mark.skipif("in_order" not in DataLoader.__init__.__code__.co_varnames,
                    reason="this torch's DataLoader has no in_order")
def test_out_of_order_delivery():
    ds = Images()
    dl = loader(ds, in_order=False, persistent_workers=True)
    with prefetch.Prefetcher(dl, device="cpu") as pf:
        for _ in range(2):
            assert_same(_sorted_by_label(streamed(pf)), reference(ds))
        assert ring_batches(pf) > 0


def test_drop_last_and_a_short_last_batch():
    ds = Images(n=45)
    with prefetch.Prefetcher(loader(ds, drop_last=True), device="cpu") as pf:
        assert_same(streamed(pf), reference(ds, drop_last=True))
    with prefetch.Prefetcher(loader(ds), device="cpu") as pf:
        for _ in range(2):
            got = streamed(pf)
            assert got[-1][0].shape[0] == 5
            assert_same(got, reference(ds))


def test_structures_round_trip():
    ds = Structured()
    with prefetch.Prefetcher(loader(ds, persistent_workers=True), device="cpu") as pf:
        for _ in range(2):
            got = streamed(pf)
            assert_same(got, reference(ds))
            assert isinstance(got[0]["pair"], Pair)
            assert got[0]["name"] == ["s%d" % i for i in range(8)]
        assert ring_batches(pf) > 0


class Box(collections.UserDict):
    pass


def test_what_a_worker_sends_holds_no_tensor():
    images = torch.zeros(8, 6, 5, 3, dtype=torch.uint8)
    batch = {"record": Record(images, 3, "x"), "box": Box(mask=images[:, 0]),
             "pair": Pair(prefetch.Samples(list(images)), torch.arange(8))}
    spec, leaves, _ = flatten(batch)
    stripped = _worker_ring._strip(spec)
    sent = pickle.dumps(stripped)
    assert len(sent) < 2000 and b"_rebuild_tensor" not in sent
    # The stripped spec rebuilds the same batch from the slot's tensors.
    from prefetch._core.tree import unflatten
    tensors = [torch.stack(leaf.value) if isinstance(leaf.value, list) else leaf.value
               for leaf in leaves]
    rebuilt = unflatten(stripped, tensors, [], torch.device("cpu"))
    assert isinstance(rebuilt["record"], Record) and rebuilt["record"].name == "x"
    assert torch.equal(rebuilt["record"].image, images) and rebuilt["record"].label == 3
    assert isinstance(rebuilt["box"], Box) and torch.equal(rebuilt["box"]["mask"], images[:, 0])
    assert torch.equal(rebuilt["pair"].image, images)
    assert batch["record"].image is images  # the batch itself untouched


def test_several_prefetchers_at_once_and_plain_iteration_afterwards():
    a, b = Images(n=64), Images(n=48, shape=(3, 3, 1))
    dla, dlb = loader(a, persistent_workers=True), loader(b)
    with prefetch.Prefetcher(dla, device="cpu") as pa, prefetch.Prefetcher(dlb, device="cpu") as pb:
        for _ in range(2):
            got_a, got_b = [], []
            ia, ib = iter(pa), iter(pb)
            for y, x in zip(ib, ia):  # interleaved; b is the shorter one
                got_a.append(x)
                got_b.append(y)
            got_a.extend(ia)
            assert_same(got_a, reference(a))
            assert_same(got_b, reference(b))
        assert ring_batches(pa) > 0 and ring_batches(pb) > 0
        # The DataLoader itself is untouched (the ring iterates a copy of it, with workers of
        # its own): a plain iteration yields exactly what collate.samples makes.
        assert dla.collate_fn is prefetch.collate.samples and dla._iterator is None
        plain = list(dla)
        want = [prefetch.collate.samples([a[i] for i in range(k, min(k + 8, len(a)))])
                for k in range(0, len(a), 8)]
        for g, w in zip(plain, want):
            assert isinstance(g[0], prefetch.Samples)
            assert all(torch.equal(s, t) for s, t in zip(g[0], w[0]))
        assert_same(streamed(pa), reference(a))  # and the Prefetcher after it


class Varying(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):  # the second half of the epoch has 4x larger samples
        side = 4 if i < 32 else 8
        return torch.full((side, side), i, dtype=torch.int32)


class Ragged(Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        return torch.zeros((3, 3) if i != 11 else (3,))  # another rank: no Ragged holds it


def test_a_bigger_batch_mid_epoch_falls_back_then_grows():
    ds = Varying()
    with prefetch.Prefetcher(loader(ds), device="cpu") as pf:
        for _ in range(2):
            assert_same(streamed(pf), reference(ds))
        stats = pf.stats()
        assert stats["worker_ring_bytes"] >= stats["worker_ring_slots"] * 8 * 8 * 8 * 4
        assert stats["worker_ring_batches"] > 0


def test_ragged_samples_raise_the_usual_collate_error():
    with prefetch.Prefetcher(loader(Ragged()), device="cpu") as pf:
        with pytest.raises(prefetch.CollateError, match=r"sample 3") as info:
            list(pf)
        assert "dataset index 11" in "\n".join(getattr(info.value, "__notes__", []))


def test_max_batch_bytes_is_enforced_with_workers_too():
    ds = Images()
    with prefetch.Prefetcher(loader(ds), device="cpu", max_batch_bytes=100) as pf:
        with pytest.raises(prefetch.CollateError, match="max_batch_bytes"):
            list(pf)


def test_worker_ring_false_keeps_the_per_sample_path():
    ds = Images()
    with prefetch.Prefetcher(loader(ds), device="cpu", worker_ring=False) as pf:
        assert_same(streamed(pf), reference(ds))
        assert "worker_ring_batches" not in pf.stats()


def test_persistent_workers_started_elsewhere_stay_the_dataloaders_and_the_ring_is_used():
    ds = Images()
    dl = loader(ds, persistent_workers=True)
    list(dl)  # the DataLoader's own persistent workers, running plain collate.samples
    own = dl._iterator
    with prefetch.Prefetcher(dl, device="cpu") as pf:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for _ in range(2):
                assert_same(streamed(pf), reference(ds))
        assert ring_batches(pf) > 0  # the ring's own workers wrote into it
        assert dl._iterator is own and all(w.is_alive() for w in own._workers)
        assert_plain(list(dl), plain_batches(ds))


def plain_batches(ds):
    """What iterating a DataLoader with collate.samples yields: Samples, never a SlotBatch."""
    return [prefetch.collate.samples([ds[i] for i in range(k, min(k + 8, len(ds)))])
            for k in range(0, len(ds), 8)]


def assert_plain(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert type(g) is type(w) and isinstance(g[0], prefetch.Samples), type(g)
        for a, b in zip(g, w):
            assert type(a) is type(b)
            if isinstance(a, prefetch.Samples):
                assert len(a) == len(b) and all(torch.equal(s, t) for s, t in zip(a, b))
            else:
                assert torch.equal(a, b)


@pytest.mark.parametrize("persistent", [False, True])
def test_the_dataloader_iterated_while_prefetchers_start_over_it_stays_plain(persistent):
    # Issue 26: the ring swapped the shared DataLoader's collate_fn from the producer thread
    # while its workers started, and a plain loop (or a second Prefetcher) started in that window
    # got the ring's SlotBatches (5 of 5 runs); with persistent workers, iterating the DataLoader
    # while a Prefetcher's epoch ran broke torch's iterator state ("Invalid iterator state").
    ds = Images(n=48)
    dl = loader(ds, persistent_workers=persistent)
    want = plain_batches(ds)
    with prefetch.Prefetcher(dl, device="cpu") as pa, prefetch.Prefetcher(dl, device="cpu") as pb:
        # (Forks from two threads at once: a plain worker's exit may be seen only when a ring
        # worker that inherited its sentinel pipe exits, up to torch's 5 s join timeout.)
        for _ in range(2):
            ia = iter(pa)  # the producer thread starts the ring's DataLoader iterator now
            plain = list(dl)  # and this thread iterates the same DataLoader at once
            ib = iter(pb)
            first = copy.deepcopy(next(ia))
            again = list(dl)  # mid-epoch of both Prefetchers (persistent: their reset)
            assert_plain(plain, want)
            assert_plain(again, want)
            assert_same([first] + [copy.deepcopy(b) for b in ia], reference(ds))
            assert_same([copy.deepcopy(b) for b in ib], reference(ds))
        assert ring_batches(pa) > 0 and ring_batches(pb) > 0
    assert dl.collate_fn is prefetch.collate.samples


def test_a_stateful_dataloaders_state_goes_through_the_rings_copy():
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    ds = Images(n=240)
    def make(**kw):
        kw.setdefault("num_workers", 2)
        kw.setdefault("collate_fn", prefetch.collate.samples)
        return sdl.StatefulDataLoader(ds, batch_size=8, shuffle=True,
                                      generator=torch.Generator().manual_seed(5), **kw)
    want = list(make(collate_fn=None))  # plain iteration: the same order, default_collate
    dl = make()
    with prefetch.Prefetcher(dl, device="cpu") as pf:
        it = iter(pf)
        got = [copy.deepcopy(next(it)) for _ in range(3)]
        state = pf.state_dict()
        del it
    assert dl._iterator is None  # the user's StatefulDataLoader was never iterated
    dl2 = make()
    with prefetch.Prefetcher(dl2, device="cpu") as pf2:
        pf2.load_state_dict(state)
        assert getattr(dl2, "next_iter_state", None) is None  # loaded into the ring's copy
        got += [copy.deepcopy(b) for b in pf2]
        assert ring_batches(pf2) > 0
    assert_same(got, want)


@pytest.mark.skipif(SANITIZED, reason="fork() of a threaded process under ASan: conftest")
def test_a_forked_child_closing_an_inherited_epoch_does_not_pause_the_parents_ring():
    # The workers of another DataLoader (forked while a kept exception held an epoch of this
    # ring) collect their copy of it: its close() must not write the parent's control words.
    ds = Images(n=160)
    with prefetch.Prefetcher(loader(ds), device="cpu") as pf:
        streamed(pf)  # the block exists: every batch of the next epoch can take the ring
        it = iter(pf)
        got = [copy.deepcopy(next(it))]
        epoch = pf.source.ring._batches()
        serial = pf.source.ring.iterator._prefetch_ring_serial
        assert epoch is not None and pf.source.ring.table.accepting(serial) is not None
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 1
            try:
                epoch.close()
                code = 0 if pf.source.ring.table.accepting(serial) is not None else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert pf.source.ring.table.accepting(serial) is not None
        before = pf.stats()["worker_ring_fallbacks"]
        got += [copy.deepcopy(b) for b in it]
        assert_same(got, reference(ds))
        assert pf.stats()["worker_ring_fallbacks"] == before


def test_a_forked_childs_copy_of_an_epoch_never_collects_the_dataloader_iterator(monkeypatch):
    # Collecting it in the child runs torch's __del__, whose shutdown sets the done event the
    # parent's workers share: they then drop every index and the parent's epoch waits forever
    # (the test above hung so in 2 runs of 15 before the iterator was kept).
    collected = []

    class Iterator:
        def __del__(self):
            collected.append(True)

    monkeypatch.setattr(_worker_ring, "_INHERITED_ITERATORS", [])
    epoch = _worker_ring._RingEpoch(types.SimpleNamespace(pid=os.getpid() + 1), Iterator(), 1)
    epoch.close()
    del epoch
    gc.collect()
    assert collected == [] and len(_worker_ring._INHERITED_ITERATORS) == 1


def test_transform_draws_are_the_same_through_the_ring():
    ds = Images(shape=(8, 8, 3))
    aug = dict(mean=(0.4, 0.5, 0.6), std=(0.2, 0.25, 0.3), hflip=0.5, seed=3)
    with prefetch.Prefetcher(loader(ds), device="cpu",
                             transform=prefetch.FusedAugment(**aug)) as ring, \
            prefetch.Prefetcher(loader(ds), device="cpu", worker_ring=False,
                                transform=prefetch.FusedAugment(**aug)) as plain:
        for _ in range(2):
            assert_same(streamed(ring), streamed(plain))
        assert ring_batches(ring) > 0


def test_close_shuts_down_persistent_workers_holding_the_ring():
    ds = Images()
    dl = loader(ds, persistent_workers=True)
    pf = prefetch.Prefetcher(dl, device="cpu")
    list(pf)
    ring = pf.source.ring
    workers = list(ring.loader._iterator._workers)  # the ring's copy of the DataLoader's
    assert dl._iterator is None  # the user's DataLoader started none
    pf.close()
    assert ring.loader._iterator is None
    for w in workers:
        w.join(timeout=10)
        assert not w.is_alive()
    assert_same(list(prefetch.Prefetcher(dl, device="cpu")), reference(ds))  # a new one works


@pytest.mark.cuda
def test_cuda_device_through_the_ring():
    require_cuda()
    ds = Images(n=400)
    want = reference(ds)
    with prefetch.Prefetcher(loader(ds, multiprocessing_context="spawn"), device="cuda",
                             depth=2) as pf:
        for epoch in range(3):
            got = []
            for b in pf:
                if epoch == 2:  # a slow consumer kernel: copies run ahead of the host
                    torch.cuda._sleep(2_000_000)
                got.append(b)  # held on the device: holding them holds no slot
            torch.cuda.synchronize()
            assert_same([[t.cpu() if isinstance(t, torch.Tensor) else t for t in b] for b in got],
                        want)
        stats = pf.stats()
        assert ring_batches(pf) > 0 and stats["packed_bytes"] > 0, stats
        assert all(p is not None for p in pf.source.ring.pins.values())  # the block is page-locked
        assert _C._testing.packed_in_flight(pf._pipeline.engine) <= 2 + 1


def test_resume_mid_epoch_with_a_stateful_dataloader():
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    ds = Images(n=400)

    def make():
        return stateful.StatefulDataLoader(ds, batch_size=8, num_workers=2,
                                           collate_fn=prefetch.collate.samples)

    with prefetch.Prefetcher(make(), device="cpu") as pf:
        it = iter(pf)
        first = [next(it) for _ in range(30)]
        state = pf.state_dict()
        assert ring_batches(pf) > 0
    with prefetch.Prefetcher(make(), device="cpu") as pf:
        pf.load_state_dict(state)
        rest = streamed(pf)
        assert ring_batches(pf) > 0
    assert_same(first + rest, reference(ds))


def test_held_batches_stay_intact_while_later_epochs_run():
    # On the CPU device a batch is its slot, leased until its last view dies: batches kept from
    # earlier epochs (every one of them, more than there are slots) must never be rewritten,
    # and the workers must keep going (the usual path) while the consumer holds every slot.
    ds = Images()
    want = reference(ds)
    with prefetch.Prefetcher(loader(ds, persistent_workers=True), device="cpu") as pf:
        streamed(pf)  # makes the block
        held = [list(pf) for _ in range(3)]
        for epoch in held:
            assert_same(epoch, want)
        assert ring_batches(pf) > 0
        views = [b[0][2:5, 1] for b in held[0]]  # a view outlives its batch
        del held
        assert_same(streamed(pf), want)
        for view, w in zip(views, want):
            assert torch.equal(view, w[0][2:5, 1])
        # (That the workers gave up on a full ring once, then tried once a batch, is
        # test_a_worker_that_gave_up_tries_once_a_batch_until_a_claim_succeeds: the seconds they
        # waited are the scheduler's.)
        assert pf.stats()["worker_ring_fallbacks"] > 0  # the held epochs took the usual path


class _ScriptedTable:
    """A slot table whose place() answers from a script and records the patience it was given."""

    def __init__(self, answers):
        self.answers, self.patience = list(answers), []

    def accepting(self, serial):
        return 1  # the block version the worker holds

    def place(self, serial, version, block, values, patience_s, parent_pid):
        self.patience.append(patience_s)
        return self.answers.pop(0)


def test_a_worker_that_gave_up_tries_once_a_batch_until_a_claim_succeeds(monkeypatch):
    # RingCollate's rule (docs/engine.md, the bound): a worker that waited its whole patience for
    # a slot (the consumer keeps more batches than the ring holds) sends that batch the usual way
    # and then tries each later batch once, without waiting, until a claim succeeds again; then
    # it waits again. Checked on the patience each place() gets, not on seconds waited.
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: types.SimpleNamespace(id=0))
    placed = (3, 1, [(0, torch.uint8, (2, 4))])
    table = _ScriptedTable([_worker_ring._STARVED, _worker_ring._STARVED, _worker_ring._FELL_BACK,
                            placed, _worker_ring._STARVED, _worker_ring._PAUSED])
    collate = _worker_ring.RingCollate(None, 2, [], types.SimpleNamespace(tensor=torch.zeros(64)),
                                       1, table=table)
    samples = [torch.zeros(4, dtype=torch.uint8), torch.ones(4, dtype=torch.uint8)]
    got = [collate(samples) for _ in range(6)]
    give_up = _worker_ring._GIVE_UP_S
    assert table.patience == [give_up, 0.0, 0.0, 0.0, give_up, 0.0]
    assert [type(g) is _worker_ring.SlotBatch for g in got] == [False, False, False, True, False,
                                                                False]
    assert all(torch.equal(torch.stack(list(g)), torch.stack(samples))
               for g in got if type(g) is not _worker_ring.SlotBatch)


@pytest.mark.skipif(SANITIZED, reason="fork() of a threaded process can deadlock in ASan")
def test_a_forked_child_dropping_a_batch_does_not_free_the_parents_slot():
    import os

    ds = Images()
    want = reference(ds)
    with prefetch.Prefetcher(loader(ds), device="cpu") as pf:
        streamed(pf)
        it = iter(pf)
        # The first batch that is its slot (on the CPU device a ring batch is, LEASED while it
        # lives): the W * P batches iter() primes may have gone the usual way, the later ones
        # come through the ring. Its own slot only: the producer leases others as it pleases.
        taken = []
        while not taken or _slot_of(pf, taken[-1][0]) is None:
            taken.append(next(it))
        slot = _slot_of(pf, taken[-1][0])
        leased = _C._testing.slot_words(pf.source.ring.table)[slot]
        assert leased[2] == _C._testing.LEASED, leased
        pid = os.fork()
        if pid == 0:  # the child drops its copy of the batch and exits normally
            del taken
            import gc
            gc.collect()
            os._exit(0)
        os.waitpid(pid, 0)
        assert _C._testing.slot_words(pf.source.ring.table)[slot] == leased  # not freed by the child
        assert_same(taken, want[:len(taken)])
        n = len(taken)
        del taken
        rest = streamed(it)
        assert_same(rest, want[n:])


def _slot_states(pf):
    return [state for _, _, state in _C._testing.slot_words(pf.source.ring.table)]


def _slot_of(pf, tensor):
    """The slot of the ring's current block that `tensor` (a leaf of a batch on the CPU device)
    views, or None (a batch that went the usual way)."""
    ring = pf.source.ring
    block = ring.blocks[ring.version]
    offset = tensor.data_ptr() - block.data_ptr()
    if not 0 <= offset < block.numel():
        return None
    return offset // ring.table.stats()["slot_bytes"]


def _slots_not_free(pf):
    """The slot words that are not FREE in the table's current generation: slots lost to every
    later batch, when the caller holds no batch (on the CPU device a batch is its slot)."""
    gc.collect()
    table = pf.source.ring.table
    free = (_C._testing.slot_generation(table), 0, _C._testing.FREE)
    return [(i, w) for i, w in enumerate(_C._testing.slot_words(table)) if w != free]


def _epoch(pf):
    """One epoch, streamed: (batches, ring batches, fallbacks) it added. Every batch came through
    the ring or the usual way, and stats() says how many went the usual way."""
    before = pf.stats()
    got = streamed(pf)
    after = pf.stats()
    ring = after["worker_ring_batches"] - before.get("worker_ring_batches", 0)
    usual = after["worker_ring_usual_way"] - before.get("worker_ring_usual_way", 0)
    assert ring + usual == len(got), (ring, usual, len(got))
    return (got, ring, after["worker_ring_fallbacks"] - before.get("worker_ring_fallbacks", 0))


@pytest.fixture
def slow_to_open(monkeypatch):
    """The main process held between the DataLoader's priming of its workers (iter(): W * P
    tasks) and the ring's open_epoch until the workers have collated every primed batch: the
    interleaving a loaded machine reaches by chance, forced. Each primed batch then finds the ring
    paused and goes the usual way (not a fallback; stats()'s worker_ring_usual_way counts it)."""
    original = _worker_ring.WorkerRing._iter_loader

    def held(ring):
        it = original(ring)
        primed = ring.loader.num_workers * ring.loader.prefetch_factor
        deadline = time.monotonic() + 60  # a hang guard, not a measure
        while it._data_queue.qsize() < primed:
            assert time.monotonic() < deadline, "the primed batches never arrived"
            time.sleep(0.002)
        return it

    monkeypatch.setattr(_worker_ring.WorkerRing, "_iter_loader", held)


@pytest.mark.parametrize("forced", [False, True], ids=["as-scheduled", "slow-to-open"])
@pytest.mark.parametrize("persistent", [False, True])
def test_the_ring_stays_in_use_across_epoch_changes(persistent, forced, request):
    # Issue 43: a stall in the slot table's load test asked whether an epoch change can leave the
    # ring's slots taken, so that every later batch silently goes the usual way. The epoch
    # change (WorkerRing.epoch: pause, iter(DataLoader), open_epoch) refills only once no task of
    # the previous epoch can still write (persistent workers answer the reset after finishing
    # them; other workers were shut down), so no slot is lost, on any schedule: after every epoch
    # each slot is FREE in the current generation, no batch falls back, and the ring carries
    # every batch but the W * P that iter() primes before the ring opens. Those find the ring
    # still paused when the main process is slow to open it ("slow-to-open" forces that for all
    # of them): the usual way, never a lost slot.
    if forced:
        request.getfixturevalue("slow_to_open")
    ds = Images()
    want = reference(ds)
    dl = loader(ds, persistent_workers=persistent)  # 12 batches, W * P = 4
    primed = dl.num_workers * dl.prefetch_factor
    with prefetch.Prefetcher(dl, device="cpu") as pf:
        # Warm-up: the block is made during the first epoch and reaches persistent workers
        # through their mailboxes; an epoch without fallbacks shows every worker holds it (each
        # wrote at least len(dl) / W - P of its batches after the ring opened).
        for warm_up in range(10):
            got, _, fallbacks = _epoch(pf)
            assert_same(got, want)
            if warm_up > 0 and fallbacks == 0:
                break
        assert fallbacks == 0, "a worker never took the block from its mailbox"
        for _ in range(4):
            got, ring, fallbacks = _epoch(pf)
            assert_same(got, want)
            assert fallbacks == 0
            if forced:
                assert ring == len(dl) - primed
            else:
                assert len(dl) - primed <= ring <= len(dl)
            assert _slots_not_free(pf) == []


# ---- the CUDA path's single copy from the slot, run on the host -------------------------------

def test_copy_from_slot_never_reads_a_rewritten_slot(copy_from_slot):
    # Few slots (W * P + depth + 2 = 5), a copy stream slowed by random delays: workers keep
    # rewriting every slot the engine frees, so a slot freed before its copy had run would show
    # as a batch equal to another one. Copies are the consumer's own: keeping every batch of an
    # epoch keeps no slot, so after the first epoch nothing falls back.
    ds = Images(n=160)
    want = reference(ds)
    dl = loader(ds, persistent_workers=True, prefetch_factor=1)
    with prefetch.Prefetcher(dl, device="cpu", depth=1) as pf:
        engine = pf._pipeline.engine
        _C._testing.set_debug_delay(engine, 3000, 1)
        assert_same(list(pf), want)
        fallbacks = pf.stats()["worker_ring_fallbacks"]
        for _ in range(2):
            assert_same(list(pf), want)
            # the consumer waited for every batch: the end of the epoch gave every slot back
            assert _C._testing.packed_in_flight(engine) == 0
            assert set(_slot_states(pf)) == {_C._testing.FREE}
        stats = pf.stats()
        assert stats["worker_ring_fallbacks"] == fallbacks, stats
        assert stats["packed_bytes"] > 0 and stats["worker_ring_slots"] == 2 + 1 + 2
        assert set(pf.source.ring.pins) == set(pf.source.ring.blocks)  # each block registered (a no-op here)


# forkserver, not spawn: its workers receive the blocks by descriptor as spawn's do (the path that
# differs from fork's inherited mappings), and this test starts 2 workers for each of its 5 epochs:
# with spawn, 10 interpreters importing torch (33 s of the suite, 55 s under ASan). Spawn itself
# is test_every_context_yields_plain_iteration's and test_worker_start_methods_with_the_pool_alive's.
@pytest.mark.parametrize("context", ["forkserver", pytest.param(
    "fork", marks=pytest.mark.skipif(SANITIZED, reason="fork() under ASan: conftest"))])
def test_copy_from_slot_through_break_growth_and_close(copy_from_slot, context):
    ds = Varying()  # the second half of each epoch needs a bigger block
    want = reference(ds)
    dl = loader(ds, multiprocessing_context=context)
    pf = prefetch.Prefetcher(dl, device="cpu", depth=2)
    _C._testing.set_debug_delay(pf._pipeline.engine, 500, 2)
    for k in (0, 3, 5):  # break after k batches: what the engine holds stays held until copied
        it = iter(pf)
        assert_same([b for _, b in zip(range(k), it)], want[:k])
        del it
        assert_same(streamed(pf), want)
    assert ring_batches(pf) > 0 and len(pf.source.ring.pins) == 1
    pins = [p for p in pf.source.ring.pins.values()]
    engine = pf._pipeline.engine
    it = iter(pf)
    next(it)
    pf.close()  # mid-epoch: the engine waits for its copies, then frees what it held
    assert engine.closed and _C._testing.LEASED not in _slot_states(pf)  # nothing LEASED is left
    del it, pf
    assert all(p.block.numel() > 0 for p in pins)  # a pin keeps its block alive


def test_a_block_that_cannot_be_pinned_warns_once_and_still_works():
    def refuse(block):
        raise _C.BackendError("cudaHostRegister failed: cudaErrorMemoryAllocation")

    ring = _worker_ring.WorkerRing(loader(Images()), 2, None, pin=refuse)
    block = torch.empty(4096, dtype=torch.uint8)
    with pytest.warns(RuntimeWarning, match="could not page-lock .*ulimit -l"):
        assert ring._pin(block) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ring._pin(block) is None  # once
    ring.close()


def _one_slot_ring(slot_bytes=4096, slots=2):
    """A slot table and its block in this process, epoch open: place() then works here as in a
    worker (it does not ask whether it runs in one)."""
    words = torch.zeros(_C.SlotTable.words_for(slots), dtype=torch.int64).share_memory_()
    table = _C.SlotTable(words, slots)
    table.announce_block(1, slot_bytes)
    table.open_epoch(1)
    return table, torch.zeros(slots * slot_bytes, dtype=torch.uint8)


def test_a_slot_release_frees_once_when_called_or_dropped():
    table, block = _one_slot_ring()
    for how in ("call", "drop"):
        generation, slot, _ = table.place(1, 1, block, [torch.ones(3)], 0.0, 0)
        hold = _C._testing.lease(table, slot, generation)
        assert not hold.released
        assert _C._testing.slot_words(table)[slot] == (generation, 0, _C._testing.LEASED)
        if how == "call":
            hold()
            generation, again, _ = table.place(1, 1, block, [torch.ones(3)], 0.0, 0)
            assert again == slot
            second = _C._testing.lease(table, slot, generation)  # leased again by someone else
            hold()  # not freed twice
            assert _C._testing.slot_words(table)[slot][2] == _C._testing.LEASED
            del second
        del hold
        now = _C._testing.slot_generation(table)
        assert _C._testing.slot_words(table)[slot] == (now, 0, _C._testing.FREE)  # current gen


def test_a_workers_write_equals_torch_stack():
    # What a worker writes into its slot (SlotTable.place): the engine's streaming copy for
    # contiguous samples, torch's strided copy for views (a flip), checked against torch.stack;
    # read back as the main process reads it (packed_views, which leases the slot).
    g = torch.Generator().manual_seed(0)
    table, block = _one_slot_ring(slot_bytes=1 << 20)
    for shape, dtype in (((224, 224, 3), torch.uint8), ((5, 3), torch.float64), ((0, 4), torch.int32),
                         ((), torch.int64)):
        samples = [torch.randint(0, 100, shape, generator=g).to(dtype) for _ in range(5)]
        if samples[0].dim() > 0 and samples[0].numel() > 0:
            samples[2] = samples[2].flip(0)  # not contiguous
        ragged = (torch.arange(7).to(dtype), torch.arange(6).to(dtype).view(2, 3).t())  # a view too
        placed = table.place(1, 1, block, [samples, ragged, samples[2]], 0.0, 0)
        generation, slot, layout = placed
        assert [(dtype_, shape_) for _, dtype_, shape_ in layout] == [
            (dtype, (5,) + shape), (dtype, (13,)), (dtype, shape)]
        assert all(offset % 64 == 0 for offset, _, _ in layout)
        stacked, flat, single = _C.packed_views(block, layout, (table, slot, generation))
        assert torch.equal(stacked, torch.stack(samples))
        assert torch.equal(flat, torch.cat([t.reshape(-1) for t in ragged]))
        assert torch.equal(single, samples[2])
        del stacked, flat, single  # frees the slot
    # Samples the engine would name an error for are not placed: the batch goes the usual way
    # (counted), and the main process collates it and raises the CollateError there.
    before = table.stats()["worker_ring_fallbacks"]
    mixed_dtypes = [torch.zeros(3, dtype=torch.uint8), torch.zeros(3, dtype=torch.int64)]
    mixed_shapes = [torch.zeros(4, dtype=torch.uint8), torch.zeros(3, dtype=torch.uint8)]
    too_large = [torch.zeros(1 << 21, dtype=torch.uint8)]
    for values in ([mixed_dtypes], [mixed_shapes], [[]], too_large, [torch.zeros(3, device="meta")]):
        assert table.place(1, 1, block, values, 0.0, 0) == 1  # fell back
    assert table.stats()["worker_ring_fallbacks"] == before + 5
    assert table.needed_bytes >= 1 << 21 and table.needs_growth()
    assert table.place(2, 1, block, [torch.ones(2)], 0.0, 0) == 0  # another iterator's worker


def test_a_packed_layout_is_checked_where_it_enters_the_main_process():
    table, block = _one_slot_ring()
    generation, slot, layout = table.place(1, 1, block, [torch.ones(4)], 0.0, 0)
    with pytest.raises(ValueError, match=r"packed leaf 0 \(torch.float32 \[2000\]\) at bytes \[0, 0 \+ 8000\) "
                                         r"lies outside its 4096 bytes"):
        _C.packed_views(block, [(0, torch.float32, (2000,))], (table, slot, generation))
    # the refused layout's lease was given back
    assert _C._testing.slot_words(table)[slot][2] == _C._testing.FREE
    with pytest.raises(TypeError, match=r"packed leaf 0 must be \(offset, dtype, shape\)"):
        _C.packed_views(block, [(0, "float32", (4,))])
    with pytest.raises(ValueError, match="slot 5 of a table of 2 slots"):
        _C.packed_views(block, layout, (table, 5, generation))
    with pytest.raises(ValueError, match="contiguous 1-D uint8 CPU tensor, got torch.float32"):
        _C.packed_views(torch.zeros(4), layout)


_VIEW_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
                torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128]


class _LazyViews(Dataset):
    """Per sample, one field per dtype and view kind: a negative view (``torch._neg_view``) of
    every signed dtype, a conjugate view and a conjugate-of-negative view of the complex ones,
    each with its lazy bit set (the raw bytes are the un-negated, un-conjugated values)."""

    def __len__(self):
        return 48

    def __getitem__(self, i):
        out = {}
        for dtype in _VIEW_DTYPES:
            base = (torch.arange(6, dtype=torch.float64).view(2, 3) + i)
            if dtype.is_complex:
                base = torch.complex(base, base + 0.5)
            base = base.to(dtype)
            name = str(dtype).replace("torch.", "")
            if dtype != torch.uint8:
                out[name + "_neg"] = torch._neg_view(base)
            if dtype.is_complex:
                out[name + "_conj"] = base.conj()
                out[name + "_conj_neg"] = torch._neg_view(base.conj())
        return out


@pytest.mark.parametrize("num_workers", [0, 2])
def test_conjugate_and_negative_views_have_their_values_whatever_num_workers(num_workers):
    """The lazy conj/neg bits are honoured: the worker ring copied the raw bytes and lost them
    (wrong signs with workers only)."""
    ds = _LazyViews()
    dl = DataLoader(ds, batch_size=4, num_workers=num_workers, collate_fn=prefetch.collate.samples)
    with prefetch.Prefetcher(dl, device="cpu") as pf:
        got = list(pf)
        ring = pf.stats().get("worker_ring_batches", 0)
    assert len(got) == 12
    for b, batch in enumerate(got):
        for name, value in batch.items():
            want = torch.stack([ds[4 * b + k][name].resolve_conj().resolve_neg() for k in range(4)])
            assert value.dtype == want.dtype and torch.equal(value, want), (name, b)
    if num_workers:
        assert ring > 0  # the ring's path was the one tested


class _FirstBatchTooLarge(Images):
    """Sample 0 is a large image while the file ``flag`` exists (workers are other processes)."""

    def __init__(self, flag):
        super().__init__()
        self.flag = flag

    def __getitem__(self, i):
        image, index, extra = super().__getitem__(i)
        if i == 0 and os.path.exists(self.flag):
            image = torch.zeros(40, 40, 3, dtype=torch.uint8)
        return image, index, extra


def test_a_batch_over_max_batch_bytes_does_not_keep_the_ring_from_being_made(tmp_path):
    """The refused batch raises; the next epoch's batches go through the ring (they all took the
    per-sample path: the refused batch had raised the ring's size target above the limit for
    good)."""
    flag = tmp_path / "big"
    flag.touch()
    ds = _FirstBatchTooLarge(str(flag))
    with prefetch.Prefetcher(loader(ds), device="cpu", max_batch_bytes=4096) as pf:
        with pytest.raises(prefetch.CollateError, match="max_batch_bytes"):
            streamed(pf)
        flag.unlink()
        assert_same(streamed(pf), reference(ds))
        assert ring_batches(pf) > 0
        assert pf.stats()["worker_ring_bytes"] <= pf.stats()["worker_ring_slots"] * 4096
