"""torchvision as a benchmark peer next to a CPU torch: its index build is CUDA, so its native ops
do not load, but its pure-Python transforms import once ``torch.library.register_fake`` (which its
native ops' registration calls) is a no-op decorator for the import. A peer, never a dependency:
the scripts skip their torchvision rows where it does not import."""
import importlib

import torch


def import_torchvision(module: str = "torchvision.transforms"):
    """``module`` (a torchvision module) imported with ``register_fake`` stubbed for the import.

    Raises:
        Exception: whatever the import raises (torchvision not installed, another build).
    """
    original = torch.library.register_fake
    torch.library.register_fake = lambda *a, **k: (lambda f: f)
    try:
        return importlib.import_module(module)
    finally:
        torch.library.register_fake = original
