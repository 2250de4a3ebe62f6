"""What ``import course_grading`` (or a covered ``course_lib``) finds inside a sandbox.

``sandbox.py`` covers an installed copy of the grader with an empty read-only folder holding
only this file as its ``__init__.py``: an empty folder alone would still import, as a namespace
package.
"""

raise ImportError("this package is not available inside a grading sandbox")
