"""The file system as the classroom's processes see it: the course's Python, not its answers.

Two problems on one machine, solved with a private mount namespace (Linux, as root) that the
hub, the proxy, every single-user server and every kernel inherit:

1. The checkout's ``.venv`` links to a base Python that may sit in a folder other users cannot
   enter (pyenv under ``/root``, mode 0700): a student's server could not even start. Inside the
   namespace that folder is replaced by an empty tmpfs into which only the base Python is
   bound back; nothing else of it is visible.
2. The checkout holds the answers (``solutions/``, ``.git``, test fixtures, a ``grading/``
   workspace). Inside the namespace the checkout is an empty tmpfs with only ``.venv``,
   ``course_lib`` (the editable install points there) and ``classroom`` bound back. The
   instructor's course folder is a copy in their own home (mode 0700).

The host's mounts are untouched (the namespace is private: nothing propagates back), and the
namespace ends with the last process in it.
"""

from __future__ import annotations

import ctypes
import os
import sys
import tempfile
from pathlib import Path

CLONE_NEWNS = 0x00020000
MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 0x1000, 0x2000, 0x4000, 0x40000
_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(
    source: str | None, target: Path, fstype: str | None, flags: int, data: str = ""
) -> None:
    _check(
        _libc.mount(
            source.encode() if source else None,
            str(target).encode(),
            fstype.encode() if fstype else None,
            flags,
            data.encode() if data else None,
        ),
        f"mount {source} on {target}",
    )


def reveal_only(top: Path, keep: list[Path]) -> None:
    """Cover ``top`` with an empty tmpfs (0755), then put back only the paths in ``keep``."""
    stash = Path(tempfile.mkdtemp(prefix="shapes-view-"))
    stashed = []
    for i, path in enumerate(keep):
        spot = stash / str(i)
        spot.mkdir()
        _mount(str(path), spot, None, MS_BIND | MS_REC)
        stashed.append((spot, path))
    _mount("tmpfs", top, "tmpfs", 0, "mode=0755")
    for spot, path in stashed:
        path.mkdir(parents=True, exist_ok=True)  # inside the fresh tmpfs: mode 0755 folders
        for parent in path.relative_to(top).parents:
            (top / parent).chmod(0o755)
        _mount(str(spot), path, None, MS_MOVE)
        spot.rmdir()
    stash.rmdir()


def closed_ancestor(path: Path) -> Path | None:
    """The highest folder on the way to ``path`` that other users may not enter, if any."""
    for folder in [*reversed(path.parents), path]:
        if not folder.stat().st_mode & 0o001:
            return folder
    return None


def closed_tops(paths: dict[Path, str]) -> list[tuple[Path, dict[Path, str]]]:
    """The closed folders to open, highest first, each with the ``paths`` it must show.

    A path inside a folder other users cannot enter (pyenv under ``/root``; a checkout cloned
    into a ``mktemp -d`` folder, mode 0700) is shown through a tmpfs over the highest closed
    folder on its way. Paths sharing a closed folder, or whose closed folder lies inside another
    one's, go through the higher one. A path that is itself the closed folder needs no opening
    here (the checkout is covered by its own tmpfs next).

    Args:
        paths: path -> what it is, in words (for the notes).
    """
    closed = {}
    for path, what in paths.items():
        folder = closed_ancestor(path)
        if folder is not None and folder != path:
            closed[path] = (folder, what)
    tops: list[tuple[Path, dict[Path, str]]] = []
    for folder in sorted({f for f, _ in closed.values()}, key=lambda f: (len(f.parts), str(f))):
        if any(top == folder or top in folder.parents for top, _ in tops):
            continue  # inside a folder already opened, which shows these paths too
        shown = {p: w for p, (f, w) in closed.items() if f == folder or folder in f.parents}
        tops.append((folder, shown))
    return tops


def available() -> bool:
    return sys.platform.startswith("linux") and os.geteuid() == 0


def enter(repo: Path, venv: Path) -> list[str]:
    """Move this process into the classroom's view; what was hidden, in words."""
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, Path("/"), None, MS_REC | MS_PRIVATE)  # nothing propagates back to the host
    notes = []
    base = Path(sys.base_prefix).resolve()
    for top, shown in closed_tops({base: "the course's base Python", repo: "the checkout"}):
        reveal_only(top, list(shown))
        notes.append(f"{top} shows only " + ", ".join(f"{p} ({w})" for p, w in shown.items()))
    keep = [venv, repo / "course_lib", repo / "classroom"]
    reveal_only(repo, [p for p in keep if p.exists()])
    notes.append(f"{repo} shows only {', '.join(p.name for p in keep)} (no solutions, no .git)")
    return notes
