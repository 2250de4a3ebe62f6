"""Reaching a grading cluster (``cluster.py``): over TLS only, and knowing when it is gone.

- :func:`add_options`: the command's options for it (``--scheduler``, ``--cluster-certs``, ...).
- :func:`connect`: the Dask client of a ``tls://`` scheduler, proving itself with the grading
  command's certificate (``--cluster-certs DIR``: the ``client/`` folder ``python -m
  course_grading cluster-certs`` writes, ``cluster_certs.py``). A ``tcp://`` scheduler is
  refused: over plain TCP any local user connects, runs code on the workers and reads every job.
  A key that others can read is refused too.
- :class:`Pool`: the cluster's workers as one run sees them, each checked once
  (``cluster_worker.admit``) before it is sent anything.
- :func:`lost`: whether what a call into Dask raised means the scheduler is gone (a closed
  connection, a cancelled future, a client no longer running): the run then stops in one line,
  keeping what is graded, wherever it was (submitting, waiting, taking an answer).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from concurrent.futures import CancelledError
from pathlib import Path

from course_grading.cluster_certs import FILES
from course_grading.cluster_worker import Needs
from course_grading.errors import GradingError
from course_grading.report_text import one_line

CONNECT_SECONDS = 10
HOW = (
    "start the cluster with TLS from `python -m course_grading cluster-certs DIR` and give "
    "--scheduler tls://HOST:PORT --cluster-certs DIR/client (docs/instructors.md, section 3.8)"
)


def add_options(parser: argparse.ArgumentParser) -> None:
    """The command's cluster options (``--scheduler``, ``--cluster-certs``, ``--resume``,
    ``--worker-wait``).

    Args:
        parser: the grading command's parser.
    """
    group = parser.add_argument_group("on a Dask cluster (docs/instructors.md, section 3.8)")
    add = group.add_argument
    add("--scheduler", metavar="tls://HOST:PORT", default=None,
        help="grade on the Dask cluster of this scheduler (TLS only): each worker in its own "
        "sandboxes, checked before it is used; the workspace (--out) shared with every "
        "worker")  # fmt: skip
    add("--cluster-certs", metavar="DIR", type=Path, default=None,
        help="with --scheduler: this command's certificate folder (the client/ folder of "
        "`python -m course_grading cluster-certs`)")  # fmt: skip
    add("--resume", action="store_true",
        help="with --scheduler: keep what a stopped run graded, grade only the rest")  # fmt: skip
    add("--worker-wait", type=int, default=300, metavar="SECONDS",
        help="with --scheduler: stop (keeping what is graded) when no worker can grade for this "
        "long (300)")  # fmt: skip


def security(folder: Path) -> object:
    """``distributed``'s ``Security`` for the grading command, from its certificate folder.

    Args:
        folder: ``ca.pem``, ``cert.pem`` and ``key.pem`` (``cluster-certs``' ``client/``).

    Returns:
        The ``Security``: TLS required, this certificate presented, the cluster's authority's
        the only one trusted.

    Raises:
        GradingError: a file is missing, or the key can be read by others.
    """
    from distributed.security import Security

    missing = [name for name in FILES if not (folder / name).is_file()]
    if missing:
        raise GradingError(f"--cluster-certs {folder} holds no {', '.join(missing)}: {HOW}")
    key = folder / "key.pem"
    mode = key.stat().st_mode & 0o777
    if mode & 0o077:
        raise GradingError(f"the key {key} can be read by others (mode {mode:o}): chmod 600 {key}")
    return Security(
        require_encryption=True,
        tls_ca_file=str(folder / "ca.pem"),
        tls_client_cert=str(folder / "cert.pem"),
        tls_client_key=str(key),
    )


def connect(address: str, certs: Path | None) -> object:
    """A Dask client of the scheduler at ``address``, over TLS with the client's certificate.

    Args:
        address: the scheduler's address (``tls://HOST:PORT``).
        certs: the grading command's certificate folder (``--cluster-certs``).

    Returns:
        The connected ``distributed.Client``.

    Raises:
        GradingError: the address is not ``tls://``, the certificates cannot be used, or the
            scheduler cannot be reached (or refuses the certificate), in one line.
    """
    if not address.startswith("tls://"):
        raise GradingError(
            f"--scheduler {address}: a Dask scheduler reached without TLS takes any local "
            f"user's connection, who could run code on its workers and read the jobs: {HOW}"
        )
    if certs is None:
        raise GradingError(f"--scheduler {address} needs --cluster-certs DIR: {HOW}")
    from distributed import Client

    quiet()
    try:
        return Client(address, timeout=CONNECT_SECONDS, security=security(certs))
    except (OSError, ValueError, TypeError) as err:  # TimeoutError is an OSError
        why = one_line(str(err)) or type(err).__name__
        raise GradingError(f"cannot reach the Dask scheduler at {address}: {why}") from None


def quiet() -> None:
    """Silence ``distributed``'s loggers: what the run says, it says in its own lines (a lost
    connection's traceback, a slow event loop would bury them)."""
    for name in [n for n in logging.root.manager.loggerDict if n.startswith("distributed")]:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    logging.getLogger("distributed").setLevel(logging.CRITICAL)


def lost(err: BaseException, client: object) -> bool:
    """Whether ``err``, raised by a call into Dask, means the scheduler is gone.

    Args:
        err: what the call raised.
        client: the run's client.

    Returns:
        ``True`` for a closed connection (``CommClosedError``, any ``OSError``), a cancelled
        future (Dask cancels them all when the scheduler goes), or a client no longer running.
    """
    from distributed.comm.core import CommClosedError

    gone = (CommClosedError, OSError, CancelledError, asyncio.CancelledError)
    return isinstance(err, gone) or getattr(client, "status", "running") != "running"


def say(line: str) -> None:
    """Say ``line`` on stderr at once (what the run reports as it goes).

    Args:
        line: one line.
    """
    print(line, file=sys.stderr, flush=True)


class Pool:
    """The cluster's workers as this run sees them: each checked once, by address.

    Args:
        client: the run's Dask client.
        needs: what a worker must have (``cluster_worker.Needs``).
    """

    def __init__(self, client: object, needs: Needs) -> None:
        self.client, self.needs = client, needs
        self.admitted: set[str] = set()
        self.refused: dict[str, str] = {}

    def check(self) -> int:
        """Check every worker not checked yet (``cluster_worker.admit``); name each refused one
        on stderr, with why. A worker that leaves while it is checked is checked again if it
        comes back.

        Returns:
            How many admitted workers the scheduler has now.

        Raises:
            Exception: what the scheduler's connection raised, when the client is no longer
                running (:func:`lost` says so).
        """
        from course_grading.cluster_worker import admit

        workers = self.client.scheduler_info(n_workers=-1)["workers"]  # all (2025: 5 by default)
        new = [a for a in workers if a not in self.admitted and a not in self.refused]
        try:
            run = self.client.run
            answers = run(admit, self.needs, workers=new, on_error="return") if new else {}
        except Exception:
            if self.client.status != "running":
                raise
            answers = {}  # a worker left while it was checked: the others are checked next time
        for address in (a for a in new if a in answers):  # one that left is not checked
            why = answers[address]
            if isinstance(why, BaseException):
                why = f"it cannot run the grader ({type(why).__name__}: {why})"
            if not why:
                self.admitted.add(address)
                continue
            self.refused[address] = why = one_line(why)
            name = workers[address].get("name", address)
            say(f"refused Dask worker {name} ({address}): {why}; it is sent nothing")
        return len(self.admitted & set(workers))
