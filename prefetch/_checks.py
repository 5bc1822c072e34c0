"""Argument checks and small pure functions that several modules share (loaders, transforms,
sharding): one definition each, so their error messages and their hashing cannot drift apart."""
import operator

import torch

_MASK64 = (1 << 64) - 1


def whole(value, name):
    """An integral value (Python or numpy int, not bool) as an int, else TypeError naming it."""
    if isinstance(value, bool):
        raise TypeError("prefetch: %s must be an int, got %r" % (name, value))
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError("prefetch: %s must be an int, got %r" % (name, value)) from None


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
