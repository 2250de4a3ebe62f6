"""Author nbgrader notebooks from Python: a small cell vocabulary for the course's lessons.

    from nbbuild import md, code, answer, tests, written, write_notebook
    write_notebook("solutions/01_x/01_x.ipynb", [md("# Title"), code("import torch"), ...])

The notebook written is the source of truth afterwards (edit it in Jupyter as usual); this only
saves typing the nbgrader metadata by hand. Cell kinds (nbgrader schema 3):

* ``md`` / ``code``: locked, read-only cells (students cannot change instructions or set-up);
* ``answer``: an autograded answer cell; wrap the solution in ``### BEGIN SOLUTION`` / ``### END
  SOLUTION`` so the release replaces it with ``raise NotImplementedError()``;
* ``tests``: autograder tests worth ``points``; put grading-only asserts between
  ``### BEGIN HIDDEN TESTS`` and ``### END HIDDEN TESTS``;
* ``written``: a manually graded markdown answer worth ``points``;
* ``free``: an unlocked scratch cell (not graded), e.g. for widgets or a student's experiments.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import nbformat


def _src(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


def _meta(grade_id, *, grade=False, solution=False, locked=False, points=None):
    meta = {
        "grade": grade,
        "grade_id": grade_id,
        "locked": locked,
        "schema_version": 3,
        "solution": solution,
    }
    if points is not None:
        meta["points"] = points
    return {"nbgrader": meta}


class _Ids:
    def __init__(self):
        self.n = 0

    def __call__(self, prefix):
        self.n += 1
        return f"{prefix}-{self.n:02d}"


_ids = _Ids()


def md(text: str, grade_id: str | None = None):
    cell = nbformat.v4.new_markdown_cell(_src(text))
    cell.metadata.update(_meta(grade_id or _ids("intro"), locked=True))
    return cell


def code(text: str, grade_id: str | None = None, tags: list[str] | None = None):
    cell = nbformat.v4.new_code_cell(_src(text))
    cell.metadata.update(_meta(grade_id or _ids("setup"), locked=True))
    if tags:
        cell.metadata["tags"] = tags
    return cell


def free(text: str, tags: list[str] | None = None):
    cell = nbformat.v4.new_code_cell(_src(text))
    if tags:
        cell.metadata["tags"] = tags
    return cell


def answer(text: str, grade_id: str):
    cell = nbformat.v4.new_code_cell(_src(text))
    cell.metadata.update(_meta(grade_id, solution=True))
    return cell


def tests(text: str, grade_id: str, points: int):
    cell = nbformat.v4.new_code_cell(_src(text))
    cell.metadata.update(_meta(grade_id, grade=True, locked=True, points=points))
    return cell


def written(text: str, grade_id: str, points: int):
    cell = nbformat.v4.new_markdown_cell(_src(text))
    cell.metadata.update(_meta(grade_id, grade=True, solution=True, points=points))
    return cell


def write_notebook(path: str | Path, cells) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = list(cells)
    nb.metadata.update(
        {
            "kernelspec": {
                "display_name": "Python 3 (ipykernel)",
                "language": "python",
                "name": "python3",
            },
            "language_info": {"name": "python"},
        }
    )
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:03d}"
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.validate(nb)
    nbformat.write(nb, path)
    return path
