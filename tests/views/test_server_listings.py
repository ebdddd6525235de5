"""The pages' view of a server (issue 15 items 1, 2 and 5): the protocol setting on the settings page
and the server page, listings opened with the capabilities a tenant admin allowed (as calls are),
and a server's ``notifications/*/list_changed`` pushed to an open server page.

Real servers on loopback: the demo servers (:mod:`mrtrweb.demo`), a small SDK ``MCPServer`` whose
tool adds tools, and npm ``@modelcontextprotocol/server-everything`` (:mod:`tests.thirdparty`),
which registers ``trigger-sampling-request`` and ``get-roots-list`` only for a client that declares
sampling / roots.
"""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from asgiref.sync import sync_to_async
from channels.testing.websocket import WebsocketCommunicator
from django.core.management import call_command
from django.test import AsyncClient

from mrtrweb.servers import connections
from mrtrweb.demo.legacy import serve_legacy_in_thread
from mrtrweb.demo.server import serve_in_thread
from mrtrweb.models import McpServer, Tenant
from mrtrweb.site.asgi import application
from tests.growing_mcp import growing_server
from tests.thirdparty import everything_server  # noqa: F401 -- a module fixture

pytestmark = [pytest.mark.django_db(transaction=True)]

CONDITIONAL = {"trigger-sampling-request": "sampling", "get-roots-list": "roots"}


@pytest.fixture(scope="module")
def legacy_mcp():
    handle = serve_legacy_in_thread()
    yield handle
    handle.stop()


async def _login(user) -> AsyncClient:
    client = AsyncClient()
    await client.aforce_login(user)
    await client.get("/mcp/")  # the CSRF cookie
    return client


async def _save(server: McpServer, **fields) -> McpServer:
    for name, value in fields.items():
        setattr(server, name, value)
    await server.asave()
    return server


def _text(resp) -> str:
    return resp.content.decode()


# --------------------------------------------------------------------------------------------
# protocol: the server page and the settings page
# --------------------------------------------------------------------------------------------


async def test_server_page_shows_the_negotiated_version_and_the_setting(seeded, legacy_mcp):
    alice = await _login(seeded["users"]["alice"])
    server = seeded["servers"]["acme"]
    page = _text(await alice.get(f"/mcp/servers/{server.pk}/"))
    assert '<code class="negotiated-version">2026-07-28</code>' in page
    assert "Automatic (2026-07-28 when the server offers it, else 2025-11-25)" in page

    await _save(server, protocol="2025-11-25")
    page = _text(await alice.get(f"/mcp/servers/{server.pk}/"))
    assert '<code class="negotiated-version">2025-11-25</code>' in page  # the pooled connection was replaced
    assert 'data-tool="echo"' in page
    seeded["mcp"].log.clear()
    assert (await alice.post(f"/mcp/servers/{server.pk}/tools/echo/", {"arg-text": "pinned"})).status_code == 302
    from mrtrweb import operations

    await operations.wait_idle()
    (call,) = seeded["mcp"].log.records("tools/call")
    # the call went out at 2025-11-25 too (on the operation's own connection: a handshake, no 2026 envelope)
    assert "io.modelcontextprotocol/protocolVersion" not in call.params.get("_meta", {})
    assert seeded["mcp"].log.records("initialize")[0].params["protocolVersion"] == "2025-11-25"
    assert not seeded["mcp"].log.records("server/discover")

    # a pinned version the server does not speak: a clear error on the page, never a 500
    legacy = await McpServer.objects.acreate(tenant_id=server.tenant_id, name="Legacy", url=legacy_mcp.url,
                                             protocol="2026-07-28")
    resp = await alice.get(f"/mcp/servers/{legacy.pk}/")
    assert resp.status_code == 200
    page = _text(resp)
    assert "This server does not speak protocol version 2026-07-28, the version it is set to." in page
    assert "not connected" in page


async def test_settings_page_offers_the_protocol_and_saves_it(seeded):
    alice = await _login(seeded["users"]["alice"])
    carol = await _login(seeded["users"]["carol"])  # a member, not an admin
    server = seeded["servers"]["acme"]
    url = f"/mcp/servers/{server.pk}/settings/"
    page = _text(await alice.get(url))
    assert 'name="protocol-protocol"' in page
    for value in ("auto", "2026-07-28", "2025-11-25"):
        assert f'value="{value}"' in page
    assert "Keep Automatic unless the server misbehaves on one version" in page
    assert (await carol.get(url)).status_code == 404

    digest = server.config_digest()
    resp = await alice.post(url, {"protocol-protocol": "2025-11-25"})
    assert resp.status_code == 200 and "Saved." in _text(resp)
    server = await McpServer.objects.aget(pk=server.pk)
    assert server.protocol == "2025-11-25"
    assert server.config_digest() != digest  # a pinned version is part of what a round depends on

    resp = await alice.post(url, {"protocol-protocol": "2025-06-18"})
    assert resp.status_code == 400 and "Select a valid choice" in _text(resp)
    assert (await McpServer.objects.aget(pk=server.pk)).protocol == "2025-11-25"
    # a post without the protocol part (an older page) leaves it as it is
    assert (await alice.post(url, {"allow_sampling": "on"})).status_code == 200
    server = await McpServer.objects.aget(pk=server.pk)
    assert server.protocol == "2025-11-25" and server.allow_sampling


def test_django_admin_offers_the_protocol(seeded, client, django_user_model):
    admin = django_user_model.objects.create_superuser("root", "root@example.test", "pw")
    client.force_login(admin)
    server = seeded["servers"]["acme"]
    url = f"/admin/mrtrweb/mcpserver/{server.pk}/change/"
    page = client.get(url).content.decode()
    assert 'name="protocol"' in page and "Keep Automatic unless the server misbehaves on one version" in page
    listing = client.get("/admin/mrtrweb/mcpserver/?protocol__exact=auto").content.decode()
    assert "Demo server" in listing


# --------------------------------------------------------------------------------------------
# capabilities on listings (the everything server)
# --------------------------------------------------------------------------------------------


async def test_listings_declare_what_the_admin_allowed(seeded, everything_server):  # noqa: F811
    alice = await _login(seeded["users"]["alice"])
    server = await McpServer.objects.acreate(tenant_id=seeded["servers"]["acme"].tenant_id, name="Everything",
                                             url=everything_server.url)
    page = _text(await alice.get(f"/mcp/servers/{server.pk}/"))
    assert 'data-tool="echo"' in page and '<code class="negotiated-version">2025-11-25</code>' in page
    for tool in CONDITIONAL:
        assert f'data-tool="{tool}"' not in page
        assert (await alice.get(f"/mcp/servers/{server.pk}/tools/", {"name": tool})).status_code == 404

    await _save(server, allow_sampling=True, allow_roots=True)
    page = _text(await alice.get(f"/mcp/servers/{server.pk}/"))
    for tool in CONDITIONAL:
        assert f'data-tool="{tool}"' in page
        resp = await alice.get(f"/mcp/servers/{server.pk}/tools/", {"name": tool})
        assert resp.status_code == 200 and "call-form" in _text(resp)
    # one connection for the pages and the calls: the key operations use
    assert connections.server_key(server) == f"{server.pk}#roots+sampling"

    await _save(server, allow_roots=False)  # only sampling now: the connection is replaced again
    page = _text(await alice.get(f"/mcp/servers/{server.pk}/"))
    assert 'data-tool="trigger-sampling-request"' in page and 'data-tool="get-roots-list"' not in page


def _command(*argv: str) -> int:
    try:
        call_command("mrtr_client", *argv)
    except SystemExit as exc:
        return int(exc.code)
    return 0


def test_headless_list_declares_what_the_admin_allowed(seeded, everything_server, capsys):  # noqa: F811
    url = everything_server.url
    assert _command(url, "--list", "--json", "--user", "alice", "--tenant", "acme") == 0
    names = {t["name"] for t in json.loads(capsys.readouterr().out)["tools"]}
    assert "echo" in names and not names & set(CONDITIONAL)

    server = McpServer.objects.get(tenant=Tenant.objects.get(slug="acme"), url=url)
    server.allow_sampling = server.allow_roots = True
    server.save()
    assert _command(url, "--list", "--json", "--user", "alice", "--tenant", "acme") == 0
    names = {t["name"] for t in json.loads(capsys.readouterr().out)["tools"]}
    assert set(CONDITIONAL) <= names


# --------------------------------------------------------------------------------------------
# list_changed
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def growing():
    handle = serve_in_thread(server=growing_server())
    yield handle
    handle.stop()


def _ws(client: AsyncClient) -> WebsocketCommunicator:
    cookie = "; ".join(f"{k}={v.value}" for k, v in client.cookies.items())
    return WebsocketCommunicator(application, "/ws/mrtrweb/", headers=[
        (b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000"), (b"cookie", cookie.encode())])


async def _listing_push(ws: WebsocketCommunicator, timeout: float = 10.0) -> dict:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        msg = await ws.receive_json_from(timeout=max(deadline - loop.time(), 0.1))
        if msg.get("type") == "listing":
            return msg


@pytest.mark.parametrize("protocol", ["auto", "2025-11-25"])
async def test_list_changed_is_pushed_to_the_open_server_page(seeded, growing, protocol):
    alice = await _login(seeded["users"]["alice"])
    bob = await _login(seeded["users"]["bob"])  # another tenant: never told
    acme = seeded["servers"]["acme"]
    server = await McpServer.objects.acreate(tenant_id=acme.tenant_id, name=f"Growing {protocol}", url=growing.url,
                                             protocol=protocol)
    sockets = [_ws(alice), _ws(bob)]
    for ws in sockets:
        assert (await ws.connect())[0]
    page = _text(await alice.get(f"/mcp/servers/{server.pk}/"))  # the page is open: its listing watched
    assert 'data-tool="grow"' in page
    assert 'id="server-listing" data-server="%d"' % server.pk in page
    before = set(re.findall(r'data-tool="(grown_\d+)"', page))
    assert (await alice.post(f"/mcp/servers/{server.pk}/tools/grow/", {})).status_code == 302
    msg = await _listing_push(sockets[0])
    assert msg == {"type": "listing", "server": server.pk, "kind": "tools"}  # no server text
    assert await sockets[1].receive_nothing(timeout=0.3)
    page = _text(await alice.get(f"/mcp/servers/{server.pk}/"))  # what the page re-reads: nothing stale
    after = set(re.findall(r'data-tool="(grown_\d+)"', page))
    assert len(after - before) == 1 and "<b>added</b>" not in page
    for ws in sockets:
        await ws.disconnect()


async def test_listing_push_is_checked_for_the_receiver(seeded, growing):
    """A push naming a server the user may not see (another tenant's) is not passed on."""
    from channels.layers import get_channel_layer

    from mrtrweb.operations import user_group

    alice = await _login(seeded["users"]["alice"])
    ws = _ws(alice)
    assert (await ws.connect())[0]
    layer = get_channel_layer()
    alice_id = seeded["users"]["alice"].pk
    await layer.group_send(user_group(alice_id), {"type": "server.listing", "server_id": seeded["servers"]["globex"].pk,
                                                  "kind": "tools"})
    await layer.group_send(user_group(alice_id), {"type": "server.listing", "server_id": "1", "kind": "tools"})
    await layer.group_send(user_group(alice_id), {"type": "server.listing", "server_id": seeded["servers"]["acme"].pk,
                                                  "kind": "<script>"})
    assert await ws.receive_nothing(timeout=0.3)
    await layer.group_send(user_group(alice_id), {"type": "server.listing", "server_id": seeded["servers"]["acme"].pk,
                                                  "kind": "prompts"})
    assert await ws.receive_json_from(timeout=3) == {"type": "listing", "server": seeded["servers"]["acme"].pk,
                                                     "kind": "prompts"}
    await ws.disconnect()


# --------------------------------------------------------------------------------------------
# FastMCP 4 (PyPI fastmcp 4.2.3, its own venv): ctx.elicit refused on 2026-07-28, works pinned to 2025-11-25
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fastmcp4(tmp_path_factory):
    from tests.thirdparty import FASTMCP4, start_fastmcp

    server = start_fastmcp(FASTMCP4, tmp_path_factory.mktemp("fastmcp4") / "server.log")
    yield server
    server.stop()


def test_fastmcp4_elicits_only_when_pinned_to_2025(seeded, fastmcp4, capsys):
    url = fastmcp4.url
    argv = (url, "--tool", "order_form", "--args", '{"item": "tea"}', "--consent", "accept-defaults",
            "--user", "alice", "--tenant", "acme", "--json")
    # automatic: 2026-07-28, where FastMCP 4 refuses server-initiated elicitation (a tool error, exit 8)
    assert _command(*argv) == 8
    (op,) = json.loads(capsys.readouterr().out)["operations"]
    assert op["rounds"] == 0 and op["result"]["isError"] is True
    assert "unavailable on 2026-07-28 connections" in json.dumps(op["result"])

    server = McpServer.objects.get(tenant=Tenant.objects.get(slug="acme"), url=url)
    server.protocol = McpServer.Protocol.LEGACY  # the tenant admin pins 2025-11-25
    server.save()
    assert _command(*argv) == 0
    (op,) = json.loads(capsys.readouterr().out)["operations"]
    assert op["status"] == "completed" and op["rounds"] == 1  # the elicitation, asked during the call
    assert op["result"]["content"][0]["text"].startswith("order tea: accept:")
