"""What the classroom test checks against: the lesson's points and hidden tests, a solved
submission, and the scores as PostgreSQL holds them."""

from __future__ import annotations

from pathlib import Path

import nbformat
from helpers import answered  # noqa: F401 (the classroom test's solved submission)
from hub_pages import LESSON


def lesson_facts(solution: Path, release: Path) -> dict:
    """Autograded points, the manually graded cells ``[(grade_id, points)]`` and the hidden-test
    lines of the instructor's version (those that the student version does not show anyway)."""
    nb = nbformat.read(str(solution), as_version=4)
    visible = "\n".join(c.source for c in nbformat.read(str(release), as_version=4).cells)
    auto_max, manual, hidden = 0.0, [], []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and not meta.get("solution"):
            auto_max += meta["points"]
        elif meta.get("grade") and meta.get("solution"):
            manual.append((meta["grade_id"], meta["points"]))
        inside = False
        for line in cell.source.split("\n"):
            if "BEGIN HIDDEN TESTS" in line:
                inside = True
            elif "END HIDDEN TESTS" in line:
                inside = False
            elif inside and len(line.strip()) > 12 and line.strip() not in visible:
                hidden.append(line.strip())
    assert manual, f"{solution} has no manually graded answer"
    return {"auto_max": auto_max, "manual": manual, "hidden": hidden}


def scores(gradebook_url: str) -> dict[str, dict]:
    """Per student: total, autograded and manual points of LESSON, read with SQL."""
    import psycopg

    query = """
        SELECT s.id,
               SUM(COALESCE(g.manual_score, g.auto_score, 0) + COALESCE(g.extra_credit, 0)),
               SUM(CASE WHEN gc.cell_type = 'code' THEN COALESCE(g.auto_score, 0) ELSE 0 END),
               SUM(COALESCE(g.manual_score, 0)),
               SUM(gc.max_score)
        FROM grade g
        JOIN grade_cells gc ON gc.id = g.cell_id
        JOIN submitted_notebook sn ON sn.id = g.notebook_id
        JOIN submitted_assignment sa ON sa.id = sn.assignment_id
        JOIN assignment a ON a.id = sa.assignment_id
        JOIN student s ON s.id = sa.student_id
        WHERE a.name = %s
        GROUP BY s.id
    """
    url = gradebook_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url, connect_timeout=10) as conn:
        rows = conn.execute(query, (LESSON,)).fetchall()
    return {sid: {"score": t, "auto": a, "manual": m, "max": mx} for sid, t, a, m, mx in rows}
