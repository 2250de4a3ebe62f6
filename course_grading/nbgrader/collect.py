"""nbgrader's ``collect`` taking a submission only from the student it names.

nbgrader's exchange names a submission ``STUDENT+LESSON+TIME+RANDOM`` in ``inbound/``, and the
student part is whatever the submitting process wrote: ``nbgrader submit --student bob`` run by
alice makes a folder that says bob's, and nbgrader's own collect takes it as bob's (its
``check_owner`` only logs a warning), newest first, so it can stand in for bob's own. Here each
folder's owner says whose it is: its Unix account, or, in the classroom's LTI login, the nbgrader
id the hub gave that account (``SHAPES_STUDENT_IDS``, a JSON file account -> id written by
``classroom/lti.py``). A folder that names someone else is left in ``inbound/``, uncollected, with
a warning naming both; it never hides the named student's own submissions, which are collected
as before. A folder whose owner has no account on this machine (a Kubernetes pod with uids and
no names) is collected with nbgrader's warning, as nbgrader does.

The classroom's instructor configuration (``classroom/course_folder.py``) sets
``c.ExchangeFactory.collect`` to :class:`OwnerCheckedCollect`.
"""

from __future__ import annotations

import json
import os
import pwd
from typing import Any

from nbgrader.exchange.default.collect import ExchangeCollect

#: The file mapping each account to its nbgrader id, when the classroom's LTI login made them.
IDS_ENVIRONMENT = "SHAPES_STUDENT_IDS"
_FORGED = "\0"  # marks a record named for someone other than its owner (no id contains it)


class OwnerCheckedCollect(ExchangeCollect):
    """``collect`` that leaves a submission named for someone other than its owner (docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """nbgrader's collect, with the account -> id map read once and its own owner warning off.

        Args:
            *args: as nbgrader's ``ExchangeCollect``.
            **kwargs: as nbgrader's ``ExchangeCollect``.
        """
        super().__init__(*args, **kwargs)
        self.check_owner = False  # this class checks the owner, and refuses, not only warns
        path = os.environ.get(IDS_ENVIRONMENT)
        self.ids: dict[str, str] = {}
        if path and os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                self.ids = {str(k): str(v) for k, v in json.load(handle).items()}

    def _path_to_record(self, path: str) -> dict:
        """nbgrader's record of an inbound folder, apart from its student's when it is forged."""
        record = super()._path_to_record(path)
        try:
            owner = pwd.getpwuid(os.stat(path, follow_symlinks=False).st_uid).pw_name
        except KeyError:
            self.log.warning("%s: its owner has no account here; collected unchecked", path)
            return record
        expected = self.ids.get(owner, owner)
        if record["username"] != expected:
            record["claimed"], record["owner"] = record["username"], f"{owner} ({expected})"
            record["username"] = f"{record['username']}{_FORGED}{path}"  # a group of its own
        return record

    def copy_files(self) -> None:
        """Collect every record but the forged ones, each of which is named in a warning."""
        for record in [r for r in self.src_records if _FORGED in r["username"]]:
            self.log.warning(
                "not collected: %s says it is %s's submission, but %s made it",
                record["filename"], record["claimed"], record["owner"],
            )  # fmt: skip
        self.src_records = [r for r in self.src_records if _FORGED not in r["username"]]
        super().copy_files()
