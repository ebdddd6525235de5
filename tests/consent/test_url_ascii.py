"""A URL-mode URL with right-to-left letters is shown in an order nothing can change.

The address line (``.url-full``) is the URL's ASCII form (:func:`mrtrweb.text.display.ascii_url`:
the host in punycode, the rest percent-encoded); the form the server wrote is on its own line
(``.url-unicode``), its invisible characters marked, inside ``<bdo dir="ltr">`` (stored order, even
without the style sheet); the "Site" line gives the ASCII host first and the Unicode form after it,
also in ``<bdo>``; the review names the ASCII host. The link opens what the server sent."""

from __future__ import annotations

import html
import re
import unicodedata

import pytest
from django.test import AsyncClient
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mrtrweb.text import names
from mrtrweb import operations
from mrtrweb.demo.server import serve_asgi_in_thread
from mrtrweb.models import McpServer, Operation

from ..answering import post_review

pytestmark = [pytest.mark.django_db(transaction=True)]

URLS = {
    "rtl_host": ("https://\u0645\u062b\u0627\u0644.\u0625\u062e\u062a\u0628\u0627\u0631:8443/moc.elgoog?a=\u05d0#\u202e",
                 "https://xn--mgbh0fb.xn--kgbechtv:8443/moc.elgoog?a=%D7%90#%E2%80%AE"),
    "rtl_path": ("https://evil.example/\u0627\u062e\u062a\u0628\u0627\u0631/moc.elgoog",
                 "https://evil.example/%D8%A7%D8%AE%D8%AA%D8%A8%D8%A7%D8%B1/moc.elgoog"),
    "ascii": ("https://sso.example.test/login?next=%2F", "https://sso.example.test/login?next=%2F"),
}


async def endpoint(request: Request) -> Response:
    message = await request.json()
    if "id" not in message:
        return Response(status_code=202)
    rid, method, params = message["id"], message.get("method"), message.get("params") or {}
    if method == "server/discover":
        result = {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
                  "resultType": "complete", "ttlMs": 0, "cacheScope": "public"}
    elif method == "tools/list":
        result = {"tools": [{"name": n, "inputSchema": {"type": "object"}} for n in URLS],
                  "resultType": "complete", "ttlMs": 0, "cacheScope": "private"}
    elif method == "tools/call" and not params.get("inputResponses"):
        result = {"resultType": "input_required", "inputRequests": {"u": {"method": "elicitation/create", "params": {
            "mode": "url", "elicitationId": "e1", "message": "go", "url": URLS[params["name"]][0]}}}}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": "ok"}], "isError": False}
    else:
        return JSONResponse({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "nf"}})
    return JSONResponse({"jsonrpc": "2.0", "id": rid, "result": result})


@pytest.fixture(scope="module")
def url_mcp():
    handle = serve_asgi_in_thread(Starlette(routes=[Route("/mcp", endpoint, methods=["POST"])]))
    yield handle
    handle.stop()


@pytest.fixture
async def setup(seeded, url_mcp):
    server = await McpServer.objects.acreate(tenant=seeded["servers"]["acme"].tenant, name="URLs", url=url_mcp.url)
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    return client, server


def _rtl(text: str) -> list[str]:
    return [c for c in text if unicodedata.bidirectional(c) in ("R", "AL", "AN")]


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


@pytest.mark.parametrize("tool", list(URLS))
async def test_the_url_mode_card_shows_the_ascii_form_first_and_the_unicode_form_isolated(setup, tool):
    client, server = setup
    url, ascii_form = URLS[tool]
    resp = await client.post(names.call_url("tool", server.pk, tool), {})
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    assert op.status == Operation.Status.AWAITING_INPUT, op.error_message
    card = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    full = re.search(r'<p class="url-full">(.*?)</p>', card, re.S).group(1)
    assert _text(full) == ascii_form
    unicode_line = re.search(r'<p class="url-unicode[^"]*">(.*?)</p>', card, re.S)
    site = re.search(r'<p class="url-host">(.*?)</p>', card, re.S).group(1)
    if url == ascii_form:
        assert unicode_line is None
        assert not _rtl(site)
    else:
        # the server's own form: markers for invisible characters, every character inside <bdo dir="ltr">
        bdo = re.search(r'<bdo dir="ltr">([^<]*)</bdo>', unicode_line.group(1)).group(1)
        assert "\u202e" not in html.unescape(bdo) and html.unescape(bdo).replace("⟨U+202E⟩", "\u202e") == url
        assert not _rtl(re.sub(r"<bdo dir=\"ltr\">[^<]*</bdo>", "", unicode_line.group(1)))
    if tool == "rtl_host":
        # the ASCII host first; its Unicode form after it, inside <bdo dir="ltr">
        assert re.match(r'Site: <code dir="ltr">xn--mgbh0fb\.xn--kgbechtv</code> \(<mark class="host">'
                        r'<bdo dir="ltr">[^<]+</bdo></mark>\)$', site), site
    # the link opens what the server sent (its invisible characters percent-encoded)
    assert "Open " + html.escape(ascii_form.split("/")[2].split(":")[0]) + " in a new tab" in card
    review, token = await post_review(client, f"/mcp/operations/{op.id}/answer/", {"round": "1", "action": "accept"})
    line = re.search(r'<p class="review-url">(.*?)</p>', review.content.decode(), re.S).group(1)
    assert token and not _rtl(_text(line)), line
