"""Fixtures of the MCP Apps tests shared by several files of this folder."""

from __future__ import annotations

import pytest

from tests import apps_server
from tests.chat.model_server import ModelServer
from tests.mcpapps import hostile_apps, show_server
from tests.mcpapps.visits import Visit

#: the sandbox origin of the tests without a browser (nothing listens there)
SANDBOX = "http://apps-sandbox.example"


@pytest.fixture
def sandboxed(settings, live):
    """The sandbox origin: the same server under another host name (cookies ignore ports, so never
    the site's host): ``http://localhost:<port>``."""
    origin = f"http://localhost:{live.port}"
    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "APPS_SANDBOX_ORIGIN": origin}
    return origin


@pytest.fixture
def own():
    handle = apps_server.serve()
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture
def sandbox(settings):
    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "APPS_SANDBOX_ORIGIN": SANDBOX}


@pytest.fixture
def model(model_endpoint, sandboxed):
    """The scripted model endpoint (:func:`model_endpoint`) with the sandbox the browser tests load apps from."""
    return model_endpoint


@pytest.fixture
def model_endpoint(settings):
    """The scripted OpenAI-compatible endpoint as the tenant's only provider (no demo model)."""
    server = ModelServer().start()
    settings.MRTRWEB = {**settings.MRTRWEB, "MODEL_DEMO": False,
                        "MODEL_PROVIDERS": {"local": {"kind": "openai", "base_url": server.url,
                                                      "models": ["scripted-1"], "label": "Test endpoint"}},
                        "MODEL_URL_POLICY": {"allow_hosts": ["127.0.0.1"], "allow_http_hosts": ["127.0.0.1"]},
                        "MODEL_REPLY_TIMEOUT_S": 5}
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def app_server():
    """:mod:`tests.mcpapps.show_server` on loopback."""
    handle = show_server.serve()
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def hostile():
    handle = hostile_apps.serve()
    yield handle
    handle.stop()


@pytest.fixture
def visit(signed_in, hostile, sandboxed):
    return lambda **fields: Visit(signed_in, hostile, sandboxed, **fields)
