"""The sandbox a student's kernel runs in: bubblewrap, its own namespaces, limits, a check inside.

Student code is untrusted. Each submission's kernel is started as::

    [join its cgroup]  bwrap <seccomp filter> <namespaces: pid, net, ipc, uts (+ user)>
          <read-only: system, Python, venv, course_lib; course_grading covered>
          <private tmpfs: /tmp, /home/student, /run/shapes/runtime, /dev/shm; /dev read-only>
          <read-only: the staged folder, the connection file>  --
      sh -c 'copy the staged folder into /home/student/<lesson> and the connection file into
             the runtime folder; drop to the slot's uid (root grader); apply prlimit; exec'

What the kernel can see (``readonly_paths``): the system folders, the Python installation the
venv links to, the venv, and ``course_lib``'s own package folder (never the repository with its
``solutions/``). ``course_grading`` is covered by an empty folder wherever an install put it
inside those (a regular install puts it in the venv), so the grader's checks cannot be read.
What it can write: private, size-limited tmpfs (``/tmp``, ``/home/student`` with a copy of its
own folder, ``/dev/shm``, and the runtime folder holding its connection file and IPC sockets),
all gone with the sandbox: nothing it writes reaches the host's disk. The grader reaches the
IPC sockets through ``/proc/<the sandbox's init>/root`` (``kernel.py``).

Namespaces: its own PID namespace (bwrap is its init, pid 1; the kernel is pid 2). When the
kernel ends, or the grader kills bwrap (``--die-with-parent`` also covers the grader dying), the
init dies and Linux ends every process of the namespace: nothing a submission starts outlives
it, and it can neither see nor signal any process outside (``kill -9 -1`` reaches only its own).
No network, its own IPC and UTS namespaces, a new session.

Uids (``sandbox_uid``): one per grader process and parallel slot. A root grader drops the
kernel to it (``setpriv``). An ordinary grader (a JupyterHub grader account) cannot, so bwrap
makes a user namespace in which the kernel is that uid (``--unshare-user --uid``; no further
user namespaces, ``--disable-userns``): outside, every slot is still the grader's uid, and it is
the PID namespace that keeps one slot from naming another's processes or the grader's. In both
modes the seccomp filter (``seccomp.py``, an allow-list) refuses any new namespace and every
call a notebook does not need.

Limits (``Limits``): ``prlimit`` sets address space, processes (counted per uid, and since
Linux 5.14 per user namespace, so per slot in both modes), file size, no core dumps. Memory and
processes for the whole sandbox: a cgroup where the host gives this grader one (``cgroup.py``,
joined by :func:`join`), otherwise the summed resident and tmpfs memory of the sandbox, watched
(``watch.py``). CPU time per cell is watched too. A graded function's sandbox
(:func:`command_argv`) gets the same envelope (``judge/functions.py``). Interrupts go as
messages: a signal to bwrap would not reach the kernel.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from course_grading.errors import GradingError
from course_grading.sandbox import seccomp

#: Where the student's folder is inside the sandbox: ``HOME`` and the kernel's working folder.
HOME = "/home/student"
#: Where the staged copy of the student's folder is mounted (read-only) before it is copied.
STAGE = "/run/shapes/stage"
#: The kernel's runtime folder (connection file, IPC sockets): a tmpfs of ``RUNTIME_BYTES``.
RUNTIME = "/run/shapes/runtime"
RUNTIME_BYTES = 2**20
#: The connection file the grader wrote, bound read-only; copied to ``KERNEL_CONNECTION``.
CONNECTION = "/run/shapes/connection.json"
KERNEL_CONNECTION = f"{RUNTIME}/kernel.json"
#: Sandbox uids: one per grader process and parallel slot, far from any account's uid and
#: from the subordinate ranges in /etc/subuid.
UID_BASE = 2_000_000_000
MAX_SLOTS = 256
#: Folders a Debian/Ubuntu system may keep at / (links into /usr on merged-/usr systems).
ROOT_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: Packages covered inside a kernel's sandbox wherever an install put them, and what covers them.
GRADER_PACKAGES = ("course_grading",)
UNAVAILABLE = Path(__file__).resolve().parent / "inside" / "unavailable.py"


@dataclass(frozen=True)
class Limits:
    """Resource limits inside one sandbox (all per submission unless said otherwise)."""

    memory_bytes: int = 4 * 2**30  # the whole sandbox, and each process's address space
    processes: int = 256  # processes and threads of the sandbox's user (RLIMIT_NPROC)
    file_bytes: int = 2**30  # largest file it may write (RLIMIT_FSIZE)
    tmpfs_bytes: int = 512 * 2**20  # size of its /tmp and of its /home/student, each
    shm_bytes: int = 64 * 2**20  # size of its /dev/shm
    output_bytes: int = 16 * 2**20  # notebook output kept; the rest is cut and flagged
    message_bytes: int = 32 * 2**20  # a larger message from the kernel is refused unread
    threads: int = 1  # OMP/MKL threads per kernel (the grader sets cores // jobs)

    def as_dict(self) -> dict:
        """The limits as plain data, for a job's spec (the job rebuilds them with ``Limits(**d)``).

        Returns:
            Field name -> value (bytes, counts, threads), as ``dataclasses.asdict`` gives it.
        """
        return asdict(self)


def privileged() -> bool:
    """Whether this grader runs as root (drops to uids) or not (user namespaces).

    Returns:
        ``True`` when the effective uid is 0: the sandbox then drops the kernel to its slot's
        uid with ``setpriv``; otherwise bwrap maps that uid inside a user namespace.
    """
    return os.geteuid() == 0


def sandbox_uid(slot: int) -> int:
    """The uid the sandboxes of parallel ``slot`` run as (inside a user namespace when the
    grader is not root).

    ``UID_BASE + (pid mod 2**22) * MAX_SLOTS + slot``: distinct per slot, and per grader process
    (Linux pids stay below 2**22, its largest ``pid_max``), so two graders running at once on
    one host never share a uid.

    Args:
        slot: the parallel job's index, ``0 .. MAX_SLOTS - 1``.

    Returns:
        The uid, at least ``UID_BASE`` (above any account's uid and the subordinate ranges).

    Raises:
        ValueError: ``slot`` is outside ``0 .. MAX_SLOTS - 1`` (too many ``--jobs``).
    """
    if not 0 <= slot < MAX_SLOTS:
        raise ValueError(f"slot {slot} outside 0..{MAX_SLOTS - 1}; use fewer --jobs")
    return UID_BASE + (os.getpid() % 2**22) * MAX_SLOTS + slot


def _namespaces(uid: int | None) -> list[str]:
    """Every namespace a sandbox gets; an ordinary grader's also maps ``uid`` in a user one."""
    args = ["--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-pid"]
    args += ["--die-with-parent", "--new-session"]
    if uid is not None and not privileged():
        args += ["--unshare-user", "--disable-userns", "--uid", str(uid), "--gid", str(uid)]
    return args


def _drop(uid: int | None) -> list[str]:
    """The command a root grader's sandbox drops to ``uid`` with (nothing otherwise)."""
    if uid is None or not privileged():
        return []
    return [
        "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs",
        "--inh-caps=-all", "--bounding-set=-all", "--pdeathsig=KILL", "--",
    ]  # fmt: skip


def check_available(uid: int | None = None) -> str:
    """Return the path of ``bwrap`` if it can make a sandbox here; else a ``GradingError``.

    Tried for real: bwrap runs ``true`` with the same namespaces a kernel gets, since a host
    may have bwrap installed but forbid unprivileged user namespaces (or, in a container,
    any new namespace).

    Args:
        uid: the uid to map or drop to in the trial; slot 0's uid (``sandbox_uid(0)``) when
            ``None``.

    Returns:
        The absolute path of the ``bwrap`` executable.

    Raises:
        GradingError: bwrap is not installed, or cannot create the namespaces here (the
            message quotes bwrap's last line of error output and names ``--no-sandbox``).
    """
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise GradingError(
            "cannot sandbox student code: bubblewrap is not installed (apt-get install "
            "bubblewrap); --no-sandbox grades without one, unsafely"
        )
    uid = sandbox_uid(0) if uid is None else uid
    proc = subprocess.run(
        seccomp.wrap([bwrap, *_namespaces(uid), *_system_binds(), "--proc", "/proc", "--", "true"]),
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
    """The Python installation, the venv and ``course_lib``'s package folder (never the repo).

    With an editable install ``course_lib`` lies in the repository, so only its package folder
    is bound: the repository's ``solutions/`` and ``course_grading/`` stay out of sight.

    Returns:
        The folders a kernel's sandbox binds read-only at their own paths, resolved,
        duplicates dropped (``sys.base_prefix`` equals ``sys.prefix`` outside a venv).
    """
    import course_lib

    package = Path(course_lib.__file__).resolve().parent
    paths = [Path(sys.base_prefix).resolve(), Path(sys.prefix), package]
    return [p for i, p in enumerate(paths) if p not in paths[:i]]


def package_folders(names: tuple[str, ...]) -> list[Path]:
    """Where ``names`` (top-level packages) are installed, as this process imports them.

    Found with ``importlib.util.find_spec``, without importing them; a namespace package may
    have several folders.

    Args:
        names: top-level package names (``("course_grading",)``).

    Returns:
        The resolved folders of every package found; a name that is not importable, or a plain
        module, adds nothing.
    """
    found: list[Path] = []
    for name in names:
        spec = importlib.util.find_spec(name)
        folders = (spec.submodule_search_locations or []) if spec else []
        found += [Path(folder).resolve() for folder in folders]
    return found


def _covers(names: tuple[str, ...], bound: list[Path]) -> list[str]:
    """Over ``names``, wherever they lie inside the ``bound`` folders: an empty read-only
    folder whose ``__init__.py`` raises ``ImportError`` (``sandbox/inside/unavailable.py``)."""
    args: list[str] = []
    for package in package_folders(names):
        if any(package == p or p in package.parents for p in bound):
            args += ["--perms", "0555", "--tmpfs", str(package)]
            args += ["--ro-bind", str(UNAVAILABLE), str(package / "__init__.py")]
            args += ["--remount-ro", str(package)]
    return args


def _system_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for folder in ROOT_DIRS:
        path = Path(folder)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), folder]
        elif path.is_dir():
            args += ["--ro-bind", folder, folder]
    return args


def _devices(limits: Limits) -> list[str]:
    """Its own ``/proc``; ``/dev`` read-only but for a size-limited ``/dev/shm``; ``/tmp``."""
    args = ["--proc", "/proc", "--dev", "/dev", "--perms", "1777"]
    args += ["--size", str(limits.shm_bytes), "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    return args + ["--perms", "1777", "--size", str(limits.tmpfs_bytes), "--tmpfs", "/tmp"]


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
    """The kernel's whole environment (``--clearenv``: nothing of the grader's leaks in, not
    even ``JPY_PARENT_PID``, whose parent check would end the kernel inside a PID namespace)."""
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
    """The same environment for an unsandboxed kernel whose home is the host folder ``home``.

    Used by ``--no-sandbox``, so a kernel sees the same threads, locale and
    ``NBGRADER_EXECUTION`` with or without a sandbox; only the paths are the host's.

    Args:
        limits: the limits whose ``threads`` sets ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS``.
        home: the host folder to use as ``HOME`` (matplotlib's config goes under it).

    Returns:
        The kernel's whole environment; ``TMPDIR`` is the grader's own (``/tmp`` if unset).
    """
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


def _start_script(lesson: str, uid: int | None) -> str:
    """Shell run inside the sandbox before the kernel: copy the folder and connection file in,
    and (root grader) hand them to the slot's uid."""
    folder = shlex.quote(f"{HOME}/{lesson}")
    copy = f"mkdir -p {folder} && cp -R {STAGE}/. {folder}/"
    copy += f" && cp {CONNECTION} {KERNEL_CONNECTION}"
    drop = " ".join(_drop(uid))
    if not drop:
        return f'{copy} && cd {folder} && exec "$@"'
    owned = f"chown -R {uid}:{uid} {HOME} {RUNTIME}"
    return f'{copy} && {owned} && cd {folder} && exec {drop} "$@"'


def kernel_argv(
    *,
    bwrap: str,
    stage: Path,
    connection: Path,
    lesson: str,
    uid: int | None,
    limits: Limits,
    kernel: list[str],
    cgroup_procs: Sequence[Path] = (),
) -> list[str]:
    """The full command that starts ``kernel`` sandboxed (module docstring).

    ``stage`` holds the student's folder as the kernel may see it (their notebook, without
    hidden tests, and the lesson's data files); ``connection`` is the connection file, which
    the kernel reads as ``KERNEL_CONNECTION``. ``cgroup_procs``: the ``cgroup.procs`` files of
    the sandbox's cgroup, joined before bwrap starts.

    Args:
        bwrap: path of the ``bwrap`` executable (``check_available``).
        stage: host folder holding the student's folder as the kernel may see it.
        connection: host path of the kernel's connection file.
        lesson: the lesson's folder name; the kernel runs in ``/home/student/<lesson>``.
        uid: the slot's uid (``sandbox_uid``), or ``None`` to keep the grader's uid.
        limits: the sandbox's resource limits.
        kernel: the kernel's own command line (``python -m ipykernel_launcher -f ...``).
        cgroup_procs: the cgroup's ``cgroup.procs`` files (one, or one per cgroup v1
            controller), or none where the host lets this grader make no cgroup (memory is
            then watched instead).

    Returns:
        The argv to start: bwrap, its arguments, the in-sandbox start script and ``prlimit``,
        then ``kernel``; joining ``cgroup_procs`` first (:func:`join`).
    """
    readonly = readonly_paths()
    args = [bwrap, *_namespaces(uid), *_system_binds(), *_devices(limits)]
    args += _folders_for([*readonly, Path(HOME), Path(STAGE), Path(RUNTIME)])
    for path in readonly:
        args += ["--ro-bind", str(path), str(path)]
    args += _covers(GRADER_PACKAGES, readonly)
    args += ["--perms", "0755", "--size", str(limits.tmpfs_bytes), "--tmpfs", HOME]
    args += ["--perms", "0755", "--size", str(RUNTIME_BYTES), "--tmpfs", RUNTIME]
    args += ["--ro-bind", str(stage), STAGE, "--ro-bind", str(connection), CONNECTION]
    args += ["--chdir", HOME, "--clearenv"]
    for name, value in _environment(limits).items():
        args += ["--setenv", name, value]
    script = _start_script(lesson, uid)
    argv = [*args, "--", "/bin/sh", "-c", script, "sh", *_limits_command(limits), *kernel]
    return join(seccomp.wrap(argv), cgroup_procs)


def join(argv: list[str], cgroup_procs: Sequence[Path]) -> list[str]:
    """``argv`` started inside a cgroup: a shell writes its own pid into each ``cgroup.procs``
    file, then execs ``argv``, so bwrap and everything it starts are born inside.

    Args:
        argv: the command (bwrap's, wrapped by ``seccomp.wrap``).
        cgroup_procs: the cgroup's ``cgroup.procs`` files; none: ``argv`` as it is.

    Returns:
        The command that joins first, or ``argv`` unchanged.
    """
    if not cgroup_procs:
        return argv
    script = " && ".join(f'echo $$ > "${n}"' for n in range(1, len(cgroup_procs) + 1))
    rest = f'shift {len(cgroup_procs)} && exec "$@"'
    return ["/bin/sh", "-c", f"{script} && {rest}", "sh", *map(str, cgroup_procs), *argv]


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
    """A plain command in a fresh sandbox of its own (``course_grading.judge.functions``).

    Read-only: the system folders, the Python installation and the venv, with the folders of
    ``course_grading`` and ``course_lib`` covered by empty ones wherever an install put them
    inside those (a regular, non-editable install); plus ``binds`` (host folder, path inside),
    read-only. Private: a size-limited ``/tmp`` and ``/dev/shm``, a PID namespace (nothing
    outlives the command), no network, a cleared environment (``env`` only). Limits: ``limits``
    and ``cpu_seconds`` of CPU time; it runs as ``uid`` (dropped to, or in a user namespace).

    Args:
        bwrap: path of the ``bwrap`` executable (``check_available``).
        argv: the command to run inside.
        binds: (host path, path inside) pairs bound read-only.
        limits: address space, processes, file size and tmpfs sizes.
        cpu_seconds: ``RLIMIT_CPU`` of the command, in seconds of CPU time.
        uid: the slot's uid (``sandbox_uid``), or ``None`` to keep the grader's uid.
        env: the command's whole environment.

    Returns:
        The argv to start: bwrap, its arguments, the uid drop (root grader), ``prlimit`` with
        the CPU limit, then ``argv``; its working folder is the private ``/tmp``.
    """
    python = [Path(sys.base_prefix).resolve(), Path(sys.prefix)]
    python = [p for i, p in enumerate(python) if p not in python[:i]]
    args = [bwrap, *_namespaces(uid), *_system_binds(), *_devices(limits)]
    args += _folders_for([*python, *(Path(dst) for _, dst in binds)])
    for path in python:
        args += ["--ro-bind", str(path), str(path)]
    args += _covers((*GRADER_PACKAGES, "course_lib"), python)
    for source, target in binds:
        args += ["--ro-bind", str(source), target]
    args += ["--chdir", "/tmp", "--clearenv"]
    for name, value in env.items():
        args += ["--setenv", name, value]
    limit = _limits_command(limits)
    return seccomp.wrap(
        [*args, "--", *_drop(uid), *limit[:-1], f"--cpu={cpu_seconds}", "--", *argv]
    )
