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
        conf.server_url_policy()
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
