"""The one error the grader raises: a reason a person can act on."""


class GradingError(Exception):
    """Grading cannot go on; the message says why and what to do."""
