"""The lessons' links to the course's public home, and their Colab install cell: one place.

    .venv/bin/python scripts/links.py           # write them into every solutions/ lesson
    .venv/bin/python scripts/links.py --check   # exit 1 if a lesson's copy is out of date

Every lesson opens with three things made here, from :data:`REPOSITORY` and :data:`BRANCH`:

* an **Open in Colab** link (the first line of the lesson's first cell): Colab opens the
  student notebook straight from the repository (``notebooks/<lesson>/<lesson>.ipynb``);
* the two-line **how to answer** note (the last paragraph of the first cell), linking to
  ``docs/students.md``;
* the **install cell** (the first code cell, locked): in Colab it installs the course's
  package, ``course_lib``, from the repository (the plain package: what a lesson imports); anywhere
  else (your own ``make lab``, nbval, the grader's sandbox, which has no network) it does
  nothing, prints nothing and reaches for no network.

**Set the repository before publishing**: :data:`REPOSITORY` is a placeholder until the course has
a public home. Change it here, run this script, then ``make release``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

REPO_ROOT = Path(__file__).resolve().parents[1]
#: The course's public repository (owner/name on GitHub). A placeholder: set it when published.
REPOSITORY = "OWNER/shapes"
#: The branch Colab opens and pip installs from.
BRANCH = "main"
INSTALL_ID = "colab-install"
COLAB_LINE = re.compile(r"\A\[Open in Colab\]\([^)\n]*\)\n\n")
HOW_TO = re.compile(r"\n\n> \*\*How to answer\.\*\*[^\n]*(\n>[^\n]*)*\Z")


def colab_link(lesson: str) -> str:
    """The first line of ``lesson``'s first cell: a plain link (no image to fetch)."""
    return (
        f"[Open in Colab](https://colab.research.google.com/github/{REPOSITORY}/blob/{BRANCH}/"
        f"notebooks/{lesson}/{lesson}.ipynb)"
    )


def how_to_answer() -> str:
    """The two-line note that ends every lesson's first cell."""
    page = f"https://github.com/{REPOSITORY}/blob/{BRANCH}/docs/students.md"
    return (
        "> **How to answer.** Replace each `...` in an answer cell and run it, then the test cell"
        " below it;\n> written answers go in their own cells. `Run All` stops at the first question"
        " not yet answered.\n> What each check says, and how the grade is made:"
        f" [`docs/students.md`]({page}) in the course's folder."
    )


def install_source() -> str:
    """The install cell's source: ``pip install`` of the course in Colab, nothing elsewhere."""
    return f"""\
# In Google Colab this installs the course's package (course_lib) into the runtime; anywhere
# else it does nothing at all (your own install, and the grader, already have the course).
import os
import sys

if "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ:
    import subprocess

    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                    "course_lib @ git+https://github.com/{REPOSITORY}@{BRANCH}"], check=True)"""


def install_cell() -> nbformat.NotebookNode:
    """The locked install cell (nbgrader: read-only, never graded)."""
    cell = nbformat.v4.new_code_cell(install_source())
    cell.id = INSTALL_ID
    cell.metadata["nbgrader"] = {
        "grade": False,
        "grade_id": INSTALL_ID,
        "locked": True,
        "schema_version": 3,
        "solution": False,
    }
    return cell


def stamp(nb: nbformat.NotebookNode, lesson: str) -> bool:
    """Put ``lesson``'s link, note and install cell into ``nb``; return whether it changed.

    Raises:
        ValueError: the first cell is not the lesson's markdown introduction.
    """
    first = nb.cells[0]
    if first.cell_type != "markdown" or "# Lesson" not in first.source:
        raise ValueError(f"{lesson}: the first cell is not the lesson's introduction")
    body = HOW_TO.sub("", COLAB_LINE.sub("", first.source))
    source = f"{colab_link(lesson)}\n\n{body}\n\n{how_to_answer()}"
    changed = source != first.source
    first.source = source
    codes = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    at = next((i for i in codes if nb.cells[i].get("id") == INSTALL_ID), None)
    if at is None:
        nb.cells.insert(codes[0], install_cell())
        return True
    if at != codes[0] or nb.cells[at] != install_cell():
        nb.cells.pop(at)  # at >= codes[0]: the first code cell's index does not move
        nb.cells.insert(codes[0], install_cell())
        changed = True
    return changed


def lessons(root: Path = REPO_ROOT) -> list[Path]:
    """Every instructor notebook, ``solutions/<lesson>/<lesson>.ipynb``."""
    return sorted((root / "solutions").glob("*/*.ipynb"))


def main(argv: list[str] | None = None) -> int:
    """Write (or, with ``--check``, compare) every lesson's links and install cell."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report what is out of date")
    args = parser.parse_args(argv)
    stale = []
    for path in lessons():
        nb = nbformat.read(str(path), as_version=nbformat.NO_CONVERT)
        if stamp(nb, path.parent.name):
            stale.append(path)
            if not args.check:
                nbformat.write(nb, str(path))
    for path in stale:
        verb = "out of date" if args.check else "wrote"
        print(f"{verb}: {path.relative_to(REPO_ROOT)}", file=sys.stderr if args.check else None)
    if args.check and stale:
        print("run `.venv/bin/python scripts/links.py`, then `make release`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
