"""``python -m course_grading cluster-certs OUT_DIR``: the certificates a grading cluster runs on.

A Dask scheduler reached over plain TCP takes any local user's connection, and whoever connects
can run code on its workers (``Client.run``) and read every job it holds. The grader therefore
talks to a cluster over TLS with mutual authentication only (``cluster.py`` refuses ``tcp://``):
the scheduler, each worker and the grading command each prove themselves with a certificate
signed by the cluster's own certificate authority, and nobody without one gets past the TLS
handshake (``distributed``'s ``Security``: both sides require a certificate).

This command makes that authority and one certificate per role, with the ``cryptography``
package ``distributed`` depends on::

    OUT_DIR/                 mode 700
      scheduler/ worker/ client/     mode 700, each: ca.pem, cert.pem, key.pem (mode 600)

The authority's own key is never written: nobody can sign another certificate for the cluster
afterwards, and making new certificates (to add a role's machine, copy its folder; to shut a
key out, make a new ``OUT_DIR`` and restart the cluster with it) is running the command again.
Each folder goes to the machines and account of its role: the worker's to the unprivileged
account the workers run as (``--worker-user`` gives it that folder), the client's to the
instructor's, whose account alone reads the course secret. Keys and certificates are EC P-256,
valid for ``--days`` (365).
"""

from __future__ import annotations

import argparse
import datetime
import os
import pwd
from pathlib import Path

from course_grading.errors import GradingError

ROLES = ("scheduler", "worker", "client")
FILES = ("ca.pem", "cert.pem", "key.pem")


def _name(common: str):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _certificate(subject: str, key, issuer: str, signer, days: int, authority: bool):
    """A certificate of ``key``'s public key for ``subject``, signed by ``signer``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID

    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(
            x509.BasicConstraints(ca=authority, path_length=0 if authority else None), critical=True
        )  # fmt: skip
    )
    if authority:
        usage = x509.KeyUsage(False, False, False, False, False, True, True, False, False)
    else:  # every role both connects and listens (workers talk to each other)
        usage = x509.KeyUsage(True, False, False, False, True, False, False, False, False)
        purposes = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = builder.add_extension(x509.ExtendedKeyUsage(purposes), critical=False)
    return builder.add_extension(usage, critical=True).sign(signer, hashes.SHA256())


def _write(path: Path, data: bytes, mode: int) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(descriptor, "wb") as out:
        out.write(data)
    os.chmod(path, mode)  # whatever the umask


def make(out: Path, days: int = 365, worker_user: str | None = None) -> Path:
    """Write the cluster's authority certificate and each role's certificate and key.

    Args:
        out: the folder to make (it must not exist, or be empty).
        days: how long the certificates are valid.
        worker_user: the account the workers run as: given the ``worker`` folder (root only).

    Returns:
        ``out``.

    Raises:
        GradingError: ``out`` holds something already, ``days`` is not positive, or the
            worker account does not exist or cannot be given its folder.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    if days < 1:
        raise GradingError(f"--days {days}: certificates must be valid for a day at least")
    owner = None
    if worker_user is not None:
        try:
            owner = pwd.getpwnam(worker_user)
        except KeyError:
            raise GradingError(f"--worker-user {worker_user}: no such account") from None
    if out.is_symlink() or (out.exists() and (not out.is_dir() or any(out.iterdir()))):
        raise GradingError(f"{out} exists already: certificates are written to a new folder")
    out.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(out, 0o700)
    authority_key = ec.generate_private_key(ec.SECP256R1())
    authority = "shapes-grading cluster authority"
    ca = _certificate(authority, authority_key, authority, authority_key, days, True)
    pem = serialization.Encoding.PEM
    for role in ROLES:
        folder = out / role
        folder.mkdir(mode=0o700)
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _certificate(f"shapes-grading {role}", key, authority, authority_key, days, False)
        private = key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        _write(folder / "ca.pem", ca.public_bytes(pem), 0o644)
        _write(folder / "cert.pem", cert.public_bytes(pem), 0o644)
        _write(folder / "key.pem", private, 0o600)
    if owner is not None:
        try:
            for path in [out / "worker", *((out / "worker" / f) for f in FILES)]:
                os.chown(path, owner.pw_uid, owner.pw_gid)
            os.chmod(out, 0o711)  # the worker account enters its own folder, lists nothing
        except OSError as err:
            raise GradingError(f"cannot give {out / 'worker'} to {worker_user}: {err}") from None
    return out


def build_parser() -> argparse.ArgumentParser:
    """The command's options.

    Returns:
        The parser of ``python -m course_grading cluster-certs``.
    """
    parser = argparse.ArgumentParser(
        prog="python -m course_grading cluster-certs",
        description="Make the certificates a grading cluster runs on (Dask over TLS, every "
        "connection proving itself): a certificate authority, and a certificate and key for "
        "the scheduler, the workers and the grading command, each in its own folder "
        "(docs/instructors.md, section 3.8). The authority's key is not kept.",
    )
    parser.add_argument("out", type=Path, help="the folder to write (new, or empty)")
    parser.add_argument("--days", type=int, default=365, help="valid for this long (365)")
    parser.add_argument(
        "--worker-user", metavar="NAME", help="the account the workers run as: it gets worker/"
    )
    return parser


def certs_main(argv: list[str]) -> int:
    """``cluster-certs OUT_DIR [--days N] [--worker-user NAME]`` (module docstring).

    Args:
        argv: the arguments after ``cluster-certs``.

    Returns:
        0, once the certificates are written.

    Raises:
        GradingError: as :func:`make`.
    """
    args = build_parser().parse_args(argv)
    out = make(args.out, args.days, args.worker_user)
    print(f"wrote {out}/{{scheduler,worker,client}}/ (keys mode 600; see docs/instructors.md 3.8)")
    return 0
