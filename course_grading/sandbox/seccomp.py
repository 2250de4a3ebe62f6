"""The system calls a sandbox may make: an allow-list of what a notebook needs; the rest refused.

Every sandbox, a kernel's and a graded function's, runs under one seccomp filter that allows the
calls below and refuses every other with ``EPERM``, as Docker's and Podman's default profiles
do. The list was written from what the five lessons use: each lesson's solution notebook ran in
a sandboxed kernel, and each of its graded functions in the function sandbox, under ``strace``
(95 distinct calls in the kernels, 52 in the functions), then widened by family to what ordinary
Python code does beside them (files, pipes, sockets, signals, timers, processes); the families a
notebook never needs stay out. So, among others, these reach no kernel code from a sandbox:

- new namespaces: ``unshare``, ``setns``, ``clone`` with a namespace flag (a user namespace
  would let a student mount a tmpfs of any size, beyond every limit: 5 GiB held under
  ``--memory 4``); ``clone3`` answers ``ENOSYS``, as Docker's profile does, so the C library
  falls back to ``clone``, whose flags a filter can read (``clone3``'s are behind a pointer);
- mounts, ``pivot_root``, ``chroot``; ``bpf``, ``perf_event_open``, ``ptrace``,
  ``process_vm_readv``/``writev``, ``userfaultfd``, ``io_uring_*``, the old ``io_setup`` family,
  ``keyctl``/``add_key``/``request_key``, ``pidfd_*``, ``kcmp``, ``fanotify_*``, handles
  (``open_by_handle_at``), modules, ``kexec``, ``reboot``, swap, clocks, quotas;
- ``personality`` but its query (``0xffffffff``): no switching off address randomisation;
- memory that no process maps and no limit counts without a cgroup: ``memfd_create`` (four
  900 MiB memfd files left unmapped held 3.6 GiB while the watch read 54 MiB), System V shared
  memory, message queues and semaphores (a segment filled and detached outlives every process
  that touched it), POSIX message queues. POSIX shared memory lives in ``/dev/shm``, a tmpfs
  of 64 MiB, as PyTorch needs.

Calls of another ABI (32-bit ``int 0x80``, x32) are refused as a whole: their numbers differ. A
number above the highest this table knows (``syscalls.py``) answers ``ENOSYS``, as a kernel
without that call would. The filter is a classic BPF program bwrap loads (``--seccomp FD``)
after it has built the namespaces, just before it starts the command; bwrap sets
``no_new_privs`` first, and a filter, once loaded, holds for every process the sandbox starts.
Built for x86_64 and aarch64 (``syscalls.py``); on another machine there is none, and
``program`` says so by returning ``None``.
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

from course_grading.sandbox import syscalls

#: What a notebook may call, by family (a name the machine does not have is passed over).
ALLOWED = {
    "memory": "brk mmap munmap mremap mprotect madvise mincore msync mlock mlock2 munlock "
    "mlockall munlockall membarrier mbind get_mempolicy set_mempolicy pkey_alloc pkey_free "
    "pkey_mprotect map_shadow_stack mseal",
    "files": "read write readv writev pread64 pwrite64 preadv pwritev preadv2 pwritev2 open "
    "openat openat2 creat close close_range lseek dup dup2 dup3 fcntl flock ioctl stat fstat "
    "lstat newfstatat statx statfs fstatfs access faccessat faccessat2 readlink readlinkat "
    "getdents getdents64 getcwd chdir fchdir rename renameat renameat2 mkdir mkdirat rmdir "
    "unlink unlinkat link linkat symlink symlinkat chmod fchmod fchmodat fchmodat2 chown fchown "
    "lchown fchownat umask utime utimes utimensat futimesat truncate ftruncate fallocate fsync "
    "fdatasync sync syncfs sync_file_range fadvise64 readahead sendfile copy_file_range splice "
    "tee mknod mknodat getxattr lgetxattr fgetxattr listxattr llistxattr flistxattr setxattr "
    "lsetxattr fsetxattr removexattr lremovexattr fremovexattr inotify_init inotify_init1 "
    "inotify_add_watch inotify_rm_watch",
    "waiting": "pipe pipe2 poll ppoll select pselect6 epoll_create epoll_create1 epoll_ctl "
    "epoll_wait epoll_pwait epoll_pwait2 eventfd eventfd2 futex futex_waitv futex_wake "
    "futex_wait futex_requeue set_robust_list get_robust_list",
    "sockets": "socket socketpair bind listen accept accept4 connect getsockname getpeername "
    "getsockopt setsockopt sendto recvfrom sendmsg recvmsg sendmmsg recvmmsg shutdown",
    "processes": "fork vfork execve execveat exit exit_group wait4 waitid kill tkill tgkill "
    "getpid getppid gettid getpgid setpgid getpgrp getsid setsid set_tid_address rseq "
    "arch_prctl prctl seccomp capget capset getpriority setpriority sched_yield "
    "sched_getaffinity sched_setaffinity sched_getparam sched_setparam sched_getscheduler "
    "sched_setscheduler sched_get_priority_max sched_get_priority_min sched_rr_get_interval "
    "sched_getattr sched_setattr getcpu ioprio_get ioprio_set prlimit64 getrlimit setrlimit "
    "getrusage times sysinfo uname getrandom restart_syscall",
    "identity": "getuid geteuid getgid getegid getgroups getresuid getresgid setuid setgid "
    "setreuid setregid setresuid setresgid setgroups setfsuid setfsgid",
    "signals": "rt_sigaction rt_sigprocmask rt_sigreturn rt_sigpending rt_sigtimedwait "
    "rt_sigsuspend rt_sigqueueinfo rt_tgsigqueueinfo sigaltstack pause alarm signalfd signalfd4",
    "time": "clock_gettime clock_getres clock_nanosleep nanosleep gettimeofday time getitimer "
    "setitimer timer_create timer_settime timer_gettime timer_getoverrun timer_delete "
    "timerfd_create timerfd_settime timerfd_gettime",
}
#: ``clone`` is allowed without any namespace flag (``CLONE_NEWNS``, ``NEWCGROUP``, ``NEWUTS``,
#: ``NEWIPC``, ``NEWUSER``, ``NEWPID``, ``NEWNET``); ``personality`` for its query only.
NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000
NAMESPACE_FLAGS |= 0x40000000
PERSONALITY_QUERY = 0xFFFFFFFF
#: The file descriptor bwrap reads the program from (``wrap``).
FD = 9

_LD_ABS, _JEQ, _JGT, _JSET, _RET = 0x20, 0x15, 0x25, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|..|K
_ALLOW = 0x7FFF0000  # SECCOMP_RET_ALLOW
_ERRNO = 0x00050000  # SECCOMP_RET_ERRNO, the errno in the low 16 bits
_REFUSE, _NO_SUCH_CALL = _ERRNO | errno.EPERM, _ERRNO | errno.ENOSYS
_NR, _ARCH, _ARG0 = 0, 4, 16  # offsets in seccomp_data (the first argument's low word: LE)
_X32 = 0x40000000  # x86_64's x32 ABI marks its call numbers with this bit
_path: Path | None = None


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def allowed(machine: str | None = None) -> dict[str, int] | None:
    """The calls the filter allows outright on ``machine``, by name.

    Args:
        machine: ``platform.machine()``'s name of the machine; ``None``: this one.

    Returns:
        Name -> number of every call in :data:`ALLOWED` that the machine has, or ``None`` for a
        machine without a table (``syscalls.py``).
    """
    table = syscalls.numbers(machine or platform.machine())
    if table is None:
        return None
    names = {name for family in ALLOWED.values() for name in family.split()}
    return {name: table[name] for name in sorted(names) if name in table}


def _checked(number: int, refuse_unless: tuple[int, int]) -> list[bytes]:
    """Allow call ``number`` when its first argument passes; refuse it otherwise.

    ``refuse_unless`` is ``(_JSET, mask)``: allowed when no bit of ``mask`` is set; or
    ``(_JEQ, value)``: allowed when the argument is ``value``. Another call jumps past, the
    accumulator still holding its number.
    """
    test, k = refuse_unless
    passes = (0, 1) if test == _JSET else (1, 0)  # (jt, jf) to the refusal / the allowance
    return [
        _op(_JEQ, number, jf=4),
        _op(_LD_ABS, _ARG0),
        _op(test, k, jt=passes[0], jf=passes[1]),
        _op(_RET, _REFUSE),
        _op(_RET, _ALLOW),
    ]


def program(machine: str | None = None) -> bytes | None:
    """The filter for ``machine`` (this one's by default), as bwrap reads it.

    Args:
        machine: ``platform.machine()``'s name of the machine; ``None``: this one.

    Returns:
        The BPF program (8 bytes an instruction), or ``None`` for a machine it is not built
        for.
    """
    machine = machine or platform.machine()
    table, calls = syscalls.numbers(machine), allowed(machine)
    if table is None or calls is None:
        return None
    ops = [
        _op(_LD_ABS, _ARCH),
        _op(_JEQ, syscalls.AUDIT_ARCH[machine], jt=1),
        _op(_RET, _REFUSE),  # another ABI: other numbers
        _op(_LD_ABS, _NR),
        _op(_JGT, _X32 - 1, jf=1),
        _op(_RET, _REFUSE),  # x32 (x86_64's, and any number that large)
    ]
    for number in sorted(calls.values()):  # each allowed call: a test and its answer
        ops += [_op(_JEQ, number, jf=1), _op(_RET, _ALLOW)]
    ops += _checked(table["clone"], (_JSET, NAMESPACE_FLAGS))
    ops += _checked(table["personality"], (_JEQ, PERSONALITY_QUERY))
    ops += [_op(_JEQ, table["clone3"], jf=1), _op(_RET, _NO_SUCH_CALL)]
    ops += [_op(_JGT, max(table.values()), jf=1), _op(_RET, _NO_SUCH_CALL)]
    return b"".join([*ops, _op(_RET, _REFUSE)])


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
