"""What the producer does to a batch once the engine has staged it: bind its thread to the device,
order the batch's moved tensors with the copy stream, rebuild the batch and run the transforms on
the copy stream; and what the consumer's stream is protected for."""
import dataclasses

import torch

from .._core.checks import distributed_rank
from .._core.ragged import Ragged
from .._core.tree import unflatten
from .transform_contract import BatchPosition, has_host_stage, run_transform

__all__ = ["DeviceStage", "bind_thread_to", "order_moves", "protect"]


def bind_thread_to(device):
    """Makes ``device`` the calling thread's current CUDA device (nothing for a CPU device). A new
    thread starts on device 0: without this, the first CUDA call the producer makes (a stream
    lookup, an allocation, a transform's kernel) would create a context on GPU 0 in every DDP
    rank, ~0.5 GB each."""
    if device.type == "cuda":
        torch.cuda.set_device(device)


def order_moves(moves, device, copy_stream, current_stream):
    """Orders the batch's tensors already on a device (the "moves") with the copy stream, which is
    non-blocking, so nothing else would: it waits for the stream current on the producer thread
    for each one's device (its default stream unless the source chose another), where the source
    made them. And their memory is kept from reuse until the streams that read them are done: a
    move on ``device`` is read on the copy stream (by the transform), one on another device by
    torch's copy on that device's current stream. ``current_stream(device)`` is
    torch.cuda.current_stream; a parameter so that the CPU tests can count the calls."""
    waited = set()
    for m in moves:
        if not m.is_cuda:
            continue
        if m.device not in waited:
            waited.add(m.device)
            copy_stream.wait_stream(current_stream(m.device))
        m.record_stream(copy_stream if m.device == device else current_stream(m.device))


class DeviceStage:
    """What the producer does to a batch once it is on the device: rebuild its structure (the
    moves copied or taken as they are, ordered after the source's work), then the transforms,
    all on the copy stream. Returns the batch and what the consumer's stream must be protected
    for beyond the packed block: None, the moved tensors, or (with transforms) the transformed
    batch itself."""

    def __init__(self, device, stream_handle, transform, device_transform, rank):
        self.device, self.transform, self.device_transform = device, transform, device_transform
        self.rank = rank  # None: torch.distributed's, read at every batch
        self.stream = (torch.cuda.ExternalStream(stream_handle, device=device)
                       if device.type == "cuda" else None)
        self.transforms = transform is not None or device_transform is not None
        self.host_stage = has_host_stage(transform, device)

    def position(self, epoch, index):
        rank = self.rank if self.rank is not None else distributed_rank()
        return BatchPosition(epoch, index, rank)

    def host(self, batch, epoch, index):
        """The transform's host stage (Transform.host_apply) on the batch as the source gave it,
        before it is collated: nothing of it has crossed to the device yet."""
        return self.transform.host_apply(batch, self.position(epoch, index), self.device)

    def _transform(self, batch, epoch, index):
        if self.transform is not None:
            batch = run_transform(self.transform, batch, self.position(epoch, index))
        if self.device_transform is not None:
            batch = self.device_transform(batch)
        return batch

    def __call__(self, spec, tensors, moves, epoch, index):
        if self.stream is None:  # the host backend: everything is ordered on this thread
            batch = unflatten(spec, tensors, moves, self.device)
            return (self._transform(batch, epoch, index) if self.transforms else batch), None
        if moves:
            order_moves(moves, self.device, self.stream, torch.cuda.current_stream)
        with torch.cuda.stream(self.stream):
            # A move to this device is the tensor itself; to another, a copy torch runs on the
            # source device's current stream and orders before the copy stream (two-way).
            moved = [m.to(self.device, non_blocking=True) for m in moves]
            batch = unflatten(spec, tensors, moved, self.device)
            if not self.transforms:
                return batch, (moved or None)
            # The consumer reads what the transform made (allocated on the copy stream): without
            # record_stream for its stream, a block the consumer drops before its queued work
            # has read it goes back to the copy stream's pool, and the next batch's copy
            # overwrites it (seen on an H200: a slow consumer read another batch's bytes). The
            # transform's inputs are read on the copy stream only (the packed block is protected
            # by next(), the moves by order_moves).
            out = self._transform(batch, epoch, index)
            return out, out


def protect(obj, stream):
    """record_stream every CUDA tensor of a transformed batch for the consumer's stream."""
    if isinstance(obj, torch.Tensor):
        if obj.is_cuda:
            obj.record_stream(stream)
    elif isinstance(obj, dict):
        for v in obj.values():
            protect(v, stream)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            protect(v, stream)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for field in dataclasses.fields(obj):
            protect(getattr(obj, field.name, None), stream)
    elif isinstance(obj, Ragged):
        for t in (obj.values, obj.offsets, obj.sizes):
            protect(t, stream)
