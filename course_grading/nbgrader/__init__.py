"""nbgrader's side: the work course, its preprocessors, the gradebooks, the release."""
