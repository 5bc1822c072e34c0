"""Issue 13, lifecycle, fork and structure: a forked child, interpreter exit with stuck sources,
close() racing iter(), infinite timeouts, dataclass batches and unknown objects, the source's
DataLoader attributes, and ragged-sample errors that name the dataset index.

Anything that could hang or crash runs in a child interpreter with a hard timeout (run_child).
"""
import dataclasses
import gc
import textwrap
import threading
import time
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

import prefetch

from .conftest import require_cuda, thread_count
from .helpers import assert_same
from .test_reliability import WAIT_PRODUCER_BLOCKED, run_child


def _wait_for_threads(before, seconds=5.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and thread_count() > before:
        gc.collect()
        time.sleep(0.02)
    return thread_count() <= before


# ---- item 11: a Prefetcher inherited by a forked child -------------------------------------

_FORK_PRELUDE = """
    import os, sys, time, torch, prefetch

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
        faulthandler.cancel_dump_traceback_later()
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


# ---- item 12: interpreter exit with several stuck sources: one bound for all ----------------

@pytest.mark.parametrize("how", ["exit", "ctrl-c"])
def test_exit_with_three_stuck_sources_is_bounded_in_total(how):
    out = run_child("""
        import os, signal, threading, time, torch, prefetch

        entered = threading.Semaphore(0)

        def stuck():
            yield torch.zeros(1)
            entered.release()
            time.sleep(120)  # inside the source's own next(): nothing can interrupt it
            yield torch.zeros(1)

        loaders = [prefetch.Prefetcher(stuck(), device="cpu") for _ in range(3)]
        its = [iter(pf) for pf in loaders]
        for it in its:
            next(it)
        for _ in its:  # every producer is now inside (or entering) time.sleep
            assert entered.acquire(timeout=10), "a producer did not reach the stuck source"
        if "%s" == "ctrl-c":
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
            print("exiting at", time.time(), flush=True)
            next(its[0])  # interrupted: KeyboardInterrupt ends the interpreter
        print("exiting at", time.time(), flush=True)
    """ % how, timeout=40)
    ended = time.time()
    assert "exiting at" in out.stdout, out.stdout + out.stderr
    started = float(out.stdout.split("exiting at ")[1].split()[0])
    if how == "exit":
        assert out.returncode == 0, out.stdout + out.stderr
    else:
        assert "KeyboardInterrupt" in out.stderr, out.stderr
    # 5 s per stuck Prefetcher, one after the other, was 15 s; the bound is on the total.
    assert ended - started < 9.0, "exit took %.1f s" % (ended - started)


# ---- item 13: close() racing a fresh iter() -------------------------------------------------

def test_close_racing_iter_raises_only_closed_and_joins_every_thread():
    before = thread_count()
    unexpected = []
    switch = __import__("sys").getswitchinterval()
    __import__("sys").setswitchinterval(1e-6)
    try:
        for round_ in range(60):
            pf = prefetch.Prefetcher([torch.zeros(10)] * 50, device="cpu", depth=2, num_threads=1)
            go = threading.Barrier(2)

            def iterate():
                go.wait()
                try:
                    for _ in range(20):
                        it = iter(pf)
                        next(it, None)
                except RuntimeError as exc:
                    if "closed" not in str(exc):
                        unexpected.append(repr(exc))
                except Exception as exc:  # noqa: BLE001
                    unexpected.append(repr(exc))

            def close():
                go.wait()
                time.sleep(0.0005 * (round_ % 10))
                try:
                    pf.close()
                except Exception as exc:  # noqa: BLE001
                    unexpected.append("close(): %r" % (exc,))

            threads = [threading.Thread(target=iterate), threading.Thread(target=close)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            assert pf.closed
            with pytest.raises(RuntimeError, match="closed"):
                iter(pf)
            del pf
    finally:
        __import__("sys").setswitchinterval(switch)
    assert not unexpected, unexpected[:5]
    assert _wait_for_threads(before), "threads left: %d, before: %d" % (thread_count(), before)


def test_close_from_the_producer_thread_and_from_a_transform():
    pf = None

    def source():
        yield torch.ones(2)
        pf.close()  # inside the source's own next(), on the producer thread
        yield torch.ones(2)

    before = thread_count()
    pf = prefetch.Prefetcher(source(), device="cpu")
    got = []
    try:
        for batch in pf:  # closing ends the epoch (or says "closed"), nothing else
            got.append(batch)
    except RuntimeError as exc:
        assert "closed" in str(exc)
    assert len(got) <= 2 and pf.closed
    del pf
    assert _wait_for_threads(before)

    def closing_transform(batch):
        pf2.close()
        return batch

    pf2 = prefetch.Prefetcher([torch.ones(2)] * 5, device="cpu", transform=closing_transform)
    try:
        list(pf2)
    except RuntimeError as exc:
        assert "closed" in str(exc)
    assert pf2.closed
    del pf2
    assert _wait_for_threads(before)


def test_pickling_a_prefetcher_says_why_it_cannot():
    import copy
    import pickle

    with prefetch.Prefetcher([torch.ones(1)], device="cpu") as pf:
        for attempt in (pickle.dumps, copy.copy, copy.deepcopy):
            with pytest.raises(TypeError, match="Prefetcher cannot be pickled"):
                attempt(pf)
        assert len(list(pf)) == 1


# ---- item 14: infinite and huge timeouts mean wait ------------------------------------------

@pytest.mark.parametrize("timeout", [float("inf"), 1e10, 1e300, 2.0 ** 63])
def test_infinite_and_huge_timeouts_wait(timeout):
    def slow():
        time.sleep(0.3)
        yield torch.arange(3)
        time.sleep(0.2)
        yield torch.arange(3) + 1

    with prefetch.Prefetcher(slow(), device="cpu", timeout=timeout) as pf:
        got = list(pf)
    assert len(got) == 2 and torch.equal(got[1], torch.arange(3) + 1)


@pytest.mark.parametrize("timeout", [float("nan"), -1.0, 0, -float("inf"), "5", True, [1]])
def test_nonsense_timeouts_are_refused(timeout):
    with pytest.raises(ValueError, match="timeout"):
        prefetch.Prefetcher([torch.zeros(1)], device="cpu", timeout=timeout)


def test_engine_next_treats_an_unrepresentable_deadline_as_forever():
    from prefetch._engine.tree import Leaf

    # The binding itself: a huge or non-finite timeout must not become a deadline in the past.
    engine = prefetch._C.Engine("cpu", -1, 2, 1, 0)
    token = engine.start_epoch()

    def later():
        time.sleep(0.3)
        prefetch._C._testing.submit(engine, token, [Leaf("x", torch.ones(2))])
        engine.finish(token, False)

    t = threading.Thread(target=later)
    t.start()
    try:
        for timeout in (float("inf"), 1e300, float("nan")):
            status, _, _ = engine.next(token, timeout)
            assert status in (prefetch._C.NextStatus.BATCH, prefetch._C.NextStatus.END), (timeout, status)
    finally:
        t.join()
        engine.close()


# ---- item 16: dataclasses are structure; unknown objects warn once --------------------------

@dataclasses.dataclass
class _Pair:
    image: torch.Tensor
    label: torch.Tensor
    name: str = "x"


@dataclasses.dataclass(frozen=True)
class _Frozen:
    a: torch.Tensor
    inner: _Pair
    meta: dict


@dataclasses.dataclass
class _WithDerived:
    x: torch.Tensor
    scale: float = 1.0
    doubled: torch.Tensor = dataclasses.field(init=False)
    calls: int = dataclasses.field(init=False, default=0)

    def __post_init__(self):
        self.doubled = self.x * 2


def _assert_dataclass_same(got, expected, device):
    assert type(got) is type(expected)
    for f in dataclasses.fields(expected):
        g, e = getattr(got, f.name), getattr(expected, f.name)
        if dataclasses.is_dataclass(e):
            _assert_dataclass_same(g, e, device)
        else:
            assert_same(g, e, device, f.name)


def test_dataclass_batches_come_back_as_the_same_dataclass(device):
    batches = [
        _Pair(torch.randn(4, 3), torch.arange(4), "a"),
        _Frozen(torch.ones(2), _Pair(torch.zeros(3), torch.arange(3)),
                {"m": torch.full((2,), 7), "s": "t"}),
        _WithDerived(torch.arange(5)),
        [_Pair(torch.ones(1), torch.zeros(1)), {"d": _Pair(torch.ones(2), torch.ones(2), "n")}],
    ]
    batches[2].calls = 5
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a dataclass is structure, never "an unknown object"
        with prefetch.Prefetcher(batches, device=device) as pf:
            got = list(pf)
    for g, e in zip(got[:3], batches[:3]):
        _assert_dataclass_same(g, e, device)
    assert got[2].calls == 5 and torch.equal(got[2].doubled.cpu(), batches[2].x * 2)
    assert got[2].doubled.device == device  # init=False fields are delivered too
    _assert_dataclass_same(got[3][0], batches[3][0], device)
    _assert_dataclass_same(got[3][1]["d"], batches[3][1]["d"], device)
    assert got[0] is not batches[0]  # the source's own object is left alone
    assert batches[0].image.device.type == "cpu"


def test_a_dataclass_class_in_a_batch_is_a_constant():
    with prefetch.Prefetcher([(torch.ones(1), _Pair)], device="cpu") as pf:
        (got,) = list(pf)
    assert got[1] is _Pair


class _Opaque:
    def __init__(self, t):
        self.t = t


def test_an_unknown_object_warns_once_naming_its_type():
    batches = [(torch.ones(1), _Opaque(torch.zeros(1))) for _ in range(3)]
    with pytest.warns(prefetch.PassThroughWarning, match="_Opaque") as record:
        with prefetch.Prefetcher(batches, device="cpu") as pf:
            got = list(pf)
            got += list(pf)
    assert len([w for w in record if issubclass(w.category, prefetch.PassThroughWarning)]) == 1
    assert got[0][1] is batches[0][1]  # passed through untouched


def test_known_immutables_never_warn():
    import enum

    import numpy as np

    class Color(enum.Enum):
        RED = 1

    consts = [1, 2.5, True, 3j, "s", b"b", None, Ellipsis, torch.float16, torch.device("cpu"),
              torch.strided, torch.contiguous_format, np.float32(1), np.dtype("f4"), Color.RED,
              slice(1, 2), range(3), frozenset({1}), np.str_("x")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with prefetch.Prefetcher([(torch.ones(1), consts)], device="cpu") as pf:
            (got,) = list(pf)
    assert got[1] == consts


def test_prepared_batches_are_untouched():
    from prefetch._engine.tree import flatten
    from prefetch._engine.tree import PreparedBatch

    spec, leaves, moves = flatten({"x": torch.arange(4)})
    with prefetch.Prefetcher([PreparedBatch(spec, leaves, moves)], device="cpu") as pf:
        (got,) = list(pf)
    assert torch.equal(got["x"], torch.arange(4))


# ---- item 18: the source's DataLoader attributes --------------------------------------------

class _Range(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.tensor([i])


def test_dataloader_attributes_are_forwarded_and_set_epoch_reaches_the_sampler():
    ds = _Range(40)
    sampler = DistributedSampler(ds, num_replicas=2, rank=0, shuffle=True, seed=1)
    loader = DataLoader(ds, batch_size=4, sampler=sampler)
    with prefetch.Prefetcher(loader, device="cpu") as pf:
        assert pf.dataset is ds and pf.sampler is sampler
        assert pf.batch_sampler is loader.batch_sampler and pf.batch_size == 4
        for epoch in (0, 1, 2):
            pf.sampler.set_epoch(epoch)
            got = torch.cat(list(pf)).flatten()
            sampler.set_epoch(epoch)
            expected = torch.cat(list(loader)).flatten()
            assert torch.equal(got, expected)
        e1 = list(iter(sampler))
        pf.sampler.set_epoch(7)
        assert list(iter(sampler)) != e1  # it reached the DataLoader's own sampler


def test_missing_source_attributes_raise_attribute_error_naming_the_source():
    with prefetch.Prefetcher([torch.zeros(1)], device="cpu") as pf:
        for name in ("dataset", "sampler", "batch_sampler", "batch_size"):
            with pytest.raises(AttributeError, match="list"):
                getattr(pf, name)
            assert not hasattr(pf, name)


# ---- item 20: a sample that does not fit names its position and, when known, its dataset index -

class _Ragged(Dataset):
    """Sample `bad` has another rank: samples that only differ in size would make a Ragged."""

    def __init__(self, n, bad):
        self.n, self.bad = n, bad

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.zeros(3) if i != self.bad else torch.zeros(4, 1)


def _collate_error_text(pf):
    """The message and notes of the CollateError that an epoch of `pf` raises."""
    with pytest.raises(prefetch.CollateError) as info:
        list(pf)
    return str(info.value) + "\n".join(getattr(info.value, "__notes__", []))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_ragged_sample_names_its_dataset_index(num_workers):
    loader = DataLoader(_Ragged(40, bad=22), batch_size=8, num_workers=num_workers,
                        collate_fn=prefetch.collate.samples)
    with prefetch.Prefetcher(loader, device="cpu") as pf:
        text = _collate_error_text(pf)
        assert "sample 6" in text and "[4, 1]" in text and "[3]" in text
        assert "dataset index 22" in text, text
        # The next epoch works: the ragged sample is still there, so it fails the same way.
        with pytest.raises(prefetch.CollateError, match="sample 6"):
            list(pf)


def test_a_ragged_sample_with_a_shuffled_sampler_names_no_index():
    loader = DataLoader(_Ragged(40, bad=22), batch_size=8, shuffle=True,
                        collate_fn=prefetch.collate.samples)
    with prefetch.Prefetcher(loader, device="cpu") as pf:
        text = _collate_error_text(pf)
    assert "sample " in text and "dataset index" not in text, text
