"""Autograding logs no false checksum warning for a test cell exactly as it was released.

nbgrader's ``OverwriteCells`` compares each submitted test cell with the gradebook's record of the
instructor's version; hidden tests were left out of the release, so every such cell of every
submission logged ``Attribute 'checksum' ... has changed!`` (the fixture: two per submission; a
lesson-5 notebook: five). ``RestoreLockedCells`` stays quiet for those and still reports, and
restores, a test cell the student edited. Run on the fixture's work course, no kernel.
"""

from __future__ import annotations

import logging

import nbformat
import pytest
from class_builders import FIXTURE, find, fixture_course
from nbgrader.preprocessors import OverwriteCells

from course_grading.nbgrader.overwrite import RestoreLockedCells, released_source

CHECKSUM = "Attribute 'checksum'"


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return fixture_course(tmp_path_factory.mktemp("restore"))[1]


def _sanitize(step_class, work, nb, caplog) -> tuple[nbformat.NotebookNode, list[str]]:
    resources = {"nbgrader": {"notebook": FIXTURE, "assignment": FIXTURE, "db_url": work.db_url}}
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        out, _ = step_class()(nb, resources)
    return out, [r.getMessage() for r in caplog.records if CHECKSUM in r.getMessage()]


def test_a_submission_as_released_logs_no_checksum_warning(work, caplog):
    released = nbformat.read(str(work.release_notebook(FIXTURE)), as_version=4)
    out, warnings = _sanitize(RestoreLockedCells, work, released, caplog)
    assert warnings == []
    assert "BEGIN HIDDEN TESTS" in find(out, "test_ratio").source  # restored all the same
    # ... where nbgrader's own step warns once per test cell with hidden tests:
    released = nbformat.read(str(work.release_notebook(FIXTURE)), as_version=4)
    assert len(_sanitize(OverwriteCells, work, released, caplog)[1]) == 2


def test_an_edited_test_cell_is_still_reported_and_restored(work, caplog):
    edited = nbformat.read(str(work.release_notebook(FIXTURE)), as_version=4)
    find(edited, "test_ratio").source = "pass  # no test here"
    out, warnings = _sanitize(RestoreLockedCells, work, edited, caplog)
    assert len(warnings) == 1 and "test_ratio" in warnings[0]
    source = nbformat.read(str(work.source_notebook(FIXTURE)), as_version=4)
    assert find(out, "test_ratio").source == find(source, "test_ratio").source


def test_released_source_is_the_release_steps_own():
    source = "x = 1\n### BEGIN HIDDEN TESTS\nassert x == 1\n### END HIDDEN TESTS\nprint(x)"
    assert released_source(source) == "x = 1\nprint(x)"
    assert released_source("plain") == "plain"
