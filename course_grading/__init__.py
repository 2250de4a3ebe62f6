"""What instructors run: the release, the work course, autograde, the report, the command line.

One job per module; import names from the module that owns them:

- ``course``: the work course, a throwaway nbgrader course folder, and running nbgrader in it;
- ``release``: ``solutions/`` -> ``notebooks/`` and the notebook normal form
  (``scripts/release.py``);
- ``lesson``, ``submissions``, ``inspection``: what a lesson contains, finding submissions,
  checking each one before and after grading;
- ``autograde``: running the notebooks and reading the scores;
- ``feedback``: feedback without hidden tests;
- ``active``, ``safe_pages``, ``formgrader_csp``: no student script in any page (the allow-list,
  the nbconvert steps that apply it, formgrader's Content-Security-Policy);
- ``workspace``, ``report``, ``run``, ``cli``: the grading command (``python -m
  course_grading``).
"""

from importlib.util import find_spec as _find_spec

#: What the grader imports beyond a student's install (pyproject.toml's ``grader`` extra).
GRADER_MODULES = ("nbgrader", "ipykernel", "nh3", "latex2mathml")
_missing = [name for name in GRADER_MODULES if _find_spec(name) is None]
if _missing:  # a student's install (the base package) has none of them: say what to install
    raise ModuleNotFoundError(
        f"course_grading is the instructors' grader and needs the `grader` extra "
        f"({', '.join(_missing)} not installed): pip install 'course_lib[grader]' "
        "(or `make setup`, which installs every extra)",
        name=_missing[0],
    )
