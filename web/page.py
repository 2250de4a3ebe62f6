"""The planner page's Python, run by Pyodide in the browser (no server): the form's fields read
off the command line's own parser, and a plan run through the command line's own ``main``, so
the page and ``python -m course_lib plan ... --json`` cannot disagree.

Left out of the form, and why: ``--packing``/``--lengths`` (the packed-rows sampler needs numpy,
which this page does not load), ``--model`` hub ids (no network: a shipped name or your
``config.json``), the TinyGPT plan's own flags, and ``--json`` (the page always asks for it).
"""

from __future__ import annotations

import contextlib
import io
import json

from course_lib.cli import TINYGPT_ONLY, build_parser, main
from course_lib.hf.cards import CARDS
from course_lib.hf_configs import available

LEFT_OUT = {"packing", "lengths", "json", "help", "old_attn_impl", "memory_gb", *TINYGPT_ONLY}
CONFIG_PATH = "/tmp/config.json"  # an uploaded config.json, written by page.js


def form() -> str:
    """The plan's flags as form fields: flag, dest, choices, whether it takes a value, help.

    Returns:
        JSON: ``{"fields": [...], "models": [...], "cards": [...]}``.
    """
    plan = build_parser()._subparsers._group_actions[0].choices["plan"]  # type: ignore[union-attr]
    fields = []
    for action in plan._actions:
        if action.dest in LEFT_OUT or not action.option_strings or action.help == "==SUPPRESS==":
            continue
        takes = action.nargs != 0
        fields.append({
            "flag": action.option_strings[0], "dest": action.dest,
            "choices": list(action.choices) if action.choices else None, "value": takes,
            "help": action.help or "", "metavar": action.metavar or "",
        })  # fmt: skip
    return json.dumps({"fields": fields, "models": available(), "cards": list(CARDS)})


def plan(argv_json: str) -> str:
    """Run ``python -m course_lib plan <argv> --json`` and return what it printed.

    Args:
        argv_json: the flags, a JSON list of strings.

    Returns:
        JSON: ``{"status": exit status, "stdout": ..., "stderr": ...}``.
    """
    argv = json.loads(argv_json)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(["plan", *argv, "--json"])
        except SystemExit as exc:  # argparse's one-line errors
            status = exc.code if isinstance(exc.code, int) else 2
    return json.dumps({"status": status, "stdout": out.getvalue(), "stderr": err.getvalue()})
