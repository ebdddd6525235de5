"""'Test' a server before saving it (issue 29, items 4 and 7): against the real demo server, a
protected one (401, with and without a bearer token), one naming its authorization server, and
hostile HTTP servers (a web page, a redirect loop, a 50 MB body, a socket that never answers) --
each a clear reason in a JSON-able report, never an exception; the endpoint's access rules, CSRF,
rate limit and the last test kept on a saved server.
"""

from __future__ import annotations

import html as htmllib
import json

import pytest
from django.test import AsyncClient
from django.template.loader import render_to_string

from mrtrweb.mcp.url_policy import UrlPolicy
from mrtrweb.models import McpServer
from mrtrweb.serverconfig.probe import probe
from tests.protected_mcp import serve_protected
from tests.serverconfig.policies import LOOPBACK, OUTBOUND

from .hostile_http import AUTH_SERVER, Silent, serve_hostile

#: the settings under which the endpoint may test servers on loopback
LOOPBACK_SETTINGS = {"SERVER_URL_POLICY": {"allow_http_hosts": ["127.0.0.1"], "allow_networks": ["127.0.0.0/8"]},
                     "SERVER_TESTS_PER_MINUTE": 100}


@pytest.fixture(scope="module")
def hostile():
    handle, counted = serve_hostile()
    yield f"http://127.0.0.1:{handle.port}", counted
    handle.stop()


@pytest.fixture(scope="module")
def protected():
    handle, check = serve_protected()
    yield handle, check
    handle.stop()


async def _probe(url: str, **kw) -> dict:
    report = await probe(url, url_policy=LOOPBACK, outbound=OUTBOUND, timeout_s=kw.pop("timeout_s", 8.0), **kw)
    assert json.loads(json.dumps(report)) == report  # JSON-able, as kept on the server
    return report


async def test_the_demo_server(demo_mcp) -> None:
    report = await _probe(demo_mcp.url)
    assert report["outcome"] == "connected" and report["reason"] is None
    assert report["protocol_version"] == "2026-07-28"
    assert report["counts"]["tools"] >= 5 and report["counts"]["prompts"] >= 1
    assert {"tools", "prompts"} <= set(report["capabilities"])
    assert report["server"]["name"] and report["origin"] == demo_mcp.url.removesuffix("/mcp")
    legacy = await _probe(demo_mcp.url, protocol="2025-11-25")
    assert legacy["outcome"] == "connected" and legacy["protocol_version"] == "2025-11-25"


async def test_a_protected_server_with_and_without_a_bearer(protected) -> None:
    handle, check = protected
    check.accepted = {"tok-person-1"}
    report = await _probe(handle.url)
    assert report["outcome"] == "needs_authorization" and report["authorization"]["required"]
    assert report["authorization"]["authorization_servers"] == []
    assert report["authorization"]["metadata_problem"]  # it names no resource metadata: said so
    with_token = await _probe(handle.url, bearer="tok-person-1")
    assert with_token["outcome"] == "connected" and with_token["counts"]["tools"] >= 5
    assert "tok-person-1" not in json.dumps(with_token)  # used, never kept
    wrong = await _probe(handle.url, bearer="tok-wrong")
    assert wrong["outcome"] == "needs_authorization" and "tok-wrong" not in json.dumps(wrong)
    bad = await _probe(handle.url, bearer="tok\r\nX-Evil: 1")
    assert bad["outcome"] == "failed" and bad["reason"] == "error" and "Evil" not in json.dumps(bad)


async def test_the_authorization_server_it_names_as_text(hostile) -> None:
    base, _ = hostile
    report = await _probe(f"{base}/prm/mcp")
    assert report["outcome"] == "needs_authorization"
    auth = report["authorization"]
    assert auth["resource_metadata"] == f"{base}/.well-known/oauth-protected-resource/prm/mcp"
    # the https one, its <markup> kept as text; the javascript: one left out
    assert auth["authorization_servers"] == [AUTH_SERVER, "https://evil.example/<img src=x onerror=alert(1)>"]
    assert auth["scope"] == "files:read⟨U+00AD⟩"  # an invisible character made visible
    page = render_to_string("mrtrweb/serverconfig/_test_report.html", {"report": report})
    assert "<img" not in page and htmllib.escape("https://evil.example/<img src=x onerror=alert(1)>") in page
    assert "files:read⟨U+00AD⟩" in page and "\xad" not in page


@pytest.mark.parametrize("path, reason", [("/html", "not_mcp"), ("/loop", "redirect"), ("/huge", "too_large")])
async def test_hostile_answers_get_a_clear_reason(hostile, path, reason) -> None:
    base, counted = hostile
    before = counted.requests
    report = await _probe(base + path)
    assert report["outcome"] == "failed" and report["reason"] == reason, report
    assert counted.requests - before <= 3  # a redirect loop is not followed round and round
    page = render_to_string("mrtrweb/serverconfig/_test_report.html", {"report": report})
    assert f'data-reason="{reason}"' in page and "The test failed." in page


async def test_a_server_that_never_answers_ends_as_timeout() -> None:
    silent = Silent()
    try:
        report = await _probe(f"http://127.0.0.1:{silent.port}/mcp", timeout_s=2.0)
    finally:
        silent.stop()
    assert silent.accepted  # it did accept the connection
    assert report["outcome"] == "failed" and report["reason"] == "timeout"


async def test_refused_by_the_policy_before_connecting(demo_mcp) -> None:
    strict = UrlPolicy(timeout_s=3.0)
    before = len(demo_mcp.log.records())
    report = await probe(demo_mcp.url, url_policy=strict, outbound=OUTBOUND)
    assert report["reason"] == "policy" and report["policy_code"] == "http"
    report = await probe("https://localhost/mcp", url_policy=strict, outbound=OUTBOUND)
    assert report["reason"] == "policy" and report["policy_code"] == "address"
    assert report["policy_detail"]["host"] == "localhost" and "address" not in report["policy_detail"]
    page = render_to_string("mrtrweb/serverconfig/_test_report.html", {"report": report})
    assert "localhost resolves to" in page
    assert len(demo_mcp.log.records()) == before  # nothing was sent


# ------------------------------------------------------------------------------------------------
# The endpoint (POST tenants/<slug>/servers/test/)
# ------------------------------------------------------------------------------------------------

URL = "/mcp/tenants/acme/servers/test/"


async def _client(user, *, csrf: bool = False) -> AsyncClient:
    client = AsyncClient(enforce_csrf_checks=csrf)
    await client.aforce_login(user)
    return client


@pytest.mark.urls("tests.serverconfig.urls")
async def test_who_may_test_and_how(seeded, settings) -> None:
    settings.MRTRWEB = dict(LOOPBACK_SETTINGS)
    users, server = seeded["users"], seeded["servers"]["acme"]
    url = seeded["mcp"].url
    alice = await _client(users["alice"])
    page = await alice.post(URL, {"url": url, "protocol": "auto"})
    assert page.status_code == 200 and 'data-outcome="connected"' in page.content.decode()
    as_json = await alice.post(URL, {"url": url, "protocol": "auto"}, headers={"Accept": "application/json"})
    assert as_json.status_code == 200 and as_json.json()["counts"]["tools"] >= 5
    assert (await alice.get(URL)).status_code == 405
    # a member, while the tenant does not allow personal servers; then when it does
    carol = await _client(users["carol"])
    assert (await carol.post(URL, {"url": url})).status_code == 404
    tenant = server.tenant
    tenant.allow_personal_servers = True
    await tenant.asave()
    assert (await carol.post(URL, {"url": url})).status_code == 200
    # carol may not test (nor record onto) the tenant's server: it is its admins' to edit
    assert (await carol.post(URL, {"url": url, "server": str(server.pk)})).status_code == 404
    # another tenant's person; nobody signed in
    assert (await (await _client(users["bob"])).post(URL, {"url": url})).status_code == 404
    anonymous = await AsyncClient().post(URL, {"url": url})
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    # CSRF
    strict = await _client(users["alice"], csrf=True)
    assert (await strict.post(URL, {"url": url})).status_code == 403
    # no URL: a 400 with a reason, never a 500
    empty = await alice.post(URL, {"url": ""})
    assert empty.status_code == 400 and 'data-reason="policy"' in empty.content.decode()


@pytest.mark.urls("tests.serverconfig.urls")
async def test_the_last_test_is_kept_on_the_saved_server(seeded, settings) -> None:
    settings.MRTRWEB = dict(LOOPBACK_SETTINGS)
    server = seeded["servers"]["acme"]
    alice = await _client(seeded["users"]["alice"])
    assert (await alice.post(URL, {"url": server.url, "protocol": server.protocol, "server": str(server.pk)})).status_code == 200
    saved = await McpServer.objects.aget(pk=server.pk)
    assert saved.last_test["outcome"] == "connected" and saved.last_tested_at is not None
    # a URL typed but not saved yet: tested, not recorded on the server
    other = seeded["mcp"].url.replace("/mcp", "/other")
    assert (await alice.post(URL, {"url": other, "server": str(server.pk)})).status_code == 200
    assert (await McpServer.objects.aget(pk=server.pk)).last_test == saved.last_test
    # another tenant's server id: 404
    globex = seeded["servers"]["globex"]
    assert (await alice.post(URL, {"url": globex.url, "server": str(globex.pk)})).status_code == 404


@pytest.mark.urls("tests.serverconfig.urls")
async def test_tests_are_rate_limited_per_person(seeded, settings) -> None:
    settings.MRTRWEB = {**LOOPBACK_SETTINGS, "SERVER_TESTS_PER_MINUTE": 2}
    url = seeded["mcp"].url
    alice = await _client(seeded["users"]["alice"])
    seeded["mcp"].log.clear()
    assert [(await alice.post(URL, {"url": url})).status_code for _ in range(2)] == [200, 200]
    calls = len(seeded["mcp"].log.records())
    assert calls > 0
    refused = await alice.post(URL, {"url": url})
    assert refused.status_code == 429 and 'data-reason="rate_limited"' in refused.content.decode()
    assert len(seeded["mcp"].log.records()) == calls  # nothing was tried
    # another person has a count of their own
    tenant = seeded["servers"]["acme"].tenant
    tenant.allow_personal_servers = True
    await tenant.asave()
    assert (await (await _client(seeded["users"]["carol"])).post(URL, {"url": url})).status_code == 200

