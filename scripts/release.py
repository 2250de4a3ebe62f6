"""Regenerate the student notebooks (``notebooks/``) from the instructor notebooks (``solutions/``).

    python scripts/release.py                     # write notebooks/<lesson>/<lesson>.ipynb
    python scripts/release.py --check             # exit 1 if notebooks/ is out of date
    python scripts/release.py --strip-solutions   # strip outputs in solutions/ (keeps metadata)
    python scripts/release.py --strip-solutions --check   # exit 1 if a solution is not stripped
    python scripts/release.py --secret-file S --out DIR    # a class's edition, into a new DIR

Every lesson ``solutions/<lesson>/<lesson>.ipynb`` goes through ``nbgrader generate_assignment``
in a temporary course folder with its own gradebook (the repository never gets a
``gradebook.db``), and the result is written in the normal form of ``nbstripout`` so that
``git diff`` is empty when nothing changed. ``--root`` points at another course folder (the
tests use ``tests/grading/fixtures``).

``notebooks/`` is the *self-study edition*. With the course secret, the check-yourself questions
that are answered by a typed number are asked with the class's own numbers (drawn from the
secret: ``course_grading/judge/editions.py``); that release goes into a new folder of its own
(``--out``), never into ``notebooks/``, and the grader, given the same secret, expects its answers.
"""

from __future__ import annotations

import argparse
import difflib
import sys
import tempfile
from pathlib import Path

from course_grading.nbgrader import course as wc
from course_grading.nbgrader import release as rel

REPO_ROOT = Path(__file__).resolve().parents[1]


def _diff_summary(problems: list[str], expected: dict, root: Path, max_lines: int = 30) -> str:
    """Problems, each differing notebook followed by the first lines of its unified diff."""
    out = []
    for problem in problems:
        out.append(f"  {problem}")
        key = problem.split(":", 1)[0].removeprefix(f"{wc.RELEASE_DIR}/")
        want = expected.get(key)
        path = root / wc.RELEASE_DIR / key
        if isinstance(want, str) and path.is_file() and "differs" in problem:
            have = path.read_text(encoding="utf-8", errors="replace")
            diff = list(
                difflib.unified_diff(
                    have.splitlines(),
                    want.splitlines(),
                    f"{key} (in notebooks/)",
                    f"{key} (regenerated)",
                    lineterm="",
                    n=1,
                )
            )
            out += [f"    {line}" for line in diff[:max_lines]]
            if len(diff) > max_lines:
                out.append(f"    ... {len(diff) - max_lines} more diff lines")
    return "\n".join(out)


def release(root: Path, check: bool) -> int:
    """Regenerate (or, with ``check``, only compare) ``notebooks/``; return the exit status."""
    lessons = wc.find_lessons(root)
    if not lessons:
        print(
            f"no lessons found: expected {root / wc.SOURCE_DIR}/<lesson>/<lesson>.ipynb",
            file=sys.stderr,
        )
        return 1
    with tempfile.TemporaryDirectory(prefix="shapes-release-") as tmp:
        _, expected = rel.build_release(root, Path(tmp) / "course")
    if check:
        problems = rel.compare_release(expected, root)
        if problems:
            print(
                f"notebooks/ is out of date with solutions/ ({len(problems)} problem(s)); "
                "run `make release`:",
                file=sys.stderr,
            )
            print(_diff_summary(problems, expected, root), file=sys.stderr)
            return 1
        print(f"notebooks/ is up to date ({len(lessons)} lesson(s): {', '.join(lessons)})")
        return 0
    changed = rel.write_release(expected, root)
    for path in changed:
        print(f"wrote {path}")
    print(f"released {len(lessons)} lesson(s); {len(changed)} file(s) changed")
    return 0


def class_release(root: Path, secret_file: Path, out: Path) -> int:
    """Write the class edition (the secret's numbers) into ``out``; return the exit status."""
    from course_grading.errors import GradingError
    from course_grading.judge import secret as course_secret

    try:
        secret = course_secret.load(secret_file)
        with tempfile.TemporaryDirectory(prefix="shapes-release-") as tmp:
            _, expected = rel.build_release(root, Path(tmp) / "course", secret)
        written = rel.write_class_release(expected, out)
    except GradingError as err:
        print(f"release: {err}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    print(
        f"released the class edition of {len(wc.find_lessons(root))} lesson(s) into {out}: "
        "hand these to the class, and grade with the same --secret-file"
    )
    return 0


def strip_solutions(root: Path, check: bool) -> int:
    """Normalise every ``solutions/*/*.ipynb`` in place (or, with ``check``, only report)."""
    paths = sorted((root / wc.SOURCE_DIR).glob("*/*.ipynb"))
    changed = [p for p in paths if rel.normalise_file(p, check=check)]
    for path in changed:
        verb = "not stripped" if check else "stripped"
        print(f"{verb}: {path.relative_to(root)}", file=sys.stderr if check else sys.stdout)
    if check and changed:
        print("run `python scripts/release.py --strip-solutions`", file=sys.stderr)
        return 1
    print(
        f"{len(paths)} solution notebook(s) checked, {len(changed)} "
        f"{'need stripping' if check else 'stripped'}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        description="Generate the student notebooks (notebooks/) from solutions/ with nbgrader."
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 with a diff summary if anything differs",
    )
    parser.add_argument(
        "--strip-solutions",
        action="store_true",
        help="normalise solutions/*/*.ipynb instead (strip outputs and "
        "execution counts, keep nbgrader metadata)",
    )
    parser.add_argument(
        "--root",
        type=Path,
        default=REPO_ROOT,
        help="course root holding solutions/ and notebooks/ (default: the repository)",
    )
    parser.add_argument(
        "--secret-file",
        type=Path,
        help="the course secret (python -m course_grading secret PATH): release the class's "
        "edition, its own numbers, into --out instead of notebooks/",
    )
    parser.add_argument("--out", type=Path, help="with --secret-file: a new folder to write into")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    if (args.secret_file is None) != (args.out is None):
        parser.error(
            "--secret-file and --out go together: a class edition goes into its own folder"
        )
    if args.secret_file is not None:
        return class_release(root, args.secret_file, args.out)
    if args.strip_solutions:
        return strip_solutions(root, args.check)
    return release(root, args.check)


if __name__ == "__main__":
    sys.exit(main())
