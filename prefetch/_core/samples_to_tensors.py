"""A field's per-sample numbers or numpy arrays as tensors, as ``default_collate`` makes them:
the one conversion behind both :class:`prefetch.Samples` (flattened for the engine) and
:func:`prefetch.collate.samples`.

- Numbers: the tensor ``default_collate`` makes of them, with its dtype rules (torch's
  ``collate_int_fn``, ``collate_float_fn`` and ``collate_numpy_scalar_fn``: the first sample's
  type decides; ``torch.tensor`` / ``torch.as_tensor`` promote the rest). Where
  ``default_collate`` fails, numpy scalars of one type still give their own dtype (``np.uint64``,
  which ``torch.as_tensor`` refuses) and numpy integers of several types their lossless numpy
  promotion; anything else is a :class:`prefetch.CollateError` naming the field, and for an int
  beyond int64 the sample and the value — never torch's "Overflow when unpacking long long".
- Arrays: ``torch.from_numpy`` of each (shared memory, no copy), in one ``map`` — no Python per
  sample on the common path; a sample ``from_numpy`` refuses (negative strides, another byte
  order, an alias dtype) takes :func:`ndarray_to_tensor`'s path, and one of a dtype torch lacks
  is a CollateError naming the sample.
"""
import warnings

import numpy as np
import torch

from .errors import CollateError

__all__ = ["INT64", "show_int", "ndarray_to_tensor", "numbers_to_tensor", "ndarrays_to_tensors"]

INT64 = (-(1 << 63), (1 << 63) - 1)


def _torch_numpy_types():
    """The numpy scalar types torch.from_numpy takes, asked of torch itself (np.longlong yes,
    np.ulonglong no; uint16/32/64 only in newer torch)."""
    types = set()
    for t in set(np.sctypeDict.values()):
        try:
            torch.from_numpy(np.zeros(1, dtype=t))
        except (TypeError, ValueError, RuntimeError):
            continue
        types.add(t)
    return frozenset(types)


_TORCH_NUMPY_TYPES = _torch_numpy_types()


def _unsupported_dtype(dtype, name, what="a numpy array"):
    shown = str(dtype) if str(dtype) == dtype.name else "%s (%s)" % (dtype, dtype.name)
    return CollateError(
        "prefetch: %s is %s of dtype %s, which has no torch dtype; only numeric and bool "
        "arrays can be moved to a device (convert it first, e.g. .astype(np.float64))"
        % (name, what, shown))


def ndarray_to_tensor(array, name, what="a numpy array"):
    # Positive: a dtype torch has (datetime64, timedelta64, longdouble, clongdouble, structured,
    # object and string arrays are all refused here, naming the leaf).
    if array.dtype.type not in _TORCH_NUMPY_TYPES:
        # A second name for a supported type (np.ulonglong is uint64's bits): view it as that.
        canonical = np.dtype(array.dtype.str) if array.dtype.kind in "biufc" else None
        if canonical is None or canonical.type not in _TORCH_NUMPY_TYPES:
            raise _unsupported_dtype(array.dtype, name, what)
        array = array.view(canonical)
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    try:
        with warnings.catch_warnings():
            # Read-only arrays (memmaps, np.load) are fine: the engine only reads them.
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            return torch.from_numpy(array)
    except (ValueError, RuntimeError, TypeError):
        # Negative strides and other layouts from_numpy refuses.
        return torch.from_numpy(np.ascontiguousarray(array))


def show_int(value):
    """An int for a message: its digits, or its size when it is too long to print (str() of an
    int of more than 4300 digits raises ValueError)."""
    if value.bit_length() <= 256:
        return "%d" % value
    return "(an int of %d bits)" % value.bit_length()


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def numbers_to_tensor(values, name):
    """``values`` (a list of Python or numpy numbers) as ``default_collate`` would stack them;
    ``name`` names the field in errors. Raises CollateError."""
    first = values[0]
    if isinstance(first, (np.bool_, np.number)):
        kind = type(first)
        if all(type(v) is kind for v in values):  # one numpy type: its own dtype, exactly
            return ndarray_to_tensor(np.array(values, dtype=first.dtype), name,
                                     "a Samples of numpy scalars")
        try:
            return torch.as_tensor(values)  # default_collate's collate_numpy_scalar_fn
        except (TypeError, ValueError, RuntimeError, OverflowError) as exc:
            promoted = _numpy_promotion(values)
            if promoted is not None:
                return ndarray_to_tensor(promoted, name, "a Samples of numpy scalars")
            raise _failure(values, name, exc) from None
    try:
        if isinstance(first, float):
            return torch.tensor(values, dtype=torch.float64)  # default_collate's collate_float_fn
        return torch.tensor(values)  # collate_int_fn (bools and ints: bool, int64 or float32)
    except (TypeError, ValueError, RuntimeError, OverflowError) as exc:
        promoted = _numpy_promotion(values)  # a Python int first, numpy integers after it
        if promoted is not None:
            return ndarray_to_tensor(promoted, name, "a Samples of numbers")
        raise _failure(values, name, exc) from None


def _numpy_promotion(values):
    """The numpy array of mixed numpy integers and bools (and Python ints in int64) when numpy's
    promotion of them is an integer dtype, which holds every value exactly; else None (int64
    with uint64 promotes to float64, which does not)."""
    if not all(isinstance(v, (np.bool_, np.integer)) or (_is_int(v) and INT64[0] <= v <= INT64[1])
               for v in values):
        return None
    try:
        array = np.asarray(values)
    except (TypeError, ValueError, OverflowError):
        return None
    return array if array.dtype.kind in "biu" else None


def _failure(values, name, exc):
    for i, v in enumerate(values):
        if _is_int(v) and not INT64[0] <= v <= INT64[1]:
            try:
                float(v)
                also = ""
            except OverflowError:
                also = " (and float64's range)"
            return CollateError(
                "prefetch: cannot collate %s: sample %d of the batch holds the int %s, beyond int64 "
                "[-2**63, 2**63)%s, which no integer tensor holds; store it as a float, a string "
                "or a smaller int" % (name, i, show_int(v), also))
    types = sorted({type(v).__name__ for v in values})
    return CollateError("prefetch: cannot collate %s: its samples are numbers of the types %s, "
                        "and torch makes no tensor of them (%s: %s)"
                        % (name, ", ".join(types), type(exc).__name__, exc))


def ndarrays_to_tensors(arrays, name):
    """Each ndarray of ``arrays`` as a CPU tensor sharing its memory (a copy only for what
    ``torch.from_numpy`` refuses: negative strides, non-native byte order; aliases of a torch
    dtype viewed as it). Errors (a dtype torch lacks: object, strings, datetime64,
    longdouble, structured) are CollateErrors naming ``name`` and the sample."""
    try:
        with warnings.catch_warnings():
            # Read-only arrays (np.frombuffer, memmaps) are fine: the engine only reads them.
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            return list(map(torch.from_numpy, arrays))
    except (TypeError, ValueError, RuntimeError):
        pass  # some sample needs the careful path; find which
    return [ndarray_to_tensor(a, "%s sample %d" % (name, i)) for i, a in enumerate(arrays)]
