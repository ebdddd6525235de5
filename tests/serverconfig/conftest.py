"""Fixtures of the server-configuration tests shared by several files of this folder."""

from __future__ import annotations

import pytest

from mrtrweb.demo.server import build_demo_app, serve_asgi_in_thread
from tests.serverconfig.hostile_http import Counted
from tests.serverconfig.ownership import LOOPBACK_POLICY
from tests.serverconfig.resolving import Names


@pytest.fixture
def policy(settings):
    settings.MRTRWEB = {"SERVER_URL_POLICY": LOOPBACK_POLICY, "MAX_STARTS_PER_MINUTE": 10_000,
                        "MAX_TENANT_STARTS_PER_MINUTE": 10_000}
    return settings


@pytest.fixture
def names(monkeypatch) -> Names:
    return Names(monkeypatch)


@pytest.fixture(scope="module")
def counted_demo():
    """The demo MCP server behind :class:`Counted` (every HTTP request that reached it), taking any
    ``Host`` (the connection sends the name it was given, to the address it checked)."""
    counted = Counted(build_demo_app(host="0.0.0.0"))
    handle = serve_asgi_in_thread(counted)
    yield handle, counted
    handle.stop()
