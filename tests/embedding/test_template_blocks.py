"""The template blocks a portal overrides (docs/embedding.md): tests/embed_orgs's base template
extends mrtrweb's and fills ``head``, ``header``, ``nav``, ``messages`` and ``footer``; every
page shows the portal's chrome once, mrtrweb's own header, navigation and live region stay, and the
consent card keeps its CSRF form and its script: a round is answered through it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.messages.storage.base import Message
from django.contrib.messages import constants
from django.template.loader import render_to_string
from django.test import RequestFactory

from mrtrweb import operations
from mrtrweb.models import Operation
from tests.answering import DEPLOY_OK, post_answer
from tests.sockets import csrf_client

CHROME = ('id="portal-bar"', 'id="portal-nav-home"', 'id="portal-footer"', 'id="portal-css"', 'id="portal-js"',
          'id="portal-messages"', '<header class="top">', 'class="nav-connections"', 'id="live"')


def _chrome_once(body: str) -> None:
    for needle in CHROME:
        assert body.count(needle) == 1, needle
    assert body.index('id="portal-bar"') < body.index('<header class="top">') < body.index('id="main"') \
        < body.index('id="portal-footer"')
    assert body.index("mrtrweb/app.css") < body.index('id="portal-css"') < body.index("</head>")


async def test_the_card_page_works_under_the_portals_blocks(seeded, portal_templates):
    client = await csrf_client(seeded["users"]["carol"])
    server = seeded["servers"]["acme"]
    for url in ("/mcp/", f"/mcp/servers/{server.pk}/", "/mcp/connections/"):
        resp = await client.get(url)
        assert resp.status_code == 200, url
        _chrome_once(resp.content.decode())
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/deploy/", {"arg-env": "staging", "arg-replicas": "2"})
    assert resp.status_code == 302
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    assert op.status == Operation.Status.AWAITING_INPUT
    body = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    _chrome_once(body)
    card = re.search(r'<form method="post" action="/mcp/operations/[^"]+/answer/" class="card".*?</form>', body, re.S)
    assert card and 'name="csrfmiddlewaretoken"' in card.group(0)
    assert body.count('mrtrweb/operations.js" defer></script>') == 1  # the page's own script block is untouched
    resp = await post_answer(client, f"/mcp/operations/{op.id}/answer/", dict(DEPLOY_OK, action="accept", round="1"))
    assert resp.status_code in (200, 302), resp.status_code
    await operations.wait_idle()
    assert (await Operation.objects.aget(pk=op.pk)).status == Operation.Status.COMPLETED
    assert seeded["mcp"].calls[("deploy", True)] == 1  # the answer reached the server once


def test_the_messages_block_wraps_mrtrweb_messages_escaped(portal_templates):
    request = RequestFactory().get("/mcp/")
    from django.contrib.auth.models import AnonymousUser

    request.user = AnonymousUser()
    body = render_to_string("mrtrweb/base.html", {"messages": [Message(constants.INFO, "Saved <b>x</b>")]},
                            request=request)
    wrapper = body[body.index('<div id="portal-messages">'):]
    assert wrapper.index('<li class="message info">Saved &lt;b&gt;x&lt;/b&gt;</li>') < wrapper.index("</div>")
    assert 'id="portal-nav-home"' in body and 'class="nav-connections"' not in body  # nav: signed in only


def test_the_documented_blocks_are_the_base_templates():
    """docs/embedding.md's table names exactly the blocks of mrtrweb/base.html."""
    root = Path(__file__).resolve().parents[2]
    base = (root / "mrtrweb" / "templates" / "mrtrweb" / "base.html").read_text()
    doc = (root / "docs" / "embedding.md").read_text()
    table = doc[doc.index("| block | where | for | default |"):]
    table = table[:table.index("\n\n")]
    documented = re.findall(r"^\| `(\w+)` \|", table, re.M)
    assert sorted(documented) == sorted(set(re.findall(r"{% block (\w+) %}", base))), documented
    assert set(documented) >= {"head", "header", "nav", "messages", "footer", "title", "content", "scripts"}
