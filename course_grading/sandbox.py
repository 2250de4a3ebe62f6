"""The sandbox a student's kernel runs in: bubblewrap, resource limits, and a check from inside.

Student code is untrusted. Each submission's kernel is started as::

    bwrap <read-only system, Python, venv, course_lib>  <tmpfs /tmp and /home/student>
          <the job's runtime folder (connection file, IPC sockets)>  --unshare-net ...
      sh -c 'copy the staged folder into /home/student/<lesson>; drop to an unprivileged uid
             (when the grader is root); apply prlimit; exec the kernel'

What the kernel can see (``readonly_paths``): the system folders (``/usr``, ``/etc``, and the
``/bin``-style links), the Python installation the venv links to, the venv, and
``course_lib``'s own package folder (an editable install points at the repository; only the
package folder is bound, never the repository with its ``solutions/``). What it can write: a
private ``/tmp`` and ``/home/student`` (size-limited tmpfs, gone with the sandbox) holding a copy
of its own notebook folder, and the runtime folder of its own kernel. Nothing else exists inside:
not the work course, the gradebook, ``source/``, other students' files, the original
submissions or the output folder. No network (its own network namespace), its own IPC and UTS
namespaces, a new session (no terminal to inject into).

Limits (``Limits``): address space (``RLIMIT_AS``, default 4 GiB per process), processes and
threads (``RLIMIT_NPROC``; a fork bomb stops there), file size, core dumps off. ``RLIMIT_NPROC``
does not bind root, so a grader running as root drops the kernel to a uid of its own per
parallel slot (``sandbox_uid``), which also lets it kill every process the sandbox left behind.
A grader running as an ordinary user (a JupyterHub grader account) runs bwrap unprivileged: it
then makes a user namespace, and the limits bind the mapped user.

Interrupts go as messages (``interrupt_mode: message``): a signal to bwrap would not reach the
kernel in its own session. There is no PID namespace: ipykernel quits at once inside one.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from course_grading.errors import GradingError

#: Where the student's folder is inside the sandbox: ``HOME`` and the kernel's working folder.
HOME = "/home/student"
#: Where the staged copy of the student's folder is mounted (read-only) before it is copied.
STAGE = "/run/shapes/stage"
#: Sandbox uids (root graders only): one per grader process and parallel slot, far from any
#: account's uid and from the subordinate ranges in /etc/subuid.
UID_BASE = 2_000_000_000
MAX_SLOTS = 256
#: Folders a Debian/Ubuntu system may keep at / (links into /usr on merged-/usr systems).
ROOT_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


@dataclass(frozen=True)
class Limits:
    """Resource limits inside one sandbox (all per submission unless said otherwise)."""

    memory_bytes: int = 4 * 2**30  # address space per process (RLIMIT_AS)
    processes: int = 256  # processes and threads of the sandbox's user (RLIMIT_NPROC)
    file_bytes: int = 2**30  # largest file it may write (RLIMIT_FSIZE)
    tmpfs_bytes: int = 512 * 2**20  # size of its /tmp and of its /home/student, each
    output_bytes: int = 16 * 2**20  # notebook output kept; the rest is cut and flagged
    threads: int = 1  # OMP/MKL threads per kernel (the grader sets cores // jobs)

    def as_dict(self) -> dict:
        return asdict(self)


def sandbox_uid(slot: int) -> int | None:
    """The uid a root grader's kernel in ``slot`` runs as; ``None`` when not running as root."""
    if os.geteuid() != 0:
        return None
    if not 0 <= slot < MAX_SLOTS:
        raise ValueError(f"slot {slot} outside 0..{MAX_SLOTS - 1}; use fewer --jobs")
    return UID_BASE + os.getpid() * MAX_SLOTS + slot


def check_available() -> str:
    """Return the path of ``bwrap`` if it can make a sandbox here; else a ``GradingError``."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise GradingError(
            "cannot sandbox student code: bubblewrap is not installed (apt-get install "
            "bubblewrap); --no-sandbox grades without one, unsafely"
        )
    proc = subprocess.run(
        [bwrap, *_system_binds(), "--unshare-net", "--unshare-ipc", "--die-with-parent"]
        + ["--new-session", "--", "true"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise GradingError(
            f"cannot sandbox student code: bwrap cannot create namespaces here ({why}); "
            "--no-sandbox grades without one, unsafely"
        )
    return bwrap


def readonly_paths() -> list[Path]:
    """The Python installation, the venv and ``course_lib``'s package folder (never the repo)."""
    import course_lib

    package = Path(course_lib.__file__).resolve().parent
    paths = [Path(sys.base_prefix).resolve(), Path(sys.prefix), package]
    return [p for i, p in enumerate(paths) if p not in paths[:i]]


def _system_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for folder in ROOT_DIRS:
        path = Path(folder)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), folder]
        elif path.is_dir():
            args += ["--ro-bind", folder, folder]
    return args


def _folders_for(targets: list[Path]) -> list[str]:
    """``--dir`` arguments making every missing parent folder of ``targets`` traversable.

    bwrap creates missing parents with mode 0700, which an unprivileged uid cannot enter.
    """
    args: list[str] = []
    made = {Path("/"), Path("/usr"), Path("/etc"), Path("/tmp")}
    for target in targets:
        for parent in reversed(target.parents):
            if parent not in made:
                made.add(parent)
                args += ["--perms", "0755", "--dir", str(parent)]
    return args


def _environment(limits: Limits) -> dict[str, str]:
    """The kernel's whole environment (``--clearenv``: nothing of the grader's leaks in)."""
    threads = str(max(1, limits.threads))
    return {
        "HOME": HOME,
        "PATH": f"{Path(sys.prefix) / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",
        "NBGRADER_EXECUTION": "autograde",  # what nbgrader's own autograde sets
        "PYTHONDONTWRITEBYTECODE": "1",  # the package folders are read-only
        "MPLCONFIGDIR": f"{HOME}/.config/matplotlib",
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
    }


def kernel_environment(limits: Limits, home: Path) -> dict[str, str]:
    """The same environment for an unsandboxed kernel whose home is the host folder ``home``."""
    env = _environment(limits)
    env.update(HOME=str(home), MPLCONFIGDIR=str(home / ".config" / "matplotlib"))
    env["TMPDIR"] = os.environ.get("TMPDIR", "/tmp")
    return env


def _limits_command(limits: Limits) -> list[str]:
    return [
        "prlimit",
        f"--as={limits.memory_bytes}",
        f"--nproc={limits.processes}",
        f"--fsize={limits.file_bytes}",
        "--core=0",
        "--",
    ]


def _start_script(lesson: str, runtime: Path, uid: int | None) -> str:
    """Shell run inside the sandbox before the kernel: copy the folder in, drop privileges."""
    folder = shlex.quote(f"{HOME}/{lesson}")
    copy = f"mkdir -p {folder} && cp -R {STAGE}/. {folder}/"
    if uid is None:
        return f'{copy} && cd {folder} && exec "$@"'
    drop = (
        f"setpriv --reuid={uid} --regid={uid} --clear-groups --no-new-privs "
        "--inh-caps=-all --bounding-set=-all --pdeathsig=KILL --"
    )
    owned = f"chown -R {uid}:{uid} {HOME} {shlex.quote(str(runtime))}"
    return f'{copy} && {owned} && cd {folder} && exec {drop} "$@"'


def kernel_argv(
    *,
    bwrap: str,
    stage: Path,
    runtime: Path,
    lesson: str,
    uid: int | None,
    limits: Limits,
    kernel: list[str],
) -> list[str]:
    """The full command that starts ``kernel`` (argv with ``{connection_file}``) sandboxed.

    ``stage`` holds the student's folder as the kernel may see it (their notebook, without
    hidden tests, and the lesson's data files); ``runtime`` holds the connection file and the
    IPC sockets and is the only host folder the sandbox can write.
    """
    readonly = readonly_paths()
    args = [bwrap, "--unshare-net", "--unshare-ipc", "--unshare-uts", "--die-with-parent"]
    args += ["--new-session", *_system_binds(), "--proc", "/proc", "--dev", "/dev"]
    size = str(limits.tmpfs_bytes)
    args += ["--perms", "1777", "--size", size, "--tmpfs", "/tmp"]  # before any bind below /tmp
    args += _folders_for([*readonly, Path(HOME), Path(STAGE), runtime])
    for path in readonly:
        args += ["--ro-bind", str(path), str(path)]
    args += ["--perms", "0755", "--size", size, "--tmpfs", HOME]
    args += ["--ro-bind", str(stage), STAGE, "--bind", str(runtime), str(runtime)]
    args += ["--chdir", HOME, "--clearenv"]
    for name, value in _environment(limits).items():
        args += ["--setenv", name, value]
    script = _start_script(lesson, runtime, uid)
    return [*args, "--", "/bin/sh", "-c", script, "sh", *_limits_command(limits), *kernel]


def command_argv(
    *,
    bwrap: str,
    argv: list[str],
    binds: list[tuple[Path, str]],
    limits: Limits,
    cpu_seconds: int,
    uid: int | None,
    env: dict[str, str],
) -> list[str]:
    """A plain command in a fresh sandbox of its own (``course_grading.functions``).

    Read-only: the system folders, the Python installation and the venv, with the folders of
    ``course_grading`` and ``course_lib`` covered by empty ones wherever an install put them
    inside those (a regular, non-editable install); plus ``binds`` (host folder, path inside),
    read-only. Private: a size-limited ``/tmp``, a PID namespace (nothing outlives the
    command), no network, a cleared environment (``env`` only). Limits: ``limits`` and
    ``cpu_seconds`` of CPU time; a root grader drops to ``uid``.
    """
    python = [Path(sys.base_prefix).resolve(), Path(sys.prefix)]
    python = [p for i, p in enumerate(python) if p not in python[:i]]
    args = [bwrap, "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-pid"]
    args += ["--die-with-parent", "--new-session", *_system_binds(), "--proc", "/proc"]
    args += ["--dev", "/dev", "--perms", "1777", "--size", str(limits.tmpfs_bytes)]
    args += ["--tmpfs", "/tmp", *_folders_for([*python, *(Path(dst) for _, dst in binds)])]
    for path in python:
        args += ["--ro-bind", str(path), str(path)]
    for name in ("course_grading", "course_lib"):  # cover them where an install put them
        spec = importlib.util.find_spec(name)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            package = Path(folder).resolve()
            if any(package == p or p in package.parents for p in python):
                args += ["--perms", "0555", "--tmpfs", str(package)]
    for source, target in binds:
        args += ["--ro-bind", str(source), target]
    args += ["--chdir", "/tmp", "--clearenv"]
    for name, value in env.items():
        args += ["--setenv", name, value]
    drop = []
    if uid is not None:
        drop = [
            "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs",
            "--inh-caps=-all", "--bounding-set=-all", "--pdeathsig=KILL", "--",
        ]  # fmt: skip
    limit = _limits_command(limits)
    return [*args, "--", *drop, *limit[:-1], f"--cpu={cpu_seconds}", "--", *argv]
