"""What a grading run on a Dask cluster keeps, as it goes, so that nothing graded is lost.

``<out>/cluster/`` (``cluster.py`` writes it; ``workspace.OUTPUTS`` clears it for a new run, and
``--resume`` keeps it):

- ``run.json``: what a resumed run must match (a digest of the installed grader, of the course
  secret, and the options that change a grade) and what it reuses (each lesson's budget and
  its graded functions' solution call times, measured once);
- ``done/<digest>/``: each recorded answer, as it is recorded: ``answer.json`` (the notebook's
  outcome, the verdicts, the attempt and the worker), ``out.ipynb`` and ``values.json``. The
  digest is the job's content (:func:`job_digest`: student, lesson, the notebook as the kernel
  gets it, the staged files), so a resubmitted notebook is graded again, never replayed;
- ``graded.csv``: one row per answer as it came: student, lesson, the worker that graded it,
  the attempt, its seconds on the worker (notebook and items).

``--resume`` replays every kept answer through the same recording as a fresh one, so the
report is the one an uninterrupted run writes; only what no answer was kept for is sent.
"""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
from dataclasses import asdict, replace
from pathlib import Path

from course_grading.cluster_worker import Answer, grader_digest
from course_grading.errors import GradingError
from course_grading.grading_run import Options
from course_grading.judge.items import Verdict
from course_grading.judge.verdicts import Graded
from course_grading.report import csv_text
from course_grading.sandbox.budgets import Budget
from course_grading.sandbox.jobs import Outcome
from course_grading.submissions import Submission


class Store:
    """What a run on the cluster keeps in ``<out>/cluster`` (module docstring).

    Args:
        folder: ``<out>/cluster``.
        options: the run's options (their grader, secret and limits must match a resumed run's).
        resume: keep what the stopped run kept (``False``: start again).

    Raises:
        GradingError: ``resume``, and ``folder`` holds no stopped run, or one graded with
            another grader, secret or options.
    """

    def __init__(self, folder: Path, options: Options, resume: bool) -> None:

        secret = options.secret
        tag = hashlib.sha256(b"shapes-resume\0" + secret).hexdigest()[:16] if secret else None
        plain = replace(options, jobs=1, limits=replace(options.limits, threads=1))
        self.fingerprint = {"grader": grader_digest(), "options": repr(plain), "secret": tag}
        self.folder, self.kept = folder, {}
        if resume:
            try:
                self.kept = json.loads((folder / "run.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                raise GradingError(f"--resume: {folder} holds no stopped run to resume") from None
            changed = [k for k, v in self.fingerprint.items() if self.kept.get(k) != v]
            if changed:
                raise GradingError(
                    f"--resume: the {' and '.join(changed)} changed since the stopped run; run "
                    "without --resume to grade every submission again"
                )

    def begin(self, budgets: dict[str, Budget], calls: dict[tuple[str, str], float]) -> None:
        """Write ``run.json`` (what a resumed run must match, and the lessons' measures).

        Args:
            budgets: each lesson's budget.
            calls: each graded function's solution call time.
        """
        (self.folder / "done").mkdir(parents=True, exist_ok=True)
        record = {**self.fingerprint, "budgets": {k: asdict(b) for k, b in budgets.items()}}
        record["calls"] = [[lesson, gid, cpu] for (lesson, gid), cpu in calls.items()]
        (self.folder / "run.json").write_text(json.dumps(record, indent=1), encoding="utf-8")

    def measured(self) -> tuple[dict[str, Budget], dict[tuple[str, str], float]] | None:
        """The stopped run's lesson measures, when resuming.

        Returns:
            ``(budgets, calls)`` as :meth:`begin` got them, or ``None``.
        """
        if "budgets" not in self.kept:
            return None
        budgets = {lesson: Budget(**b) for lesson, b in self.kept["budgets"].items()}
        return budgets, {(lesson, gid): cpu for lesson, gid, cpu in self.kept["calls"]}

    def answer(self, digest: str) -> Answer | None:
        """The answer kept for the job whose content has ``digest``, if any.

        Args:
            digest: :func:`job_digest` of the job.

        Returns:
            The answer, its folder the kept one; ``None`` when none is kept.
        """
        folder = self.folder / "done" / digest
        try:
            kept = json.loads((folder / "answer.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        outcome = Outcome(**kept["outcome"]) if kept["outcome"] else None
        graded = None
        if kept["verdicts"] is not None:
            verdicts = {g: Verdict(**{**v, "review": tuple(v["review"])})
                        for g, v in kept["verdicts"].items()}  # fmt: skip
            graded = Graded(verdicts, kept["review"])
        return Answer(outcome, graded, str(folder), kept["attempt"], kept["worker"])

    def keep(self, digest: str, sub: Submission, answer: Answer) -> None:
        """Keep a recorded answer (its notebook and values too) and add its ``graded.csv`` row.

        Args:
            digest: :func:`job_digest` of its job.
            sub: its submission.
            answer: the answer, recorded.
        """
        folder = self.folder / "done" / digest
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("out.ipynb", "values.json"):
            if (Path(answer.folder) / name).is_file():
                shutil.copyfile(Path(answer.folder) / name, folder / name)
        graded = answer.decided if isinstance(answer.decided, Graded) else None
        kept = {
            "outcome": asdict(answer.outcome) if answer.outcome else None,
            "verdicts": {g: asdict(v) for g, v in graded.verdicts.items()} if graded else None,
            "review": graded.review if graded else [],
            "attempt": answer.attempt,
            "worker": answer.worker,
        }
        (folder / "answer.json").write_text(json.dumps(kept), encoding="utf-8")
        log = self.folder / "graded.csv"
        new = not log.is_file()
        with open(log, "a", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            if new:
                writer.writerow(["student", "lesson", "worker", "attempt", "seconds"])
            cells = [csv_text(sub.student), sub.lesson, csv_text(answer.worker), answer.attempt]
            writer.writerow([*cells, f"{answer.seconds:.3f}"])

    def count(self) -> int:
        """How many answers are kept.

        Returns:
            The number of kept answers.
        """
        return sum(1 for _ in (self.folder / "done").glob("*/answer.json"))


def job_digest(sub: Submission, job: Path) -> str:
    """What identifies a job across runs: its student, lesson, notebook and staged files.

    Args:
        sub: its submission.
        job: its folder (``in.ipynb``, ``stage/``).

    Returns:
        The SHA-256, in hex.
    """
    digest = hashlib.sha256(f"{sub.student}\0{sub.lesson}\0".encode())
    for path in [job / "in.ipynb", *sorted((job / "stage").rglob("*"))]:
        if path.is_file():
            digest.update(path.relative_to(job).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()
