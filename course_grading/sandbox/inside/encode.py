"""Plain data out of a sandbox: encode a Python value as JSON-able data, exact types only.

This file runs *inside* sandboxes (the student's kernel, the function runner): it imports
nothing of the course and holds no expected value and no checking code. The grader decodes and
re-validates everything it produces (``course_grading.judge.plain``): what comes out of here is
untrusted, however it was made.

The encoding keeps what JSON would lose::

    None, bool, int, str, finite float    as themselves
    nan, inf, -inf                        {"float": "nan"}  {"float": "inf"}  {"float": "-inf"}
    fractions.Fraction(n, d)              {"fraction": [n, d]}
    decimal.Decimal                       {"decimal": "its text"}
    list, tuple                           {"list": [...]}   {"tuple": [...]}
    dict                                  {"dict": [[key, value], ...]}
    set, frozenset                        {"set": [...]}    {"frozenset": [...]}
    a numpy scalar, a 0-d numpy array or torch tensor     its ``.item()``, encoded as above
    (``np.longdouble``, which ``.item()`` keeps as itself, as the nearest float)
    Ellipsis (an answer still blank)      {"unset": "..."}
    (a name the kernel does not hold)     {"missing": name}
    anything else                         {"not_plain": "<type name>"}

Types are compared exactly (``type(v) is int``): a subclass of int, float, Fraction or Decimal,
or an object whose ``__eq__`` always says yes, is ``not_plain``. The visible tests read answers
by the same rules (``course_lib/forms.py``, ``plain``). With ``tensors=True`` (the function
runner) a torch tensor (exactly ``torch.Tensor`` or ``nn.Parameter``) or numpy array of any
shape becomes ``{"tensor": {"dtype", "shape", "data"}}``, ``data`` flat and row-major.
"""

import decimal
import fractions
import math
import sys

# Annotations here are strings: this file also runs as code in the student's kernel, where a
# name in an annotation would be looked up in the student's namespace when a function is defined.

MAX_DEPTH = 20
MAX_ITEMS = 200_000  # numbers, strings and containers in one encoded value
MAX_CHARS = 1_000_000  # characters of all strings in one encoded value
MAX_BITS = 1000  # an int's, or a Fraction's numerator's and denominator's, size (the grader's)


class TooLarge(Exception):
    """The value is deeper or larger than the limits above."""


def _scalar_of(value):
    """A numpy scalar or a 0-d numpy array / torch tensor as a Python scalar, else ``None``."""
    numpy = sys.modules.get("numpy")
    if numpy is not None and type(value) in (numpy.ndarray,) + tuple(_numpy_scalars(numpy)):
        if numpy.ndim(value) == 0:
            return _python_item(numpy, value.item())
    torch = sys.modules.get("torch")
    if torch is not None and type(value) is torch.Tensor and value.dim() == 0:
        return (value.item(),)
    return None


def _python_item(numpy, item):
    """``(item,)`` once it is a Python value: ``.item()`` keeps an ``np.longdouble`` as itself
    (a float64 cannot always hold it), which is read as the nearest float; ``None`` (not plain)
    for any other numpy value ``.item()`` leaves as it was."""
    if type(item) not in tuple(_numpy_scalars(numpy)):
        return (item,)
    if isinstance(item, numpy.floating):
        return (float(item),)
    return None


_NUMPY_SCALARS = []


def _numpy_scalars(numpy):
    """Every numpy scalar type (``np.float64``, ``np.bool_``, ``np.str_``, ...), numpy's own."""
    if not _NUMPY_SCALARS:
        pending = [numpy.generic]
        while pending:
            kind = pending.pop()
            if kind.__module__ == "numpy":
                _NUMPY_SCALARS.append(kind)
            pending.extend(kind.__subclasses__())
    return _NUMPY_SCALARS


def _tensor_of(value):
    """``{"tensor": ...}`` for a torch tensor or numpy array (``tensors=True``), else ``None``."""
    torch = sys.modules.get("torch")
    # exact types, as for every other value: a subclass (an always-equal tensor) is not plain
    if torch is not None and type(value) in (torch.Tensor, torch.nn.Parameter):
        flat = value.detach().cpu().reshape(-1).tolist()
        return {"dtype": str(value.dtype).replace("torch.", ""), "shape": list(value.shape)}, flat
    numpy = sys.modules.get("numpy")
    if numpy is not None and type(value) is numpy.ndarray:
        return {"dtype": str(value.dtype), "shape": list(value.shape)}, value.reshape(-1).tolist()
    return None


class Encoder:
    """One encoding pass, counting what it has written against the limits.

    Args:
        tensors: whether a torch tensor or numpy array of any shape is encoded as
            ``{"tensor": ...}`` (the function runner) rather than ``not_plain``.
    """

    def __init__(self, tensors: "bool" = False) -> "None":
        self.tensors = tensors
        self.items = 0
        self.chars = 0

    def _count(self, items=1, chars=0):
        self.items += items
        self.chars += chars
        if self.items > MAX_ITEMS or self.chars > MAX_CHARS:
            raise TooLarge(f"more than {MAX_ITEMS:,} items or {MAX_CHARS:,} characters")

    @staticmethod
    def _bounded(number):
        if number.bit_length() > MAX_BITS:
            raise TooLarge(f"a number of more than {MAX_BITS} bits")
        return number

    def encode(self, value: "object", depth: "int" = 0) -> "object":
        """``value`` as JSON-able data (module docstring), counted against the limits.

        Args:
            value: the value to encode.
            depth: how deep ``value`` sits in the value being encoded (0 at the top).

        Returns:
            The encoding: a JSON scalar, or a one-key dict naming its type.

        Raises:
            TooLarge: the value is nested deeper than ``MAX_DEPTH``, holds more than
                ``MAX_ITEMS`` items or ``MAX_CHARS`` characters, or a number over ``MAX_BITS``.
        """
        if depth > MAX_DEPTH:
            raise TooLarge(f"nested more than {MAX_DEPTH} deep")
        self._count()
        kind = type(value)
        if value is None or kind is bool:
            return value
        if kind is int:
            return self._bounded(value)
        if kind is float:
            if math.isfinite(value):
                return value
            return {"float": "nan" if value != value else ("inf" if value > 0 else "-inf")}
        if kind is str:
            self._count(0, len(value))
            return value
        if kind is fractions.Fraction:
            return {"fraction": [self._bounded(value.numerator), self._bounded(value.denominator)]}
        if kind is decimal.Decimal:
            return {"decimal": str(value)}
        if value is Ellipsis:
            return {"unset": "..."}
        if kind is list or kind is tuple or kind is set or kind is frozenset:
            tag = {list: "list", tuple: "tuple", set: "set", frozenset: "frozenset"}[kind]
            items = [self.encode(item, depth + 1) for item in value]
            if kind is set or kind is frozenset:  # sorted as encoded: no student code runs
                items.sort(key=repr)
            return {tag: items}
        if kind is dict:
            pairs = [
                [self.encode(k, depth + 1), self.encode(v, depth + 1)] for k, v in value.items()
            ]
            return {"dict": pairs}
        scalar = _scalar_of(value)
        if scalar is not None:
            return self.encode(scalar[0], depth)
        if self.tensors:
            found = _tensor_of(value)
            if found is not None:
                head, flat = found
                self._count(len(flat))
                data = [self.encode(x, depth + 1) for x in flat]
                return {"tensor": dict(head, data=data)}
        return {"not_plain": _type_name(value)}


def _type_name(value):
    """The type's name as the grader reports it (bounded; a broken name is still a name)."""
    try:
        kind = type(value)
        name = f"{kind.__module__}.{kind.__qualname__}"
        if name.startswith("builtins."):
            name = name[len("builtins.") :]
        return str(name)[:80]
    except Exception:  # noqa: BLE001 (a class can make even its name fail)
        return "?"


def encode(value: "object", tensors: "bool" = False) -> "object":
    """``value`` as JSON-able data (module docstring); ``{"too_large": why}`` over the limits.

    Args:
        value: the value to encode.
        tensors: whether tensors and arrays of any shape are encoded (the function runner).

    Returns:
        The encoding, or ``{"too_large": why}`` when the value is over a limit.
    """
    try:
        return Encoder(tensors).encode(value)
    except TooLarge as why:
        return {"too_large": str(why)}
    except RecursionError:
        return {"too_large": "nested too deep"}
