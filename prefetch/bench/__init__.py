"""Benchmarks that tell a user where their input pipeline stands (``python -m prefetch.bench``)."""
