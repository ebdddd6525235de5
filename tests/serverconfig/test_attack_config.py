"""Attacks through the deployer's own setting (``SERVER_URL_POLICY``): an entry that passes the
start-up check but does not do what it looks like at run time is refused at start-up
(``mrtrweb.E050``), saying what to write instead.

* ``allow_networks`` entries covering public addresses (``0.0.0.0/0``, ``::/0``, ``10.0.0.0/7``):
  public addresses are allowed anyway, so the only effect of such an entry is to open every
  private, loopback and link-local address it also covers (the cloud metadata address among them)
  -- a typo or a misunderstanding, never what a deployer means.
* ``allow_hosts`` / ``allow_http_hosts`` names that are no host name (``*.corp.example``): they
  would silently match nothing.

Each test here failed before its fix (see the commit that added it).
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from mrtrweb import checks, conf
from mrtrweb.mcp.url_policy import parse_policy


@pytest.mark.parametrize("value, words", [
    ({"allow_networks": ["0.0.0.0/0"]}, "covers public addresses"),
    ({"allow_networks": ["::/0"]}, "covers public addresses"),
    ({"allow_networks": ["10.0.0.0/7"]}, "covers public addresses"),
    ({"allow_networks": ["10.0.0.0/8", "128.0.0.0/1"]}, "covers public addresses"),
    ({"allow_networks": ["2000::/3"]}, "covers public addresses"),
    ({"allow_hosts": ["*.corp.example"]}, "not a host name"),
    ({"allow_http_hosts": ["mcp.corp.example/mcp"]}, "not a host name"),
    ({"allow_hosts": ["mcp corp"]}, "not a host name"),
])
def test_a_setting_that_would_not_do_what_it_says_stops_start_up(settings, value, words) -> None:
    with pytest.raises(ValueError, match=words):
        parse_policy(value)
    settings.MRTRWEB = {"SERVER_URL_POLICY": value}
    with pytest.raises(ImproperlyConfigured, match=words):
        conf.server_url_policy_of(value)
    assert conf.server_url_policy().unusable  # at run time: every URL refused (test_attack_config)
    assert [m.id for m in checks.check_settings() if m.id.startswith("mrtrweb.E")] == ["mrtrweb.E050"]


def test_private_networks_and_names_still_pass() -> None:
    policy = parse_policy({"allow_networks": ["10.20.0.0/16", "127.0.0.0/8", "192.168.0.0/16", "172.16.0.0/12",
                                             "100.64.0.0/10", "fd12:3456::/48", "fe80::/10", "169.254.10.0/24"],
                           "allow_hosts": ["mcp.corp.example", ".tools.corp.example", "10.9.9.9", "[fd00::1]",
                                           "mcp_1.corp.example", "bücher.example"],
                           "allow_http_hosts": ["legacy-mcp.corp.example."]})
    assert len(policy.allow_networks) == 8
    assert policy.allow_hosts == frozenset({"mcp.corp.example", ".tools.corp.example", "10.9.9.9", "fd00::1",
                                            "mcp_1.corp.example", "xn--bcher-kva.example"})
    assert policy.allow_http_hosts == frozenset({"legacy-mcp.corp.example"})


@pytest.mark.urls("tests.serverconfig.urls")
async def test_a_wrong_setting_at_run_time_refuses_clearly_never_a_500(seeded, settings, caplog) -> None:
    """The ASGI server does not run Django's checks: a deployment started without ``check`` with a
    wrong ``SERVER_URL_POLICY`` must still refuse clearly -- a test's report and a connection of a
    server under the policy say the policy cannot be read (logged), nothing is sent, never a 500."""
    import logging

    from django.test import AsyncClient

    from mrtrweb.mcp import McpCallError
    from mrtrweb.models import McpServer
    from mrtrweb.servers.connections import connection_for, pool

    # (a value no other test uses: its error is logged once per process)
    settings.MRTRWEB = {"SERVER_URL_POLICY": {"allow_networks": ["8.0.0.0/7"]}, "SERVER_TESTS_PER_MINUTE": 100}
    caplog.set_level(logging.WARNING, logger="mrtrweb")
    alice = AsyncClient()
    await alice.aforce_login(seeded["users"]["alice"])
    seeded["mcp"].log.clear()
    answer = await alice.post("/mcp/tenants/acme/servers/test/", {"url": seeded["mcp"].url},
                              headers={"Accept": "application/json"})
    assert answer.status_code == 200, answer.status_code
    assert answer.json()["reason"] == "policy" and answer.json()["policy_code"] == "setting"
    page = await alice.post("/mcp/tenants/acme/servers/test/", {"url": seeded["mcp"].url})
    assert "URL policy cannot be read" in page.content.decode()
    server = seeded["servers"]["acme"]
    await McpServer.objects.filter(pk=server.pk).aupdate(url_policy=True)
    server = await McpServer.objects.select_related("tenant").aget(pk=server.pk)
    with pytest.raises(McpCallError) as caught:
        await connection_for(seeded["users"]["alice"], server)
    assert caught.value.code == "transport_error" and caught.value.reason == "policy"
    assert seeded["mcp"].log.records() == []  # nothing was sent
    assert [r.levelname for r in caplog.records if r.name == "mrtrweb.mcp.url_policy" and "8.0.0.0/7" in r.getMessage()] == ["ERROR"]
    await pool().close_all()
