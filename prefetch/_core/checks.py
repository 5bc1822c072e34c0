"""Argument checks and small pure functions that several modules share (loaders, transforms,
sharding): one definition each, so their error messages and their hashing cannot drift apart."""
import math
import operator

import torch

_MASK64 = (1 << 64) - 1


def whole(value, name):
    """A whole number as an int: a Python or numpy integer, a 0-d integer tensor, or a float (or a
    0-d float tensor) without a fractional part. Anything else — a bool, a fraction, a string —
    is a TypeError naming the argument: int() would truncate 0.5 to 0 and accept "3". Every
    integer argument of prefetch (ops, transforms, loaders) goes through this one check."""
    if isinstance(value, bool) or (isinstance(value, torch.Tensor) and value.dtype == torch.bool):
        raise TypeError("prefetch: %s must be a whole number, got %r" % (name, value))
    try:
        return operator.index(value)
    except TypeError:
        pass
    if isinstance(value, torch.Tensor) and value.dim() == 0 and value.is_floating_point():
        value = value.item()
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():  # numpy floats too
        return int(value)
    raise TypeError("prefetch: %s must be a whole number, got %r" % (name, value))


def describe(x):
    """What a value is, for an error message: "a 2-D uint8 tensor of shape [3, 4]", "an int",
    "a list"."""
    if isinstance(x, torch.Tensor):
        return "a %d-D %s tensor of shape %s" % (x.dim(), str(x.dtype).replace("torch.", ""),
                                                  list(x.shape))
    name = type(x).__name__
    return ("an " if name[:1].lower() in "aeiou" else "a ") + name


def check_seed(seed, name="seed"):
    """An int seed in torch.manual_seed's range [-2**63, 2**64): larger ones would alias."""
    seed = whole(seed, name)
    if not -(1 << 63) <= seed < (1 << 64):
        raise ValueError("prefetch: %s must be in [-2**63, 2**64) (as torch.manual_seed; larger "
                         "seeds would alias smaller ones), got %d" % (name, seed))
    return seed


def mix64(*values):
    """splitmix64 over the values: independent 63-bit seeds for neighbouring inputs (the seed
    streams of epochs, batches and ranks)."""
    h = 0x9E3779B97F4A7C15
    for v in values:
        h = (h ^ (v & _MASK64)) & _MASK64
        h = (h + 0x9E3779B97F4A7C15) & _MASK64
        h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _MASK64
        h ^= h >> 31
    return h & ((1 << 63) - 1)


def is_stateful(obj):
    """Has both ``state_dict()`` and ``load_state_dict()`` (a resumable source or transform)."""
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


def resolve_device(device):
    """A loader's target device: ``None`` means the current CUDA device when CUDA is available,
    else the CPU; a bare ``"cuda"`` means the current CUDA device (each DDP rank's own)."""
    if device is None:
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if device.type not in ("cpu", "cuda"):
        raise ValueError("prefetch: device must be a CPU or CUDA device, got %r" % (device,))
    return device


def distributed_rank():
    """This process's rank in torch.distributed's default group, or 0 when not initialised."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return int(torch.distributed.get_rank())
    return 0
