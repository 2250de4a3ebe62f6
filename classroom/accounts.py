"""Local Unix accounts for the classroom, and the processes that run under them.

JupyterHub's LocalProcessSpawner runs each user's server as that Unix user, which is what makes
the nbgrader exchange honest on one machine: a submission is a file owned by the student who
made it, the inbound folder is write-only for students, and one student's home (mode 0700) is
closed to another. Demo accounts are created here; real accounts are used as they are and
never changed or removed (see docs/classroom.md).
"""

from __future__ import annotations

import os
import pwd
import secrets
import signal
import subprocess
import time
from pathlib import Path


def exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def create(name: str, home: Path, password: str) -> None:
    """A login account with its own group and a private home (0700) at ``home``."""
    home.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["useradd", "--create-home", "--home-dir", str(home), "--shell", "/bin/bash",
         "--user-group", name],
        check=True,
        capture_output=True,
    )  # fmt: skip
    home.chmod(0o700)
    set_password(name, password)


def set_password(name: str, password: str) -> None:
    subprocess.run(["chpasswd"], input=f"{name}:{password}\n", text=True, check=True)


def remove(name: str) -> None:
    """Delete a demo account and its home (its processes must be gone first)."""
    result = subprocess.run(["userdel", "--remove", name], capture_output=True, text=True)
    # userdel exits 12 when only the (never created) mail spool is missing.
    if result.returncode not in (0, 12) and exists(name):
        raise RuntimeError(f"userdel {name} failed: {result.stderr.strip()}")


def new_password() -> str:
    return secrets.token_urlsafe(9)


def pids_of(names: list[str]) -> list[int]:
    """PIDs of the processes running as any of these accounts (read from /proc)."""
    uids = {pwd.getpwnam(n).pw_uid for n in names if exists(n)}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue  # gone meanwhile
        for line in status.splitlines():
            if line.startswith("Uid:"):
                if int(line.split()[1]) in uids:
                    found.append(int(entry.name))
                break
    return found


def stop_processes(names: list[str], *, grace: float = 10) -> list[int]:
    """SIGTERM, then SIGKILL, every process still running as these accounts; the PIDs found.

    Only the classroom's accounts are swept: their processes are the single-user servers and
    kernels that this classroom's hub started.
    """
    pids = pids_of(names)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids_of(names):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while pids_of(names) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not pids_of(names):
            break
    return pids
