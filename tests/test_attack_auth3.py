"""Attacks on the authorization to MCP servers (issue 13), third pass: each test the regression
test of a fault found, or of an attack that held and should keep holding. Real parts: Django's
test client through the whole middleware stack, the database, real authorization servers and
MCP servers on loopback (:mod:`tests.oauth_sdk_as`) where a flow runs.
"""

from __future__ import annotations

import urllib.parse

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings as hsettings
from hypothesis import strategies as st

from mrtrweb.models import McpServer

pytestmark = [pytest.mark.django_db(transaction=True)]


def _signed_in(user) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(user)
    client.get("/mcp/")
    return client


def _oauth(server) -> McpServer:
    server.auth_mode = McpServer.AuthMode.OAUTH_USER
    server.save()
    return server


# -- 1. never a 500: the views and forms fuzzed ---------------------------------------------------

@pytest.mark.parametrize("rerun", ["x" * 5000, "not-a-uuid", "\x00", "1", "0" * 32 + "g"])
def test_connect_with_a_rerun_value_that_is_no_uuid_is_not_a_500(seeded, rerun) -> None:
    """POST ``oauth/connect/<id>/`` with ``rerun`` not a UUID: ``access.operation_for`` let
    Django's ``ValidationError`` (UUIDField) out, a 500; a bad value must be ignored."""
    server = _oauth(seeded["servers"]["acme"])
    client = _signed_in(seeded["users"]["alice"])
    response = client.post(f"/mcp/oauth/connect/{server.pk}/", {"rerun": rerun, "return_to": "/mcp/"})
    assert response.status_code < 500


_query_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
_raw = st.one_of(_query_text.map(lambda t: urllib.parse.quote(t, safe="")),
                 st.binary(max_size=20).map(lambda b: "".join(f"%{x:02X}" for x in b)),
                 st.sampled_from(["%", "%zz", "%ff", "%ed%a0%80", "%00", "%C0%AF", "a" * 5000]))
_key = st.sampled_from(["state", "code", "iss", "error", "error_description", "rerun", "return_to", "%ff", "state[]"])


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pairs=st.lists(st.tuples(_key, _raw), max_size=6))
def test_the_authorization_views_never_answer_500_to_any_query_or_form(seeded, pairs) -> None:
    """Raw query strings and form bodies (non-UTF-8 percent-encodings, NUL, repeated keys,
    overlong values) to the callback, Connect, Continue, Connections, Disconnect and the CIMD
    document: a page or a refusal, never a 500."""
    server = _oauth(seeded["servers"]["acme"])
    other = seeded["servers"]["globex"]
    client = _signed_in(seeded["users"]["alice"])
    raw = "&".join(f"{k}={v}" for k, v in pairs)
    form = "application/x-www-form-urlencoded"
    answers = [
        client.get("/mcp/oauth/callback/?" + raw),
        client.get(f"/mcp/oauth/go/{server.pk}/?" + raw),
        client.get("/mcp/connections/?" + raw),
        client.get("/mcp/oauth/client-metadata.json?" + raw),
        client.post(f"/mcp/oauth/connect/{server.pk}/", raw, content_type=form),
        client.post(f"/mcp/oauth/connect/{other.pk}/", raw, content_type=form),
        client.post(f"/mcp/connections/{server.pk}/disconnect/", raw, content_type=form),
    ]
    assert [r.status_code for r in answers if r.status_code >= 500] == []
