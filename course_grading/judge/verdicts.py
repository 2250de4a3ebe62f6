"""Trusted verdicts for one submission, and the nbgrader step that records them.

``grade_submission`` decides every autograded item of one submission with the lesson's trusted
checks (``items``), from plain evidence only: the values taken out of the student's kernel after
its last cell (``evidence.py``, re-validated by ``plain``), and the answer cells' sources as
stored in the submitted file (graded functions are re-created from them, ``functions.py``). It
also points at every use of ``course_lib`` in the student's cells (``uses.py``), for review.

``SaveTrustedGrades`` is nbgrader's ``SaveAutoGrades`` with the trusted verdicts in place of the
cell status: the course's ``nbgrader_config.py`` puts it (and ``nbgrader_steps.SandboxedExecute``
in place of ``Execute``) in ``Autograde.autograde_preprocessors``, and the grading command uses
the same class (``gradebook.record``), so ``python -m course_grading``, ``nbgrader autograde``
and formgrader's Autograde button all record the same grades. Each verdict's message is appended
to its test cell's output (the student's feedback shows it) and becomes the automatic comment
of the item's answer cell (formgrader shows it); review flags set formgrader's flag.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbconvert.exporters.exporter import ResourcesDict
from nbformat.notebooknode import NotebookNode
from nbgrader import utils
from nbgrader.api import Gradebook
from nbgrader.preprocessors import SaveAutoGrades
from traitlets import Bool, Unicode

from course_grading.errors import GradingError
from course_grading.judge import items as trusted
from course_grading.judge import plain
from course_grading.judge import secret as course_secret
from course_grading.judge.functions import FunctionSandbox, TimeBudget, submission_budget
from course_grading.judge.items import Verdict
from course_grading.judge.items.checking import SELF_STUDY
from course_grading.judge.lesson import LessonSpec
from course_grading.nbgrader.course import course_directory, lesson_paths
from course_grading.review.names import Bindings
from course_grading.review.uses import (
    answer_and_earlier,
    borrowed,
    cells_after,
    cells_by_id,
    feeding,
    rebound,
    student_entries,
    uses,
)

#: The first words of the output a verdict appends to its test cell.
GRADED = "Graded outside your notebook"


@dataclass
class Graded:
    """The verdicts of one submission (test-cell grade id -> ``Verdict``), and review flags."""

    verdicts: dict[str, Verdict] = field(default_factory=dict)
    review: list[str] = field(default_factory=list)

    @property
    def points(self) -> float:
        return sum(v.points for v in self.verdicts.values())


def taken_values(payload: dict | None) -> dict[str, object]:
    """The values a kernel gave, from a ``values.json`` payload (``evidence.py``).

    Args:
        payload: the payload as read (:func:`payload_of`); ``None`` or not a dict: none.

    Returns:
        Name -> its decoded plain value, or a ``plain.NotPlain`` saying why it is not; when
        nothing could be read, ``{"*": NotPlain(why)}`` alone.
    """
    if not isinstance(payload, dict):
        return {}
    if "error" in payload or not isinstance(payload.get("values"), dict):
        why = str(payload.get("error", "no values"))[:200]
        return {"*": plain.NotPlain(f"the values could not be read from your notebook ({why})")}
    taken: dict[str, object] = {}
    for name, data in payload["values"].items():
        try:
            taken[str(name)] = plain.decode(data)
        except plain.NotPlain as err:
            taken[str(name)] = err
    return taken


def course_lib_review(submitted: NotebookNode, spec: LessonSpec) -> list[str]:
    """Review flags naming the uses of ``course_lib`` in the student's cells that deserve a look
    (``uses.py``).

    In an answer cell, every use its blank does not hold. In the student's other cells (one
    they added, or a cell the lesson provides for editing, edited), a use that feeds a graded
    value (an answer cell reads what it computed, or it sets a graded value again:
    ``uses.borrowed``, ``uses.rebound``), or that reaches ``course_lib`` beyond the names the
    lesson imports (an import of the student's own, a name built at run time). A lesson-imported
    function called in a cell the lesson provides or asks for (an explorer, a scratch cell, "add
    a cell of your own") that no graded value reads is the lesson's own invitation: no flag.

    Args:
        submitted: the notebook as submitted.
        spec: its lesson (the blank cells' sources, the provided cells).

    Returns:
        One flag per cell with such uses (``uses course_lib in cell 4 ('q1'): ...``, at most
        four named), in cell order.
    """
    lesson = Bindings.of_lesson(spec.lesson_code)
    imported = {o for o in lesson.imports.values() if o.split(".")[0] == "course_lib"}
    graded = [(i.answer, i.values) for i in trusted.items_of(spec.lesson).values() if i.values]
    taken = feeding(submitted, spec, graded)
    flags = []
    for index, (where, source, given) in student_entries(submitted, spec):
        found = [u for u in uses(source, lesson) if u.code not in given]
        answer = bool(submitted.cells[index].metadata.get("nbgrader", {}).get("grade_id"))
        if not answer and not any(where in line for line in taken):
            found = [u for u in found if not u.within_lesson(imported)]
        if found:
            flags.append(f"uses course_lib in {where}: {', '.join(u.code for u in found[:4])}")
    return flags


def grade_submission(
    *,
    spec: LessonSpec,
    source: NotebookNode,
    submitted: NotebookNode,
    student: str,
    payload: dict | None,
    sandbox: FunctionSandbox,
    secret: bytes | None = None,
) -> Graded:
    """Every item of ``spec.lesson`` decided for ``submitted`` (module docstring).

    Args:
        spec: the lesson.
        source: the lesson's instructor notebook; its declarations are checked against the
            registry first.
        submitted: the notebook as submitted (answer cells read from it, never from the kernel).
        student: the student's id.
        payload: the values taken out of the student's kernel (``values.json``).
        sandbox: how graded functions run.
        secret: the course secret the hidden inputs are drawn with (``judge/secret.py``);
            ``None``: practice grading.

    Returns:
        The verdict of every item, by test-cell grade id, and the review flags: the
        ``course_lib`` uses (:func:`course_lib_review`), the items whose values answer the
        self-study edition in a class edition (``items.SELF_STUDY``), and the limits graded
        functions reached (named by their item).

    Raises:
        GradingError: the source notebook's declarations and the registry disagree, or graded
            functions cannot run here.
    """
    registered = trusted.check_notebook(spec.lesson, source)
    values = taken_values(payload)
    if "*" in values:  # nothing could be read: every value reads as that reason
        values = {n: values["*"] for item in registered.values() for n in item.values}
    graded = Graded(review=course_lib_review(submitted, spec))
    present = cells_by_id(submitted)
    budget = submission_budget(sandbox, spec.lesson)  # every function item's runs together
    for gid, item in registered.items():
        if gid not in present:  # scored 0 (gradebook.read_scores): say that, not the check's
            graded.verdicts[gid] = Verdict(
                gid, 0.0, item.points, f"the test cell {gid!r} was deleted, so this item "
                "scores 0; restore it from the student version of the notebook to be graded",
            )  # fmt: skip
            continue
        answer, earlier = answer_and_earlier(submitted, spec, item.answer)
        later = cells_after(submitted, spec, item.answer)
        graded.verdicts[gid] = decide(item, spec, student, values, answer, sandbox, earlier,
                                      secret=secret, later=later, budget=budget)  # fmt: skip
        graded.review += [
            f"{gid}: {note}" for note in graded.verdicts[gid].review if note != SELF_STUDY
        ]
    if edition := [gid for gid, v in graded.verdicts.items() if SELF_STUDY in v.review]:
        graded.review.append(
            f"{SELF_STUDY}: {', '.join(edition)} (the public notebook's numbers, not this class "
            "edition's: worked in the wrong notebook, or the public answers typed in)"
        )
    return graded


def decide(
    item: trusted.Item,
    spec: LessonSpec,
    student: str,
    values: dict[str, object],
    answer: str | None,
    sandbox: FunctionSandbox,
    earlier: Sequence[tuple[str, str, frozenset[str]]] = (),
    *,
    secret: bytes | None = None,
    later: Sequence[tuple[str, str, frozenset[str]]] = (),
    budget: TimeBudget | None = None,
) -> Verdict:
    """One item's verdict from its evidence.

    A ``course_lib`` use in the answer that the lesson's blank does not hold, outside the item's
    allowed modules, a name copied from a cell that computed it with ``course_lib``, and code
    built at run time count against it (``items.verdict``): each is read in the code, never
    guessed from a resemblance (``review/copies.py`` lists those, for review).

    Args:
        item: the item.
        spec: its lesson.
        student: the student's id.
        values: name -> plain value or ``plain.NotPlain``, as the kernel gave them.
        answer: the answer cell's source as submitted; ``None``: no such cell.
        sandbox: how graded functions run.
        earlier: the student's cells before the answer (:func:`answer_and_earlier`).
        later: the student's cells after it (:func:`cells_after`): a value set again there
            with ``course_lib`` is not the student's own work.
        secret: the course secret; ``None``: practice grading.
        budget: the submission's time budget for graded functions, shared by its items
            (``functions.submission_budget``); ``None``: the item's own budget alone.

    Returns:
        The item's verdict.
    """
    lesson = Bindings.of_lesson(spec.lesson_code)
    given = {u.code for u in uses(spec.release_text.get(item.answer, ""), lesson)}
    mine = [u for u in uses(answer or "", lesson) if u.code not in given]
    found = [u.code for u in mine if u.definite and not u.within(item.allowed)]
    evidence = trusted.Evidence(
        item,
        student,
        values={n: values[n] for n in item.values if n in values},
        answer_source=answer,
        sandbox=sandbox,
        secret=secret,
        budget=budget,
    )
    return trusted.verdict(
        item,
        evidence,
        found,
        borrowed=borrowed(answer or "", earlier, lesson)
        + rebound(
            item.values,
            [*earlier, ("the answer cell", answer or "", frozenset(given))],
            later,
            lesson,
        ),
        unread=[u.code for u in mine if not u.definite],
    )


# --- the nbgrader step ------------------------------------------------------------------------


def _message_output(verdict: Verdict) -> NotebookNode:
    mark = "✓" if verdict.full else "✗"
    text = f"{mark} {GRADED}: {verdict.line()}\n"
    return nbformat.v4.new_output("stream", name="stdout", text=text)


class SaveTrustedGrades(SaveAutoGrades):
    """nbgrader's ``SaveAutoGrades``, with every autograded test scored by its trusted check.

    Needs the values that ``nbgrader_steps.SandboxedExecute`` (or the grading command) took out
    of the sandboxed kernel, in ``resources["course_grading"]["values"]``: without them it stops
    (a ``GradingError``), so no configuration can fall back to the cell status. Written answers
    are nbgrader's as before (manual grading).
    """

    sandbox = Bool(
        True, help="call graded functions in a bubblewrap sandbox (False: unsafe, trusted code)"
    ).tag(config=True)
    secret_file = Unicode(
        "",
        help="the course secret's file (judge/secret.py); empty: practice grading, hidden inputs "
        "that follow from public files",
    ).tag(config=True)

    def _secret(self) -> bytes | None:
        secret = course_secret.load(self.secret_file or None)
        if secret is None:
            self.log.warning(course_secret.PRACTICE)
        return secret

    def preprocess(
        self, nb: NotebookNode, resources: ResourcesDict
    ) -> tuple[NotebookNode, ResourcesDict]:
        """Score every autograded test of one submission by its trusted check; save as nbgrader.

        The verdicts come from the grading command when it has decided them already
        (``resources["course_grading"]["decided"]``), else are decided here; a submission with
        review flags is flagged in formgrader.

        Args:
            nb: the executed notebook (nbgrader's earlier steps).
            resources: nbgrader's resources: ``resources["nbgrader"]`` names the lesson, the
                student, the notebook and the gradebook; ``resources["course_grading"]`` holds the
                values taken out of the kernel.

        Returns:
            The notebook with each test cell's verdict appended to its output, and ``resources``
            with the verdicts under ``resources["course_grading"]["graded"]``.

        Raises:
            GradingError: no values from a sandboxed run (``SandboxedExecute`` was not used), or
                the checks cannot decide (see :func:`grade_submission`).
        """
        info = resources["nbgrader"]
        lesson, student, name = info["assignment"], info["student"], info["notebook"]
        mine = resources.setdefault("course_grading", {})
        if "values" not in mine:
            raise GradingError(
                f"{student}/{lesson}: no values from a sandboxed run; autograde with "
                "course_grading.nbgrader.steps.SandboxedExecute in place of Execute (the "
                "course's nbgrader_config.py does)"
            )
        source, release, submitted = lesson_paths(course_directory(self), lesson, name, student)
        sandbox = mine.get("sandbox") or FunctionSandbox.default(sandboxed=self.sandbox)
        decided = mine.get("decided")
        self.graded = (
            decided
            if decided is not None
            else grade_submission(
                spec=LessonSpec.from_notebooks(lesson, source, release),
                source=nbformat.read(str(source), as_version=4),
                submitted=nbformat.read(str(submitted), as_version=4),
                student=student,
                payload=mine["values"],
                sandbox=sandbox,
                secret=mine["secret"] if "secret" in mine else self._secret(),
            )
        )
        self.answer_items = {}
        for gid, verdict in self.graded.verdicts.items():
            item = trusted.items_of(lesson)[gid]
            self.answer_items.setdefault(item.answer, []).append(verdict)
        mine["graded"] = self.graded
        nb, resources = super().preprocess(nb, resources)
        if self.graded.review:  # formgrader's flag: someone should look at it
            with Gradebook(info["db_url"]) as gb:
                gb.find_submission_notebook(name, lesson, student).flagged = True
                gb.db.commit()
        return nb, resources

    def _add_score(self, cell: NotebookNode, resources: ResourcesDict) -> None:
        gid = cell.metadata["nbgrader"]["grade_id"]
        if not trusted.is_test_cell(cell):
            return super()._add_score(cell, resources)  # written answers: nbgrader's rules
        verdict = self.graded.verdicts.get(gid)
        if verdict is None:
            raise GradingError(f"test cell {gid!r} has no trusted check (items.check_notebook)")
        grade = self.gradebook.find_grade(
            gid, self.notebook_id, self.assignment_id, self.student_id
        )
        grade.auto_score = verdict.points
        grade.needs_manual_grade = grade.manual_score is not None
        self.gradebook.db.commit()
        cell.outputs.append(_message_output(verdict))

    def _add_comment(self, cell: NotebookNode, resources: ResourcesDict) -> None:
        gid = cell.metadata["nbgrader"]["grade_id"]
        verdicts = self.answer_items.get(gid)
        if not verdicts:
            return super()._add_comment(cell, resources)
        comment = self.gradebook.find_comment(
            gid, self.notebook_id, self.assignment_id, self.student_id
        )
        lines = [f"{GRADED}: {v.line()}" for v in verdicts]
        lines += [f"For review: {flag}" for flag in self.graded.review if f"({gid!r})" in flag]
        comment.auto_comment = "\n".join(lines)
        self.gradebook.db.commit()

    def preprocess_cell(
        self, cell: NotebookNode, resources: ResourcesDict, cell_index: int
    ) -> tuple[NotebookNode, ResourcesDict]:
        """Save the grade or comment of a graded, answer or task cell; leave other cells alone.

        Args:
            cell: one cell of the notebook.
            resources: nbgrader's resources.
            cell_index: the cell's position.

        Returns:
            The cell (with its verdict appended, for a test cell) and ``resources``.
        """
        if utils.is_grade(cell) or utils.is_solution(cell) or utils.is_task(cell):
            return super().preprocess_cell(cell, resources, cell_index)
        return cell, resources


def payload_of(path: Path) -> dict:
    """A job's ``values.json`` (``evidence.py``), read as JSON.

    Args:
        path: the file.

    Returns:
        The payload, or ``{"error": why}`` when the file is missing or not JSON.
    """
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        return {"error": f"no values were taken ({type(err).__name__})"}
