"""Local Unix accounts for the classroom, and the processes that run under them.

JupyterHub's LocalProcessSpawner runs each user's server as that Unix user, which is what makes
the nbgrader exchange honest on one machine: a submission is a file owned by the student who
made it, the inbound folder is write-only for students, and one student's home (mode 0700) is
closed to another. Demo accounts are created here; real accounts are used as they are and
never changed or removed (see docs/classroom.md). Accounts of students who log in from the LMS
(``lti.py``) are created here too, in a range of uids of their own (:data:`LTI_UIDS`) that no
system, regular or subordinate uid shares, so that no launch can ever be given an account the
classroom did not make for it.
"""

from __future__ import annotations

import os
import pwd
import secrets
import signal
import subprocess
import time
from pathlib import Path

#: The uids (and gids) of the accounts made for LTI launches: above the regular users'
#: ``UID_MAX`` (60000) and ``nobody`` (65534), below the subordinate uids ``useradd`` hands out
#: for user namespaces (from 100000), and in what systemd's uid table leaves unused.
LTI_UIDS = (70000, 99999)


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


def create_in_range(name: str, home: Path, uids: tuple[int, int], comment: str) -> int:
    """A login-less account with its own group, its uid and gid in ``uids``, a private home.

    ``--no-log-init`` keeps it out of lastlog and faillog, which are indexed by uid. The
    account gets no password: it is never logged in to, only run as by the hub.

    Returns:
        The account's uid.

    Raises:
        RuntimeError: ``useradd`` failed (the range is full, or the name is taken), or the uid
            it gave is not in ``uids``.
    """
    first, last = uids
    home.parent.mkdir(parents=True, exist_ok=True)
    limits = [f"UID_MIN={first}", f"UID_MAX={last}", f"GID_MIN={first}", f"GID_MAX={last}"]
    command = ["useradd", "--create-home", "--home-dir", str(home), "--shell", "/bin/bash",
               "--user-group", "--no-log-init", "--comment", comment]  # fmt: skip
    for limit in limits:
        command += ["-K", limit]
    result = subprocess.run([*command, name], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"useradd {name} failed: {result.stderr.strip()}")
    home.chmod(0o700)
    uid = pwd.getpwnam(name).pw_uid
    if not first <= uid <= last:
        raise RuntimeError(f"useradd gave {name} uid {uid}, outside {first}-{last}")
    return uid


def in_range(name: str, uids: tuple[int, int]) -> bool:
    """Whether the account ``name`` exists with its uid and primary gid in ``uids``."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return False
    return uids[0] <= entry.pw_uid <= uids[1] and uids[0] <= entry.pw_gid <= uids[1]


def range_problems(
    uids: tuple[int, int],
    login_defs: Path = Path("/etc/login.defs"),
    subuid: Path = Path("/etc/subuid"),
) -> list[str]:
    """Why ``uids`` is no range of its own on this machine: what it overlaps.

    Args:
        uids: the first and last uid of the range.
        login_defs: ``useradd``'s settings (regular and system uid ranges).
        subuid: the subordinate uid ranges handed out for user namespaces.

    Returns:
        One line per overlap (the regular or system users' range, ``nobody``, a subordinate
        range), empty when the range is clear.
    """
    first, last = uids
    if not 1000 <= first <= last < 2**31 - 1:
        return [f"{first}-{last} is not a range of ordinary uids"]
    settings = {}
    if login_defs.is_file():
        for line in login_defs.read_text(errors="replace").splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit():
                settings[parts[0]] = int(parts[1])
    ranges = [("regular users (login.defs)", settings.get("UID_MIN", 1000),
               settings.get("UID_MAX", 60000)),
              ("system users (login.defs)", settings.get("SYS_UID_MIN", 100),
               settings.get("SYS_UID_MAX", 999)), ("nobody", 65534, 65535)]  # fmt: skip
    if subuid.is_file():
        for line in subuid.read_text(errors="replace").splitlines():
            fields = line.strip().split(":")
            if len(fields) == 3 and fields[1].isdigit() and fields[2].isdigit():
                start, count = int(fields[1]), int(fields[2])
                ranges.append((f"{fields[0]}'s subordinate uids", start, start + count - 1))
    return [f"{first}-{last} overlaps {what}, {low}-{high}" for what, low, high in ranges
            if low <= last and first <= high]  # fmt: skip


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
