"""What every bench section is: a name, a one-line description, and run(config) -> SectionResult.

A section measures, prints its own progress through ``config.progress``, and returns its rows
(stored under ``details[name]`` in results.json), its flat metrics (merged into ``metrics``: the
names are the results.json contract, README.md lists them), the table it prints, what it skipped,
and the resources each of its pipelines was built with (``resources[name]`` in results.json). A
section that does not apply to the run raises ``Skipped(reason)``.

Equal resources (a figure compares what a competent user runs on the same cores): one number
N, ``Config.workers``, is every pipeline's: the usual pipeline's DataLoader workers, prefetch's
C++ threads (and its DataLoader workers where it has some), DALI's threads, torch's intra-op
threads in the main process. A section reads N from its config, never from a default of its
own; a baseline that is single-threaded by nature (``default_collate`` in the main process) says
so in its name (``SINGLE_THREAD``) and is recorded with 1 thread.
"""
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

import torch

# In a pipeline's name: a baseline that runs on one thread by nature (the only pipelines whose
# resources are not N).
SINGLE_THREAD = "1 thread"


def usable_cores():
    """The cores this process may run on: its CPU affinity (``os.sched_getaffinity``), else
    ``os.cpu_count()``. N's default."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class Skipped(Exception):
    """The whole section does not apply to this run (e.g. host-to-device copies on a CPU); the
    message says why and is recorded under ``skipped[name]``."""


@dataclass(frozen=True)
class Config:
    """The run's options, as parsed by ``python -m prefetch.bench``.

    workers: N, every pipeline's resources (``--workers``; default the usable cores): DataLoader
    worker processes, prefetch's ``num_threads``, DALI's ``num_threads``. ValueError unless an
    int >= 1."""

    device: torch.device
    quick: bool = False
    batch_sizes: List[int] = field(default_factory=lambda: [64, 256])
    image_size: int = 224
    workers: int = field(default_factory=usable_cores)
    steps: Optional[int] = None
    progress: Callable[[str], None] = print

    def __post_init__(self):
        if not isinstance(self.workers, int) or isinstance(self.workers, bool) or self.workers < 1:
            raise ValueError("prefetch bench: Config.workers (N) must be an int >= 1, got %r"
                             % (self.workers,))

    @property
    def threads(self):
        """The same N as ``workers`` (kept for sections written before N was one setting: a
        section's threads are its workers)."""
        return self.workers


def resources(workers=0, threads=0):
    """One pipeline's entry in ``SectionResult.resources``: ``workers``, the DataLoader worker
    processes it was built with (0: none); ``threads``, the threads its work in the main process
    was given (prefetch's ``num_threads``, DALI's, torch's intra-op threads; 1 for a
    ``SINGLE_THREAD`` baseline)."""
    return {"workers": int(workers), "threads": int(threads)}


def unequal_resources(pipelines, n):
    """``[(pipeline, why)]`` for each entry of ``pipelines`` (name -> :func:`resources`) that
    breaks the rule: workers and threads each 0 or N, at least one of them N; or, for a name that
    says ``SINGLE_THREAD``, no workers and 1 thread. Empty when every pipeline has N."""
    bad = []
    for name, r in pipelines.items():
        w, t = r.get("workers"), r.get("threads")
        if SINGLE_THREAD in name:
            if (w, t) != (0, 1):
                bad.append((name, "named %r, so 0 workers and 1 thread, got %d workers and %s "
                                  "threads" % (SINGLE_THREAD, w, t)))
        elif w not in (0, n) or t not in (0, n) or n not in (w, t):
            bad.append((name, "workers and threads must be 0 or N = %d, one of them N; got %s "
                              "workers and %s threads" % (n, w, t)))
    return bad


@dataclass
class SectionResult:
    rows: Any                                                # details[name]
    metrics: Dict[str, float]                                # merged into results.json's metrics
    table: str = ""                                          # printed after the section ran
    details: Dict[str, Any] = field(default_factory=dict)    # further details[key] entries
    skipped: Dict[str, str] = field(default_factory=dict)    # parts skipped: part -> reason
    # pipeline name -> resources(workers, threads): results.json's resources[section]
    resources: Dict[str, Dict[str, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Section:
    name: str
    description: str
    run: Callable[[Config], SectionResult]
