"""A destructive tool's warning says the same words on every page and card, and says where it comes
from only when the page knows: "the server's annotations say" for ``destructiveHint: true``, "the
protocol's default" for a tool whose annotations are absent -- never "the server says" for a default."""

from __future__ import annotations

import urllib.parse

import pytest
from django.template.loader import render_to_string
from django.test import AsyncClient

from mrtrweb.models import McpServer
from mrtrweb.text import names

from .. import hostile

pytestmark = [pytest.mark.django_db(transaction=True)]

STATED = "The server's annotations say it may destroy or overwrite data."
DEFAULT = "Its annotations do not say either way: this is the protocol's default, not the server's claim."
BASE = "This tool may change or delete things."


@pytest.fixture(scope="module")
def listing_mcp():
    handle = hostile.serve_listing()
    yield handle
    handle.stop()


@pytest.fixture(autouse=True)
def _utf8_paths(monkeypatch):
    """The hostile tools' names hold U+202E: request their paths as a browser does (UTF-8)."""
    from django.test.client import RequestFactory

    monkeypatch.setattr(RequestFactory, "_get_path",
                        lambda self, parsed: urllib.parse.unquote_to_bytes(parsed.path).decode("utf-8"))


def test_the_warning_says_where_it_comes_from_only_when_known():
    server = render_to_string("mrtrweb/_destructive.html", {"destructive_source": "server"})
    default = render_to_string("mrtrweb/_destructive.html", {"destructive_source": "default"})
    unknown = render_to_string("mrtrweb/_destructive.html", {})
    assert all(BASE in html for html in (server, default, unknown))
    assert STATED in server and DEFAULT not in server and 'data-source="server"' in server
    assert DEFAULT in default and STATED not in default and 'data-source="default"' in default
    assert STATED not in unknown and DEFAULT not in unknown and "data-source" not in unknown


async def test_the_call_page_tells_a_stated_hint_from_the_default(seeded, listing_mcp):
    acme = seeded["servers"]["acme"].tenant
    server = await McpServer.objects.acreate(tenant=acme, name="Listing", url=listing_mcp.url)
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    stated = (await client.get(names.call_url("tool", server.pk, hostile.ASK_TOOL))).content.decode()
    assert BASE in stated and STATED in stated and DEFAULT not in stated  # destructiveHint: true
    default = (await client.get(names.call_url("tool", server.pk, hostile.URL_TOOL))).content.decode()
    assert BASE in default and DEFAULT in default and STATED not in default  # no annotations at all
    assert "The server says" not in default
