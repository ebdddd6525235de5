"""Results are bounded: what is stored per operation (``MAX_STORED_RESULT_BYTES``), what a page
or a push shows (``MAX_SHOWN_CHARS``, ``MAX_PUSH_BYTES``), the rest behind an authenticated
download served as an attachment; against a real hostile MCP server (``tests/hostile_names.py``)
whose results and messages are megabytes long. Response sizes are counted."""

from __future__ import annotations

import json

import pytest
from channels.testing.websocket import WebsocketCommunicator
from django.test import AsyncClient

from mrtrweb import conf, operations
from mrtrweb.text import names, results
from mrtrweb.models import McpServer, Operation
from mrtrweb.site.asgi import application

from .. import hostile_names as hn

pytestmark = [pytest.mark.django_db(transaction=True)]

SHOWN = conf.DEFAULTS["MAX_SHOWN_CHARS"]
STORED = conf.DEFAULTS["MAX_STORED_RESULT_BYTES"]
#: a page's own markup besides the capped server text (layout, card, links): generous
PAGE_OVERHEAD = 40_000


@pytest.fixture(scope="module")
def names_mcp():
    handle = hn.serve()
    yield handle
    handle.stop()


@pytest.fixture
async def setup(seeded, names_mcp):
    acme = seeded["servers"]["acme"].tenant
    server = await McpServer.objects.acreate(tenant=acme, name="Huge results", url=names_mcp.url)
    names_mcp.log.clear()
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    await client.get("/mcp/")  # CSRF cookie, for the WebSocket test
    return client, server, names_mcp


async def _run(client, server, kind: str, name: str, data=None) -> Operation:
    resp = await client.post(names.call_url(kind, server.pk, name), data or {})
    assert resp.status_code == 302, resp.content.decode()[:300]
    await operations.wait_idle()
    return await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])


def _stored_bytes(op: Operation) -> int:
    return len(json.dumps(op.result, ensure_ascii=False).encode())


async def test_a_5mb_result_is_stored_cut_shown_bounded_and_downloaded(setup, seeded):
    client, server, mcp = setup
    op = await _run(client, server, "tool", "big_result")
    assert op.status == Operation.Status.COMPLETED
    assert _stored_bytes(op) <= STORED  # stored: under the cap, explicitly marked
    mark = results.truncation(op.result)
    assert mark["original_bytes"] > 5 * hn.MB and 0 < mark["stored_bytes"] <= STORED
    page = await client.get(f"/mcp/operations/{op.id}/")
    body = page.content.decode()
    assert page.status_code == 200 and len(page.content) < SHOWN + PAGE_OVERHEAD, len(page.content)
    assert body.count("A" * 1000) <= SHOWN // 1000  # at most MAX_SHOWN_CHARS of it
    assert f"Showing {SHOWN} of {len(op.result['text'])} characters" in body
    assert f"only its first {mark['stored_bytes']} bytes were kept" in body
    href = f"/mcp/operations/{op.id}/result/"
    assert f'href="{href}"' in body
    download = await client.get(href)
    assert download.status_code == 200
    assert download["Content-Type"].startswith("text/plain") and download["X-Content-Type-Options"] == "nosniff"
    assert download["Content-Disposition"].startswith("attachment;")
    assert "sandbox" in download["Content-Security-Policy"]
    assert download.content.decode() == op.result["text"]  # the stored content, as is
    # the download is the owner's only: another user of the same tenant, or another tenant: 404
    for other in ("carol", "bob"):
        stranger = AsyncClient()
        await stranger.aforce_login(seeded["users"][other])
        assert (await stranger.get(href)).status_code == 404
    assert (await AsyncClient().get(href)).status_code == 302  # to the login page


async def test_a_small_result_downloads_as_json(setup):
    client, server, mcp = setup
    op = await _run(client, server, "tool", "Case")
    download = await client.get(f"/mcp/operations/{op.id}/result/")
    assert download["Content-Type"].startswith("application/json")
    assert download["Content-Disposition"] == f'attachment; filename="result-{op.id}.json"'
    assert json.loads(download.content) == op.result == hn._text("called:Case")
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert "Showing" not in page and "were kept" not in page


async def test_a_running_operation_has_no_download(setup):
    client, server, mcp = setup
    op = await _run(client, server, "tool", "big_message")
    assert op.status == Operation.Status.AWAITING_INPUT
    assert (await client.get(f"/mcp/operations/{op.id}/result/")).status_code == 404


async def test_json_escapes_cannot_push_the_stored_copy_over_the_cap(setup):
    client, server, mcp = setup
    op = await _run(client, server, "tool", "big_structured")
    assert op.status == Operation.Status.COMPLETED
    assert _stored_bytes(op) <= STORED and results.truncation(op.result)
    page = await client.get(f"/mcp/operations/{op.id}/")
    assert len(page.content) < 6 * SHOWN + PAGE_OVERHEAD  # each shown character escapes to at most 6


async def test_many_blocks_are_shown_within_the_cap(setup):
    client, server, mcp = setup
    op = await _run(client, server, "tool", "many_blocks")
    assert results.truncation(op.result) is None and len(op.result["content"]) == 5000  # 0.5 MB: stored whole
    page = await client.get(f"/mcp/operations/{op.id}/")
    body = page.content.decode()
    assert len(page.content) < SHOWN + PAGE_OVERHEAD
    assert body.count('class="block block-text"') <= results.MAX_SHOWN_BLOCKS
    assert "Showing" in body and "download it to read the rest" in body


async def test_a_result_holding_nul_characters_is_stored_and_shown(setup):
    client, server, mcp = setup
    op = await _run(client, server, "tool", "nul_result")
    assert op.status == Operation.Status.COMPLETED, (op.error_code, op.error_message)
    assert op.result["content"][0]["text"] == "before\ufffdafter \\u0000 literal"  # the escape text kept
    page = await client.get(f"/mcp/operations/{op.id}/")
    assert page.status_code == 200 and "after" in page.content.decode()


async def test_the_caps_are_settings(setup, settings):
    client, server, mcp = setup
    settings.MRTRWEB = {"MAX_STORED_RESULT_BYTES": 10_000, "MAX_SHOWN_CHARS": 500}
    op = await _run(client, server, "tool", "many_blocks")
    assert _stored_bytes(op) <= 10_000 and results.truncation(op.result)["original_bytes"] > 500_000
    body = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert body.count("b" * 95) <= 5 and "Showing 500 of" in body


async def test_a_server_cannot_fake_the_truncation_mark(setup):
    client, server, mcp = setup
    op = await _run(client, server, "tool", "marked")
    assert results.TRUNCATED_KEY not in op.result and "server:mrtrweb_truncated" in op.result
    assert results.truncation(op.result) is None
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert "were kept" not in page and "small" in page


@pytest.mark.parametrize("kind,name,data", [("prompt", "big_prompt", {}),
                                           ("resource", "big://{n}", {"arg-n": "1"})])
async def test_prompt_and_resource_results_are_bounded(setup, kind, name, data):
    client, server, mcp = setup
    op = await _run(client, server, kind, name, data)
    assert op.status == Operation.Status.COMPLETED and _stored_bytes(op) <= STORED
    page = await client.get(f"/mcp/operations/{op.id}/")
    assert len(page.content) < SHOWN + PAGE_OVERHEAD and "Showing" in page.content.decode()
    assert (await client.get(f"/mcp/operations/{op.id}/result/")).status_code == 200


async def test_megabyte_descriptions_give_bounded_pages(setup):
    client, server, mcp = setup
    page = await client.get(f"/mcp/servers/{server.pk}/")
    assert page.status_code == 200 and len(page.content) < 2 * results.LISTED_DESCRIPTION_CHARS + PAGE_OVERHEAD * 2
    assert "more characters not shown" in page.content.decode()
    for kind, name in (("tool", "long_description"), ("prompt", "long_prompt_description")):
        page = await client.get(names.call_url(kind, server.pk, name))
        assert page.status_code == 200 and len(page.content) < SHOWN + PAGE_OVERHEAD, (name, len(page.content))


async def test_a_listing_of_many_tools_gives_a_bounded_page(setup):
    client, server, mcp = setup
    many = await McpServer.objects.acreate(tenant_id=server.tenant_id, name="Many", url=mcp.url.replace("/mcp", "/many/mcp"))
    page = await client.get(f"/mcp/servers/{many.pk}/")
    body = page.content.decode()
    assert page.status_code == 200 and body.count("data-tool=") == names.MAX_LISTED_SHOWN
    assert f"This server lists {hn.MANY - names.MAX_LISTED_SHOWN} more items than this page shows" in body
    assert len(page.content) < names.MAX_LISTED_SHOWN * (results.LISTED_DESCRIPTION_CHARS + 600) + PAGE_OVERHEAD
    last = await client.get(names.call_url("tool", many.pk, f"t{hn.MANY - 1}"))  # not shown, still callable
    assert last.status_code == 200


async def test_a_1mb_elicitation_message_gives_a_bounded_card(setup):
    client, server, mcp = setup
    op = await _run(client, server, "tool", "big_message")
    assert op.status == Operation.Status.AWAITING_INPUT
    page = await client.get(f"/mcp/operations/{op.id}/")
    body = page.content.decode()
    assert page.status_code == 200 and len(page.content) < SHOWN + PAGE_OVERHEAD, len(page.content)
    assert 'class="card"' in body and f"({hn.MB - SHOWN} more characters not shown)" in body
    review = await client.post(f"/mcp/operations/{op.id}/answer/", {"action": "accept", "round": "1"})
    assert review.status_code == 200 and len(review.content) < SHOWN + PAGE_OVERHEAD, len(review.content)


async def test_a_card_of_many_long_messages_shares_one_budget(setup):
    client, server, mcp = setup
    op = await _run(client, server, "tool", "many_messages")
    assert op.status == Operation.Status.AWAITING_INPUT, (op.error_code, op.error_message)
    page = await client.get(f"/mcp/operations/{op.id}/")
    body = page.content.decode()
    assert body.count('class="server-message"') == hn.MANY_REQUESTS  # every request shown, each cut
    text = body.count("m")
    assert text < SHOWN + hn.MANY_REQUESTS * results.MIN_MESSAGE_CHARS + 20_000, text
    assert len(page.content) < SHOWN + hn.MANY_REQUESTS * (results.MIN_MESSAGE_CHARS + 3000) + PAGE_OVERHEAD


async def test_a_sampling_request_of_500_long_messages_gives_a_bounded_card(setup):
    client, server, mcp = setup
    server.allow_sampling = True
    await server.asave()
    op = await _run(client, server, "tool", "big_sampling")
    assert op.status == Operation.Status.AWAITING_INPUT, (op.error_code, op.error_message)
    page = await client.get(f"/mcp/operations/{op.id}/")
    body = page.content.decode()
    assert page.status_code == 200 and 'class="card"' in body
    assert body.count("S" * 100) < (SHOWN + results.MAX_SHOWN_BLOCKS * results.MIN_MESSAGE_CHARS) // 100 + 1
    assert f"[{500 - results.MAX_SHOWN_BLOCKS} more messages not shown]" in body
    assert len(page.content) < SHOWN + results.MAX_SHOWN_BLOCKS * (results.MIN_MESSAGE_CHARS + 400) + PAGE_OVERHEAD


async def test_a_panel_over_the_push_cap_is_fetched_not_pushed(setup, settings):
    client, server, mcp = setup
    settings.MRTRWEB = {"MAX_PUSH_BYTES": 5000}
    cookie = "; ".join(f"{k}={v.value}" for k, v in client.cookies.items())
    ws = WebsocketCommunicator(application, "/ws/mrtrweb/", headers=[
        (b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000"), (b"cookie", cookie.encode())])
    connected, _ = await ws.connect()
    assert connected
    op = await _run(client, server, "tool", "big_result")
    sizes = []
    while True:
        msg = await ws.receive_json_from(timeout=5)
        sizes.append(len(json.dumps(msg)))
        if msg.get("status") == "completed":
            break
    assert msg["type"] == "operation" and msg["id"] == str(op.id) and msg["html"] is None
    assert max(sizes) < 5000
    await ws.disconnect()
    panel = await client.get(f"/mcp/operations/{op.id}/panel/")  # what the page fetches instead
    assert panel.status_code == 200 and len(panel.content) < SHOWN + PAGE_OVERHEAD
