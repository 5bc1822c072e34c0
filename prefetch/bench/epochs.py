"""Whole epochs of the pipelines (``pipelines.Pipeline``) timed interleaved, as the ``workers``
and ``recipes`` sections measure them: how many files or batches an epoch holds so that no worker
sits idle, the CPU time of the main process and of its DataLoader workers around each epoch, and
the rows and per-round ratios made of the rounds.
"""
import gc
import math
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

from . import timing
from .pipelines import EnginePipeline, Pipeline

# An epoch holds at least this many batches per DataLoader worker (--quick: at least one): with
# fewer batches than workers, workers sit idle and the epoch is one worker's batch, whatever N
# is (the usual pipeline would be given N workers and use a few).
BATCHES_PER_WORKER = 2


def epoch_batches(batches: int, workers: int, per_worker: int = BATCHES_PER_WORKER) -> int:
    """Batches an epoch holds.

    Args:
        batches (int): the batches asked for.
        workers (int): DataLoader workers.
        per_worker (int): the fewest batches each worker makes in an epoch.

    Returns:
        int: ``max(batches, per_worker * workers)``.
    """
    return max(batches, per_worker * workers)


def epoch_files(files: Sequence[str], batch_size: int, workers: int,
                per_worker: int = BATCHES_PER_WORKER) -> List[str]:
    """One epoch's files: ``files`` repeated (the page cache holds them) up to
    ``epoch_batches`` batches, so that every one of the ``workers`` has batches to make.

    Args:
        files (Sequence[str]): the distinct files (a list: it is repeated by ``*``).
        batch_size (int): images per batch.
        workers (int): DataLoader workers.
        per_worker (int): as :func:`epoch_batches`.

    Returns:
        list[str]: ``files`` repeated in order, cut to ``epoch_batches(...) * batch_size`` paths
        (never fewer than ``files``).
    """
    want = epoch_batches(-(-len(files) // batch_size), workers, per_worker) * batch_size
    return (files * -(-want // len(files)))[:max(want, len(files))]


# --- CPU time --------------------------------------------------------------------------------

def children_cpu_s() -> Optional[float]:
    """CPU seconds (user + system) of this process's child processes (the DataLoader workers):
    the live ones' from /proc, plus the ended ones' that the process has reaped
    (``os.times()``'s ``children_*``: a worker that ends between two reads — an epoch's
    non-persistent workers — counts its whole time there, its part before the first read having
    been counted live then, so a difference stays that interval's time); None where there is no
    /proc. Idle workers of the other pipelines add nothing. Resolution: 10 ms ticks (a quick run's
    few images make it coarse per image).

    Returns:
        float or None: seconds (Linux's ``utime + stime`` of each live child in clock ticks, over
        ``SC_CLK_TCK``, plus the reaped children's), None without /proc.
    """
    if not os.path.isdir("/proc/self"):
        return None
    me, ticks = os.getpid(), 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # state, ppid, ... utime is field 14
        if int(fields[1]) == me:
            ticks += int(fields[11]) + int(fields[12])
    reaped = os.times()
    return ticks / os.sysconf("SC_CLK_TCK") + reaped.children_user + reaped.children_system


class CpuProbe:
    """CPU seconds of the main process (``time.process_time``: all its threads) and of its
    worker processes (:func:`children_cpu_s`) between one ``start`` and the next ``start`` (or
    ``stop``): called from ``timing.interleaved``'s setups, it brackets each timed epoch from
    outside its sample (reading /proc costs milliseconds that no epoch should carry)."""

    def __init__(self):
        self.records = {}  # name -> [(main CPU s, worker CPU s or None)], in call order
        self._open = None

    def start(self, name: str) -> None:
        """Closes the open record (:meth:`stop`) and opens one for pipeline ``name``."""
        self.stop()
        kids = children_cpu_s()
        self._open = (name, kids, time.process_time())

    def stop(self) -> None:
        """Appends the open record's ``(main CPU s, worker CPU s or None)`` to
        ``records[name]``; nothing when none is open."""
        if self._open is None:
            return
        name, kids0, cpu0 = self._open
        cpu1 = time.process_time()
        kids1 = children_cpu_s()
        self.records.setdefault(name, []).append(
            (cpu1 - cpu0, None if kids0 is None else kids1 - kids0))
        self._open = None


# --- interleaved epochs, rows and ratios -----------------------------------------------------

def interleave(pipelines: Sequence[Pipeline], repeats: int, device: Any,
               progress: Optional[Callable[[str], None]] = None, label: str = "",
               warmup: int = 1) -> Dict[str, Dict[str, Any]]:
    """One untimed epoch of each (``warmup``), then ``repeats`` rounds of one timed epoch of
    each in turn (``timing.interleaved``).

    Args:
        pipelines (Sequence[Pipeline]): built, with distinct names.
        repeats (int): timed rounds.
        device (torch.device): synchronized around each timed epoch (``timing.interleaved``).
        progress (callable): told each round's start (``"workers: <label>round k/n"``).
        label (str): the progress lines' prefix.
        warmup (int): untimed rounds first.

    Returns:
        dict: per pipeline name, lists with one entry per timed round: ``s`` (seconds),
        ``images``, ``main_cpu_s``, ``worker_cpu_s`` (None entries without /proc), ``collate``
        (the engine's ``(bytes, seconds)``, empty for the others), and its ``resources``.
    """
    probe = CpuProbe()
    images = {p.name: [] for p in pipelines}
    first = pipelines[0].name
    calls_of_first = [0]

    def setup(p):
        def start():
            if progress and p.name == first:
                calls_of_first[0] += 1
                k = calls_of_first[0] - warmup
                progress("workers: %s%s" % (label, "warm-up epochs" if k < 1 else
                                            "round %d/%d" % (k, repeats)))
            probe.start(p.name)
        return start

    def epoch(p):
        return lambda _: images[p.name].append(p.epoch())

    calls = {p.name: (setup(p), epoch(p)) for p in pipelines}
    try:
        seconds = timing.interleaved(calls, repeats, device=device, warmup=warmup)
    finally:
        probe.stop()
    out = {}
    for p in pipelines:
        cpu = probe.records[p.name][warmup:]
        out[p.name] = {"s": seconds[p.name], "images": images[p.name][warmup:],
                       "main_cpu_s": [c for c, _ in cpu], "worker_cpu_s": [k for _, k in cpu],
                       "collate": p.collates[warmup:] if isinstance(p, EnginePipeline) else [],
                       "resources": p.resources}
    return out


def interleave_then_close(pipelines: Sequence[Pipeline], repeats: int, device: Any,
                          progress: Optional[Callable[[str], None]] = None,
                          label: str = "") -> Dict[str, Dict[str, Any]]:
    """:func:`interleave` (one warm-up round), then every pipeline closed (its workers and
    Prefetcher gone), whatever happened, so the next measurement starts on idle cores.

    Args:
        pipelines, repeats, device, progress, label: as :func:`interleave`.

    Returns:
        dict: :func:`interleave`'s.
    """
    try:
        return interleave(pipelines, repeats, device, progress, label)
    finally:
        for p in pipelines:
            p.close()
        gc.collect()


def _summary(values):
    s = timing.Summary.of(values)
    return {"median": s.median, "low": s.low, "high": s.high}


def summarize(raw: Dict[str, Dict[str, Any]], batch_size: int,
              image_bytes: int) -> Dict[str, Dict[str, Any]]:
    """Rows per pipeline: images/s and batches/s (median, min, max over rounds), images per
    epoch, CPU microseconds per image in the main process and in the workers (medians).

    Args:
        raw (dict): :func:`interleave`'s.
        batch_size (int): images per batch (an epoch's batches: ``ceil(images / batch_size)``).
        image_bytes (int): bytes an image (for ``gbps``).

    Returns:
        dict: per pipeline, ``img_per_s``, ``batches_per_s``, ``gbps`` (GB/s, 1e9 bytes), each
        ``{"median", "low", "high"}``; ``images_per_epoch`` (the first round's),
        ``images_per_epoch_all_equal``, ``rounds``, ``main_cpu_us_per_img``, ``resources``, and
        where measured ``worker_cpu_us_per_img`` and the engine's ``collate_gbps``.
    """
    rows = {}
    for name, rec in raw.items():
        ips = [n / s for n, s in zip(rec["images"], rec["s"])]
        row = {
            "img_per_s": _summary(ips),
            "batches_per_s": _summary([math.ceil(n / batch_size) / s
                                       for n, s in zip(rec["images"], rec["s"])]),
            "gbps": _summary([v * image_bytes / 1e9 for v in ips]),
            "images_per_epoch": rec["images"][0],
            "rounds": {"s": rec["s"], "images": rec["images"]},
            "images_per_epoch_all_equal": len(set(rec["images"])) == 1,
            "main_cpu_us_per_img": timing.median(
                [1e6 * c / n for c, n in zip(rec["main_cpu_s"], rec["images"])]),
            "resources": rec["resources"],
        }
        if rec["worker_cpu_s"] and None not in rec["worker_cpu_s"]:
            row["worker_cpu_us_per_img"] = timing.median(
                [1e6 * c / n for c, n in zip(rec["worker_cpu_s"], rec["images"])])
        if rec["collate"]:
            row["collate_gbps"] = _summary([b / s / 1e9 for b, s in rec["collate"] if s > 0])
        rows[name] = row
    return rows


def ratio(raw: Dict[str, Dict[str, Any]], a: str, b: str) -> Dict[str, float]:
    """a's speed over b's, per round (the same round's epochs, back to back).

    Args:
        raw (dict): :func:`interleave`'s.
        a (str): a pipeline's name.
        b (str): another's.

    Returns:
        dict: ``{"median", "low", "high"}`` of the per-round ratios of images/s (above 1: ``a`` is
        faster).

    Raises:
        KeyError: ``a`` or ``b`` did not run.
    """
    ra, rb = raw[a], raw[b]
    return _summary([(na / sa) / (nb / sb) for na, sa, nb, sb in
                     zip(ra["images"], ra["s"], rb["images"], rb["s"])])
