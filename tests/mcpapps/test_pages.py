"""MCP Apps on the product's pages (issue 31, item 1): a tool with an app is marked, an app-only
tool (``_meta.ui.visibility: ["app"]``) is neither listed nor callable by a person, a tenant admin
turns apps on per server, and the sandbox origin's start-up check (``mrtrweb.E060``)."""

from __future__ import annotations

import pytest
from django.test import AsyncClient

from mrtrweb.models import McpServer
from tests.mcpapps.show_server import CALLS


async def _login(user) -> AsyncClient:
    client = AsyncClient()
    await client.aforce_login(user)
    await client.get("/mcp/")
    return client


async def test_app_marked_and_app_only_tools_not_a_persons(seeded, app_server):
    CALLS.clear()
    server = await McpServer.objects.acreate(tenant_id=seeded["servers"]["acme"].tenant_id, name="Apps",
                                             url=app_server.url, apps_enabled=True)
    alice = await _login(seeded["users"]["alice"])
    page = (await alice.get(f"/mcp/servers/{server.pk}/")).content.decode()
    assert 'data-tool="show"' in page and 'data-tool="plain"' in page
    assert 'data-tool="refresh"' not in page  # app-only: not offered
    assert page.count("hint-app") == 1  # "show" has an app; "plain" none
    tool_page = await alice.get(f"/mcp/servers/{server.pk}/tools/?name=refresh")
    assert tool_page.status_code == 200 and "Only its app calls it" in tool_page.content.decode()
    refused = await alice.post(f"/mcp/servers/{server.pk}/tools/?name=refresh", {})
    assert refused.status_code == 409 and "is for its app alone" in refused.content.decode()
    assert CALLS == []  # nothing sent
    ok = await alice.post(f"/mcp/servers/{server.pk}/tools/?name=plain", {})
    assert ok.status_code == 302


async def test_admin_turns_apps_on_per_server(seeded):
    alice = await _login(seeded["users"]["alice"])
    carol = await _login(seeded["users"]["carol"])
    server = seeded["servers"]["acme"]
    assert not server.apps_enabled and not server.apps_require_approval  # off by default
    url = f"/mcp/servers/{server.pk}/settings/"
    page = (await alice.get(url)).content.decode()
    assert 'name="apps-apps_enabled"' in page and 'name="apps-apps_require_approval"' in page
    assert (await carol.get(url)).status_code == 404
    resp = await alice.post(url, {"apps-shown": "1", "apps-apps_enabled": "on"})
    assert resp.status_code == 200 and "Saved." in resp.content.decode()
    server = await McpServer.objects.aget(pk=server.pk)
    assert server.apps_enabled and not server.apps_require_approval
    # a post without the apps part (an older page) leaves it as it is
    assert (await alice.post(url, {"allow_sampling": "on"})).status_code == 200
    assert (await McpServer.objects.aget(pk=server.pk)).apps_enabled
    # unticked with the part present: off again
    assert (await alice.post(url, {"apps-shown": "1"})).status_code == 200
    assert not (await McpServer.objects.aget(pk=server.pk)).apps_enabled


@pytest.mark.parametrize(("value", "ok"), [
    (None, True), ("https://apps.example.com", True), ("http://localhost:8001", True),
    ("https://site.example.com:8443", False),  # the site's host on another port: same cookies
    ("https://apps.example.com/path", False), ("javascript:alert(1)", False), (42, False),
])
def test_sandbox_origin_start_up_check(settings, value, ok):
    from mrtrweb.checks import check_apps_sandbox_origin

    settings.CSRF_TRUSTED_ORIGINS = ["https://site.example.com"]
    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "APPS_SANDBOX_ORIGIN": value}
    errors = check_apps_sandbox_origin()
    assert (errors == []) is ok
    assert all(e.id == "mrtrweb.E060" for e in errors)


async def test_an_operation_page_asks_for_an_app_only_when_its_tool_has_one_and_the_call_can_show_it(
        seeded, app_server, settings):
    """The newcomer's console errors: an operation page of a tool WITHOUT an app asked ``/app/`` (404),
    and an ended call's page asked it too (409). The page knows both: it offers no app section then."""
    from mrtrweb import operations
    from mrtrweb.models import Operation

    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "APPS_SANDBOX_ORIGIN": "http://apps-sandbox.example"}
    server = await McpServer.objects.acreate(tenant_id=seeded["servers"]["acme"].tenant_id, name="Apps",
                                             url=app_server.url, apps_enabled=True)
    alice = await _login(seeded["users"]["alice"])

    async def call(tool: str) -> str:
        resp = await alice.post(f"/mcp/servers/{server.pk}/tools/?name={tool}", {})
        assert resp.status_code == 302
        await operations.wait_idle()
        return resp["Location"]

    shown = await call("show")
    assert 'id="mcp-app"' in (await alice.get(shown)).content.decode()  # its app: the page asks for it
    plain = await call("plain")
    assert 'id="mcp-app"' not in (await alice.get(plain)).content.decode()  # no app: nothing asked
    # the call with an app ended without a result: the page does not ask for the app (it would be a 409)
    op_id = shown.rstrip("/").split("/")[-1]
    await Operation.objects.filter(pk=op_id).aupdate(status=Operation.Status.FAILED, result=None)
    assert 'id="mcp-app"' not in (await alice.get(shown)).content.decode()
    assert (await alice.post(f"/mcp/operations/{op_id}/app/")).status_code == 409  # what it would have got
