"""Attacks on the authorization flow of a server added under the URL policy (OAuth per person): a
server that is its own authorization server, whose name is re-pointed to a private address while
the person is at the authorization page. The token request at the callback goes to the server's
origin: it must be checked by the URL policy and pinned like every other request of that server,
never sent wherever the name points by then.

Each test here failed before its fix (see the commit that added it).
"""

from __future__ import annotations

import httpx2
import pytest

from mrtrweb.authz import service
from mrtrweb.demo.oauth import DemoProvider as Provider
from mrtrweb.demo.oauth import build_auth_app
from mrtrweb.demo.server import build_demo_app, serve_built_in_thread
from tests.oauth_sdk_as import BearerGate


AS_PATHS = ("/.well-known/oauth-authorization-server", "/authorize", "/token", "/register", "/revoke")


@pytest.fixture
def own_as(seeded, settings):
    """The demo MCP server, its own authorization server, at ``http://localhost:<port>/mcp``,
    saved as acme's server under the URL policy (which allows http to localhost and 127.0.0.0/8)."""
    settings.MRTRWEB = {"OUTBOUND_ALLOW_HTTP_LOOPBACK": False,
                        "SERVER_URL_POLICY": {"allow_http_hosts": ["localhost"], "allow_networks": ["127.0.0.0/8"]}}
    provider = Provider(auto_approve=True)
    gate = BearerGate(build_demo_app(), provider)
    hits: list[str] = []

    def make_app(port: int):
        as_app, _metadata = build_auth_app(provider, f"http://localhost:{port}")

        async def app(scope, receive, send):
            if scope["type"] == "http" and scope["path"] in AS_PATHS:
                hits.append(scope["path"])
                return await as_app(scope, receive, send)
            return await gate(scope, receive, send)

        return app

    handle = serve_built_in_thread(make_app)
    origin = f"http://localhost:{handle.port}"
    gate.resource_metadata_url = f"{origin}/.well-known/oauth-protected-resource/mcp"
    gate.prm = {"resource": f"{origin}/mcp", "authorization_servers": [origin]}
    server = seeded["servers"]["acme"]
    server.url, server.auth_mode, server.url_policy = f"{origin}/mcp", "oauth_user", True
    server.save()
    yield {**seeded, "server": server, "origin": origin, "hits": hits}
    handle.stop()


async def test_the_token_request_holds_the_url_policy(own_as, names) -> None:
    alice, server = own_as["users"]["alice"], own_as["server"]
    names.names["localhost"] = ["127.0.0.1"]  # allowed when the person starts connecting
    start = await service.start_connect(user=alice, tenant=server.tenant, server=server, session_key="s1",
                                        return_to="/", redirect_uri="http://127.0.0.1:9/mcp/oauth/callback/")
    assert own_as["hits"][:2] == ["/.well-known/oauth-authorization-server", "/register"]
    async with httpx2.AsyncClient() as browser:
        answer = await browser.get(start.authorization_url)
    query = dict(httpx2.URL(answer.headers["location"]).params)
    # re-pointed while the person was at the authorization page (the seam answers for the
    # product's resolver; an unchecked request would go where the system's resolver says)
    names.names["localhost"] = ["10.99.0.1"]
    with pytest.raises(service.ConnectRefused) as caught:
        await service.finish_connect(user=alice, session_key="s1", query=query)
    assert "localhost resolves to a private" in caught.value.message and "10.99.0.1" not in caught.value.message
    assert own_as["hits"].count("/token") == 0  # nothing was sent
