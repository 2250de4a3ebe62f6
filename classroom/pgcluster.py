"""A private PostgreSQL cluster for the class gradebook: Debian's server, run by its own user.

The server binaries refuse to run as root, so the cluster belongs to the ``postgres`` account
(Debian's package creates it). The data folder and the Unix socket live in one folder that only
that account can enter; the server listens on 127.0.0.1 only, and the gradebook role logs in
there with a password (scram-sha-256). Nothing is registered with the system: no service, no
``pg_ctlcluster``; the server is a child process of whoever calls :meth:`Cluster.start`.
"""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import time
from pathlib import Path
from urllib.parse import quote

import psycopg
from psycopg import sql


def find_bin() -> Path:
    """The folder with ``initdb`` and ``postgres``: ``$SHAPES_PG_BIN`` or the newest Debian one."""
    if os.environ.get("SHAPES_PG_BIN"):
        return Path(os.environ["SHAPES_PG_BIN"])
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/postgres"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if not found:
        raise FileNotFoundError(
            "no PostgreSQL server under /usr/lib/postgresql/*/bin: "
            "apt-get install postgresql (or set SHAPES_PG_BIN)"
        )
    return found[-1].parent


class Cluster:
    """One PostgreSQL cluster in ``folder`` (``data/``, ``run/`` for the socket, ``server.log``)."""

    def __init__(self, folder: Path, *, owner: str = "postgres") -> None:
        self.folder = Path(folder)
        self.owner = pwd.getpwnam(owner)
        self.bin = find_bin()
        self.data = self.folder / "data"
        self.socket_dir = self.folder / "run"
        self.log = self.folder / "server.log"
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None

    def _as_owner(self) -> dict:
        return dict(user=self.owner.pw_uid, group=self.owner.pw_gid, extra_groups=[])

    def init(self) -> None:
        """Create the cluster once (``initdb``); later calls keep the data."""
        for path in (self.folder, self.socket_dir):
            path.mkdir(parents=True, exist_ok=True)
            os.chown(path, self.owner.pw_uid, self.owner.pw_gid)
            path.chmod(0o700)
        if (self.data / "PG_VERSION").exists():
            return
        subprocess.run(
            [
                str(self.bin / "initdb"),
                "--pgdata",
                str(self.data),
                "--username=postgres",
                "--encoding=UTF8",
                "--auth-local=trust",  # the socket folder is the owner's alone
                "--auth-host=scram-sha-256",
                "--no-instructions",
            ],
            check=True,
            capture_output=True,
            cwd="/",
            **self._as_owner(),
        )

    def start(self, port: int, *, timeout: float = 60) -> None:
        """Run the server as a child (its own session) on 127.0.0.1:``port``; wait until ready."""
        log = open(self.log, "ab")
        os.chown(self.log, self.owner.pw_uid, self.owner.pw_gid)
        self.port = port
        self.proc = subprocess.Popen(
            [
                str(self.bin / "postgres"),
                "-D",
                str(self.data),
                "-p",
                str(port),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                f"unix_socket_directories={self.socket_dir}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd="/",
            start_new_session=True,
            **self._as_owner(),
        )
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            try:
                with self.admin():
                    return
            except psycopg.OperationalError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"PostgreSQL did not start; the end of {self.log}:\n"
                        + self.log.read_text(errors="replace")[-2000:]
                    ) from None
                time.sleep(0.3)

    def admin(self) -> psycopg.Connection:
        """A superuser connection through the private socket."""
        return psycopg.connect(
            host=str(self.socket_dir),
            port=self.port,
            user="postgres",
            dbname="postgres",
            autocommit=True,
            connect_timeout=5,
        )

    def ensure_database(self, name: str, role: str, password: str) -> str:
        """Create (or keep) ``role`` with ``password`` owning database ``name``; its URL."""
        with self.admin() as conn:
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
            verb = "ALTER" if exists else "CREATE"
            conn.execute(
                sql.SQL(verb + " ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(role), sql.Literal(password)
                )
            )
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
                conn.execute(
                    sql.SQL("CREATE DATABASE {} OWNER {}").format(
                        sql.Identifier(name), sql.Identifier(role)
                    )
                )
        return (
            f"postgresql+psycopg://{quote(role)}:{quote(password, safe='')}"
            f"@127.0.0.1:{self.port}/{quote(name)}"
        )

    def stop(self, *, timeout: float = 30) -> None:
        """Fast shutdown (SIGINT: roll back open transactions, then exit); SIGKILL if it hangs."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
