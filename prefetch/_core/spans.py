"""Element ranges of a 1-D tensor gathered one after another: what a Ragged's ``index_select``
and a gather leaf's host rows (prefetch._core.tree) both do."""
import torch

from .extension import C as _C  # noqa: F401  (registers torch.ops.prefetch._gather_spans)

__all__ = ["gather_spans"]


def gather_spans(values: torch.Tensor, spans: torch.Tensor, name: str = "values") -> torch.Tensor:
    """Element ranges of the 1-D ``values``, one after another (any device; the engine's C++
    copy does this for the host path).

    Args:
        values (Tensor[N]): any dtype, on any device.
        spans (Tensor[n, 2]): int64 ``(start, count)`` pairs, in elements.
        name (str): what the error calls ``values``.

    Returns:
        Tensor[sum(count)]: the ranges concatenated, ``values``' dtype and device.

    Raises:
        IndexError: a range outside ``values`` (the first such, with its position).
    """
    if values.device.type == "cpu" and values.dim() == 1 and values.is_contiguous() \
            and spans.dtype == torch.int64 and spans.device.type == "cpu":
        # One C++ call a batch, the GIL released (a transform's host stage on a store's encoded
        # bytes: csrc/torch/ops/jpeg_host_ops.cpp, the core's span copies), not a narrow a range.
        return torch.ops.prefetch._gather_spans(values, spans, name)
    starts, counts = spans[:, 0], spans[:, 1]
    bad = (starts < 0) | (counts < 0) | (starts > values.numel() - counts)
    if bool(bad.any()):
        k = int(bad.nonzero()[0, 0])
        raise IndexError("prefetch: %s: range %d + %d (position %d of the batch) is out of range "
                         "for %d elements" % (name, int(starts[k]), int(counts[k]), k,
                                              values.numel()))
    total = int(counts.sum())
    if total == 0:
        return values.new_empty(0)
    if values.device.type == "cpu":
        # One memcpy a range (an index a byte would be 8 times the batch's bytes).
        return torch.cat([values.narrow(0, s, c) for s, c in spans.tolist()])
    first = torch.cumsum(counts, 0) - counts  # each range's first position in the output
    positions = torch.arange(total, device=values.device) + (starts - first).repeat_interleave(
        counts, output_size=total)
    return values[positions]
