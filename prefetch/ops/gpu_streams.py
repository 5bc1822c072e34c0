"""A GPU JPEG decoder's call on a stream that cannot race the caller's work, and its answer per image
(:func:`decode_on_device`, used by :mod:`prefetch.ops.decode`).

- torchvision (torchvision/csrc/io/image/cuda/decode_jpegs_cuda.cpp on its main branch; the
  batched decoder since 0.20, pytorch/vision PR 8496): the outputs are allocated with
  ``torch::empty`` while the caller's stream is current, and nvJPEG writes them on a private stream
  from torch's pool that never waits for the caller's stream. Before returning it host-synchronises
  that private stream and makes the caller's stream wait on an event recorded there, so the pixels
  are final when it returns; the danger is before: the caching allocator hands out a block as soon
  as it is freed on the caller's stream, so nvJPEG can overwrite memory that kernels queued on the
  caller's stream have not read yet (pytorch/vision PR 9606, which reproduces it with torchvision
  0.28 on nvJPEG's hardware and software paths alike). That PR was closed without being merged
  and torchvision's decoders are deprecated since 0.29, so no torchvision release is exempt.
- TorchCodec (src/torchcodec/_core/DecodeJpegCuda.cpp on its main branch, the decoder of
  meta-pytorch/torchcodec PR 1547, released in 0.16): decodes on the caller's current stream and
  host-synchronises that stream before returning (so a call made while a training step is queued
  on that stream waits for the step). It applies the EXIF orientation, which prefetch's decoders
  (like Pillow's ``Image.open``) do not: images with an orientation other than 1 are refused here
  and decoded on the CPU. nvJPEG's hardware engine (seen on H100s, not on A100s) writes its outputs
  before earlier work queued on the same stream has run (meta-pytorch/torchcodec PR 1634, merged
  after 0.16.0 was released): the same hazard as torchvision's.

So a backend is called with a private decode stream of prefetch's current (one per device, taken
once from torch's stream pool and never destroyed) on which nothing is pending:
``side.synchronize()`` before the call waits only for earlier decodes. The outputs are then
allocated from that stream's pool, whose blocks are only ever freed by prefetch after the reads
queued below, so no queued kernel can still be reading them; and TorchCodec's host
synchronisation waits for its own decode only. ``side.synchronize()`` after the call costs nothing
more today (both backends have waited already) and keeps the pixels final even for a backend that
only orders its work on the current stream. The outputs are then read on the decode stream itself
(the windows cut and packed into one output, allocated there): the next decode's blocks come from
that stream's pool after those reads, in stream order, with no ``record_stream`` per image. The
caller's stream waits for the decode stream (an event, no host synchronisation), and the one
packed output is protected for the caller's stream (``record_stream``). ``torch.cuda.synchronize``
would also be correct, but it waits for every stream of the device, the training step included.
The cost: the decode stream's pool keeps about one batch of whole decoded images cached.
"""
import threading
from typing import Any, Callable, Sequence

import torch

__all__ = ["decode_on_device"]


class _CudaStreams:
    """The stream operations decode_on_device makes (tests replace it with a recorder)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._side = {}

    def current(self, device):
        return torch.cuda.current_stream(device)

    def side(self, device):
        # One per device for the life of the process, from torch's pool: a stream made per call
        # (or destroyed) strands allocator blocks tied to it.
        with self._lock:
            stream = self._side.get(device.index)
            if stream is None:
                stream = self._side[device.index] = torch.cuda.Stream(device=device)
            return stream

    def use(self, stream):
        return torch.cuda.stream(stream)

    def synchronize(self, stream):
        stream.synchronize()

    def protect(self, tensor, stream):
        tensor.record_stream(stream)

    def wait(self, stream, other):
        stream.wait_stream(other)


_streams = _CudaStreams()


def decode_on_device(backend, images: Sequence[torch.Tensor], device: torch.device,
                     read: Callable[[list, list], Any]) -> tuple[Any, list]:
    """``backend``'s decode of ``images`` on ``device``, read by ``read``. One batched call; only if
    it raises, one call per image (a batch with one image nvJPEG rejects costs one failed call, not
    one per image).

    On a CUDA device the calls and ``read`` run on the decode stream (the module docstring says
    why): ``read`` cuts what it needs out of the outputs there, into a tensor it allocates there
    and returns; the caller's stream then waits for the decode stream, and that one tensor is
    protected for the caller's stream (the outputs are dropped once ``read`` has queued its reads:
    their blocks go back to the decode stream's pool in stream order). Elsewhere (the CPU tests'
    and the bench's fake backend) it is the same without streams.

    Args:
        backend (prefetch.ops.gpu_backends.GpuJpegBackend): the decoder.
        images (list of Tensor[L_i]): the encoded images, 1-D uint8 CPU tensors.
        device (torch.device): where to decode (CUDA; the fake backend's CPU or meta too).
        read: called once as ``read(outputs, errors)``: ``outputs[i]`` is the backend's image i
            (in its ``layout``), or None with ``errors[i]`` the exception the backend raised for
            image ``i`` alone.

    Returns:
        ``(read's result, errors)``.

    Raises:
        Whatever ``read`` raises; the backend's own exceptions are caught and returned per image.
    """
    images = list(images)
    if not images:
        return read([], []), []
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if device.type != "cuda":
        outputs, errors = _decode_each(backend, images, device)
        return read(outputs, errors), errors
    caller, side = _streams.current(device), _streams.side(device)
    _streams.synchronize(side)
    done = False
    try:
        with _streams.use(side):
            outputs, errors = _decode_each(backend, images, device)
            _streams.synchronize(side)  # the pixels are final, whatever the backend ordered where
            result = read(outputs, errors)
            outputs = None
        done = True
    finally:
        if not done:  # leave the decode stream idle for the next call
            _streams.synchronize(side)
    _streams.wait(caller, side)
    if isinstance(result, torch.Tensor):
        _streams.protect(result, caller)
    return result, errors


def _decode_each(backend, images, device):
    try:
        return _checked(backend.decode_batch(images, device), len(images), backend), [None] * len(images)
    except Exception:  # noqa: BLE001 - nvJPEG's batched call fails the whole list: try them one by one
        pass
    outputs, errors = [], []
    for image in images:
        try:
            outputs.append(_checked(backend.decode_batch([image], device), 1, backend)[0])
            errors.append(None)
        except Exception as exc:  # noqa: BLE001 - anything it cannot do goes to the CPU decoder
            outputs.append(None)
            errors.append(exc)
    return outputs, errors


def _checked(outputs, count, backend):
    outputs = list(outputs)
    if len(outputs) != count:
        raise RuntimeError("prefetch: the GPU JPEG decoder %s returned %d images for %d"
                           % (backend.name, len(outputs), count))
    return outputs
