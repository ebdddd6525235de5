"""Any name a server chooses can be shown, linked and called (tools, prompts, resource
templates), against a real hostile MCP server over Streamable HTTP (``tests/hostile_names.py``):
the server receives byte for byte the name it listed. Bad admin input is a form error, never a 500."""

from __future__ import annotations


import pytest
from django.test import AsyncClient
from django.utils.html import escape

from mrtrweb.text import names, results
from mrtrweb import operations
from mrtrweb.models import McpServer, Operation

from .. import hostile_names as hn
from ..answering import post_answer

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def names_mcp():
    handle = hn.serve()
    yield handle
    handle.stop()


@pytest.fixture
async def setup(seeded, names_mcp):
    acme = seeded["servers"]["acme"].tenant
    server = await McpServer.objects.acreate(tenant=acme, name="Odd names", url=names_mcp.url)
    names_mcp.log.clear()
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    return client, server, names_mcp


def _links(page: str, kind: str, server: McpServer, listed: list[str]) -> dict[str, str]:
    """name -> the href of its link on the server page (each listed name linked exactly once)."""
    links = {}
    for name in listed:
        href = names.call_url(kind, server.pk, name)
        assert page.count(f'href="{escape(href)}"') == 1, (name, href)
        links[name] = href
    return links


async def _server_page(client, server) -> str:
    resp = await client.get(f"/mcp/servers/{server.pk}/")
    assert resp.status_code == 200, resp.content[:300]
    return resp.content.decode()


async def _op(resp) -> Operation:
    assert resp.status_code == 302, (resp.status_code, resp.content.decode()[:400])
    await operations.wait_idle()
    return await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])


async def test_every_odd_tool_name_is_listed_linked_and_called(setup):
    client, server, mcp = setup
    links = _links(await _server_page(client, server), "tool", server, hn.ODD_NAMES)
    for name in hn.ODD_NAMES:
        href = links[name]
        assert href.startswith(f"/mcp/servers/{server.pk}/tools/?")
        page = await client.get(href)
        assert page.status_code == 200, (name, page.status_code)
        mcp.log.clear()
        op = await _op(await client.post(href, {}))
        assert [r.tool for r in mcp.log.tool_calls()] == [name]  # exactly the listed name, once
        assert op.status == Operation.Status.COMPLETED and results.stored_params(op.params)["name"] == name
        assert op.result["content"][0]["text"] == f"called:{name}".replace("\x00", "\ufffd")  # stored: no NUL
        assert len(op.name) <= names.STORED_NAME_CHARS
        shown = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
        assert escape(op.result["content"][0]["text"])[:60] in shown  # the result, escaped
    assert "sha256=" + names.name_digest(hn.LONG_NAME) in links[hn.LONG_NAME]
    assert links["Case"] != links["case"]


async def test_unknown_or_missing_names_are_404(setup):
    client, server, mcp = setup
    base = f"/mcp/servers/{server.pk}"
    for url in (f"{base}/tools/", f"{base}/tools/?name=nope", f"{base}/tools/?name=A%2FB", f"{base}/tools/?sha256=zz",
                f"{base}/tools/?sha256={'0' * 64}", f"{base}/prompts/", f"{base}/prompts/?name=nope",
                f"{base}/resources/?template=nope://{{x}}", f"{base}/resources/"):
        assert (await client.get(url)).status_code == 404, url
        assert (await client.post(url, {})).status_code == 404, url
    assert not mcp.log.tool_calls()


async def test_a_failed_call_of_an_odd_name_runs_again(setup):
    client, server, mcp = setup
    href = _links(await _server_page(client, server), "tool", server, [hn.FAILING])[hn.FAILING]
    op = await _op(await client.post(href, {}))
    assert op.status == Operation.Status.FAILED
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    again = page.split("Change the arguments")[0].rsplit('href="', 1)[1].split('"')[0].replace("&amp;", "&")
    assert again == f"{href}&from={op.id}"  # the same call page, showing this operation's arguments
    assert (await client.get(again)).status_code == 200


async def test_a_name_listed_twice_is_shown_and_called_once(setup):
    client, server, mcp = setup
    page = await _server_page(client, server)
    _links(page, "tool", server, [hn.DUPLICATE])  # linked once
    assert "first" in page and "second" not in page and "already listed" in page
    op = await _op(await client.post(names.call_url("tool", server.pk, hn.DUPLICATE), {}))  # the first: no field
    assert op.status == Operation.Status.COMPLETED and [r.tool for r in mcp.log.tool_calls()] == [hn.DUPLICATE]


async def test_every_odd_prompt_name_is_listed_linked_and_called(setup):
    client, server, mcp = setup
    links = _links(await _server_page(client, server), "prompt", server, hn.PROMPT_NAMES)
    for name in hn.PROMPT_NAMES:
        assert (await client.get(links[name])).status_code == 200, name
        mcp.log.clear()
        op = await _op(await client.post(links[name], {"arg-v": "1/2?"}))
        sent = [r.params for r in mcp.log.records("prompts/get")]
        assert [(p["name"], p["arguments"]) for p in sent] == [(name, {"v": "1/2?"})]
        assert op.status == Operation.Status.COMPLETED, (name, op.error_code)


async def test_prompt_arguments_named_like_form_fields_never_get_the_csrf_token(setup, seeded):
    _, server, mcp = setup
    client = AsyncClient(enforce_csrf_checks=True)
    await client.aforce_login(seeded["users"]["alice"])
    href = names.call_url("prompt", server.pk, hn.FIELD_CLASH)
    page = (await client.get(href)).content.decode()
    token = page.split('name="csrfmiddlewaretoken" value="')[1].split('"')[0]
    assert 'name="arg-csrfmiddlewaretoken"' in page and 'name="arg-action"' in page
    op = await _op(await client.post(href, {"csrfmiddlewaretoken": token, "arg-csrfmiddlewaretoken": "typed",
                                            "arg-action": "a", "arg-name": "n"}))
    [sent] = [r.params for r in mcp.log.records("prompts/get")]
    assert sent["name"] == hn.FIELD_CLASH
    assert sent["arguments"] == {"csrfmiddlewaretoken": "typed", "action": "a", "name": "n"}
    assert op.status == Operation.Status.COMPLETED


async def test_odd_resource_templates_are_linked_and_read(setup):
    client, server, mcp = setup
    links = _links(await _server_page(client, server), "resource", server, hn.TEMPLATES)
    href = links["odd://{x}/a b?c#d%"]
    assert 'name="arg-x"' in (await client.get(href)).content.decode()
    op = await _op(await client.post(href, {"arg-x": "v/1"}))
    assert [r.params["uri"] for r in mcp.log.records("resources/read")] == ["odd://v%2F1/a b?c#d%"]
    assert op.status == Operation.Status.COMPLETED
    mcp.log.clear()
    op = await _op(await client.post(links["odd://{csrfmiddlewaretoken}/{x}"],
                                     {"arg-csrfmiddlewaretoken": "t", "arg-x": "y"}))
    assert [r.params["uri"] for r in mcp.log.records("resources/read")] == ["odd://t/y"]


async def test_odd_resource_uris_are_linked_and_read_exactly(setup):
    client, server, mcp = setup
    links = _links(await _server_page(client, server), "resource-uri", server, hn.RESOURCES)
    assert "uri_sha256=" in links[hn.RESOURCES[-1]]
    for uri in hn.RESOURCES:
        assert (await client.get(links[uri])).status_code == 200, uri
        mcp.log.clear()
        op = await _op(await client.post(links[uri], {}))
        assert [r.params["uri"] for r in mcp.log.records("resources/read")] == [uri]
        assert op.status == Operation.Status.COMPLETED and op.result["contents"][0]["text"] == f"read:{uri}"
    assert (await client.get(f"/mcp/servers/{server.pk}/resources/?uri=odd://nope")).status_code == 404


async def test_a_listing_with_names_that_are_not_strings_is_no_500(setup):
    client, server, mcp = setup
    bad = await McpServer.objects.acreate(tenant_id=server.tenant_id, name="Bad names",
                                          url=mcp.url.replace("/mcp", "/bad/mcp"))
    resp = await client.get(f"/mcp/servers/{bad.pk}/")
    assert resp.status_code == 200
    page = resp.content.decode()
    assert "malformed" in page or 'data-tool="ok"' in page
    assert (await client.get(f"/mcp/servers/{bad.pk}/tools/?name=5")).status_code in (404, 503)


async def test_a_round_of_a_tool_named_with_a_nul_is_answered_as_its_retry(setup):
    client, server, mcp = setup
    name = "ask\x00nul"
    op = await _op(await client.post(names.call_url("tool", server.pk, name), {}))
    assert op.status == Operation.Status.AWAITING_INPUT and op.name == "ask\ufffdnul", (op.error_code, op.error_message)
    await client.get(f"/mcp/operations/{op.id}/")  # the card is shown (consent receipt)
    resp = await post_answer(client, f"/mcp/operations/{op.id}/answer/",
                             {"action": "accept", "round": "1", "in-q-ok": "on"})
    assert resp.status_code == 302, resp.content.decode()[:400]
    await operations.wait_idle()
    await op.arefresh_from_db()
    calls = mcp.log.tool_calls()
    assert [r.tool for r in calls] == [name, name] and calls[1].is_retry
    assert op.status == Operation.Status.COMPLETED, (op.error_code, op.error_message)


async def test_older_path_links_still_work_for_plain_names(setup):
    client, server, mcp = setup
    op = await _op(await client.post(f"/mcp/servers/{server.pk}/tools/Case/", {}))
    assert [r.tool for r in mcp.log.tool_calls()] == ["Case"] and op.status == Operation.Status.COMPLETED


# --- bad admin input: a form error, never a 500 -------------------------------------------------

DEEP = "[" * 5000 + "]" * 5000


@pytest.mark.parametrize("roots", [DEEP, '{"a":' * 5000 + "1" + "}" * 5000, "[" * 40 + "]" * 40, '["unterminated',
                                   '[{"uri": "file:///ok"}' + "]" * 5000, "NaN", "\x00"])
async def test_server_settings_refuse_bad_json_with_a_form_error(seeded, roots):
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    server = seeded["servers"]["acme"]
    resp = await client.post(f"/mcp/servers/{server.pk}/settings/", {"allow_roots": "on", "roots": roots})
    assert resp.status_code == 400, resp.content[:300]
    assert 'class="field-error"' in resp.content.decode()
    await server.arefresh_from_db()
    assert server.roots != roots and not server.allow_roots


async def test_admin_refuses_deep_json_with_a_form_error(seeded):
    from django.contrib.auth import get_user_model

    admin = await get_user_model().objects.aget(username="admin")
    client = AsyncClient()
    await client.aforce_login(admin)
    server = seeded["servers"]["acme"]
    url = f"/admin/mrtrweb/mcpserver/{server.pk}/change/"
    assert (await client.get(url)).status_code == 200
    data = {"tenant": server.tenant_id, "name": server.name, "url": server.url, "enabled": "on", "roots": DEEP}
    resp = await client.post(url, data)
    assert resp.status_code == 200 and "nests deeper than" in resp.content.decode()
    resp = await client.post("/admin/mrtrweb/mcpserver/add/", data)
    assert resp.status_code == 200 and "nests deeper than" in resp.content.decode()
