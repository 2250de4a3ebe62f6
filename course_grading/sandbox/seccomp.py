"""The system calls a sandbox refuses: memory that no process maps and no limit counts.

Without a memory cgroup (an ordinary grader account) a sandbox's memory is its processes'
resident memory, watched (``watch.py``), and its tmpfs folders are bounded by their sizes. Two
kinds of memory are in neither: a ``memfd_create`` file that nothing maps (``posix_fallocate``
of 4 × 900 MiB left the watch reading 54 MiB while the host gave up 3.6 GiB), and a System V
shared-memory segment that was filled and detached (it lives on in the sandbox's IPC namespace,
mapped by nobody). ``RLIMIT_FSIZE`` caps one memfd file, not how many. So the sandbox refuses
``memfd_create``, ``memfd_secret`` and ``shmget`` with ``EPERM``, as Docker's default profile
refuses calls it does not need; nothing a lesson runs uses them (POSIX shared memory, what
PyTorch shares tensors with, lives in ``/dev/shm``, a 64 MiB tmpfs). Calls of another ABI
(32-bit ``int 0x80``, x32) are refused too: their numbers differ, so a filter on the native
numbers alone would let them through.

The filter is a classic BPF program bwrap loads (``--seccomp FD``) after it has built the
namespaces and before it starts the command; bwrap sets ``no_new_privs`` first, and a filter,
once loaded, holds for every process the sandbox starts. Built for x86_64 and aarch64; on
another machine there is none, and ``program`` says so by returning ``None``.
"""

from __future__ import annotations

import atexit
import errno
import os
import platform
import shutil
import struct
import tempfile
from pathlib import Path

#: (audit architecture, {call: number}) of the machines the filter is built for.
CALLS = {
    "x86_64": (0xC000003E, {"memfd_create": 319, "shmget": 29, "memfd_secret": 447}),
    "aarch64": (0xC00000B7, {"memfd_create": 279, "shmget": 194, "memfd_secret": 447}),
}
#: The file descriptor bwrap reads the program from (``wrap``).
FD = 9

_LD_ABS, _JEQ, _JGE, _RET = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, JGE, BPF_RET|K
_ALLOW = 0x7FFF0000  # SECCOMP_RET_ALLOW
_REFUSE = 0x00050000 | errno.EPERM  # SECCOMP_RET_ERRNO
_X32 = 0x40000000  # x86_64's x32 ABI marks its call numbers with this bit
_path: Path | None = None


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(machine: str | None = None) -> bytes | None:
    """The filter for ``machine`` (this one's by default), as bwrap reads it.

    Args:
        machine: ``platform.machine()``'s name of the machine; ``None``: this one.

    Returns:
        The BPF program (8 bytes an instruction), or ``None`` for a machine it is not built
        for.
    """
    found = CALLS.get(machine or platform.machine())
    if found is None:
        return None
    arch, numbers = found
    refused = sorted(numbers.values())
    ops = [
        _op(_LD_ABS, 4),  # seccomp_data.arch
        _op(_JEQ, arch, jt=1),
        _op(_RET, _REFUSE),  # another ABI: other numbers
        _op(_LD_ABS, 0),  # seccomp_data.nr
        _op(_JGE, _X32, jf=1),
        _op(_RET, _REFUSE),  # x32
    ]
    for i, number in enumerate(refused):  # each jumps to the last instruction, the refusal
        ops.append(_op(_JEQ, number, jt=len(refused) - i))
    ops += [_op(_RET, _ALLOW), _op(_RET, _REFUSE)]
    return b"".join(ops)


def program_file() -> Path | None:
    """This machine's filter, written once per grader process to a folder only it can read
    (removed when the process ends).

    Returns:
        The file's path, or ``None`` where no filter is built for this machine.
    """
    global _path
    code = program()
    if code is None:
        return None
    if _path is None or not _path.is_file():
        folder = Path(tempfile.mkdtemp(prefix="shapes-seccomp-"))  # mode 0700, ours
        atexit.register(shutil.rmtree, folder, True)  # bwrap has read it by then
        path = folder / "filter.bpf"
        path.write_bytes(code)
        os.chmod(path, 0o400)
        _path = path
    return _path


def wrap(argv: list[str]) -> list[str]:
    """``argv`` (bwrap and its arguments first) with the filter loaded into the sandbox.

    Args:
        argv: the command that starts bwrap: ``[bwrap, options..., "--", command...]``.

    Returns:
        A shell that opens the filter on ``FD`` and execs bwrap told to load it; ``argv``
        unchanged where no filter is built for this machine.
    """
    path = program_file()
    if path is None:
        return argv
    bwrap = [argv[0], "--seccomp", str(FD), *argv[1:]]
    return ["/bin/sh", "-c", f'exec "$@" {FD}<"$0"', str(path), *bwrap]
