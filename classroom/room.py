"""The classroom's state folder and the long-running parts started from it.

``STATE/`` holds ``classroom.json`` (ports, accounts, folders: no secrets), ``secrets/`` (root
only: passwords, the gradebook URL, the hub's cookie secret, the LTI registry), ``hub/`` (root
only: the hub's database and log), ``lti/`` (under the LTI login: each launched account's
nbgrader id, for the instructor), ``postgres/`` (the ``postgres`` account's only),
``exchange/`` (1777), ``etc/`` (per-role Jupyter configuration) and ``home/`` (the homes of
demo accounts and of LTI launches, 0700 each).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import accounts
import course_folder
import course_secret
from pgcluster import Cluster

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
COURSE_ID = os.environ.get("SHAPES_COURSE_ID", "shapes")
GRADEBOOK_DB, GRADEBOOK_ROLE = "shapes_gradebook", "shapes_grader"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_proxy() -> str:
    """configurable-http-proxy: ``$SHAPES_PROXY``, ``classroom/node_modules`` or the PATH."""
    for candidate in (
        os.environ.get("SHAPES_PROXY"),
        str(HERE / "node_modules" / ".bin" / "configurable-http-proxy"),
        shutil.which("configurable-http-proxy"),
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    sys.exit(
        "configurable-http-proxy not found: `npm ci --prefix classroom` (or npm install -g "
        "configurable-http-proxy@5)"
    )


def write_private(path: Path, text: str) -> None:
    path.touch(mode=0o600, exist_ok=True)
    path.write_text(text)


class Classroom:
    """The state folder and what runs from it."""

    def __init__(self, state: Path) -> None:
        self.state = state.resolve()
        self.secrets = self.state / "secrets"  # root only: passwords, the gradebook URL
        self.hub_dir = self.state / "hub"  # root only: the hub's database and logs
        self.settings_file = self.state / "classroom.json"
        self.accounts_file = self.secrets / "accounts.json"
        self.pids_file = self.state / "pids.json"
        self.lti_registry = self.secrets / "lti_users.json"  # lti.py's: launches' accounts
        self.lti_ids = self.state / "lti" / "student_ids.json"  # lti.ids_file: account -> id

    # --- accounts ---------------------------------------------------------------------------
    def load_accounts(self) -> dict:
        return json.loads(self.accounts_file.read_text()) if self.accounts_file.exists() else {}

    def lti_accounts(self) -> list[str]:
        """The accounts the hub made for LTI launches (``lti.py``'s registry), made by us all."""
        if not self.lti_registry.is_file():
            return []
        return sorted(json.loads(self.lti_registry.read_text()).get("users", {}))

    def ensure_accounts(self, instructor: str, students: list[str]) -> dict:
        """Create the missing accounts (recorded as ours); existing ones are used as they are."""
        known = self.load_accounts()
        for name, role in [(instructor, "instructor"), *((s, "student") for s in students)]:
            entry = known.get(name)
            if entry is None or not accounts.exists(name):
                if accounts.exists(name):
                    entry = {"role": role, "created": False, "password": None}
                else:
                    password = accounts.new_password()
                    accounts.create(name, self.state / "home" / name, password)
                    entry = {"role": role, "created": True, "password": password}
            entry["role"] = role
            known[name] = entry
        write_private(self.accounts_file, json.dumps(known, indent=2))
        return {n: known[n] for n in [instructor, *students]}

    # --- start ------------------------------------------------------------------------------
    def instructor_of(self, args) -> str:
        return args.instructor or f"{args.prefix}-instructor"

    def prepare(self, args) -> dict:
        self.state.mkdir(parents=True, exist_ok=True)
        self.state.chmod(0o755)  # users pass through to their homes, the exchange, etc/
        for private in (self.secrets, self.hub_dir):
            private.mkdir(exist_ok=True)
            private.chmod(0o700)
        (self.state / "home").mkdir(exist_ok=True)
        (self.state / "home").chmod(0o755)
        students = args.student or [
            f"{args.prefix}-student{i}" for i in range(1, args.students + 1)
        ]
        instructor = self.instructor_of(args)
        people = self.ensure_accounts(instructor, students)
        exchange = self.state / "exchange"
        exchange.mkdir(exist_ok=True)
        exchange.chmod(0o1777)  # nbgrader's exchange: everyone writes, the sticky bit guards
        etc = course_folder.write_role_configs(self.state / "etc")
        course_root = course_folder.build(REPO, instructor, COURSE_ID)
        grader = course_folder.install_grader(REPO, instructor)
        secret = course_secret.install(args.secret_file, instructor)  # a copy of the given file
        settings = {
            "ip": args.ip,
            "port": args.port or free_port(),
            "hub_api_port": free_port(),
            "proxy_api_port": free_port(),
            "proxy": find_proxy(),
            "venv": str(Path(sys.prefix)),
            "instructor": instructor,
            "students": students,
            "course_id": COURSE_ID,
            "course_root": str(course_root),
            "grader": str(grader),
            "course_secret": str(secret),  # the instructor's copy, named to their servers
            "secret_file": str(Path(args.secret_file).expanduser().resolve()),  # the original
            "exchange": str(exchange),
            "etc": {role: str(path) for role, path in etc.items()},
        }
        self.settings_file.write_text(json.dumps(settings, indent=2))
        self.settings_file.chmod(0o644)
        return {"settings": settings, "accounts": people}

    def start_gradebook(self, cluster: Cluster) -> str:
        """Start ``cluster`` (made by the caller, so that it can stop a half-started one)."""
        cluster.init()
        cluster.start(free_port())
        password_file = self.secrets / "gradebook_password"
        if not password_file.exists():
            write_private(password_file, accounts.new_password())
        url = cluster.ensure_database(GRADEBOOK_DB, GRADEBOOK_ROLE, password_file.read_text())
        write_private(self.secrets / "gradebook_url", url)
        return url

    def start_hub(self) -> subprocess.Popen:
        env = {
            "PATH": f"{Path(sys.prefix) / 'bin'}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.hub_dir),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "SHAPES_CLASSROOM_STATE": str(self.state),
        }
        log = open(self.hub_dir / "jupyterhub.log", "ab")
        hub = subprocess.Popen(
            [
                str(Path(sys.prefix) / "bin" / "jupyterhub"),
                "-f",
                str(HERE / "jupyterhub_config.py"),
            ],
            cwd=self.hub_dir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches run.py only, which stops things in order
        )
        log.close()
        return hub

    def wait_for_hub(self, hub: subprocess.Popen, url: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(f"{url}/hub/api/", timeout=3)
                return
            except OSError:
                if hub.poll() is not None or time.monotonic() > deadline:
                    tail = (self.hub_dir / "jupyterhub.log").read_text(errors="replace")[-3000:]
                    raise RuntimeError(f"JupyterHub did not start:\n{tail}") from None
                time.sleep(0.5)

    # --- stop -------------------------------------------------------------------------------
    def stop_hub(self, hub_pid: int | None, grace: float = 45) -> None:
        """SIGTERM the hub (it stops the servers and the proxy), then its process group."""
        if hub_pid is None:
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10)):
            try:
                os.killpg(hub_pid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                reap(hub_pid)
                if not group_members(hub_pid):
                    return
                time.sleep(0.2)

    def teardown(self, hub_pid: int | None, cluster: Cluster | None, people: list[str]) -> None:
        self.stop_hub(hub_pid)
        left = accounts.stop_processes([*people, *self.lti_accounts()])
        if left:
            print(f"stopped {len(left)} process(es) the hub left running as classroom users")
        if cluster is not None:
            cluster.stop()
        for stale in (self.pids_file, self.secrets / "ready.json"):
            stale.unlink(missing_ok=True)


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``, from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "pid (comm)"
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
