"""One trusted check run: the :class:`Evidence` it reads and the :class:`Verdict` it comes to.

``Evidence`` hands a check the student's values read by their forms, the graded function's calls
(one sandboxed run per item), a generator seeded per student and item, and the answer cell's
source; :func:`verdict` runs the check and turns what it returned or raised into a ``Verdict``,
after the rules every item keeps (``own_work``, no ``course_lib`` in a graded function).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace

from course_grading.errors import GradingError
from course_grading.judge import functions, plain
from course_grading.judge import secret as course_secret
from course_grading.judge.items.calls import Result, exception_text
from course_grading.judge.items.model import Item, Reject, Verdict
from course_grading.judge.plain import describe
from course_lib.forms import Form, Unreadable

#: The review flag of a verdict whose values answer the self-study edition, not the class's
#: (``Evidence.self_study_note``); ``judge/verdicts.py`` names the items on the report's row.
SELF_STUDY = "answers the self-study edition"
#: torch's global generator is one per process, and the ``--jobs`` slots decide submissions in
#: threads of one process: a reference model built from a seed must hold it while it draws
_TORCH_GENERATOR = threading.Lock()


@contextmanager
def seeded_torch(seed: int) -> Iterator[None]:
    """Draw from torch's global generator seeded with ``seed``, alone: no other check's thread
    seeds or draws meanwhile (two references built at once drew each other's weights and a
    right answer was rejected), and the generator is as it was afterwards.

    Args:
        seed: the seed (``torch.manual_seed``).

    Yields:
        Nothing: build the reference model inside the ``with`` block.
    """
    import torch

    with _TORCH_GENERATOR, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def seed_for(lesson: str, grade_id: str, student: str) -> int:
    """The practice seed of one item for one student (no course secret: ``judge/secret.py``).

    Args:
        lesson: the lesson's folder name.
        grade_id: the item's test-cell grade id.
        student: the student's id.

    Returns:
        The seed ``Evidence.rng`` starts from when grading without a secret and without the
        answer cell's digest: a hash of these public facts alone.
    """
    return course_secret.seed(None, lesson, grade_id, student, None)


class Evidence:
    """Everything a check may look at for one item of one submission (the package's docstring)."""

    def __init__(
        self,
        item: Item,
        student: str,
        *,
        values: dict[str, object] | None = None,
        answer_source: str | None = None,
        sandbox: functions.FunctionSandbox | None = None,
        secret: bytes | course_secret.LessonKeys | None = None,
        budget: functions.TimeBudget | None = None,
    ) -> None:
        """The evidence of ``item`` for ``student``'s submission.

        Args:
            item: the item the check decides.
            student: the student's id (one of the seed's inputs).
            values: the values taken out of the kernel, by name: plain data, or a
                ``plain.NotPlain`` saying why a value is not (a value item).
            answer_source: the answer cell's source as submitted; ``None`` when the notebook has no
                such cell.
            sandbox: how the graded function runs (a function item); ``None``: the defaults.
            secret: the course secret hidden inputs are drawn with (or the lesson's key: a Dask
                worker's); ``None``: practice grading.
            budget: the submission's time budget for graded functions, which this item's runs
                share with its other items (``functions.submission_budget``); ``None``: none
                but the item's own.
        """
        self.item, self.student = item, student
        self._values = values or {}
        self.answer_source = answer_source
        self._sandbox = sandbox
        self.seed = course_secret.seed(secret, item.lesson, item.grade_id, student, answer_source)
        #: the class's numbers of an edition-bound item (``judge/editions.py``), else ``{}``
        self.numbers = item.edition.draw(secret) if item.edition is not None else {}
        self.rng = random.Random(self.seed)
        self.review: list[str] = []
        self.call_times: list[tuple[float, float]] = []  # (CPU, wall) seconds of every call
        self.run_seconds = 0.0  # wall-clock seconds of every run of the function, start to end
        self._budgets = [functions.item_budget(self._settings(), (item.lesson, item.grade_id))]
        self._budgets += [budget] if budget is not None else []

    def _settings(self) -> functions.FunctionSandbox:
        return self._sandbox or functions.FunctionSandbox()

    # values
    def _raw(self, name: str) -> object:
        """The student's value of ``name`` as plain data, before its form reads it.

        Raises:
            GradingError: the check reads a name its item does not declare (a grader bug).
            Reject: the notebook never set it, or it is not plain data.
        """
        if name not in self.item.values:
            raise GradingError(f"{self.item.grade_id}: the check reads {name!r}, not declared")
        found = self._values.get(name, plain.NotPlain("not set: the notebook never defined it"))
        if isinstance(found, plain.NotPlain):
            raise Reject(f"{name}: {found}")
        return found

    def form(self, name: str) -> Form:
        """How ``name`` is compared (the registration's ``values``).

        Args:
            name: one of the item's declared values.

        Returns:
            Its ``course_lib.forms.Form``.

        Raises:
            GradingError: the registration declares no form for it (a grader bug).
        """
        if name not in self.item.forms:
            raise GradingError(f"{self.item.grade_id}: no form declared for {name!r}")
        return self.item.forms[name]

    def read(self, name: str) -> object:
        """``name`` read by its form.

        Args:
            name: one of the item's declared values.

        Returns:
            The value as its form reads it: a Python number, text or tuple.

        Raises:
            Reject: the value is missing, or its form cannot read it (the message gives the form's
                reason).
        """
        value = self._raw(name)
        try:
            return self.form(name).value(value)
        except Unreadable as why:
            raise Reject(f"{name}: {why}") from None

    def expect(self, name: str, expected: object = None) -> object:
        """``name`` read and compared by its form with the expected value.

        Args:
            name: one of the item's declared values.
            expected: the right value; ``None``: the registration's ``expected``.

        Returns:
            The value as its form reads it.

        Raises:
            Reject: the value cannot be read, or is not the expected one; the message says what
                the check needs, never the expected value.
        """
        got = self.read(name)
        if expected is None:
            expected = self.item.expected_values(self.numbers or None)[name]
        if not self.form(name).same(self._raw(name), expected):
            raise Reject(
                f"{name}: your value {describe(self._raw(name))}; the check needs it "
                f"{self.form(name).needs}{self.self_study_note(name)}"
            )
        return got

    def self_study_note(self, *names: str) -> str:
        """Why wrong values of an edition-bound item may be wrong: together they answer the
        self-study edition's numbers, not the class's (an honest student worked in the public
        notebook, or the public answer was typed in).

        Args:
            *names: the item's values read together (one for :meth:`expect`).

        Returns:
            The note to append to the check's message, or ``""`` when the values are not the
            self-study answers (or the class's edition is the self-study one).
        """
        if not self.numbers or self.item.edition is None:
            return ""
        if self.numbers == self.item.edition.public():
            return ""
        public = self.item.expected_values()
        if not all(self.form(n).same(self._raw(n), public[n]) for n in names):
            return ""
        if SELF_STUDY not in self.review:
            self.review.append(SELF_STUDY)
        return (
            " (it answers the self-study edition's numbers: your class's edition asks this "
            "question with its own, in your notebook)"
        )

    def expect_all(self) -> str:
        """Every declared value compared with its expected value (:meth:`expect`).

        Returns:
            The full-marks message, ``"name, other: right"``.
        """
        for name in self.item.values:
            self.expect(name)
        return f"{', '.join(self.item.values)}: right"

    def recorded(self) -> str:
        """A prediction's whole check: every value read by its form and plausible by the item's
        rule (the visible test's ``predicted`` applies the same), and nothing about being right.

        Returns:
            The full-marks message, the same for every plausible value: it says the prediction
            was recorded, never whether it was right.

        Raises:
            GradingError: the item is not a prediction (a grader bug).
            Reject: a value is missing, unreadable, or outside its rule.
        """
        rules = self.item.rules
        if set(rules) != set(self.item.values):
            raise GradingError(f"{self.item.grade_id}: not a prediction (no rule per value)")
        for name in self.item.values:
            if not rules[name].holds(self.read(name)):
                raise Reject(
                    f"{name}: your value {describe(self._raw(name))} is not {rules[name].words}, "
                    "so it is not a plausible prediction"
                )
        return (
            f"{', '.join(self.item.values)}: a plausible prediction, recorded; a prediction "
            "earns this point whether or not the measurement agrees, and your written "
            "comparison with the measurement carries the points"
        )

    def returned(self, result: Result, expected: object, wrong: str = "not right") -> object:
        """A call's result read by the item's ``returns`` form and compared with ``expected``.

        Args:
            result: one call's result (:meth:`call`).
            expected: the right result.
            wrong: what the message says when the result is readable but not right.

        Returns:
            The result as the form reads it.

        Raises:
            GradingError: the item declares no ``returns`` form (a grader bug).
            Reject: the call gave no plain value, or one the form cannot read or that is not
                ``expected``; the message names the call and what came back, never the expected
                value.
        """
        got = result.value()
        form = self.item.returns
        if form is None:
            raise GradingError(f"{self.item.grade_id}: no form declared for the results")
        try:
            read = form.value(got)
            right = form.same(got, expected)
        except Unreadable as why:
            raise Reject(f"{result.shown} returned {describe(got)}: {why}") from None
        if not right:
            raise Reject(f"{result.shown} returned {describe(got)}: {wrong}")
        return read

    @staticmethod
    def require(condition: object, message: str) -> None:
        """Fail the item with ``message`` unless ``condition`` holds.

        Args:
            condition: anything true when the check passes this point.
            message: the student's reason the item scores 0 (never the expected value).

        Raises:
            Reject: with ``message``, when ``condition`` is false.
        """
        if not condition:
            raise Reject(message)

    # functions
    def call(self, calls: list[dict]) -> list[Result]:
        """Every call of ``calls`` in one fresh sandbox run; one :class:`Result` each.

        Each call's CPU and wall-clock seconds are added to :attr:`call_times`.

        Args:
            calls: the calls, as :func:`~course_grading.judge.items.calls.call` writes them (their
                ``shown`` is taken out here).

        Returns:
            One result per call, in order, each shown as ``function(arguments)``.

        Raises:
            GradingError: the item declares no function (a grader bug), or graded functions cannot
                run here at all.
            Reject: the answer cell is missing, is not Python, does not run on its own, does not
                define the function, or the run gives no answer (time, memory, a crash).
        """
        item = self.item
        if item.function is None:
            raise GradingError(f"{item.grade_id}: the check calls a function, none declared")
        if self.answer_source is None:
            raise Reject(f"the answer cell {item.answer!r} is not in your notebook")
        source = _python_source(self.answer_source)
        shown = [c.pop("shown", "…") for c in calls]
        settings = self._settings()
        ran = functions.run(
            source,
            item.function,
            calls,
            allowed=item.allowed,
            forbidden=item.forbidden,
            settings=settings,
            key=(item.lesson, item.grade_id),
            budgets=self._budgets,
        )
        self.run_seconds += ran.seconds
        self._note_limits(ran, settings)
        if ran.answer is None:
            raise Reject(f"{item.function}: {ran.failure}")
        if ran.answer["error"]:
            error = ran.answer["error"]
            raise Reject(f"your answer cell, run on its own, raised {exception_text(error)}")
        if not ran.answer["defined"]:
            raise Reject(f"your answer cell does not define a function {item.function}")
        answers = ran.answer["calls"]
        if len(answers) != len(calls):
            raise Reject(f"{item.function}: the run ended before every call was made")
        results = []
        for text, got in zip(shown, answers):
            self.call_times.append((got.get("cpu", 0.0), got.get("wall", 0.0)))
            results.append(
                Result(
                    f"{item.function}({text})",
                    got.get("returned"),
                    got.get("raised"),
                    got.get("not_plain"),
                    got.get("after", []),
                    got.get("stopped"),
                )
            )
        return results

    def _note_limits(self, ran: functions.Ran, settings: functions.FunctionSandbox) -> None:
        """Review flags for the limits a run reached: a time budget, the sandbox's memory."""
        if ran.budget is not None:
            note = f"its graded function's runs used {ran.budget.why} and were stopped"
            self.review.append(note)
        if ran.memory_kills:
            gib = settings.limits.memory_bytes / 2**30
            self.review.append(
                f"its graded function's sandbox reached its memory limit of {gib:g} GiB; "
                "processes of it were killed"
            )


def _python_source(source: str) -> str:
    """The cell as Python: IPython's syntax (``%magic``, ``!cmd``) turned into calls."""
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        return TransformerManager().transform_cell(source)
    except (SyntaxError, ValueError) as err:
        raise Reject(f"your answer cell is not valid Python ({type(err).__name__})") from None


def verdict(
    item: Item,
    ev: Evidence,
    uses: list[str],
    *,
    borrowed: Sequence[str] = (),
    unread: Sequence[str] = (),
) -> Verdict:
    """Run ``item``'s check on ``ev``; a ``Verdict`` whatever the check raised but a grader bug.

    An ``own_work`` value item and every function item score 0 with ``uses``: a ``course_lib``
    use read in the answer cell, never a resemblance (a cell that looks like the course's code is
    listed for review by ``review/copies.py``, and scored on its results). An ``own_work`` item
    also scores 0 when its answer cell copies a name an earlier cell of the student's computed
    with ``course_lib`` (``borrowed``), or runs code built at run time that the grader cannot
    read (``unread``).

    Args:
        item: the item.
        ev: its evidence for one submission.
        uses: the certain ``course_lib`` uses in the answer cell (``uses.py``) outside the
            item's allowed modules.
        borrowed: names the answer cell takes from earlier cells that computed them with
            ``course_lib`` (``uses.borrowed``).
        unread: code the answer cell builds at run time, which the grader cannot read.

    Returns:
        The check's verdict (full marks with its message, or 0 with the reason it rejected),
        with the wall-clock seconds of the item's function runs and its review flags (a
        check's own, and the limits its runs reached).
    """
    decided = _decided(item, ev, uses, borrowed, unread)
    review = tuple(dict.fromkeys((*decided.review, *ev.review)))  # a check's own Verdict too
    seconds = ev.run_seconds or sum(wall for _, wall in ev.call_times)
    return replace(decided, seconds=seconds, review=review)


def _decided(
    item: Item,
    ev: Evidence,
    uses: list[str],
    borrowed: Sequence[str],
    unread: Sequence[str],
) -> Verdict:
    try:
        if item.own_work and uses:
            raise Reject(
                f"your answer cell uses {', '.join(uses[:3])}: this item is worked out by "
                "hand, without course_lib"
            )
        if item.own_work and borrowed:
            raise Reject(
                f"your answer cell takes {borrowed[0]}: this item is worked out by hand, "
                "without course_lib, in its answer cell"
            )
        if item.own_work and unread:
            raise Reject(
                f"your answer cell runs code the grader cannot read ({unread[0]}): write the "
                "work out plainly in the answer cell"
            )
        if item.function and uses:
            raise Reject(
                f"your answer cell uses {', '.join(uses[:3])}, which this item does not allow: "
                "write it yourself"
            )
        got = item.check(ev)
    except Reject as why:
        return Verdict(item.grade_id, 0.0, item.points, str(why), tuple(ev.review))
    if isinstance(got, Verdict):
        return got
    return Verdict(item.grade_id, item.points, item.points, str(got), tuple(ev.review))
