"""The module-scoped fixtures of the tests that use the real authorization server (import them into
a test module: ``from tests.oauth_as.fixtures import auth_server, protected, hostile``).

``auth_server``: django-oauth-toolkit in a subprocess (:func:`tests.oauth_as.start_auth_server`);
``protected``: the demo MCP server behind the SDK's resource-server auth, checking tokens by
introspection at it; ``hostile``: the misbehaving discovery server pointing at it.
"""

from __future__ import annotations

import pytest

from tests.oauth_as import start_auth_server
from tests.oauth_as.hostile_discovery import serve_hostile_discovery
from tests.oauth_as.mcp_server import serve_protected_demo

__all__ = ["auth_server", "hostile", "protected"]


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory):
    server = start_auth_server(tmp_path_factory.mktemp("oauth-as"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def protected(auth_server):
    demo = serve_protected_demo(auth_server)
    yield demo
    demo.stop()


@pytest.fixture(scope="module")
def hostile(auth_server):
    handle, app = serve_hostile_discovery(auth_server.issuer)
    yield app
    handle.stop()
