"""The checks of transform arguments, made when a transform is built (issue 43): one definition
each, so every transform refuses a bad argument the same way, before the first batch, with a
message naming the class, the argument, what it must be and what it got::

    prefetch: RandomErasing ratio must be finite, got (1, inf)

As torchvision checks its transforms' arguments in their constructors, and more strictly: a value
that would only fail when applied (an infinite range, ``alpha=inf`` giving NaN batches) or be
changed silently (a bool where a number goes, ``1.5`` where an int goes, ``"0.5"`` where a float
goes) is refused here. A value of the wrong type raises :class:`ArgumentTypeError` (a TypeError
that is also a ValueError, so ``except ValueError`` keeps catching every refused argument); a
value out of range raises ValueError.

What counts as a number: ``int``, ``float`` and numpy's numbers (``numbers.Real``), not ``bool``
(nor numpy's), not a string, not a tensor. An int: ``int`` or a numpy integer, not a float
(``2.0`` included: torchvision's ``range(num_ops)`` refuses it too).
"""
import math
import numbers

import numpy as np

__all__ = ["ArgumentTypeError", "is_number", "number", "integer", "probability", "number_pair",
           "numbers_list", "flag", "one_of", "leaf_key", "fill_value"]


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type (a TypeError, and a ValueError as every refused argument)."""


def _fail(cls, name, expected, value, error=ValueError):
    raise error("prefetch: %s %s must be %s, got %r" % (cls, name, expected, value))


def _is_bool(value):
    return isinstance(value, (bool, np.bool_))


def is_number(value):
    """A real number that is not a bool (Python's or numpy's)."""
    return isinstance(value, numbers.Real) and not _is_bool(value)


def number(cls, name, value, *, low=None, high=None, low_open=False, high_open=False,
           expected=None):
    """``value`` as a finite float in ``[low, high]`` (an end ``None``: unbounded; ``*_open``:
    that end excluded). ``expected`` words the message (default: from the bounds)."""
    if expected is None:
        expected = _range_words(low, high, low_open, high_open)
    if not is_number(value):
        _fail(cls, name, expected, value, ArgumentTypeError)
    v = float(value)
    if not math.isfinite(v) or not _inside(v, low, high, low_open, high_open):
        _fail(cls, name, expected, value)
    return v


def integer(cls, name, value, *, low=None, high=None, expected=None):
    """``value`` as an int in ``[low, high]``: ``int`` or a numpy integer, never a bool or a
    float (no silent truncation)."""
    if expected is None:
        expected = "an int" + ("" if low is None and high is None else
                               " in " + _interval(low, high, False, False))
    if _is_bool(value) or not isinstance(value, numbers.Integral):
        _fail(cls, name, expected, value, ArgumentTypeError)
    v = int(value)
    if not _inside(v, low, high, False, False):
        _fail(cls, name, expected, value)
    return v


def probability(cls, name, value):
    """A probability: a finite number in [0, 1], as a float."""
    return number(cls, name, value, low=0.0, high=1.0, expected="a number in [0, 1]")


def number_pair(cls, name, value, *, low=None, high=None, low_open=False, ordered=True):
    """``value`` as a pair ``(min, max)`` of finite floats in ``[low, high]`` (``low_open``: above
    ``low``), ``min <= max`` when ``ordered``."""
    words = "(min, max) of finite numbers%s%s" % (
        "" if low is None and high is None else " in " + _interval(low, high, low_open, False),
        " with min <= max" if ordered else "")
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") \
            or not hasattr(value, "__iter__"):
        _fail(cls, name, words, value, ArgumentTypeError)
    items = list(value)
    if len(items) != 2 or not all(is_number(v) for v in items):
        _fail(cls, name, words, value, ArgumentTypeError)
    a, b = float(items[0]), float(items[1])
    if not (math.isfinite(a) and math.isfinite(b)):
        _fail(cls, name, "finite", value)
    if not (_inside(a, low, high, low_open, False) and _inside(b, low, high, low_open, False)) \
            or (ordered and a > b):
        _fail(cls, name, words, value)
    return a, b


def flag(cls, name, value):
    """A bool (Python's or numpy's): ``bool("False")`` would be True."""
    if not _is_bool(value):
        _fail(cls, name, "True or False", value, ArgumentTypeError)
    return bool(value)


def one_of(cls, name, value, options, expected=None):
    """``value`` if it is one of ``options`` (of the same type: ``1`` is not ``True``)."""
    if not any(type(value) is type(o) and value == o for o in options):
        _fail(cls, name, expected or "one of " + ", ".join(repr(o) for o in options), value)
    return value


def leaf_key(cls, name, value):
    """A batch leaf's key (``get_leaf``): an int index (not a bool: ``True`` would pick leaf 1)
    or a mapping's key (a str or another hashable that is not a number)."""
    expected = "an int index or a mapping key (a str)"
    if _is_bool(value) or (is_number(value) and not isinstance(value, numbers.Integral)):
        _fail(cls, name, expected, value, ArgumentTypeError)
    try:
        hash(value)
    except TypeError:
        _fail(cls, name, expected, value, ArgumentTypeError)
    return int(value) if isinstance(value, numbers.Integral) else value


def fill_value(cls, name, value, *, low=0.0, high=255.0, allow_none=True):
    """A fill: None (when allowed), a number in ``[low, high]``, or one per channel (a list or
    tuple of them); returned as a float or a list of floats."""
    expected = "%sa number in [%g, %g] or one per channel" % ("None, " if allow_none else "",
                                                             low, high)
    if value is None and allow_none:
        return None
    if is_number(value):
        return number(cls, name, value, low=low, high=high, expected=expected)
    return numbers_list(cls, name, value, low=low, high=high, expected=expected)


def numbers_list(cls, name, value, *, low=None, high=None, expected=None):
    """A non-empty list or tuple of finite numbers in ``[low, high]``, as a list of floats; the
    message shows the whole value."""
    expected = expected or "a non-empty list of finite numbers" + (
        "" if low is None and high is None else " in " + _interval(low, high, False, False))
    if not isinstance(value, (list, tuple)) or not value or not all(is_number(v) for v in value):
        _fail(cls, name, expected, value, ArgumentTypeError)
    out = [float(v) for v in value]
    if not all(math.isfinite(v) and _inside(v, low, high, False, False) for v in out):
        _fail(cls, name, expected, value)
    return out


def _inside(v, low, high, low_open, high_open):
    if low is not None and (v <= low if low_open else v < low):
        return False
    if high is not None and (v >= high if high_open else v > high):
        return False
    return True


def _interval(low, high, low_open, high_open):
    return "%s%s, %s%s" % ("(" if low_open or low is None else "[",
                           "-inf" if low is None else "%g" % low,
                           "inf" if high is None else "%g" % high,
                           ")" if high_open or high is None else "]")


def _range_words(low, high, low_open, high_open):
    if low is None and high is None:
        return "a finite number"
    if high is None:
        return "a finite number %s %g" % (">" if low_open else ">=", low)
    return "a number in " + _interval(low, high, low_open, high_open)
