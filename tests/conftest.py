"""Shared fixtures: the real demo MCP server on loopback, seeded tenants and users."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# the suite's order over pytest-xdist workers and the cost of each test (tests/scheduling.py)
from tests.scheduling import pytest_addoption, pytest_configure  # noqa: F401

# fixtures shared by the folders, too many for this file: the real-browser ones (browser, live,
# valved_mcp, app, signed_in)
pytest_plugins = ["tests.browser", "tests.tls_demo", "tests.lock_watch"]

ROOT = Path(__file__).resolve().parents[1]
(ROOT / "var").mkdir(exist_ok=True)

# a test's loop closes within a bound, whatever its tasks do (tests/loop_teardown.py)
from tests import loop_teardown  # noqa: E402

loop_teardown.install()


def shared_dir() -> Path:
    """The ``shared/`` folder beside the checkout (or ``$MRTR_SHARED_DIR``)."""
    env = os.environ.get("MRTR_SHARED_DIR")
    return Path(env) if env else ROOT.parent / "shared"


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix):
    """Before the test databases are made: remove the WAL files (``-wal``, ``-shm``) an earlier
    test process with the same pid may have left beside its SQLite test database (a WAL journal
    outlives a file deleted while a connection was open; replayed into a new file of that name it
    would corrupt it)."""
    from django.conf import settings

    for db in settings.DATABASES.values():
        name = (db.get("TEST") or {}).get("NAME")
        if db.get("ENGINE", "").endswith("sqlite3") and name and name != ":memory:":
            for suffix in ("-wal", "-shm"):
                Path(f"{name}{suffix}").unlink(missing_ok=True)


@pytest.fixture(scope="session")
def demo_mcp():
    """The demo MCP server (``MCPServer`` over Streamable HTTP) on 127.0.0.1, for the session."""
    from mrtrweb.demo.server import serve_in_thread

    handle = serve_in_thread()
    yield handle
    handle.stop()


@pytest.fixture
def seeded(transactional_db, demo_mcp, _fast_password_hasher, _fresh_gate_and_cache):
    """Tenants acme (alice admin, carol member) and globex (bob), each with a "Demo server"."""
    from django.contrib.auth import get_user_model

    from mrtrweb.management.commands.mrtrweb_demo import seed_demo
    from mrtrweb.models import McpServer

    seed_demo(demo_mcp.url)
    User = get_user_model()
    users = {u.username: u for u in User.objects.all()}
    servers = {s.tenant.slug: s for s in McpServer.objects.select_related("tenant")}
    demo_mcp.log.clear()
    return {"users": users, "servers": servers, "mcp": demo_mcp}


@pytest.fixture
def trusted_worker(monkeypatch):
    """This process's reaper may judge other workers (as after three successful lease renewals in
    a row, :func:`mrtrweb.runtime.workers.trusted`) for the whole test; forgotten afterwards. The
    test process's own lease renewals keep running beside the test; one failing (the SQLite file
    busy on a loaded machine) would end the trust midway, and that is not what these tests judge."""
    from mrtrweb.runtime import leases, workers

    import time

    workers._state.streak = workers.TRUSTED_RENEWALS
    workers._state.last_ok = time.monotonic() + 3600  # as recent as the test needs
    succeeded = leases.renewal_succeeded

    def still_recent() -> None:  # a success must not bring the last one back to now: failures after it
        succeeded()              # (ignored here) would then age it past two periods (ci14)
        workers._state.last_ok = time.monotonic() + 3600

    for module in (leases, workers):
        monkeypatch.setattr(module, "renewal_failed", lambda exc: None)
        if hasattr(module, "renewal_succeeded"):
            monkeypatch.setattr(module, "renewal_succeeded", still_recent)
    yield
    workers.reset()


@pytest.fixture
def _fast_password_hasher(settings):
    """Seeding users with the production hasher costs seconds per test."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def _fresh_gate_and_cache():
    """Each test starts with an empty binding cache, a new gate and no server row the headless
    client kept from another test (mrtrweb.headless.quickstart)."""
    from mrtrweb import operations
    from mrtrweb.headless import quickstart
    from tests.caches import clear_cache

    clear_cache()
    operations.reset_gate()
    quickstart.forget()
    yield


@pytest.fixture(scope="session", autouse=True)
def _close_sync_thread_connections(django_db_setup, django_db_blocker):
    """Async tests reach the database from asgiref's shared sync thread (``sync_to_async``) and,
    on PostgreSQL, from the round's threads (:mod:`mrtrweb.operations.hops`); their connections
    outlive the test and kept PostgreSQL from dropping the test database at the end
    ("is being accessed by other users"). Closed here, before the database is dropped."""
    yield
    import asyncio

    from asgiref.sync import sync_to_async
    from django.db import connections

    from mrtrweb.operations import hops

    with django_db_blocker.unblock():
        asyncio.run(sync_to_async(connections.close_all)())
        hops.close_connections()  # the round's threads' own (mrtrweb.operations.hops)


@pytest.fixture(scope="module")
def legacy_mcp():
    """The legacy demo server (2025-11-25, :mod:`mrtrweb.demo.legacy`) on 127.0.0.1, per module."""
    from mrtrweb.demo.legacy import serve_legacy_in_thread

    handle = serve_legacy_in_thread()
    yield handle
    handle.stop()


@pytest.fixture
def legacy(seeded, legacy_mcp):
    """The seeded tenants, each with the legacy demo server too."""
    from mrtrweb.models import McpServer

    servers = {slug: McpServer.objects.create(tenant=s.tenant, name="Demo (legacy 2025-11-25)", url=legacy_mcp.url)
               for slug, s in seeded["servers"].items()}
    legacy_mcp.log.clear()
    return {"users": seeded["users"], "servers": servers, "mcp": legacy_mcp}
