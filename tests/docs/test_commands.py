"""Every command README.md and docs/ show runs as written from a fresh clone, and is checked.

``commands.py`` finds them and says what counts; here each is checked by its kind
(``how_checked``): make's dry run for every ``make`` line, the real parsers of the course's own
commands (the cheap ones run: ``secret``, ``course_lib plan``), nbgrader's own
application classes for its subcommands and flags, the ``add_argument`` calls of a script for its
flags, the paths ``pytest`` is given, ``pyproject.toml`` for an extra, ``.venv/bin`` for a Jupyter
subcommand; system programs are parsed and their file arguments checked. The expensive commands
(``make test``, ``make grade``, ``make classroom``, the benchmarks, a grading run) are never run:
their dry run or parse is. ``python tests/docs/commands.py`` lists them all.

Also here: every repository path the docs name exists; the docs give nbgrader's real default
exchange folder (read from the installed nbgrader); no doc calls formgrader's buttons
unsandboxed (``tests/grading/test_formgrader_button.py`` shows what they run). Each check is also
fed a doc that must fail it.
"""

from __future__ import annotations

import ast
import functools
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from commands import DOCS, ROOT, Command, commands, runnable_problem

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

LESSON = "01_tokens_and_attention_memory"
PLACEHOLDERS = {
    "<lesson>": LESSON, "LESSON": LESSON, "NN": "01", "<student>": "ann", "ID": "ann",
    "N": "2", "L": LESSON, "CMD": "true", "TEST_ID": "test-real-scale",
}  # fmt: skip
#: Folders the docs' commands make as they go (a grading workspace): ``cd`` may enter them.
MADE_BY_COMMANDS = ("grading",)


def tool(cmd: Command) -> str:
    """The program without ``.venv/bin/``: ``python``, ``nbgrader``, ``make``, ``kubectl``..."""
    return cmd.program.removeprefix(".venv/bin/")


def filled(words: list[str], tmp: Path) -> list[str]:
    """``words`` with placeholders made real and optional ``[...]`` brackets opened."""
    out = []
    for word in words:
        word = word.removeprefix("[")
        word = word[:-1] if word.endswith("]") and "[" not in word else word
        for name, value in PLACEHOLDERS.items():
            word = re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w-])", value, word)
        word = word.replace("PATH", str(tmp / "course_secret"))
        if word:
            out.append(word)
    return out


@functools.cache
def script_options(path: Path) -> tuple[frozenset[str], frozenset[str]]:
    """The options (``--x``) and subcommands a script's argparse calls declare."""
    options, subcommands = set(), set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            strings = [a.value for a in node.args if isinstance(a, ast.Constant)]
            strings = [s for s in strings if isinstance(s, str)]
            if node.func.attr == "add_argument":
                options |= {s for s in strings if s.startswith("-")}
            elif node.func.attr == "add_parser" and strings:
                subcommands.add(strings[0])
    return frozenset(options), frozenset(subcommands)


@functools.cache
def nbgrader_apps() -> dict:
    from nbgrader.apps.nbgraderapp import NbGraderApp

    return NbGraderApp.subcommands


def _app(app):
    if isinstance(app, str):
        module, _, name = app.rpartition(".")
        app = getattr(importlib.import_module(module), name)
    return app


def _subcommands(app) -> dict:
    found = getattr(app, "subcommands", None)
    return found if isinstance(found, dict) else {}  # else traitlets' trait: none


def _nbgrader(args: list[str]) -> str:
    apps = nbgrader_apps()
    if not args or args[0] not in apps:
        return f"nbgrader has no subcommand {args[:1]}"
    app, rest = _app(apps[args[0]][0]), args[1:]
    while rest and rest[0] in _subcommands(app):  # nbgrader db assignment add
        app, rest = _app(app.subcommands[rest[0]][0]), rest[1:]
    known = set(app.flags) | set(app.aliases)
    for arg in rest:
        name = arg.lstrip("-").split("=")[0]
        if arg.startswith("--") and "." not in name and name not in known:
            return f"nbgrader {args[0]} has no option --{name}"
    return ""


def _course_grading(args: list[str], tmp: Path) -> str:
    from course_grading import cli

    if args[:1] == ["secret"]:
        (tmp / "course_secret").unlink(missing_ok=True)
        made = cli.main(["secret", str(tmp / "course_secret"), *args[2:]])  # its options too
        return "" if made == 0 else "secret failed"
    commands = (["export"], ["refresh"], ["key"], ["passback"], ["lti-key"], ["cluster-certs"])
    if args[:1] in commands:
        from course_grading import cluster_certs, refresh
        from course_grading.lms import export, passback_cli
        from course_grading.nbgrader import answer_key

        parser = {
            "export": export.build_parser,
            "refresh": refresh.build_parser,
            "key": lambda: answer_key.build_parser(ROOT),
            "passback": passback_cli.build_parser,
            "lti-key": passback_cli.key_parser,
            "cluster-certs": cluster_certs.build_parser,
        }[args[0]]()
        try:
            parser.parse_args(args[1:])
        except SystemExit as done:  # --help ends with 0, a bad argument with 2
            bad = f"python -m course_grading {args[0]} does not accept {args[1:]}"
            return bad if done.code else ""
        return ""
    try:
        cli.build_parser().parse_args(args or ["submitted"])
    except SystemExit:
        return f"python -m course_grading does not accept {args}"
    return ""


def _course_lib(args: list[str]) -> str:
    from course_lib import cli

    if args == ["plan"]:  # named in prose: the subcommand exists
        try:
            cli.build_parser().parse_args(["plan", "--help"])
        except SystemExit as stop:
            return "" if stop.code == 0 else "no plan subcommand"
    try:
        return "" if cli.main(args) == 0 else f"python -m course_lib {args} failed"
    except SystemExit as stop:
        return "" if stop.code in (0, None) else f"python -m course_lib {args}: exit {stop.code}"


def _paths_exist(args: list[str]) -> str:
    paths = [a for a in args if "/" in a or a.endswith(".py")]  # not -k's expression
    missing = [a for a in paths if not (ROOT / a.split("::")[0]).exists()]
    return f"no such test path {missing}" if missing else ""


def _script(args: list[str]) -> str:
    path = ROOT / args[0]
    if not path.is_file():
        return f"no script {args[0]}"
    options, subcommands = script_options(path)
    if subcommands and (len(args) < 2 or args[1] not in subcommands):
        return f"{args[0]} has no subcommand {args[1:2]}; it has {sorted(subcommands)}"
    if args[1:3] == ["instructor", "--"] and args[3:4] == ["nbgrader"]:  # classroom/run.py
        return _nbgrader(args[4:])
    for arg in args[1:]:
        if arg == "--":
            break
        if arg.startswith("-") and arg.split("=")[0] not in options:
            return f"{args[0]} has no option {arg.split('=')[0]}"
    return ""


def _python(args: list[str], tmp: Path) -> str:
    if not args:  # the interpreter itself, to type into
        return ""
    if args[:2] == ["-m", "course_grading"]:
        return _course_grading(args[2:], tmp)
    if args[:2] == ["-m", "course_lib"]:
        return _course_lib(args[2:])
    if args[:2] in (["-m", "pytest"],):
        return _paths_exist(args[2:])
    if args[:2] == ["-m", "nbgrader"]:
        return _nbgrader(args[2:])
    if args[:1] == ["-m"]:
        return "" if importlib.util.find_spec(args[1]) else f"no module {args[1]}"
    return _script(args)


def _pip(args: list[str]) -> str:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for arg in args:
        if match := re.fullmatch(r"\.\[([\w,]+)\]", arg):
            if unknown := set(match.group(1).split(",")) - set(extras):
                return f"pyproject.toml has no extra {sorted(unknown)}"
    return ""


@functools.cache
def dask_options(sub: str) -> frozenset[str] | None:
    """The flags ``.venv/bin/dask SUB --help`` lists; ``None`` when there is no such subcommand."""
    exe = ROOT / ".venv" / "bin" / "dask"
    proc = subprocess.run([str(exe), sub, "--help"], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        return None
    return frozenset(re.findall(r"(?<![\w-])--[\w-]+", proc.stdout))


def _dask(args: list[str]) -> str:
    if not args or args[0].startswith("-") or (options := dask_options(args[0])) is None:
        return f"dask has no subcommand {args[:1]}"
    flags = [a.split("=")[0] for a in args[1:] if a.startswith("--")]
    bad = [flag for flag in flags if flag not in options]
    return f"dask {args[0]} has no option {bad[0]}" if bad else ""


def _make(words: list[str]) -> str:
    targets = [w for w in words if "=" not in w and not w.startswith("-")]
    variables = [w for w in words if "=" in w]
    proc = subprocess.run(
        ["make", "-n", *targets, *variables], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    return "" if proc.returncode == 0 else f"make -n {' '.join(words)}: {proc.stderr.strip()[:200]}"


def _system(cmd: Command, args: list[str]) -> str:
    program = tool(cmd)
    if program == "cd":
        target = os.path.normpath(os.path.join(cmd.cwd, args[0] if args else "~"))
        inside = not target.startswith(("/", "~", "$", "?")) and not target.startswith(
            MADE_BY_COMMANDS
        )
        return f"no folder {target}" if inside and not (ROOT / target).is_dir() else ""
    if program == "conda" and "-f" in args:
        path = args[args.index("-f") + 1]
        return "" if (ROOT / path).is_file() else f"no file {path}"
    if program == "npm" and "--prefix" in args:
        folder = args[args.index("--prefix") + 1]
        return "" if (ROOT / folder / "package-lock.json").is_file() else f"no npm project {folder}"
    return ""


def check(cmd: Command, tmp: Path) -> str:
    """What is wrong with ``cmd`` when checked by its kind (``how_checked``), or ``""``."""
    args = filled(cmd.words[1:], tmp)
    program = tool(cmd)
    if program == "make":
        return _make(args)
    if program == "python":
        return _python(args, tmp)
    if program == "nbgrader":
        return _nbgrader(args)
    if program == "pytest":
        return _paths_exist(args)
    if program == "pip":
        return _pip(args)
    if program == "dask":
        return _dask(args)
    if program == "jupyter":
        sub = args[0] if args else ""
        exe = ROOT / ".venv" / "bin" / f"jupyter-{sub}"
        return "" if exe.exists() else f"no jupyter {sub} (no {exe.relative_to(ROOT)})"
    return _system(cmd, args)


def how_checked(cmd: Command) -> str:
    """One phrase: how ``check`` treats ``cmd`` (for ``python tests/docs/commands.py``)."""
    program, args = tool(cmd), cmd.words[1:]
    if program == "make":
        return "make -n (dry run)"
    if program == "python" and args[:2] == ["-m", "course_grading"]:
        return "run" if args[2:3] == ["secret"] else "parsed by its parser"
    if program == "python" and args[:2] == ["-m", "course_lib"]:
        return "run (no torch)" if args[2:] != ["plan"] else "subcommand exists"
    if program == "pytest" or (program == "python" and args[:2] == ["-m", "pytest"]):
        return "test paths exist"
    if program == "nbgrader":
        return "nbgrader subcommand + flags"
    if program == "python" and args[:1] != ["-m"]:
        return "script + its argparse flags"
    if program == "pip":
        return "pyproject extras"
    if program == "jupyter":
        return "executable in .venv/bin"
    if program == "dask":
        return "dask subcommand + flags (--help)"
    return "system program: parsed"


ALL = commands()


def test_the_docs_show_commands_to_check():
    kinds = {tool(c) for c in ALL}
    assert {"make", "python", "nbgrader", "pip", "kubectl", "dask"} <= kinds, kinds
    assert len(ALL) > 40


def test_every_command_runs_as_written_from_a_fresh_clone():
    problems = [f"{c.where} `{c.text}`: {p}" for c in ALL if (p := runnable_problem(c))]
    assert not problems, "\n".join(problems)


def test_every_command_passes_its_check(tmp_path, capsys):
    if not (ROOT / ".venv" / "bin").is_dir():
        pytest.fail("no .venv here: run `make setup` (the checks read .venv/bin)")
    problems = [f"{c.where} `{c.text}`: {p}" for c in ALL if (p := check(c, tmp_path))]
    capsys.readouterr()  # what the cheap commands printed
    assert not problems, "\n".join(problems)


BAD_DOC = """
```bash
nbgrader export
make no-such-target
.venv/bin/python -m course_grading submitted --no-such-flag
.venv/bin/python -m course_grading key --secret-file PATH --no-such-flag
.venv/bin/python -m course_grading passback grading --platform lti.json --no-such-flag
.venv/bin/python -m course_grading lti-key
.venv/bin/nbgrader generate_feedback LESSON --no-such-flag
.venv/bin/nbgrader no_such_subcommand
.venv/bin/python benchmarks/grading.py --no-such-flag
.venv/bin/python scripts/no_such_script.py
.venv/bin/python classroom/run.py no-such-subcommand
.venv/bin/python classroom/run.py instructor -- nbgrader no_such_subcommand
.venv/bin/nbgrader db assignment add LESSON --no-such-flag=1
.venv/bin/pytest tests/no_such_test.py
.venv/bin/pip install -e ".[no_such_extra]"
.venv/bin/jupyter no-such-app
.venv/bin/dask no-such-subcommand
.venv/bin/dask worker tcp://127.0.0.1:8786 --no-such-flag
conda env create -f no_such_environment.yml
cd no_such_folder
```

```bash
cd grading/course && .venv/bin/nbgrader export
```

Prose: `python -m course_grading submitted` and `terraform apply x`;
`nbgrader autograde` is a name.
"""


def test_the_command_checks_can_fail(tmp_path):
    doc = tmp_path / "bad.md"
    doc.write_text(BAD_DOC)
    found = commands([doc])
    assert "nbgrader autograde" not in [" ".join(c.words) for c in found]
    problems = {" ".join(c.words): runnable_problem(c) or check(c, tmp_path) for c in found}
    passed = [words for words, problem in problems.items() if not problem]
    assert passed == ["cd grading/course"], problems  # a folder the grading command makes
    assert "bare `nbgrader`" in problems["nbgrader export"]
    assert (
        "grading/course/.venv/bin/nbgrader" in problems["grading/course/.venv/bin/nbgrader export"]
    )
    assert "bare `python`" in problems["python -m course_grading submitted"]


# --- repository paths -------------------------------------------------------------------------

#: Files named in the docs that the course's commands make (never in the repository).
MADE_AT_RUN_TIME = {
    "report.md", "report.csv", "scores.csv", "function_times.csv", "class.json", "grades.csv",
    "gradebook.db", "nbgrader.log", "timestamp.txt", "submission_secret.txt", "overrides.json",
    "config.yaml", "classroom.json", "accounts.json", "jupyterhub.log", "server.log",
    "steps.txt", "values.json", "in.ipynb", "out.ipynb", "worker.log", "hub.db",
    "jupyter_server_config.json", "page_config.json", "course_secret", "values.schema.json",
    "node_modules", "copies.md", "rows.json", "gpu_held_out_rows.json", "canvas.csv",
    "moodle.csv", "CANVAS_EXPORT.csv", "MOODLE_EXPORT.csv", "graded.csv", "WORKSHEET.csv",
    "class_gradebook.json",
}  # fmt: skip
#: Files of other projects the docs name, and why.
NOT_OURS = {
    "config.json": "a Hugging Face model's configuration",
    "_module.py": "a naming pattern (a private module)",
    "bnb.py": "peft's bitsandbytes layer",
    "measure.py": "fitcheck-llm's measuring script",
    "scripts/measure.py": "fitcheck-llm's measuring script",
}
_TOP = "|".join(
    ["course_lib", "course_grading", "tests", "docs", "scripts", "benchmarks", "classroom"]
    + ["solutions", "notebooks", "jupyter-config", r"\.ci"]
)
_PATH = re.compile(rf"(?<![\w/.~$-])((?:{_TOP})/[\w./<>*-]*)")
_FILE = re.compile(
    r"(?<![\w/.~$<-])([\w-]+(?:/[\w<>-]+)*\.(?:md|py|toml|yml|yaml|json|txt|ipynb|csv|cfg))\b"
    r"(?!\.\w)"  # msgspec.json.decode is no file
)


@functools.cache
def tracked() -> tuple[str, ...]:
    command = ["git", "ls-files", "--cached", "--others", "--exclude-standard"]  # new files too
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True)
    return tuple(out.stdout.split())


def _exists(name: str) -> bool:
    pattern = re.escape(name.rstrip("/")).replace("<lesson>", "[^/]+").replace("NN", r"\d\d")
    pattern = re.sub(r"\\<\w+\\>", "[^/]+", pattern).replace(r"\*", "[^/]*")
    regex = re.compile(rf"(^|.*/){pattern}(/.*)?$")
    return any(regex.match(path) for path in tracked())


def named_paths(doc: Path) -> list[tuple[int, str]]:
    """Repository paths and file names ``doc`` names in code, in order (with line numbers)."""
    text = doc.read_text(encoding="utf-8")
    found = []
    for match in re.finditer(r"`([^`]+)`|^ *```\w*\n(.*?)^ *```", text, re.S | re.M):
        code = match.group(1) or match.group(2) or ""
        line = text[: match.start()].count("\n") + 1
        found += [(line, m.group(1)) for m in _PATH.finditer(code)]
        found += [(line, m.group(1)) for m in _FILE.finditer(code) if "/" not in m.group(1)]
    for match in re.finditer(r"\]\(([^)#:]+\.md)(?:#[^)]*)?\)", text):  # relative links
        target = (doc.parent / match.group(1)).resolve()
        rel = target.relative_to(ROOT).as_posix() if target.is_relative_to(ROOT) else match.group(1)
        found.append((text[: match.start()].count("\n") + 1, rel))
    return found


def path_problems(docs: list[Path]) -> list[str]:
    problems = []
    for doc in docs:
        for line, name in named_paths(doc):
            if Path(name).name in MADE_AT_RUN_TIME or name in NOT_OURS or _exists(name):
                continue
            problems.append(f"{doc.name}:{line} names {name}, which is not in the repository")
    return problems


def test_every_repository_path_the_docs_name_exists():
    problems = path_problems(DOCS)
    assert not problems, "\n".join(problems)


def test_the_path_check_can_fail(tmp_path):
    doc = tmp_path / "bad.md"
    doc.write_text(
        "See `TOOLCHAIN.md`, `course_grading/no_such.py` and [this](no_such.md); "
        "`course_grading/judge/items/lesson_NN.py` and `scripts/lab.py` exist.\n"
    )
    problems = path_problems([doc])
    assert len(problems) == 3 and all("names" in p for p in problems), problems


# --- one true account ------------------------------------------------------------------------


def exchange_claims(text: str) -> list[str]:
    """Every exchange folder the text calls nbgrader's own (its default)."""
    return re.findall(r"nbgrader's (?:own )?(?:default[^`]{0,40})?`([^`]*exchange[^`]*)`", text)


def test_the_docs_give_nbgraders_real_default_exchange():
    from nbgrader.exchange.default.exchange import Exchange

    default = Exchange.class_traits()["root"].default_value
    claims = [c for doc in DOCS for c in exchange_claims(doc.read_text(encoding="utf-8"))]
    assert claims and set(claims) == {default}, claims
    assert exchange_claims("unset: nbgrader's `/srv/nbgrader/exchange`") == [
        "/srv/nbgrader/exchange"
    ]


def unsandboxed_buttons(text: str) -> list[str]:
    """Sentences that call formgrader's buttons unsandboxed."""
    sentences = re.split(r"(?<=[.!?])\s+", " ".join(text.split()))
    return [s for s in sentences if re.search(r"formgrader", s, re.I) and "unsandboxed" in s]


def test_no_doc_calls_formgraders_buttons_unsandboxed():
    found = [s for doc in DOCS for s in unsandboxed_buttons(doc.read_text(encoding="utf-8"))]
    assert not found, found
    old = "Formgrader's own *autograde* buttons run `nbgrader autograde` unsandboxed, as you."
    assert unsandboxed_buttons(old)
