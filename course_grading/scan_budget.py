"""A time budget for reading what a student controls (the leak scan's pages and outputs).

The scan is linear in its input, and its input is bounded (the output cap, the notebook size
limits); the budget is the last bound: a scan that runs past it stops, and the caller treats
what it could not check as withheld.
"""

from __future__ import annotations

import time


class ScanBudgetExceeded(Exception):
    """A scan ran past its time budget; the message says what it was doing."""


class Deadline:
    """The moment a scan must stop: ``seconds`` from now, or never (``None``).

    Measured on the monotonic clock, from when the ``Deadline`` is made.

    Args:
        seconds: the budget in seconds, or ``None`` for a scan without one.
    """

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.at = None if seconds is None else time.monotonic() + seconds

    def check(self, doing: str) -> None:
        """Raise ``ScanBudgetExceeded`` once the budget is spent.

        Cheap (one clock read), so long loops call it every so often.

        Args:
            doing: what the scan is doing, in words, for the message ("decoding base64").

        Raises:
            ScanBudgetExceeded: the deadline has passed (``doing`` says where).
        """
        if self.at is not None and time.monotonic() > self.at:
            raise ScanBudgetExceeded(f"ran past its {self.seconds:g} s budget while {doing}")
