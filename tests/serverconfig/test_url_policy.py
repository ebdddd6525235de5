"""The deployer's URL policy of servers people add (issue 29, item 3): every refused form, allowed
hosts and networks, the setting and its start-up check, and the connection of a server added under
it -- checked again at each connection and pinned to the checked address, so a public name
re-pointed to a private address between the test and the call reaches nothing.

Names resolve through the one seam :func:`mrtrweb.mcp.outbound.resolve_host`; :class:`Names`
replaces it where a test needs a name to point somewhere (``localhost`` resolves for real).
"""

from __future__ import annotations

import ipaddress

import pytest
from django.core.exceptions import ImproperlyConfigured, ValidationError

from mrtrweb import checks, conf
from mrtrweb.mcp import McpCallError, McpConnection
from mrtrweb.mcp.url_policy import UrlPolicy, UrlRefused, parse_policy
from mrtrweb.serverconfig import policy


DEFAULT = UrlPolicy(timeout_s=3.0)


@pytest.mark.parametrize("url, code", [
    ("ftp://mcp.example.com/mcp", "scheme"),
    ("file:///etc/passwd", "scheme"),
    ("javascript:alert(1)", "scheme"),
    ("mcp.example.com/mcp", "scheme"),
    ("https://user:secret@mcp.example.com/mcp", "userinfo"),
    ("https://127.0.0.1@169.254.169.254/", "userinfo"),
    ("http://mcp.example.com/mcp", "http"),
    ("http://93.184.216.34/mcp", "http"),
    ("https://exa mple.com/mcp", "url"),
    ("https://mcp.example.com:99999/mcp", "url"),
    ("https:///mcp", "url"),
    ("", "url"),
    ("https://no-such-host.invalid/mcp", "dns"),
    # loopback, private (RFC 1918, ULA), link-local (cloud metadata), shared, reserved, unspecified, multicast
    ("https://127.0.0.1/mcp", "address"),
    ("https://[::1]/mcp", "address"),
    ("https://10.0.0.5/mcp", "address"),
    ("https://172.16.0.1/mcp", "address"),
    ("https://192.168.1.1/mcp", "address"),
    ("https://[fd00::1]/mcp", "address"),
    ("https://169.254.169.254/latest/meta-data/", "address"),
    ("https://[fe80::1]/mcp", "address"),
    ("https://100.64.0.1/mcp", "address"),
    ("https://240.0.0.1/mcp", "address"),
    ("https://0.0.0.0/mcp", "address"),
    ("https://224.0.0.1/mcp", "address"),
    # the IPv4 address carried by IPv4-mapped, NAT64 and 6to4 forms is what counts
    ("https://[::ffff:127.0.0.1]/mcp", "address"),
    ("https://[::ffff:10.0.0.1]/mcp", "address"),
    ("https://[::ffff:169.254.169.254]/mcp", "address"),
    ("https://[64:ff9b::a9fe:a9fe]/mcp", "address"),
    ("https://[64:ff9b::7f00:1]/mcp", "address"),
    ("https://[2002:a00:1::]/mcp", "address"),
    ("https://[2002:7f00:1::]/mcp", "address"),
    # a real name that resolves to loopback
    ("https://localhost/mcp", "address"),
])
async def test_refused_forms(url: str, code: str) -> None:
    with pytest.raises(UrlRefused) as caught:
        await DEFAULT.resolve(url)
    assert caught.value.code == code, caught.value.reason
    assert "secret" not in caught.value.reason and "secret" not in str(caught.value.detail)


async def test_over_the_length_bound_is_refused_before_anything_else(names) -> None:
    url = "https://mcp.example.com/" + "a" * 477
    assert len(url) == 501
    with pytest.raises(UrlRefused) as caught:
        await DEFAULT.resolve(url)
    assert caught.value.code == "too_long" and caught.value.detail == {"max": 500}
    assert names.asked == []  # refused before any resolution
    names.names["mcp.example.com"] = ["93.184.216.34"]
    assert await DEFAULT.resolve(url[:500]) == ["93.184.216.34"]
    assert await UrlPolicy(max_url_chars=1000).resolve(url) == ["93.184.216.34"]


async def test_a_name_is_judged_by_every_address_it_resolves_to(names, caplog) -> None:
    caplog.set_level("INFO", logger="mrtrweb.mcp.url_policy")
    names.names["mixed.example.com"] = ["93.184.216.34", "10.1.2.3"]
    with pytest.raises(UrlRefused) as caught:
        await DEFAULT.resolve("https://mixed.example.com/mcp")
    assert caught.value.code == "address" and "address" not in caught.value.detail  # never shown (test_attack_disclosure)
    assert any("mixed.example.com resolves to 10.1.2.3" in r.getMessage() for r in caplog.records)  # logged
    names.names["public.example.com"] = ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"]
    assert await DEFAULT.resolve("https://public.example.com/mcp") == ["93.184.216.34",
                                                                      "2606:2800:220:1:248:1893:25c8:1946"]


async def test_allowed_hosts_networks_and_http_hosts(names) -> None:
    names.names.update({"mcp.corp.example": ["10.20.0.7"], "tools.corp.example": ["10.20.0.8"],
                        "other.example": ["192.168.5.5"]})
    on_prem = parse_policy({"allow_hosts": ["mcp.corp.example"], "allow_networks": ["192.168.0.0/16", "fd00::/8"],
                            "allow_http_hosts": ["mcp.corp.example", ".lab.example"]})
    assert await on_prem.resolve("https://mcp.corp.example/mcp") == ["10.20.0.7"]
    assert await on_prem.resolve("http://mcp.corp.example:8080/mcp") == ["10.20.0.7"]
    with pytest.raises(UrlRefused, match="tools.corp.example resolves to a private") as caught:  # not the allowed host, not the network
        await on_prem.resolve("https://tools.corp.example/mcp")
    assert caught.value.code == "address"
    assert await on_prem.resolve("https://other.example/mcp") == ["192.168.5.5"]  # the allowed network
    assert await on_prem.resolve("https://[::ffff:192.168.1.1]/mcp") == ["::ffff:c0a8:101"]  # mapped, in the network
    assert await on_prem.resolve("https://[fd00::7]/mcp") == ["fd00::7"]
    with pytest.raises(UrlRefused) as caught:  # plain http only to allowed http hosts
        await on_prem.resolve("http://other.example/mcp")
    assert caught.value.code == "http"
    names.names["a.lab.example"] = ["192.168.9.9"]
    assert await on_prem.resolve("http://a.lab.example/mcp") == ["192.168.9.9"]  # under the .domain entry
    names.names["lab.example"] = ["192.168.9.9"]
    with pytest.raises(UrlRefused):  # the domain itself is not "under" it
        await on_prem.resolve("http://lab.example/mcp")
    # the scheme and userinfo rules hold for allowed hosts too
    for url, code in (("ftp://mcp.corp.example/", "scheme"), ("https://u:p@mcp.corp.example/", "userinfo")):
        with pytest.raises(UrlRefused) as caught:
            await on_prem.resolve(url)
        assert caught.value.code == code
    # an IP literal allowed by host
    assert await parse_policy({"allow_hosts": ["10.9.9.9"]}).resolve("https://10.9.9.9/mcp") == ["10.9.9.9"]


@pytest.mark.parametrize("value, words", [
    ("10.0.0.0/8", "must be a dict"),
    ({"allow_host": ["x"]}, "unknown keys"),
    ({"allow_networks": ["10.0.0.0/33"]}, "not a network"),
    ({"allow_networks": "10.0.0.0/8"}, "must be a list"),
    ({"allow_hosts": ["https://mcp.corp.example/"]}, "not a host name"),
    ({"allow_http_hosts": [""]}, "list of host names"),
    ({"max_url_chars": 0}, "20 to 4096"),
    ({"max_url_chars": True}, "20 to 4096"),
])
def test_a_wrong_setting_stops_start_up_with_E050(settings, value, words) -> None:
    settings.MRTRWEB = {"SERVER_URL_POLICY": value}
    with pytest.raises(ImproperlyConfigured, match=words):
        conf.server_url_policy_of(value)
    assert conf.server_url_policy().unusable  # at run time: every URL refused (test_attack_config)
    errors = [m for m in checks.check_settings() if m.id == "mrtrweb.E050"]
    assert len(errors) == 1 and words in errors[0].msg
    assert not [m for m in checks.check_settings() if m.id == "mrtrweb.E001"]


def test_the_setting_from_the_environment_and_its_default(settings) -> None:
    assert conf.from_environ({"MRTRWEB_SERVER_URL_POLICY": '{"allow_networks": ["10.0.0.0/8"]}'}) == {
        "SERVER_URL_POLICY": {"allow_networks": ["10.0.0.0/8"]}}
    for raw in ("[1]", "{nope"):
        with pytest.raises(ImproperlyConfigured, match="JSON object"):
            conf.from_environ({"MRTRWEB_SERVER_URL_POLICY": raw})
    settings.MRTRWEB = {}
    assert conf.server_url_policy() == UrlPolicy(timeout_s=10.0)
    assert not [m for m in checks.check_settings() if m.id.startswith("mrtrweb.E")]


def test_the_form_validator_says_why_in_the_persons_language(settings) -> None:
    from django.utils import translation

    settings.MRTRWEB = {}
    with pytest.raises(ValidationError) as caught:
        policy.validate_url("https://localhost/mcp")
    assert caught.value.code == "url_policy_address"
    assert "localhost resolves to a private, loopback" in caught.value.messages[0]
    with pytest.raises(ValidationError) as caught:
        policy.validate_url("https://10.0.0.1/mcp")
    assert caught.value.messages == ["10.0.0.1 is a private, loopback, link-local or reserved address this "
                                     "deployment does not allow servers at."]
    with translation.override("de"), pytest.raises(ValidationError) as caught:
        policy.validate_url("ftp://example.com/")
    assert caught.value.code == "url_policy_scheme" and "https" in caught.value.messages[0]
    assert caught.value.messages[0] != "Only https URLs are allowed (this one starts with ftp:)."
    settings.MRTRWEB = {"SERVER_URL_POLICY": {"allow_hosts": ["localhost"]}}
    assert policy.check("https://localhost/mcp")[0] in ("127.0.0.1", "::1")
    policy.validate_url("https://localhost/mcp")


# ------------------------------------------------------------------------------------------------
# The connection: checked at each connection, pinned to the checked address
# ------------------------------------------------------------------------------------------------


def _loopback_policy(**kw) -> UrlPolicy:
    return UrlPolicy(allow_http_hosts=frozenset({"mcp.example.test", "127.0.0.1"}), timeout_s=3.0, **kw)


async def test_a_public_name_repointed_to_a_private_address_after_the_test_reaches_nothing(names, counted_demo) -> None:
    handle, counted = counted_demo
    url = f"http://mcp.example.test:{handle.port}/mcp"
    pol = _loopback_policy()
    names.names["mcp.example.test"] = ["93.184.216.34"]  # public when saved
    assert await pol.resolve(url) == ["93.184.216.34"]
    names.names["mcp.example.test"] = ["127.0.0.1"]  # re-pointed before the call
    before = counted.requests
    with pytest.raises(McpCallError) as caught:
        async with McpConnection(url, url_policy=pol, timeout_s=5):
            pass
    assert caught.value.code == "transport_error" and caught.value.reason == "policy"
    assert "mcp.example.test resolves to a private" in caught.value.message
    assert counted.requests == before  # nothing reached the server
    # without the policy (a superuser's server), the same URL is connected as today
    async with McpConnection(url.replace("mcp.example.test", "127.0.0.1"), timeout_s=5) as conn:
        assert conn.protocol_version
    assert counted.requests > before


async def test_the_connection_goes_to_the_checked_address_and_is_checked_again_at_the_next(names, counted_demo) -> None:
    handle, counted = counted_demo
    url = f"http://mcp.example.test:{handle.port}/mcp"
    pol = _loopback_policy(allow_networks=(ipaddress.ip_network("127.0.0.0/8"),))
    names.names["mcp.example.test"] = ["127.0.0.1"]
    first = len(counted.hosts)
    async with McpConnection(url, url_policy=pol, timeout_s=5) as conn:
        asked = len(names.asked)
        assert asked == 1
        names.names["mcp.example.test"] = ["10.99.0.1"]  # rebinding during the connection: not asked again
        assert len(await conn.list_tools()) > 0
        assert len(names.asked) == asked  # every request went to the address checked at connect
    # (.test names resolve nowhere for real: only the pinned address was reached, under the name)
    assert counted.hosts[first:] and set(counted.hosts[first:]) == {f"mcp.example.test:{handle.port}"}
    before = counted.requests
    with pytest.raises(McpCallError) as caught:  # the next connection checks again
        async with McpConnection(url, url_policy=pol, timeout_s=5):
            pass
    assert caught.value.reason == "policy" and counted.requests == before


async def test_connection_for_follows_the_servers_flag_and_the_pool_reopens_when_it_changes(seeded, settings) -> None:
    from mrtrweb.servers.connections import connection_for, pool

    settings.MRTRWEB = {}
    server, alice = seeded["servers"]["acme"], seeded["users"]["alice"]
    assert not server.url_policy  # seeded as a superuser's server: not restricted
    first = await connection_for(alice, server)
    assert first.is_open and first.url_policy is None
    server.url_policy = True  # now under the default policy: loopback http is refused
    with pytest.raises(McpCallError) as caught:
        await connection_for(alice, server)
    assert caught.value.reason == "policy"
    assert not first.is_open  # the pooled connection of the other verdict was closed, not reused
    host = server.url.split("//", 1)[1].split(":", 1)[0]
    settings.MRTRWEB = {"SERVER_URL_POLICY": {"allow_http_hosts": [host], "allow_networks": ["127.0.0.0/8"]}}
    again = await connection_for(alice, server)
    assert again.is_open and again.url_policy is not None and again is not first
    assert await connection_for(alice, server) is again  # the same verdict: the pooled one
    await pool().close_all()


async def test_the_authorization_flows_of_a_policy_server_hold_the_policy_too(names, counted_demo, settings) -> None:
    """Discovery, refresh and revocation requests to the server's own origin (OAuth per person)
    go through a guarded client of ``outbound_policy(server)``: checked and pinned as the connection."""
    from types import SimpleNamespace

    from mrtrweb.authz.config import outbound_policy
    from mrtrweb.mcp.outbound import guarded_client

    handle, counted = counted_demo
    settings.MRTRWEB = {"SERVER_URL_POLICY": {"allow_http_hosts": ["mcp.example.test"]},
                        "OUTBOUND_ALLOW_HTTP_LOOPBACK": True}
    assert outbound_policy(SimpleNamespace(url_policy=False)).mcp_policy is None
    held = outbound_policy(SimpleNamespace(url_policy=True))
    assert held.mcp_policy == conf.server_url_policy()
    names.names["mcp.example.test"] = ["127.0.0.1"]
    origin = f"http://mcp.example.test:{handle.port}"
    before = counted.requests
    async with guarded_client(held, mcp_origin=origin, bound_mcp=True) as client:
        with pytest.raises(UrlRefused) as caught:
            await client.get(f"{origin}/.well-known/oauth-protected-resource/mcp")
    assert caught.value.code == "address" and counted.requests == before
    # a superuser's server: its origin is the admin's choice, as before
    async with guarded_client(outbound_policy(SimpleNamespace(url_policy=False)), mcp_origin=f"http://127.0.0.1:{handle.port}",
                              bound_mcp=True) as client:
        await client.get(f"http://127.0.0.1:{handle.port}/.well-known/oauth-protected-resource/mcp")
    assert counted.requests == before + 1


async def test_https_pinned_to_the_checked_address_is_verified_for_the_name(names, tls_demo, fresh_context,
                                                                            monkeypatch) -> None:
    """The certificate (``localhost`` and 127.0.0.1) is checked against the URL's name, not the
    pinned address: a name the certificate does not cover fails as TLS although its address is in it."""
    url, cert = tls_demo
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    port = url.split(":")[2].split("/")[0]
    pol = UrlPolicy(allow_networks=(ipaddress.ip_network("127.0.0.0/8"),), timeout_s=3.0)
    names.names["localhost"] = ["127.0.0.1"]
    async with McpConnection(url, url_policy=pol, timeout_s=10) as conn:
        assert any(t["name"] == "deploy" for t in await conn.list_tools())
    names.names["other.example.test"] = ["127.0.0.1"]
    with pytest.raises(McpCallError) as caught:
        async with McpConnection(f"https://other.example.test:{port}/mcp", url_policy=pol, timeout_s=10):
            pass
    assert caught.value.reason == "tls"


async def test_the_server_page_says_the_policy_refused_the_address_now(seeded, settings) -> None:
    from django.test import AsyncClient

    from mrtrweb.models import McpServer

    settings.MRTRWEB = {}
    server = seeded["servers"]["acme"]
    await McpServer.objects.filter(pk=server.pk).aupdate(url_policy=True)  # added under the policy; now on loopback
    seeded["mcp"].log.clear()
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["carol"])
    page = await client.get(f"/mcp/servers/{server.pk}/")
    assert page.status_code == 200
    assert 'data-reason="policy"' in page.content.decode()
    assert "URL policy does not allow the address" in page.content.decode()
    assert seeded["mcp"].log.records() == []  # nothing was sent


async def test_the_sync_check_works_inside_an_event_loop_too(settings) -> None:
    """A form validated inside an async view (no ``sync_to_async``) must not fail with a 500."""
    settings.MRTRWEB = {}
    with pytest.raises(ValidationError) as caught:
        policy.validate_url("https://localhost/mcp")
    assert caught.value.code == "url_policy_address"
    assert policy.check("https://93.184.216.34/mcp") == ["93.184.216.34"]


async def test_a_call_to_a_server_the_policy_refuses_now_sends_nothing(seeded, settings) -> None:
    from django.test import AsyncClient

    from mrtrweb import operations
    from mrtrweb.models import McpServer, Operation

    settings.MRTRWEB = {"MAX_STARTS_PER_MINUTE": 10_000}
    server = seeded["servers"]["acme"]
    await McpServer.objects.filter(pk=server.pk).aupdate(url_policy=True)
    server = await McpServer.objects.select_related("tenant").aget(pk=server.pk)
    seeded["mcp"].log.clear()
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    # the tool page cannot list the server: as for any server it cannot reach (503), it says why
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/?name=chatty", {"arg-lines": "1"})
    assert resp.status_code == 503
    assert "URL policy does not allow the address this server&#x27;s name points to now" in resp.content.decode()
    # an operation started (the headless way) fails at its connect with that reason, nothing sent
    op = await operations.start_operation(user=seeded["users"]["alice"], server=server, method="tools/call",
                                          name="chatty", params={"name": "chatty", "arguments": {"lines": 1}})
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=op.pk)
    assert op.status == Operation.Status.FAILED and op.error_code == "transport_error", op.error_code
    assert "URL policy does not allow" in op.error_message
    page = await client.get(f"/mcp/operations/{op.pk}/", headers={"Accept-Language": "de"})
    assert "Die URL-Richtlinie dieser Installation" in page.content.decode()  # translated when shown
    assert seeded["mcp"].log.records() == []  # nothing was sent
