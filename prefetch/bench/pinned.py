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
    CPU or not pinned."""
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError("cuda_view_of_pinned needs a CUDA device, got %s" % device)
    if host.device.type != "cpu" or not host.is_pinned():
        raise ValueError("cuda_view_of_pinned needs a pinned CPU tensor (tensor.pin_memory()); got a "
                         "tensor on %s%s" % (host.device, " that is not pinned"
                                             if host.device.type == "cpu" else ""))
    view = torch.as_tensor(_PinnedInterface(host), device=device)
    # as_tensor copies when the memory maps to another device than the one asked for: a copy
    # would silently turn the zero-copy measurement into copy-then-op.
    if view.data_ptr() != host.data_ptr() or view.device != device:
        raise ValueError("cuda_view_of_pinned: this pinned memory is not addressable from %s at its "
                         "host address (no unified addressing)" % device)
    return view
