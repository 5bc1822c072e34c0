"""What every bench section is: a name, a one-line description, and run(config) -> SectionResult.

A section measures, prints its own progress through ``config.progress``, and returns its rows
(stored under ``details[name]`` in results.json), its flat metrics (merged into ``metrics``: the
names are the results.json contract, README.md lists them), the table it prints, and what it
skipped. A section that does not apply to the run raises ``Skipped(reason)``.
"""
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

import torch


class Skipped(Exception):
    """The whole section does not apply to this run (e.g. host-to-device copies on a CPU); the
    message says why and is recorded under ``skipped[name]``."""


@dataclass(frozen=True)
class Config:
    """The run's options, as parsed by ``python -m prefetch.bench``."""

    device: torch.device
    quick: bool = False
    batch_sizes: List[int] = field(default_factory=lambda: [64, 256])
    image_size: int = 224
    workers: int = 2
    threads: Optional[int] = None
    steps: Optional[int] = None
    progress: Callable[[str], None] = print


@dataclass
class SectionResult:
    rows: Any                                                # details[name]
    metrics: Dict[str, float]                                # merged into results.json's metrics
    table: str = ""                                          # printed after the section ran
    details: Dict[str, Any] = field(default_factory=dict)    # further details[key] entries
    skipped: Dict[str, str] = field(default_factory=dict)    # parts skipped: part -> reason


@dataclass(frozen=True)
class Section:
    name: str
    description: str
    run: Callable[[Config], SectionResult]
