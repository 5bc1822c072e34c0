"""Benchmarks that tell a user where their input pipeline stands (``python -m prefetch.bench``).

``measure_loader(make_loader, step=None, ...)`` runs the same harness as ``python -m
prefetch.bench --loader ... --step ...`` from Python (:mod:`prefetch.bench.loader`)."""
from .loader import LoaderReport, measure_loader  # noqa: F401
from .target import TargetError  # noqa: F401
