"""A CUDA tensor over a pinned CPU tensor's memory, with torch's public API only (the zero-copy
measurement of the h2d section).

Pinned (page-locked) memory is mapped into every device's address space, and under unified
addressing (every 64-bit CUDA platform torch supports) the device reaches it at the host's own
address. torch builds a CUDA tensor over any object that exposes ``__cuda_array_interface__``
(``torch.as_tensor``), keeping that object alive as long as the tensor; the object here keeps the
pinned tensor alive. A kernel given the view reads host memory across the bus, with no copy first.
"""
import torch


class _PinnedInterface:
    """``__cuda_array_interface__`` (version 2: no stream to synchronise with) of `host`."""

    def __init__(self, host):
        self.host = host  # torch holds this object, hence the memory, while the view lives
        size = host.element_size()
        self.__cuda_array_interface__ = {
            "shape": tuple(host.shape),
            "typestr": host.numpy().dtype.str,  # refuses dtypes numpy has no name for (bfloat16)
            "data": (host.data_ptr(), False),
            "strides": tuple(s * size for s in host.stride()),
            "version": 2,
        }


def cuda_view_of_pinned(host, device):
    """A tensor on the CUDA `device` over the memory of the pinned CPU tensor `host` (which it
    keeps alive). ValueError for anything else: a non-CUDA device, a tensor that is not on the
    CPU or not pinned, or a block pinned for another device.

    torch builds the view on the device that the pointer's attributes name: the device that was
    current (with a CUDA context) when the block was pinned. So pin the block under
    ``with torch.cuda.device(device):`` for a view on ``device``."""
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError("cuda_view_of_pinned needs a CUDA device, got %s" % device)
    if host.device.type != "cpu" or not host.is_pinned():
        raise ValueError("cuda_view_of_pinned needs a pinned CPU tensor (tensor.pin_memory()); got a "
                         "tensor on %s%s" % (host.device, " that is not pinned"
                                             if host.device.type == "cpu" else ""))
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    # Without a device, as_tensor puts the view where the memory maps; with one that differs it
    # would copy, silently turning the zero-copy measurement into copy-then-op.
    view = torch.as_tensor(_PinnedInterface(host))
    check_view(view.device, view.data_ptr(), host.data_ptr(), device)
    return view


def check_view(view_device, view_ptr, host_ptr, device):
    """ValueError unless a view made by torch.as_tensor is on `device` at the host's address."""
    if view_device != device:
        raise ValueError(
            "cuda_view_of_pinned: this block was pinned while %s was the current device, so torch "
            "maps it to %s, not to the %s asked for; pin it under `with torch.cuda.device(%d):` "
            "(torch pins under the current device when it has a CUDA context)"
            % (view_device, view_device, device, device.index))
    if view_ptr != host_ptr:
        raise ValueError("cuda_view_of_pinned: this pinned memory is not addressable from %s at its "
                         "host address (no unified addressing)" % device)
