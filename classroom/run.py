"""The Shapes classroom on one machine: JupyterHub, the nbgrader exchange, a PostgreSQL gradebook.

    python classroom/run.py start --secret-file S [--students 3]  # foreground; Ctrl-C stops all
    python classroom/run.py stop                                  # from another terminal
    python classroom/run.py instructor -- nbgrader collect LESSON # a command as the instructor
    python classroom/run.py passback [--post]                     # grades to the LMS (LTI AGS)
    python classroom/run.py clean                                 # demo accounts and data gone

``start`` (as root) takes the instructor's course secret (``--secret-file``, the file ``make
release`` and ``make grade`` take: ``course_secret.py``; without one it refuses), creates the
demo accounts (Unix users with a private home and a password), copies the course into the
instructor's home, makes the exchange folder, starts PostgreSQL as the ``postgres`` user on
127.0.0.1 with the gradebook database, starts JupyterHub (which starts its proxy and, on login,
each user's server), prints the URL and the accounts, and waits. On
Ctrl-C or SIGTERM it stops the hub (which stops the servers and the proxy), every process still
running as a classroom account, and PostgreSQL. Accounts, homes and the gradebook stay in the
state folder (``--state``, default ``/srv/shapes-classroom``) for the next start.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import accounts
import course_secret
import private_view
from pgcluster import Cluster
from room import GRADEBOOK_DB, HERE, REPO, Classroom, write_private

DEFAULT_STATE = Path(os.environ.get("SHAPES_CLASSROOM_STATE", "/srv/shapes-classroom"))


def require_root() -> None:
    if os.geteuid() != 0:
        sys.exit("the classroom creates Unix accounts and runs servers as them: run it as root")


def enter_private_view() -> list[str]:
    """Run on in the classroom's mount namespace (see private_view.py); what it hides."""
    try:
        return private_view.enter(REPO, Path(sys.prefix))
    except OSError as exc:
        closed = private_view.closed_ancestor(Path(sys.base_prefix).resolve())
        if closed is not None:
            sys.exit(
                f"the course's Python ({sys.base_prefix}) is inside {closed}, which other users "
                f"cannot enter, and no private mount namespace could be made ({exc}). Build the "
                "venv from a Python every user can run (make setup PYTHON=/usr/bin/python3)."
            )
        return [f"WARNING: no private mount namespace ({exc}): students can read {REPO}"]


def cmd_start(args) -> int:
    parent = os.getppid()
    require_root()
    room = Classroom(args.state)
    if room.pids_file.exists():
        sys.exit(f"a classroom seems to run from {room.state} ({room.pids_file}): stop it first")
    if REPO in args.state.resolve().parents:
        sys.exit("keep the state folder outside the repository (the classroom hides the checkout)")
    if problem := course_secret.check(args.secret_file, room.state, room.instructor_of(args)):
        sys.exit(problem)
    made = room.prepare(args)
    settings, people = made["settings"], made["accounts"]
    view = enter_private_view()  # everything started from here on sees the course, not answers
    names = list(people)
    hub = cluster = None
    stopping = False

    def on_signal(signum, frame):
        nonlocal stopping
        if not stopping:
            stopping = True
            raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    status = 0
    try:
        cluster = Cluster(room.state / "postgres")
        gradebook_url = room.start_gradebook(cluster)
        pids = {"run": os.getpid(), "postgres": cluster.proc.pid}
        write_private(room.pids_file, json.dumps(pids))
        host = "127.0.0.1" if settings["ip"] in ("0.0.0.0", "") else settings["ip"]
        url = f"http://{host}:{settings['port']}"
        hub = room.start_hub()
        write_private(room.pids_file, json.dumps({**pids, "hub": hub.pid}))
        room.wait_for_hub(hub, url)
        ready = {"url": url, "accounts": people, "gradebook_url": gradebook_url, **settings}
        write_private(room.secrets / "ready.json", json.dumps(ready, indent=2))
        print(banner(url, people, settings, cluster, room, view), flush=True)
        while hub.poll() is None and cluster.proc.poll() is None:
            if args.exit_with_parent and os.getppid() != parent:
                raise KeyboardInterrupt  # whoever started us is gone (a killed test run)
            time.sleep(0.5)
        print("JupyterHub or PostgreSQL exited on its own; stopping the rest", file=sys.stderr)
        status = 1
    except KeyboardInterrupt:
        print("\nstopping the classroom ...", flush=True)
    except Exception as exc:  # report, then still stop everything below
        print(f"classroom failed: {exc}", file=sys.stderr)
        status = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not skip teardown
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        room.teardown(hub.pid if hub else None, cluster, names)
        print("classroom stopped: no hub, proxy, user server or PostgreSQL left running")
    return status


def banner(
    url: str, people: dict, settings: dict, cluster: Cluster, room: Classroom, view: list[str]
) -> str:
    lines = [f"\nShapes classroom: {url}", ""]
    for name, entry in people.items():
        password = entry["password"] or "(their own password)"
        lines.append(f"  {entry['role']:<10}  {name:<28}  password: {password}")
    lines += [
        "",
        f"  course folder   {settings['course_root']}  (instructor: Nbgrader > Formgrader)",
        f"  exchange        {settings['exchange']}",
        f"  gradebook       PostgreSQL on 127.0.0.1:{cluster.port}, database {GRADEBOOK_DB} "
        f"(URL in {room.secrets / 'gradebook_url'})",
        f"  course secret   {settings['secret_file']} (the instructor's copy: "
        f"{settings['course_secret']})",
        f"  logs            {room.hub_dir / 'jupyterhub.log'}, {cluster.log}",
        f"  as instructor   python classroom/run.py instructor --state {room.state} -- CMD",
        *(f"  file view       {note}" for note in view),
        "",
        "Ctrl-C here (or `make classroom-stop`) stops everything.",
    ]
    return "\n".join(lines)


def cmd_stop(args) -> int:
    """Stop a classroom started from this state folder: ask run.py, else stop its parts."""
    require_root()
    room = Classroom(args.state)
    if not room.pids_file.exists():
        print(f"no classroom running from {room.state}")
        return 0
    pids = json.loads(room.pids_file.read_text())
    run_pid = pids.get("run")
    if run_pid and _is(run_pid, "run.py"):
        os.kill(run_pid, signal.SIGTERM)
        deadline = time.monotonic() + 90
        while _is(run_pid, "run.py") and time.monotonic() < deadline:
            time.sleep(0.3)
    if room.pids_file.exists():  # run.py was killed hard, or did not finish: do its teardown
        hub = pids.get("hub") if pids.get("hub") and _is(pids["hub"], "jupyterhub") else None
        room.teardown(hub, None, list(room.load_accounts()))
        postgres = pids.get("postgres")
        if postgres and _is(postgres, "postgres"):
            os.kill(postgres, signal.SIGINT)  # fast shutdown
            deadline = time.monotonic() + 30
            while _is(postgres, "postgres") and time.monotonic() < deadline:
                time.sleep(0.3)
    print(f"classroom from {room.state} stopped")
    return 0


def _is(pid: int, name: str) -> bool:
    try:
        return name in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def cmd_clean(args) -> int:
    """Stop, then remove the accounts this classroom created (with homes) and its state."""
    cmd_stop(args)
    room = Classroom(args.state)
    if not room.state.exists():
        return 0
    if not room.settings_file.exists() and any(room.state.iterdir()):
        sys.exit(f"{room.state} is not a classroom state folder (no classroom.json): kept")
    settings = json.loads(room.settings_file.read_text()) if room.settings_file.exists() else {}
    instructor = room.load_accounts().get(settings.get("instructor", ""), {})
    if instructor.get("created") and (why := course_secret.only_copy(settings)):
        sys.exit(f"nothing removed: {why}")  # clean never deletes the class's secret
    for name, entry in room.load_accounts().items():
        if entry.get("created") and accounts.exists(name):
            accounts.remove(name)
            print(f"removed account {name}")
    for name in room.lti_accounts():  # made by the hub for LTI launches, in their own uid range
        if accounts.in_range(name, accounts.LTI_UIDS):
            accounts.remove(name)
            print(f"removed account {name} (an LTI launch's)")
    shutil.rmtree(room.state)
    print(f"removed {room.state}")
    return 0


def cmd_instructor(args) -> int:
    """Run a command as the instructor, in the course folder, with the classroom's settings."""
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    return as_instructor(Classroom(args.state), command)


def cmd_autograde(args) -> int:
    """``classroom/autograde.py LESSON`` as the instructor: sandboxed, into the class gradebook."""
    command = [str(Path(sys.prefix) / "bin" / "python"), str(HERE / "autograde.py"), args.lesson]
    command += ["--scheduler", args.scheduler] if args.scheduler else []
    command += ["--cluster-certs", args.cluster_certs] if args.cluster_certs else []
    return as_instructor(Classroom(args.state), command)


def cmd_passback(args) -> int:
    """The class gradebook's scores to the LMS (``python -m course_grading passback``), as root:
    the platform is ``STATE/lti.json``, the students' platform ids ``STATE/secrets/
    lti_users.json`` (both root's only), the scores the gradebook's, manual grades included."""
    require_root()
    room = Classroom(args.state)
    if not room.pids_file.exists():
        sys.exit(f"no classroom running from {room.state}: the gradebook is down")
    if not (room.state / "lti.json").is_file():
        sys.exit(f"no {room.state / 'lti.json'}: passback needs the LTI login's platform")
    from course_grading import cli  # the checkout's grader: root runs it, no student sees it

    settings = json.loads(room.settings_file.read_text())
    command = ["passback", "--gradebook", (room.secrets / "gradebook_url").read_text().strip(),
               "--course-id", settings["course_id"], "--platform", str(room.state / "lti.json"),
               "--registry", str(room.lti_registry)]  # fmt: skip
    command += ["--lessons", *args.lessons] if args.lessons else []
    command += [f"--label={label}" for label in args.label] + (["--post"] if args.post else [])
    return cli.main(command)


def as_instructor(room: Classroom, command: list[str]) -> int:
    require_root()
    if not room.pids_file.exists():
        sys.exit(f"no classroom running from {room.state}: the gradebook is down")
    settings = json.loads(room.settings_file.read_text())
    account = pwd.getpwnam(settings["instructor"])
    env = {
        "HOME": account.pw_dir,
        "USER": account.pw_name,
        "LOGNAME": account.pw_name,
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "PATH": f"{settings['venv']}/bin:/usr/local/bin:/usr/bin:/bin",
        "JUPYTER_CONFIG_PATH": settings["etc"]["instructor"],
        "SHAPES_COURSE_ID": settings["course_id"],
        "SHAPES_EXCHANGE_ROOT": settings["exchange"],
        "SHAPES_COURSE_ROOT": settings["course_root"],
        "SHAPES_GRADEBOOK_URL": (room.secrets / "gradebook_url").read_text().strip(),
        "PYTHONPATH": settings["grader"],  # the instructor's own copy of course_grading
        "SHAPES_COURSE_SECRET_FILE": settings["course_secret"],  # the hidden inputs' secret
    }
    if room.lti_ids.is_file():  # LTI: collect maps each account to its student's nbgrader id
        env["SHAPES_STUDENT_IDS"] = str(room.lti_ids)
    enter_private_view()  # the instructor's tools see what the hub's users see
    return subprocess.run(
        command,
        cwd=settings["course_root"],
        env=env,
        user=account.pw_uid,
        group=account.pw_gid,
        extra_groups=[],
    ).returncode


def _start_options(parser: argparse.ArgumentParser, unused: bool = False) -> None:
    """``start``'s options; on ``stop`` and ``clean`` taken but unused (hidden from --help)."""

    def helped(text: str) -> str:
        return argparse.SUPPRESS if unused else text

    parser.add_argument(
        "--students", type=int, default=3, help=helped("demo students (%(default)s)")
    )
    parser.add_argument(
        "--prefix", default="shapes", help=helped("demo account names: PREFIX-student1 ...")
    )
    parser.add_argument(
        "--instructor", help=helped("an existing Unix account to teach (default: a demo one)")
    )
    parser.add_argument(
        "--student", action="append", help=helped("an existing Unix account (repeat)")
    )
    parser.add_argument(
        "--port", type=int, default=8000, help=helped("public port; 0 picks a free one")
    )
    parser.add_argument("--ip", default="127.0.0.1", help=helped("public address (%(default)s)"))
    parser.add_argument(
        "--secret-file",
        type=Path,
        default=os.environ.get(course_secret.ENVIRONMENT) or None,
        help=helped(
            "your course secret (python -m course_grading secret PATH), the file you release "
            f"and grade with (default: ${course_secret.ENVIRONMENT}); required"
        ),
    )
    parser.add_argument(
        "--exit-with-parent", action="store_true", help=helped("stop everything if the caller dies")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python classroom/run.py", description=__doc__.split("\n")[0]
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--state", type=Path, default=DEFAULT_STATE, help="state folder (%(default)s)"
    )
    sub = parser.add_subparsers(dest="action", required=True)
    start = sub.add_parser(
        "start", parents=[common], help="bring the classroom up (Ctrl-C stops it)"
    )
    _start_options(start)
    # `make classroom-stop` and `classroom-clean` pass CLASSROOM_ARGS, start's options: the
    # state folder is read from them, the others are taken and left unused.
    _start_options(sub.add_parser("stop", parents=[common], help="stop a running classroom"), True)
    clean = sub.add_parser(
        "clean", parents=[common], help="stop; remove demo accounts and all data"
    )
    _start_options(clean, True)
    instr = sub.add_parser("instructor", parents=[common], help="a command as the instructor")
    instr.add_argument("command", nargs=argparse.REMAINDER)
    grade = sub.add_parser("autograde", parents=[common], help="sandboxed autograde of a lesson")
    grade.add_argument("lesson")
    grade.add_argument("--scheduler", help="grade on this Dask cluster (tls://HOST:PORT)")
    grade.add_argument("--cluster-certs", help="with --scheduler: the client's certificates")
    back = sub.add_parser("passback", parents=[common], help="grades to the LMS (LTI Advantage)")
    back.add_argument("--lessons", nargs="+", help="only these lessons (default: all)")
    back.add_argument(
        "--label", action="append", default=[], help="LESSON=TEXT: a line item's label"
    )
    back.add_argument("--post", action="store_true", help="change the LMS (without it: a dry run)")
    args = parser.parse_args(argv)
    action = {
        "start": cmd_start,
        "stop": cmd_stop,
        "clean": cmd_clean,
        "instructor": cmd_instructor,
        "autograde": cmd_autograde,
        "passback": cmd_passback,
    }
    return action[args.action](args)


if __name__ == "__main__":
    sys.exit(main())
