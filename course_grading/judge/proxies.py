"""The objects a graded function is handed but never holds: ``fits`` and the optimiser.

A call's ``predicate`` and ``recorder`` inputs (``items.predicate``, ``items.recorder``) reach
the runner as proxies (:func:`judge_side`): the student's function gets an object whose every
use is a question to the judge, and the state behind it (the card limit, the probes, the steps'
gradients) lives here, in the judge's process, where the student's process cannot read or
change it. After the call, :func:`collected` gives the check the judge's own record.
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

from course_grading.errors import GradingError
from course_grading.judge import plain


class Predicate:
    """``fits(n)``, judged here: the limit and every probe stay in the judge's process."""

    def __init__(self, limit: int) -> None:
        """A ``fits`` whose card holds ``limit`` rows; no probe yet.

        Args:
            limit: the largest ``n`` for which ``fits(n)`` is True.
        """
        self.limit = limit
        self.probes: list = []

    def ask(self, method: str, args: list) -> object:
        """Answer one use of the student's ``fits``: only a call with one number.

        Every call is recorded in :attr:`probes` (a number as given, anything else described),
        before it is checked.

        Args:
            method: what the student's code did with the proxy (``"call"``).
            args: the arguments it sent, decoded.

        Returns:
            Whether ``1 <= n <= limit``.

        Raises:
            TypeError: not a call with exactly one number; the judge refuses, and the student's
                call raises it.
        """
        if method != "call" or len(args) != 1:
            raise TypeError("fits() takes exactly one argument, a number")
        n = args[0]
        if type(n) in (int, float):
            self.probes.append(n)
        else:
            self.probes.append(plain.describe(n, 40))
        if type(n) not in (int, float, bool, Fraction, Decimal):
            raise TypeError(f"fits() takes a number, not {type(n).__name__}")
        return 1 <= n <= self.limit


class Recorder:
    """The optimiser stand-in, judged here: it keeps every step's gradient and counts."""

    def __init__(self) -> None:
        self.steps: list = []
        self.zero_grads = 0

    def ask(self, method: str, args: list) -> object:
        """Answer one use of the optimiser: ``zero_grad()`` counted, ``step(flat gradient)`` kept.

        Args:
            method: the method the student's code called (``"step"``, ``"zero_grad"``).
            args: its arguments, decoded: a step sends the model's flat gradient as a tensor.

        Returns:
            ``None``, as the optimiser's methods return.

        Raises:
            TypeError: any other method or arguments; the student's call raises it.
        """
        if method == "zero_grad" and not args:
            self.zero_grads += 1
            return None
        if method == "step" and len(args) == 1 and isinstance(args[0], plain.Tensor):
            self.steps.append(args[0])
            return None
        raise TypeError(f"the optimiser has no {method}() taking these arguments")


def judge_side(call: dict, proxies: dict[int, object]) -> dict:
    """``call`` as the runner gets it: every predicate and recorder replaced by a proxy.

    Args:
        call: the call as a check wrote it (``items.call``).
        proxies: filled here: argument position -> the judge's object behind the proxy
            (:class:`Predicate`, :class:`Recorder`), whose state never leaves the judge.

    Returns:
        The call message (``"op": "call"``), its ``predicate`` and ``recorder`` arguments
        replaced by ``{"proxy": {"kind", "id", ...}}``; no limit in it.
    """
    args = []
    for spec in call.get("args", []):
        if isinstance(spec, dict) and "predicate" in spec:
            proxies[len(args)] = Predicate(spec["predicate"]["limit"])
            spec = {"proxy": {"kind": "predicate", "id": len(args)}}
        elif isinstance(spec, dict) and "recorder" in spec:
            proxies[len(args)] = Recorder()
            of = spec["recorder"]["params_of"]
            spec = {"proxy": {"kind": "recorder", "id": len(args), "params_of": of}}
        args.append(spec)
    return dict(call, op="call", args=args)


def collected(what: dict, sent: object, proxies: dict[int, object]) -> object:
    """One ``after`` entry: the judge's own record for a proxy, the runner's for a gradient.

    Args:
        what: the entry the check asked for: ``{"probes": k}``, ``{"steps": k}`` or
            ``{"grads": k}``.
        sent: what the runner sent for it (read only for ``grads``).
        proxies: the call's proxies, by argument position (:func:`judge_side`).

    Returns:
        The probes or steps the judge recorded, or the decoded gradient (a ``plain.NotPlain``
        saying why, when it is not plain data).

    Raises:
        GradingError: the check asks for something its call does not have (a grader bug).
    """
    ((kind, index),) = what.items()
    proxy = proxies.get(index)
    if kind == "probes" and isinstance(proxy, Predicate):
        return list(proxy.probes)
    if kind == "steps" and isinstance(proxy, Recorder):
        return list(proxy.steps)
    if kind == "grads":
        try:
            return plain.decode(sent, tensors=True)
        except plain.NotPlain as err:
            return err
    raise GradingError(f"the check collects {what!r}, which its call does not have")
