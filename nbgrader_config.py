"""nbgrader configuration for the Shapes course.

The course root is this repository. Instructor notebooks (with solutions and hidden tests) live
in ``solutions/<lesson>/<lesson>.ipynb``; ``nbgrader generate_assignment <lesson>`` writes the
student version to ``notebooks/<lesson>/<lesson>.ipynb``. The lesson folder name is nbgrader's
assignment id and the notebook stem is its notebook id.

``scripts/release.py`` and ``python -m course_grading`` load this file from their own
temporary or private course folders (``load_subconfig``) and override only the paths, so the
settings below hold everywhere.
"""

import os

c = get_config()  # noqa: F821  (injected by traitlets when it executes this file)

# --- where things are -------------------------------------------------------------------------
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
# What depends on the deployment comes from one place, the environment: a hub sets these per
# user (classroom/jupyterhub_config.py on one machine; singleuser.extraEnv and hub.extraConfig on
# Kubernetes: docs/classroom.md). Unset, this is one instructor's course: id "shapes", nbgrader's
# default exchange, and a SQLite gradebook.db in the course root.
c.CourseDirectory.course_id = os.environ.get("SHAPES_COURSE_ID", "shapes")
if os.environ.get("SHAPES_EXCHANGE_ROOT"):
    c.Exchange.root = os.environ["SHAPES_EXCHANGE_ROOT"]
if os.environ.get("SHAPES_GRADEBOOK_URL"):  # e.g. postgresql+psycopg://grader:...@host/db
    c.CourseDirectory.db_url = os.environ["SHAPES_GRADEBOOK_URL"]
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"

# --- the blank a student gets ---------------------------------------------------------------------
# The solution region of an answer cell becomes this comment only. Each answer cell says itself
# what is missing: a line `name = ...  # what kind of value` above the region and
# `ensure_answered(name=name)` below it (course_lib.answers), or, in a function, a
# `raise NotImplementedError("write ...")` after the region. Run All on a blank notebook then
# fails only in answer cells and their tests, each with a message that names what to set.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE"}

# --- execution ----------------------------------------------------------------------------------
# The per-cell limit applies to every cell, the lesson's own `import torch` included; a few
# seconds is not enough on a loaded 2-core machine, and a timeout in an instructor cell makes
# nbgrader throw the whole submission away. An infinite loop in a student cell costs this long.
c.Execute.timeout = 60

# --- autograde: trusted verdicts, never the kernel's cell status -----------------------------
# Every autograded point is decided by trusted code outside the student's kernel
# (course_grading/judge/items/), on plain data only: values taken out of the sandboxed kernel
# after the last cell, and graded functions re-created from the submitted file's source in a
# fresh sandbox. nbgrader's own `nbgrader autograde` (and formgrader's Autograde button) go the
# same way: its `Execute` step is replaced by a sandboxed run with every hidden-test region
# removed, and its `SaveAutoGrades` by the trusted checks. Neither falls back to the old
# cell-status verdicts.
# Hidden inputs are drawn with the course secret (course_grading/judge/secret.py): a file only the
# grader can read, named here from the environment (`make classroom` sets it for the
# instructor). Unset: practice grading, with inputs anyone holding the repository can compute.
c.SaveTrustedGrades.secret_file = os.environ.get("SHAPES_COURSE_SECRET_FILE", "")
# The same secret draws the class's edition: the numbers of the questions answered by a typed
# number (course_grading/judge/editions.py). generate_assignment renders them first; every other
# step is nbgrader's default, in its order.
c.RenderEdition.secret_file = os.environ.get("SHAPES_COURSE_SECRET_FILE", "")
c.GenerateAssignment.preprocessors = [
    "course_grading.nbgrader.steps.RenderEdition",
    *(
        f"nbgrader.preprocessors.{name}"
        for name in (
            "IncludeHeaderFooter",
            "InstantiateTests",
            "LockCells",
            "ClearSolutions",
            "ClearOutput",
            "CheckCellMetadata",
            "ComputeChecksums",
            "SaveCells",
            "ClearHiddenTests",
            "ClearMarkScheme",
            "ComputeChecksums",
            "CheckCellMetadata",
        )
    ),
]
# nbgrader's sanitize steps, with its OverwriteCells quiet about the checksum of a test cell that
# is exactly as released (its hidden tests differ by design: jupyter/nbgrader#1961); an edited
# test cell is still reported and restored (course_grading/nbgrader/overwrite.py).
c.Autograde.sanitize_preprocessors = [
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.DeduplicateIds",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "course_grading.nbgrader.overwrite.RestoreLockedCells",
    "nbgrader.preprocessors.CheckCellMetadata",
]
c.Autograde.autograde_preprocessors = [
    "course_grading.nbgrader.steps.SandboxedExecute",
    # The cells written answers quote (a step time, a GPU's peak) keep the student's own run,
    # labelled, beside the grader's: grading ran them again (course_grading/pages/student_run.py).
    "course_grading.pages.student_run.ShowStudentRun",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "course_grading.judge.verdicts.SaveTrustedGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
    "course_grading.pages.safe_pages.NeutraliseActiveContent",  # the stored copy's outputs: inert
]

# --- feedback without hidden tests ---------------------------------------------------------
# nbgrader 0.9 puts hidden tests back into the autograded notebook and, by default, shows them in
# the HTML feedback (jupyter/nbgrader#917). There is no switch for it: the feedback converter's
# preprocessor list is configurable, so the hidden region is removed again before rendering.
# `course_grading.pages.feedback.HideHiddenTests` is nbgrader's ClearHiddenTests plus one more step:
# the traceback of a failed hidden assert (which quotes the hidden line) is cut down to its last
# line.
# `course_grading.pages.feedback.WithholdInstructorMaterial` then refuses to render a notebook in
# which any other hidden-test, solution or mark-scheme line shows (a student's code that printed
# the cells it saw run): that student gets no feedback file (the post-convert hook removes the
# page nbgrader writes, which holds only a notice), nbgrader's log names it in one warning, the
# exit status stays 0 (withholding is the step working), and
# `withheld_feedback/<student>/<lesson>/` records the lines. This holds for formgrader's Generate
# Feedback button too. The names are imported only when feedback is generated.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "course_grading.pages.feedback.HideHiddenTests",
    "course_grading.pages.feedback.WithholdInstructorMaterial",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
    "course_grading.pages.safe_pages.NeutraliseActiveContent",
]
c.GenerateFeedback.post_convert_hook = "course_grading.pages.withheld.remove_withheld_pages"

# --- no active content in any page built from a submission ----------------------------------
# A student's notebook can hold a <script> in a text/html output, an application/javascript
# output or <img onerror=...> in markdown; opened by the instructor, it would run with their
# Jupyter session. Every HTML page nbgrader builds with this configuration (feedback, and
# formgrader's manual-grading view, whose HTMLExporter is made from it) goes through the
# allow-list of course_grading/pages/active.py: outputs holding anything active are shown as text,
# HTML and markdown keep only inert markup, and feedback pages carry a Content-Security-Policy
# that lets them run nothing (course_grading/pages/safe_pages.py). Formgrader's own pages get theirs
# from the server extension course_grading.pages.formgrader_csp. HTMLExporter.sanitize_html is left
# off: it would add bleach's pure-Python parse of every output, and formgrader's and the
# feedback's templates ignore it for markdown cells anyway.
c.HTMLExporter.preprocessors = ["course_grading.pages.safe_pages.NeutraliseActiveContent"]
c.HTMLExporter.filters = {"markdown2html": "course_grading.pages.safe_pages.SafeMarkdown"}
c.GenerateFeedback.exporter_class = "course_grading.pages.safe_pages.FeedbackExporter"
