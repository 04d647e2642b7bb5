"""A real PostgreSQL server for the shared-study tests: Debian's, in a throw-away cluster.

``scripts/test.sh`` installs Debian's ``postgresql`` package where its server is missing; the
``postgres_url`` fixture makes a cluster in a temporary folder (as the ``postgres`` user when
the tests run as root: the server refuses to run as root), starts it on a free port of
127.0.0.1 with trust authentication, creates a database, and stops the server by its data
folder at the end. A missing server is a failure, never a skip.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tuner.engines.base import free_port

PASSWORD = "s3cret-pw"  # trust authentication ignores it; the tests check it is never written


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        pytest.fail(
            f"PostgreSQL's {name} is missing: scripts/test.sh installs Debian's postgresql "
            "package (apt-get install postgresql)"
        )
    return found[-1]


def _as_owner(argv: list[str]) -> list[str]:
    """Run as the postgres user when we are root (initdb and the server refuse root)."""
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


def _run(argv: list[str]) -> None:
    done = subprocess.run(_as_owner(argv), capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        pytest.fail(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """``postgresql+psycopg://postgres:<PASSWORD>@127.0.0.1:<port>/autotune``."""
    root = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(sock, "postgres")
    port = free_port()
    _run([_bin("initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"])
    opts = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c max_connections=100"
    _run(
        [_bin("pg_ctl"), "-D", str(data), "-o", opts, "-l", str(root / "server.log"), "-w", "start"]
    )
    try:
        _run([_bin("createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "autotune"])
        yield f"postgresql+psycopg://postgres:{PASSWORD}@127.0.0.1:{port}/autotune"
    finally:
        subprocess.run(
            _as_owner([_bin("pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(root, ignore_errors=True)
