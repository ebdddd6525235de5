"""The demo command's protected server and its own authorization server, through the product.

The demo command's servers (``mrtrweb_demo.start_servers``, seeded by ``seed_demo`` as the
command does, ``OUTBOUND_ALLOW_HTTP_LOOPBACK`` on as the command turns it on) and OAuth per user
done headlessly through :mod:`mrtrweb.authz.service`: ``start_connect`` -> the authorization URL
and the demo AS's sign-in and consent page over HTTP (as a browser: its cookie, its form) ->
``finish_connect`` -> ``confirm_as_me`` (one ``input_required`` round) completed with the
person's identity as the server saw it. Deny at the page stores nothing; the page escapes what a
client registered and refuses a POST without its CSRF cookie.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
import secrets
import urllib.parse

import httpx2
import pytest

from mrtrweb.headless import client as headless
from mrtrweb.authz import service
from mrtrweb.authz.models import OAuthConnection
from mrtrweb.headless.client import ConsentPolicy
from mrtrweb.management.commands.mrtrweb_demo import PROTECTED_SERVER, allow_http_loopback, seed_demo, start_servers
from mrtrweb.models import McpServer

REDIRECT = "http://127.0.0.1:9/mcp/oauth/callback/"


@pytest.fixture(scope="module")
def servers():
    running = start_servers()
    yield running
    running.stop()


@pytest.fixture
def demo(servers, transactional_db, _fast_password_hasher, _fresh_gate_and_cache, settings):
    from django.contrib.auth import get_user_model

    from django.conf import settings as django_settings

    settings.MRTRWEB = dict(getattr(settings, "MRTRWEB", None) or {})  # restored after the test
    allow_http_loopback()  # as the command does
    assert django_settings.MRTRWEB["OUTBOUND_ALLOW_HTTP_LOOPBACK"] is True
    seed_demo(servers.mcp.url, servers.legacy.url, servers.protected.url)
    users = {u.username: u for u in get_user_model().objects.all()}
    server = McpServer.objects.select_related("tenant").get(tenant__slug="acme", name=PROTECTED_SERVER)
    return {"users": users, "server": server, "protected": servers.protected}


def _field(page: str, name: str) -> str:
    return html.unescape(re.search(rf'name="{name}" value="([^"]*)"', page).group(1))


async def _consent_page(client: httpx2.AsyncClient, authorization_url: str) -> tuple[str, str]:
    """Follow the authorization URL to the demo AS's consent page: ``(page url, html)``."""
    r = await client.get(authorization_url)
    assert r.status_code == 302, r.text
    page_url = r.headers["location"]
    r = await client.get(page_url)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert r.headers["x-frame-options"] == "DENY" and "frame-ancestors 'none'" in r.headers["content-security-policy"]
    return page_url, r.text


async def _answer(client: httpx2.AsyncClient, as_url: str, page: str, decision: str, account: str = "alice") -> dict:
    """POST the consent form; returns the redirect's query (must go to REDIRECT)."""
    r = await client.post(as_url + "/consent", data={"request": _field(page, "request"), "csrf": _field(page, "csrf"),
                                                      "account": account, "decision": decision})
    assert r.status_code == 303, r.text
    target = urllib.parse.urlsplit(r.headers["location"])
    assert f"{target.scheme}://{target.netloc}{target.path}" == REDIRECT
    return dict(urllib.parse.parse_qsl(target.query))


async def _start(d, who: str, session: str):
    return await service.start_connect(user=d["users"][who], tenant=d["server"].tenant, server=d["server"],
                                       session_key=session, return_to="/mcp/", redirect_uri=REDIRECT)


async def _confirm(d, who: str, note: str):
    return await headless.arun(url=d["server"].url, user=d["users"][who], tenant=d["server"].tenant,
                               method="tools/call", params={"name": "confirm_as_me", "arguments": {"note": note}},
                               consent=ConsentPolicy("answers", answers={"confirm": {"confirm": True}}))


async def test_connect_through_the_consent_page_then_a_round_as_the_person(demo) -> None:
    d, protected = demo, demo["protected"]
    # before connecting: the product names the failure
    outcome = await _confirm(d, "alice", "n0")
    assert outcome.status == "failed" and outcome.error_code == "authorization_required"
    start = await _start(d, "alice", "sess-a")
    assert start.authorization_origin == protected.as_url
    async with httpx2.AsyncClient(timeout=10) as browser:
        _, page = await _consent_page(browser, start.authorization_url)
        assert "Sign in to the demo authorization server" in page
        assert '<option value="alice">alice</option>' in page and ">Approve<" in page and ">Deny<" in page
        assert "mrtrweb" in page and html.escape(protected.url) in page  # the client and the resource
        query = await _answer(browser, protected.as_url, page, "approve", account="alice")
    assert query.get("code") and query.get("iss") == protected.as_url
    conn = await service.finish_connect(user=d["users"]["alice"], session_key="sess-a", query=query)
    assert conn.issuer == protected.as_url
    outcome = await _confirm(d, "alice", "n1")
    assert outcome.status == "completed", outcome.error_message
    assert outcome.rounds == 1
    assert [c.get("text") for c in outcome.result["content"]] == ["Confirmed n1 for alice (client mrtrweb)."]
    subjects = {subject for subject, _client in protected.verifier.seen}
    assert subjects == {"alice"}
    # carol (same tenant, same server) has no connection: alice's token is never used for her
    outcome = await _confirm(d, "carol", "n2")
    assert outcome.error_code == "authorization_required"
    assert {subject for subject, _client in protected.verifier.seen} == {"alice"}
    # Disconnect: revoked at the demo authorization server (RFC 7009), the next call asks to connect
    provider = protected.auth.provider
    assert await service.disconnect(user=d["users"]["alice"], tenant=d["server"].tenant, server=d["server"]) == "revoked"
    assert len(provider.revoked) == 2 and not [t for t in provider.access.values() if t.subject == "alice"]
    outcome = await _confirm(d, "alice", "n3")
    assert outcome.error_code == "authorization_required"


async def test_deny_at_the_consent_page_stores_nothing(demo) -> None:
    d, protected = demo, demo["protected"]
    before = protected.auth.provider.token_requests
    start = await _start(d, "carol", "sess-c")
    async with httpx2.AsyncClient(timeout=10) as browser:
        _, page = await _consent_page(browser, start.authorization_url)
        query = await _answer(browser, protected.as_url, page, "deny")
    assert query.get("error") == "access_denied" and "code" not in query
    with pytest.raises(service.ConnectRefused) as caught:
        await service.finish_connect(user=d["users"]["carol"], session_key="sess-c", query=query)
    assert caught.value.code == "authorization_failed"
    assert not await OAuthConnection.objects.aexists()
    assert protected.auth.provider.token_requests == before


async def test_the_consent_page_escapes_a_clients_name_and_checks_its_csrf_cookie(servers) -> None:
    as_url = servers.protected.as_url
    hostile = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
    async with httpx2.AsyncClient(timeout=10) as browser:
        reg = await browser.post(as_url + "/register", json={"client_name": hostile, "redirect_uris": [REDIRECT],
                                                             "token_endpoint_auth_method": "none"})
        assert reg.status_code == 201, reg.text
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        url = as_url + "/authorize?" + urllib.parse.urlencode({
            "response_type": "code", "client_id": reg.json()["client_id"], "redirect_uri": REDIRECT,
            "code_challenge": challenge, "code_challenge_method": "S256", "state": "s1", "scope": "mcp:demo"})
        page_url, page = await _consent_page(browser, url)
        assert hostile not in page and "<script>" not in page and "<img" not in page
        assert html.escape(hostile) in page
        form = {"request": _field(page, "request"), "csrf": _field(page, "csrf"), "account": "alice",
                "decision": "approve"}
        # another site's POST: no cookie (SameSite=Strict), or a wrong token -> 403, the request not spent
        async with httpx2.AsyncClient(timeout=10) as other_site:
            assert (await other_site.post(as_url + "/consent", data=form)).status_code == 403
        assert (await browser.post(as_url + "/consent", data={**form, "csrf": "x"})).status_code == 403
        assert (await browser.post(as_url + "/consent", data={**form, "account": "mallory"})).status_code == 400
        done = await browser.post(as_url + "/consent", data=form)
        assert done.status_code == 303 and "code=" in done.headers["location"]
        # single use; unknown requests are a page, not a 500
        assert (await browser.post(as_url + "/consent", data=form)).status_code == 400
        assert (await browser.get(page_url)).status_code == 400
        assert (await browser.get(as_url + "/consent?request=" + "x" * 500)).status_code == 400


def test_the_loopback_setting_did_not_outlive_the_tests_above() -> None:
    from django.conf import settings

    assert not (getattr(settings, "MRTRWEB", None) or {}).get("OUTBOUND_ALLOW_HTTP_LOOPBACK")
