"""Every command README.md and docs/ show, found and classified: what ``test_commands.py`` checks.

``python tests/docs/commands.py`` prints each command with where it is and how it is checked.

**What counts as a command.** Every line of a fenced ``bash``/``sh``/``shell`` block (a trailing
``\\`` joins lines, ``#`` starts a comment), and every inline code span that starts with a
program (``make``, ``.venv/bin/...``, ``python``, ``nbgrader``, ``jupyter``, ``pytest``,
``pip``, ``npm``, ``apt-get``, ``kubectl``, ``helm``, ``conda``, ``cd``, ``source``, after any
``NAME=value`` settings). A span naming a tool's subcommand in prose, ``nbgrader autograde`` or
``jupyter lab`` (the program and one word, nothing more), or a module, ``python -m
course_grading`` (nothing more), is a name, not a command. A command is split at ``&&``,
``;``, ``||`` and ``|``; ``( ... )`` and ``$ `` prompts are dropped.

**Runs as written from a fresh clone** means: a ``make`` target, a tool in ``.venv/bin/`` (made
by ``make setup``), a script of the repository run by ``.venv/bin/python``, or a program of the
system (``apt-get``, ``npm``, ``kubectl``, ``helm``, ``conda``, ``python3 -m venv``, ``cd``). A bare
``python``, ``nbgrader``, ``jupyter``, ``pytest`` or ``pip`` is allowed only after
``source .venv/bin/activate`` (or ``conda activate shapes``) earlier in the same block or span.

**How each is checked** (``KIND``): ``make`` targets by make's own dry run (``make -n``); the
course's command lines by their real parsers (``course_grading``'s, ``course_lib plan``,
``secret``: the cheap one is run); nbgrader's subcommands and flags against nbgrader's
own application classes; a script's path and flags against the ``add_argument`` calls in it;
``pytest``'s paths; ``pip install -e ".[extra]"`` against ``pyproject.toml``'s extras; a
``jupyter`` subcommand by its executable in ``.venv/bin``; a ``dask`` subcommand and its flags
against its own ``--help``; the rest (system programs) only parsed,
their file arguments checked to exist.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_BLOCKS = {"bash", "sh", "shell"}
VENV_TOOLS = {"python", "nbgrader", "jupyter", "pytest", "pip"}
SYSTEM = {"apt-get", "npm", "kubectl", "helm", "conda", "cd", "source", "python3", "useradd",
          "install"}  # fmt: skip
PROGRAMS = VENV_TOOLS | SYSTEM | {"make"}
ACTIVATE = re.compile(r"(^|&&|;)\s*(source \.venv/bin/activate|conda activate shapes)\b")
_FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^ *```", re.S | re.M)
_SPAN = re.compile(r"`([^`]+)`")  # a span may wrap onto the next line of its paragraph
_SETTING = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")


@dataclass
class Command:
    """One command as a doc shows it."""

    doc: str  # path relative to the repository
    line: int
    text: str  # as written (continuations joined)
    words: list[str]  # the program and its arguments, settings and prompt removed
    inline: bool  # from a code span (else a fenced block)
    activated: bool  # a venv was activated before it in its block or span
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = "."  # where it runs, relative to the repository (after a ``cd`` before it)

    @property
    def program(self) -> str:
        return self.words[0] if self.words else ""

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def _segments(text: str) -> list[str]:
    """``text`` split at ``&&``, ``;``, ``||`` and ``|`` (outside quotes), brackets dropped."""
    text = text.strip().removeprefix("$ ").strip()
    parts, current, quote = [], "", ""
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            quote = "" if ch == quote else quote
            current += ch
        elif ch in "'\"":
            quote = ch
            current += ch
        elif text.startswith(("&&", "||"), i):
            parts.append(current)
            current, i = "", i + 2
            continue
        elif ch in ";|":
            parts.append(current)
            current = ""
        else:
            current += ch
        i += 1
    parts.append(current)
    return [p.strip().strip("()").strip() for p in parts if p.strip().strip("()").strip()]


def _words(segment: str) -> tuple[list[str], dict[str, str]]:
    try:
        words = shlex.split(segment, comments=False)
    except ValueError:
        words = segment.split()
    env = {}
    while words and _SETTING.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    return [w for w in words if w not in ("...", "[options]")], env


def is_command(span: str) -> bool:
    """Whether an inline code span is a command (module docstring), not a name or a value."""
    words, _ = _words(_segments(span)[0] if _segments(span) else "")
    if not words:
        return False
    first = words[0]
    if first.endswith("/"):  # a folder named in prose (.venv/bin/)
        return False
    if first.startswith(".venv/bin/") or (first == "make" and len(words) > 1):
        return True
    if first not in PROGRAMS:
        return False
    if first in ("nbgrader", "jupyter") and len(words) == 2 and re.fullmatch(r"[\w-]+", words[1]):
        return False  # a subcommand named in prose
    if first == "python" and len(words) == 3 and words[1] == "-m":
        return False  # a module named in prose: python -m course_grading
    return len(words) > 1


def _after_cd(cwd: str, words: list[str]) -> str:
    """The folder a ``cd`` leaves the shell in (relative to the repository; ``?`` outside)."""
    target = words[1] if len(words) > 1 else "~"
    if target.startswith(("/", "~", "$")):
        return "?"
    return os.path.normpath(os.path.join(cwd, target))


def _located(words: list[str], cwd: str) -> list[str]:
    """A program given by a path relative to ``cwd`` (``../../.venv/bin/nbgrader`` after ``cd
    grading/course``), written from the repository's root, so it is checked as such."""
    if words and "/" in words[0] and cwd not in (".", "?"):  # .venv/bin/x from there: no
        words = [os.path.normpath(os.path.join(cwd, words[0])), *words[1:]]
    return words


def _block_lines(body: str, start: int) -> list[tuple[int, str]]:
    """Logical lines of a block (continuations joined), comments and blank lines dropped."""
    out, pending, first = [], "", start
    for offset, raw in enumerate(body.splitlines()):
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if not pending:
            first = start + offset
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        text = (pending + line).strip()
        pending = ""
        if text:
            out.append((first, text))
    return out


def commands(docs: list[Path] = DOCS) -> list[Command]:
    """Every command in ``docs``, in order (module docstring)."""
    found: list[Command] = []
    for doc in docs:
        text = doc.read_text(encoding="utf-8")
        rel = doc.relative_to(ROOT).as_posix() if doc.is_relative_to(ROOT) else doc.name
        for fence in _FENCE.finditer(text):
            if fence.group(2) not in SHELL_BLOCKS:
                continue
            start = text[: fence.start(3)].count("\n") + 1
            activated, cwd = False, "."
            for number, line in _block_lines(fence.group(3), start):
                for segment in _segments(line):
                    words, env = _words(segment)
                    found.append(
                        Command(rel, number, line, _located(words, cwd), False, activated, env, cwd)
                    )
                    cwd = _after_cd(cwd, words) if words[:1] == ["cd"] else cwd
                activated = activated or bool(ACTIVATE.search(line))
        prose = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
        for span in _SPAN.finditer(prose):
            if "\n\n" in span.group(1) or not is_command(" ".join(span.group(1).split())):
                continue
            number = prose[: span.start()].count("\n") + 1
            activated, cwd = False, "."
            for segment in _segments(span.group(1)):
                words, env = _words(segment)
                found.append(
                    Command(
                        rel, number, span.group(1), _located(words, cwd), True, activated, env, cwd
                    )
                )
                cwd = _after_cd(cwd, words) if words[:1] == ["cd"] else cwd
                activated = activated or bool(ACTIVATE.search(segment))
    return found


def runnable_problem(cmd: Command) -> str:
    """Why ``cmd`` would not run as written from a fresh clone, or ``""``."""
    program = cmd.program
    if program in VENV_TOOLS and not cmd.activated:
        return (
            f"bare `{program}` is not on a fresh clone's PATH: write .venv/bin/{program} "
            "(or a make target), or activate the venv first in the same block"
        )
    if program.startswith(".venv/bin/") and not (ROOT / program).exists():
        if not (ROOT / ".venv").is_dir():
            return ""  # no venv here to look in: test_commands says so
        return f"{program} does not exist (make setup makes .venv/bin)"
    if "/.venv/bin/" in program or program.startswith("../"):
        return f"{program} is not the repository's .venv/bin (the command runs in {cmd.cwd})"
    if program not in PROGRAMS and not program.startswith(".venv/bin/"):
        return f"unknown program {program!r}: classify it in tests/docs/commands.py"
    return ""


def main() -> None:
    """Print every command, where it is, and how ``test_commands.py`` checks it."""
    from test_commands import how_checked  # noqa: PLC0415 (the checks live with the test)

    for cmd in commands():
        print(f"{cmd.where:28} {how_checked(cmd):34} {' '.join(cmd.words)}")


if __name__ == "__main__":
    main()
