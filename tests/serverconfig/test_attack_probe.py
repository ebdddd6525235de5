"""Attacks on "Test before saving" (issue 29): the endpoint must never become a way around the
deployer's URL policy, nor a way to exhaust the worker.

Each test here failed before its fix (see the commit that added it).
"""

from __future__ import annotations

import pytest
from django.test import AsyncClient

from mrtrweb.models import McpServer

from .hostile_http import serve_hostile

URL = "/mcp/tenants/acme/servers/test/"


@pytest.fixture(scope="module")
def hostile():
    handle, counted = serve_hostile()
    yield f"http://127.0.0.1:{handle.port}", counted
    handle.stop()


@pytest.mark.urls("tests.serverconfig.urls")
async def test_a_superusers_server_id_does_not_lift_the_policy_from_another_url(seeded, settings, hostile) -> None:
    """The superuser's server (``url_policy`` off) is tested unrestricted only at the URL the
    superuser saved: a tenant admin naming that server and typing another URL (loopback, the cloud
    metadata address, an internal service) is tested under the deployer's policy -- refused,
    nothing sent."""
    settings.MRTRWEB = {"SERVER_TESTS_PER_MINUTE": 100}
    base, counted = hostile
    server = seeded["servers"]["acme"]
    assert not server.url_policy  # the superuser's, on loopback
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])  # acme's tenant admin
    before = counted.requests
    answer = await client.post(URL, {"url": f"{base}/html", "server": str(server.pk)},
                               headers={"Accept": "application/json"})
    report = answer.json()
    assert report["reason"] == "policy" and report["policy_code"] == "http", report
    assert counted.requests == before  # nothing reached the internal service
    # the saved URL itself is tested as the server is connected: unrestricted (the superuser chose it)
    seeded["mcp"].log.clear()
    saved = await client.post(URL, {"url": server.url, "server": str(server.pk)}, headers={"Accept": "application/json"})
    assert saved.json()["outcome"] == "connected"
    assert (await McpServer.objects.aget(pk=server.pk)).last_test["outcome"] == "connected"


@pytest.mark.urls("tests.serverconfig.urls")
async def test_one_test_at_a_time_per_person(seeded, settings) -> None:
    """The rate limit counts tests a minute; without a bound on tests running at once, one person
    holds ``SERVER_TESTS_PER_MINUTE`` connections (each up to 20 s) open at the same moment, and
    every person of a tenant does. A second test while one of theirs runs is refused, nothing tried."""
    import asyncio

    from .hostile_http import Silent

    settings.MRTRWEB = {"SERVER_URL_POLICY": {"allow_http_hosts": ["127.0.0.1"], "allow_networks": ["127.0.0.0/8"]},
                        "SERVER_TESTS_PER_MINUTE": 100}
    silent = Silent()
    alice = AsyncClient()
    await alice.aforce_login(seeded["users"]["alice"])
    try:
        first = asyncio.create_task(alice.post(URL, {"url": f"http://127.0.0.1:{silent.port}/mcp"}))
        while not silent.accepted and not first.done():
            await asyncio.sleep(0.02)
        assert len(silent.accepted) == 1
        second = await alice.post(URL, {"url": f"http://127.0.0.1:{silent.port}/mcp"}, headers={"Accept": "application/json"})
        assert second.status_code == 429 and second.json()["reason"] == "busy"
        html = await alice.post(URL, {"url": f"http://127.0.0.1:{silent.port}/mcp"})
        assert html.status_code == 429 and "Another test of yours is still running" in html.content.decode()
        assert len(silent.accepted) == 1  # nothing was tried
        # another person is not held up by alice's test
        tenant = seeded["servers"]["acme"].tenant
        tenant.allow_personal_servers = True
        await tenant.asave()
        carol = AsyncClient()
        await carol.aforce_login(seeded["users"]["carol"])
        assert (await carol.post(URL, {"url": seeded["mcp"].url})).status_code == 200
    finally:
        silent.stop()  # the first test's connection closes: it ends
    assert (await first).status_code == 200
    again = await alice.post(URL, {"url": seeded["mcp"].url}, headers={"Accept": "application/json"})
    assert again.status_code == 200 and again.json()["outcome"] == "connected"


@pytest.mark.urls("tests.serverconfig.urls")
async def test_hostile_form_fields_are_a_clear_answer_never_a_500(seeded, settings) -> None:
    """(No fault: a regression guard.) A ``server`` id out of any integer range, not a number, of
    another tenant; an inactive admin's session; a person without the personal-servers allowance."""
    settings.MRTRWEB = {"SERVER_TESTS_PER_MINUTE": 100}
    alice = AsyncClient()
    await alice.aforce_login(seeded["users"]["alice"])
    url = "https://127.0.0.1/mcp"
    for server in ("9" * 30, "-1", "1e3", "9" * 5000, str(seeded["servers"]["globex"].pk)):
        assert (await alice.post(URL, {"url": url, "server": server})).status_code == 404, server
    # the bad slug of another tenant, and a tenant that does not exist
    assert (await alice.post("/mcp/tenants/globex/servers/test/", {"url": url})).status_code == 404
    # an admin made inactive: the session no longer signs in
    from django.contrib.auth import get_user_model

    await get_user_model().objects.filter(pk=seeded["users"]["alice"].pk).aupdate(is_active=False)
    answer = await alice.post(URL, {"url": url})
    assert answer.status_code == 302 and "/accounts/login/" in answer["Location"]


@pytest.mark.urls("tests.serverconfig.urls")
async def test_a_bearer_given_for_a_test_reaches_no_log_report_or_page(seeded, settings, caplog) -> None:
    """(No fault: a regression guard.) Every logger at DEBUG, a test with a bearer token that the
    server refuses and one it accepts: the token is in no log record, report or page."""
    import logging

    from tests.protected_mcp import serve_protected

    settings.MRTRWEB = {"SERVER_URL_POLICY": {"allow_http_hosts": ["127.0.0.1"], "allow_networks": ["127.0.0.0/8"]},
                        "SERVER_TESTS_PER_MINUTE": 100}
    handle, check = serve_protected()
    check.accepted = {"tok-secret-4711"}
    caplog.set_level(logging.DEBUG)
    for name in ("mcp", "httpx2", "httpcore", "mrtrweb"):
        caplog.set_level(logging.DEBUG, logger=name)
    try:
        alice = AsyncClient()
        await alice.aforce_login(seeded["users"]["alice"])
        answers = []
        for token, outcome in (("tok-secret-4711", "connected"), ("tok-secret-wrong", "needs_authorization")):
            as_json = await alice.post(URL, {"url": handle.url, "bearer": token}, headers={"Accept": "application/json"})
            assert as_json.json()["outcome"] == outcome
            answers += [as_json.content.decode(), (await alice.post(URL, {"url": handle.url, "bearer": token})).content.decode()]
    finally:
        handle.stop()
    logged = "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    assert caplog.records and "tok-secret" not in logged
    assert not [a for a in answers if "tok-secret" in a]


@pytest.mark.urls("tests.serverconfig.urls")
async def test_a_url_far_too_long_says_its_bound(seeded, settings) -> None:
    settings.MRTRWEB = {"SERVER_TESTS_PER_MINUTE": 100}
    alice = AsyncClient()
    await alice.aforce_login(seeded["users"]["alice"])
    answer = await alice.post(URL, {"url": "https://mcp.example.com/" + "a" * 5000, "protocol": "x" * 10_000})
    text = answer.content.decode()
    assert answer.status_code == 400 and 'data-reason="policy"' in text
    assert "The URL is longer than 4096 characters." in text, text
    as_json = await alice.post(URL, {"url": "https://mcp.example.com/" + "a" * 5000, "protocol": "x" * 10_000},
                               headers={"Accept": "application/json"})
    assert as_json.json()["protocol"] == "auto"  # not the field echoed back
