"""Installed package versions without importing the packages (standard library only: the GPU check's
preflight loads this file by path, before prefetch is built)."""
import importlib.metadata


def installed_versions(names):
    """{name: version or None} for each distribution name."""
    out = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out
