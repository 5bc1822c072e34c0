"""The bench's one way to time things: every section's figures come from these samples.

``samples`` times repetitions of a call on the host clock, synchronising the device around each,
and returns every sample (seconds); ``kernel_samples`` does the same for device work, which on a
GPU is timed between CUDA events around back-to-back calls. ``Summary`` is a list of samples'
median and spread, the form every comparison of the bench is written in.
"""
import statistics
import time
from typing import NamedTuple

import torch


def sync(device):
    """Waits for the device's queued work (a no-op on the CPU)."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def samples(fn, repeats, *, device=None, warmup=1, setup=None):
    """Seconds of each of `repeats` calls of fn, after `warmup` untimed calls, on the host clock.

    The device is synchronised before the clock starts and before it stops, so a call's queued
    device work is inside its sample. With `setup`, each call is ``fn(setup())`` and setup's own
    time (e.g. building an iterator and warming it up) is outside the sample; its result is
    released before the next setup."""
    for _ in range(warmup):
        fn(setup()) if setup else fn()
    times = []
    for _ in range(repeats):
        arg = setup() if setup else None
        sync(device)
        t0 = time.perf_counter()
        fn(arg) if setup else fn()
        sync(device)
        times.append(time.perf_counter() - t0)
        del arg  # e.g. an iterator whose workers must stop before the next one starts
    return times


def interleaved(calls, repeats, *, device=None, warmup=1, order=None, alternate=False, settle=0.0):
    """Seconds of each of ``repeats`` rounds of every call in ``calls`` (a dict name -> fn, or
    name -> ``(setup, fn)`` as :func:`samples` takes them), **interleaved**: round r times each
    call once, in the dict's order (A, B, A, B, ...), so a slow phase of the machine lands on
    every pipeline alike rather than on whichever ran then. With ``alternate`` the odd rounds
    run in the reverse order (A, B, C, C, B, A, ...: the counterbalanced "ABBA" order), so that
    no call always follows the same one: what a call leaves behind (torch's OpenMP threads
    still spinning, the caches it filled) then lands on different calls from round to round.
    Each call is warmed up ``warmup`` times first (all of A's, then all of B's). With ``settle``
    (seconds), the clock stops for that long before each timed call, so that each starts on idle
    cores: torch's OpenMP threads spin for a few milliseconds after their last region, on the
    cores the next call's own threads need (the sixth H200 run: the ring's epochs moved 36.9 GB/s
    after a ``pin_memory()`` round, 45.9 after itself). Returns
    ``{name: [seconds of round 0, 1, ...]}``; ``order``, a list, receives the names in the order
    they were timed (what a test checks, and what :func:`previous_calls` reads)."""
    if settle < 0:
        raise ValueError("prefetch bench: settle must be >= 0 seconds, got %r" % (settle,))
    if repeats < 1:
        raise ValueError("prefetch bench: repeats must be >= 1, got %r" % (repeats,))
    parts = {name: (c if isinstance(c, tuple) else (None, c)) for name, c in calls.items()}
    for setup, fn in parts.values():
        for _ in range(warmup):
            fn(setup()) if setup else fn()
    out = {name: [] for name in parts}
    names = list(parts)
    for r in range(repeats):
        for name in (names[::-1] if alternate and r % 2 else names):
            setup, fn = parts[name]
            if settle:
                sync(device)
                time.sleep(settle)
            out[name].extend(samples(fn, 1, device=device, warmup=0, setup=setup))
            if order is not None:
                order.append(name)
    return out


def previous_calls(order, name, before=None):
    """The call timed just before each timing of `name` in `order` (the names in the order they
    were timed, as :func:`interleaved` records them), one per timing of `name`, in order; for a
    first timing, `before` (what ran before the timed rounds: their warm-ups' last call)."""
    return [order[i - 1] if i else before for i, n in enumerate(order) if n == name]


def kernel_samples(fn, repeats, device, *, warmup=1, inner=10):
    """Seconds per call of fn, one sample per repetition. On a GPU `inner` calls run back to back
    between two CUDA events, so a sample is the kernels' time: the host's launch and
    synchronisation overhead (tens of microseconds, the order of a whole 224x224 batch's kernel on
    an H100) stays out of it. Elsewhere it is ``samples`` (one call per sample)."""
    device = torch.device(device)
    if device.type != "cuda":
        return samples(fn, repeats, device=device, warmup=warmup)
    for _ in range(warmup):
        fn()
    sync(device)
    # The events go on the measured device's stream, where fn's kernels run (an op on cuda:1
    # tensors launches on cuda:1's current stream): events on the current device's stream would
    # time another device's queue, an empty one when the current device is not the measured one.
    stream = torch.cuda.current_stream(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        start.record(stream)
        for _ in range(inner):
            fn()
        end.record(stream)
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / inner)
    return times


def median(values):
    return statistics.median(values)


def spread(values):
    """``{"median", "min", "max"}`` of a list of samples: how the benchmark scripts' JSON results
    report each figure's rounds."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


class Summary(NamedTuple):
    """A list of samples as the bench reports them: the median and the range around it."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values):
        return cls(statistics.median(values), min(values), max(values))

    @property
    def spread(self):
        """(high - low) / median: the range relative to the median."""
        return (self.high - self.low) / self.median if self.median else float("nan")

    def format(self, fmt="%.2f"):
        """e.g. '20.62 (19.80–21.10)'."""
        return (fmt + " (" + fmt + "–" + fmt + ")") % self
