"""The checks of transform arguments, made when a transform is built: one definition each, for
every transform of prefetch.transforms and every step of its v2 front end, so all of them refuse
a bad argument the same way, before the first batch, with a message naming the class, the
argument, what it must be and what it got::

    prefetch: RandomErasing ratio must be finite, got (1, inf)

Every check takes ``(cls, name, value)`` — the class as the user knows it (torchvision's name for
a policy's options: ``"RandAugment"``), the argument, its value — and keyword-only bounds, and
returns the value converted (a float, an int, a tuple).

As torchvision checks its transforms' arguments in their constructors, and more strictly: a value
that would only fail when applied (an infinite range, ``alpha=inf`` giving NaN batches) or be
changed silently (a bool where a number goes, ``1.5`` where an int goes, ``"0.5"`` where a float
goes) is refused here. One exception scheme: every check here raises :class:`ArgumentError`, a
ValueError (what torchvision raises); a value of the wrong type raises its subclass
:class:`ArgumentTypeError`, also a TypeError. A transform's other refusals (arguments that
conflict with each other) are ValueErrors too, so ``except ValueError`` catches every refused
argument and ``except TypeError`` the wrong types.

What counts as a number: ``int``, ``float`` and numpy's numbers (``numbers.Real``), not ``bool``
(nor numpy's), not a string, not a tensor (a probability takes a 0-d tensor, as torchvision's
flips do). An int: ``int`` or a numpy integer, not a float (``2.0`` included: torchvision's
``range(num_ops)`` refuses it too). The ops' and loaders' integer arguments, which take a whole
float, are :func:`prefetch._core.checks.whole`'s.
"""
from __future__ import annotations

import contextlib
import math
import numbers
from typing import Any, Iterator, NoReturn, Optional, Sequence, Tuple, Type, Union

import numpy as np
import torch

__all__ = ["ArgumentError", "ArgumentTypeError", "fail", "reworded", "is_number", "number",
           "integer", "probability", "number_pair", "numbers_list", "flag", "one_of", "interpolation",
           "leaf_key", "fill_value", "size", "jitter_range"]


class ArgumentError(ValueError):
    """A refused argument of a transform (a ValueError, as torchvision raises for its own)."""


class ArgumentTypeError(ArgumentError, TypeError):
    """An argument of the wrong type: a TypeError, and a ValueError as every refused argument."""


def _message(cls, name, expected, value):
    return "prefetch: %s %s must be %s, got %r" % (cls, name, expected, value)


def fail(cls: str, name: str, expected: str, value: Any,
         error: Type[ArgumentError] = ArgumentError) -> NoReturn:
    """Raises a refusal with the one message shape:
    ``prefetch: <cls> <name> must be <expected>, got <value!r>``.

    Args:
        cls, name, value: the class, the argument and its value (see the module docstring).
        expected (str): what it must be, in words.
        error (type): :class:`ArgumentError`, or :class:`ArgumentTypeError` for a wrong type.

    Raises:
        ArgumentError: always (``error``).
    """
    raise error(_message(cls, name, expected, value))


@contextlib.contextmanager
def reworded(cls: str, name: str, expected: str, value: Any) -> Iterator[None]:
    """A refusal of one part of ``value`` (checked inside the ``with``) raised as a refusal of the
    whole value, with ``expected`` words: the same class (a wrong type stays a TypeError).

    Args:
        cls, name, value: the class, the argument and its value (see the module docstring).
        expected (str): what the whole value must be, in words.

    Yields:
        None.

    Raises:
        ArgumentError: reworded from one raised inside the ``with``.
    """
    try:
        yield
    except ArgumentError as error:
        raise type(error)(_message(cls, name, expected, value)) from None


def _is_bool(value):
    return isinstance(value, (bool, np.bool_))


def is_number(value: Any) -> bool:
    """Whether a value is a number here.

    Args:
        value: anything.

    Returns:
        bool: True for a real number (``numbers.Real``: int, float, numpy's) that is not a bool
        (Python's or numpy's).
    """
    return isinstance(value, numbers.Real) and not _is_bool(value)


def number(cls: str, name: str, value: Any, *, low: Optional[float] = None,
           high: Optional[float] = None, low_open: bool = False, high_open: bool = False,
           expected: Optional[str] = None) -> float:
    """A finite number within bounds.

    Args:
        cls, name, value: the class, the argument and its value (see the module docstring).
        low, high (float, optional): the bounds (None: unbounded).
        low_open, high_open (bool): that end excluded.
        expected (str, optional): words for the message (default: from the bounds).

    Returns:
        float: ``value``.

    Raises:
        ArgumentTypeError: not a number (:func:`is_number`).
        ArgumentError: not finite, or outside the bounds.
    """
    if expected is None:
        expected = _range_words(low, high, low_open, high_open)
    if not is_number(value):
        fail(cls, name, expected, value, ArgumentTypeError)
    v = float(value)
    if not math.isfinite(v) or not _inside(v, low, high, low_open, high_open):
        fail(cls, name, expected, value)
    return v


def integer(cls: str, name: str, value: Any, *, low: Optional[int] = None,
            high: Optional[int] = None, expected: Optional[str] = None) -> int:
    """An int in ``[low, high]``: ``int`` or a numpy integer, never a bool or a float (no silent
    truncation).

    Args:
        cls, name, value: the class, the argument and its value (see the module docstring).
        low, high (int, optional): the inclusive bounds (None: unbounded).
        expected (str, optional): words for the message.

    Returns:
        int: ``value``.

    Raises:
        ArgumentTypeError: not an integer (a bool or a float included).
        ArgumentError: outside the bounds.
    """
    if expected is None:
        expected = "an int" + _int_bounds(low, high)
    if _is_bool(value) or not isinstance(value, numbers.Integral):
        fail(cls, name, expected, value, ArgumentTypeError)
    v = int(value)
    if not _inside(v, low, high, False, False):
        fail(cls, name, expected, value)
    return v


def probability(cls: str, name: str, value: Any) -> float:
    """A probability: a finite number in [0, 1] (a 0-d tensor too, as torchvision's
    ``RandomHorizontalFlip(p=torch.tensor(0.5))``).

    Args:
        cls, name, value: the class, the argument and its value (see the module docstring);
            ``value`` a number or a 0-d tensor.

    Returns:
        float: the probability.

    Raises:
        ArgumentTypeError: not a number (a bool, a string, a tensor of another shape).
        ArgumentError: outside [0, 1] or not finite.
    """
    if isinstance(value, torch.Tensor) and value.dim() == 0 and value.dtype != torch.bool:
        value = value.item()
    return number(cls, name, value, low=0.0, high=1.0, expected="a probability in [0, 1]")


def number_pair(cls: str, name: str, value: Any, *, low: Optional[float] = None,
                high: Optional[float] = None, low_open: bool = False,
                ordered: bool = True) -> Tuple[float, float]:
    """A pair ``(min, max)`` of finite numbers in ``[low, high]``.

    Args:
        cls, name, value: the class, the argument and its value (see the module docstring).
        low, high (float, optional): the bounds (None: unbounded).
        low_open (bool): ``low`` excluded.
        ordered (bool): ``min <= max`` required.

    Returns:
        tuple[float, float]: ``value``.

    Raises:
        ArgumentTypeError: not a sequence of two numbers (a string included).
        ArgumentError: not finite, outside the bounds, or unordered.
    """
    words = "(min, max) of finite numbers%s%s" % (
        "" if low is None and high is None else " in " + _interval(low, high, low_open, False),
        " with min <= max" if ordered else "")
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") \
            or not hasattr(value, "__iter__"):
        fail(cls, name, words, value, ArgumentTypeError)
    items = list(value)
    if len(items) != 2 or not all(is_number(v) for v in items):
        fail(cls, name, words, value, ArgumentTypeError)
    a, b = float(items[0]), float(items[1])
    if not (math.isfinite(a) and math.isfinite(b)):
        fail(cls, name, "finite", value)
    if not (_inside(a, low, high, low_open, False) and _inside(b, low, high, low_open, False)) \
            or (ordered and a > b):
        fail(cls, name, words, value)
    return a, b


def numbers_list(cls: str, name: str, value: Any, *, low: Optional[float] = None,
                 high: Optional[float] = None, low_open: bool = False,
                 expected: Optional[str] = None) -> list:
    """A non-empty list or tuple of finite numbers in ``[low, high]``; the message shows the
    whole value.

    Args:
        cls, name, value: the class, the argument and its value (see the module docstring).
        low, high (float, optional): the bounds (None: unbounded).
        low_open (bool): ``low`` excluded.
        expected (str, optional): words for the message.

    Returns:
        list[float]: ``value``.

    Raises:
        ArgumentTypeError: not a non-empty list or tuple of numbers.
        ArgumentError: a value not finite or outside the bounds.
    """
    expected = expected or "a non-empty list of finite numbers" + (
        "" if low is None and high is None else " in " + _interval(low, high, low_open, False))
    if not isinstance(value, (list, tuple)) or not value or not all(is_number(v) for v in value):
        fail(cls, name, expected, value, ArgumentTypeError)
    out = [float(v) for v in value]
    if not all(math.isfinite(v) and _inside(v, low, high, low_open, False) for v in out):
        fail(cls, name, expected, value)
    return out


def flag(cls: str, name: str, value: Any) -> bool:
    """A bool (Python's or numpy's), checked because ``bool("False")`` would be True.

    Args:
        cls, name, value: the class, the argument and its value (see the module docstring).

    Returns:
        bool: ``value``.

    Raises:
        ArgumentTypeError: anything but a bool.
    """
    if not _is_bool(value):
        fail(cls, name, "True or False", value, ArgumentTypeError)
    return bool(value)


def one_of(cls: str, name: str, value: Any, options: Sequence[Any],
           expected: Optional[str] = None) -> Any:
    """One of a set of options, of the same type (``1`` is not ``True``).

    Args:
        cls, name, value: the class, the argument and its value (see the module docstring).
        options (sequence): the values allowed.
        expected (str, optional): words for the message (default: the options).

    Returns:
        ``value``.

    Raises:
        ArgumentError: not one of ``options``.
    """
    if not any(type(value) is type(o) and value == o for o in options):
        fail(cls, name, expected or "one of " + ", ".join(repr(o) for o in options), value)
    return value


def interpolation(cls: str, value: Any, allowed: Sequence[str],
                  expected: Optional[str] = None) -> str:
    """A resampling filter's name: a string in any case, or an enum whose ``value`` is one
    (torchvision's ``InterpolationMode``), as its lower-case name.

    Args:
        cls, value: the class and its ``interpolation`` argument (see the module docstring).
        allowed (sequence of str): the lower-case names the class takes.
        expected (str, optional): words for the message (default: the names, "'a', 'b' or 'c'").

    Returns:
        The name, lower-case.

    Raises:
        ArgumentError: a name not in ``allowed``; :class:`ArgumentTypeError` for a value that
            is neither a string nor such an enum.
    """
    name = getattr(value, "value", value)
    names = [repr(a) for a in allowed]
    words = expected or (", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0])
    if not isinstance(name, str):
        fail(cls, "interpolation", words, value, ArgumentTypeError)
    if name.lower() not in allowed:
        fail(cls, "interpolation", words, value)
    return name.lower()


def leaf_key(cls: str, name: str, value: Any) -> Any:
    """A batch leaf's key (``get_leaf``): an int index (not a bool: ``True`` would pick leaf 1)
    or a mapping's key (a str or another hashable that is not a number).

    Args:
        cls, name, value: the class, the argument and its value (see the module docstring).

    Returns:
        ``value`` (an int for an integer index).

    Raises:
        ArgumentTypeError: a bool, a non-integer number, or an unhashable value.
    """
    expected = "an int index or a mapping key (a str)"
    if _is_bool(value) or (is_number(value) and not isinstance(value, numbers.Integral)):
        fail(cls, name, expected, value, ArgumentTypeError)
    try:
        hash(value)
    except TypeError:
        fail(cls, name, expected, value, ArgumentTypeError)
    return int(value) if isinstance(value, numbers.Integral) else value


def fill_value(cls: str, name: str, value: Any, *, low: float = 0.0, high: float = 255.0,
               allow_none: bool = True,
               channels: Optional[Sequence[int]] = None) -> Union[float, list, None]:
    """A fill: None (when allowed), a number in ``[low, high]``, or one per channel.

    Args:
        cls, name, value: the class, the argument and its value (see the module docstring).
        low, high (float): the bounds (default a uint8 pixel's, [0, 255]).
        allow_none (bool): None allowed.
        channels (sequence of int, optional): the channel counts a per-channel fill may have,
            e.g. ``(1, 3)`` for the policies' ops, which take 1 or 3.

    Returns:
        float, list[float] or None: ``value``.

    Raises:
        ArgumentTypeError: not a number or a list or tuple of numbers.
        ArgumentError: a value outside the bounds or not finite, or another channel count.
    """
    per_channel = "one per channel" if channels is None else "one per channel (%s values)" % (
        " or ".join(map(str, channels)))
    expected = "%sa number in [%g, %g] or %s" % ("None, " if allow_none else "", low, high,
                                                 per_channel)
    if value is None and allow_none:
        return None
    if is_number(value):
        return number(cls, name, value, low=low, high=high, expected=expected)
    values = numbers_list(cls, name, value, low=low, high=high, expected=expected)
    if channels is not None and len(values) not in channels:
        fail(cls, name, expected, value)
    return values


def size(cls: str, name: str, value: Any, *,
         pair_allowed: bool = True) -> Union[int, Tuple[int, int]]:
    """An output size as torchvision's ``_setup_size`` takes it (torchvision/transforms/v2/
    _utils.py): an int, or a list or tuple of one or two ints, each >= 1.

    Args:
        cls, name, value: the class, the argument and its value (see the module docstring).
        pair_allowed (bool): False: an int only.

    Returns:
        int or tuple[int, int]: an int (a square, or the shorter side) or ``(h, w)``.

    Raises:
        ArgumentTypeError: not an int or a list or tuple of ints.
        ArgumentError: a size below 1, more than two, or a pair where only an int is allowed.
    """
    expected = "an int >= 1 or (h, w) of them" if pair_allowed else "an int >= 1"
    given = value
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    with reworded(cls, name, expected, given):
        if isinstance(value, (list, tuple)):
            if len(value) != 2 or not pair_allowed:  # torchvision: "only two dimensions (h, w)"
                fail(cls, name, expected, given)
            return tuple(integer(cls, name, v, low=1) for v in value)
        return integer(cls, name, value, low=1)


def jitter_range(cls: str, name: str, value: Any, *, center: float = 1.0,
                 bound: Optional[Tuple[float, float]] = None) -> Tuple[float, float]:
    """ColorJitter's ``(min, max)`` for one of its arguments (torchvision's
    ``ColorJitter._check_input``, torchvision/transforms/v2/_color.py): None is the identity
    ``(center, center)``; a number v gives ``[max(0, center - v), center + v]`` (hue, with
    ``bound=(-0.5, 0.5)``: ``[-v, v]``), v finite and at least 0 (and at most ``bound``'s upper
    end); a pair is taken as it is, finite, ``min <= max``, inside ``bound`` (brightness,
    contrast and saturation: at least 0; hue: [-0.5, 0.5]).

    Args:
        cls, name, value: the class, the argument and its value (see the module docstring).
        center (float): the identity's value (1 for factors, 0 for hue).
        bound (tuple[float, float], optional): the range a pair must lie in (None: at least 0).

    Returns:
        tuple[float, float]: ``(min, max)``.

    Raises:
        ArgumentTypeError: not None, a number or a pair of numbers.
        ArgumentError: a value not finite, negative, beyond ``bound`` or unordered.
    """
    low_bound, high_bound = bound if bound is not None else (0.0, None)
    if value is None:
        return center, center
    if is_number(value):
        v = number(cls, name, value, low=0.0, high=None if bound is None else bound[1],
                   expected="None, a finite number >= 0%s or a (min, max) pair" % (
                       "" if bound is None else " and <= %g" % bound[1]))
        return (max(center - v, 0.0) if bound is None else center - v), center + v
    return number_pair(cls, name, value, low=low_bound, high=high_bound)


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


def _int_bounds(low, high):
    if low is None:
        return "" if high is None else " <= %d" % high
    return " >= %d" % low if high is None else " in [%d, %d]" % (low, high)


def _range_words(low, high, low_open, high_open):
    if low is None and high is None:
        return "a finite number"
    if high is None:
        return "a finite number %s %g" % (">" if low_open else ">=", low)
    return "a number in " + _interval(low, high, low_open, high_open)
