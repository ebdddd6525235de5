"""The runtime tests' shared fixtures."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.topology import free_port


@pytest.fixture
def own_postgres():
    """A private PostgreSQL server (initdb in a temp dir, its own port): the shared one is untouched."""
    import glob
    import os
    import pwd
    import tempfile
    from pathlib import Path

    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not bins:
        pytest.fail("PostgreSQL server binaries (initdb) are not installed")
    bindir = os.path.dirname(bins[-1])
    top = Path(tempfile.mkdtemp(prefix="mrtrweb-pg-"))  # under /tmp: reachable by the postgres user
    os.chmod(top, 0o755)
    data = top / "pgdata"
    data.mkdir()
    prefix: list[str] = []
    if os.geteuid() == 0:  # initdb refuses root: run as the postgres user
        pg = pwd.getpwnam("postgres")
        os.chown(top, pg.pw_uid, pg.pw_gid)
        os.chown(data, pg.pw_uid, pg.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    port = free_port()
    subprocess.run(prefix + [f"{bindir}/initdb", "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"],
                   check=True, capture_output=True, timeout=120)
    opts = f"-p {port} -k {data} -c listen_addresses=127.0.0.1 -c fsync=off"

    class Handle:
        url = f"postgres://postgres@127.0.0.1:{port}/postgres"

        def start(self) -> None:
            subprocess.run(prefix + [f"{bindir}/pg_ctl", "-D", str(data), "-o", opts, "-w", "-l",
                                     str(data / "log"), "start"], check=True, capture_output=True, timeout=60)

        def stop(self) -> None:
            subprocess.run(prefix + [f"{bindir}/pg_ctl", "-D", str(data), "-m", "fast", "-w", "stop"],
                           capture_output=True, timeout=60)

    handle = Handle()
    handle.start()
    yield handle
    handle.stop()
    shutil.rmtree(top, ignore_errors=True)
