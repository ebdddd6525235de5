"""The app CSP builder against hostile ``_meta.ui.csp`` values, and a tool's ``_meta.ui`` (issue 31,
items 1 and 2)."""

from __future__ import annotations

import pytest

from mrtrweb.mcpapps import csp, meta

DEFAULT = ("default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
           "img-src 'self' data:; media-src 'self' data:; font-src 'self'; connect-src 'none'; "
           "frame-src 'none'; base-uri 'self'; object-src 'none'; form-action 'none'")


def directives(header: str) -> dict[str, str]:
    return {part.split(" ", 1)[0]: part.split(" ", 1)[1] for part in header.split("; ")}


@pytest.mark.parametrize("declared", [None, {}, [], "x", {"connectDomains": None}, {"connectDomains": []}])
def test_nothing_declared_is_the_restrictive_default(declared):
    policy = csp.build(declared)
    assert policy.header == DEFAULT
    assert policy.outside_domains == () and policy.refused == ()


def test_declared_domains_land_in_their_directives_only():
    policy = csp.build({"connectDomains": ["https://api.example.com", "wss://live.example.com:8443"],
                        "resourceDomains": ["https://cdn.example.com/"],
                        "frameDomains": ["https://www.youtube.com"],
                        "baseUriDomains": ["https://base.example.com"]})
    d = directives(policy.header)
    assert d["connect-src"] == "https://api.example.com wss://live.example.com:8443"
    assert d["script-src"] == "'self' 'unsafe-inline' https://cdn.example.com"
    assert d["img-src"] == "'self' data: https://cdn.example.com"
    assert d["frame-src"] == "https://www.youtube.com"
    assert d["base-uri"] == "https://base.example.com"
    assert d["default-src"] == "'none'"
    assert policy.refused == ()
    assert policy.outside_domains == ("https://api.example.com", "wss://live.example.com:8443",
                                      "https://cdn.example.com", "https://www.youtube.com",
                                      "https://base.example.com")


HOSTILE = [
    ("*", "wildcards"), ("https://*", "wildcards"), ("https://*.example.com", "wildcards"),
    ("data:", "bare origin"), ("javascript:alert(1)", "bare origin"), ("blob:", "bare origin"),
    ("data://x.example.com", "scheme"), ("javascript://example.com", "scheme"),
    ("http://example.com", "scheme"), ("wss://example.com", "scheme"),  # wss only for connect
    ("https://example.com/path", "bare origin"), ("https://user@example.com", "bare origin"),
    ("https://example.com; script-src 'self'", "separators"), ("https://a.com 'unsafe-eval'", "separators"),
    ("'self'", "separators"), ("https://localhost", "public host"), ("https://app.localhost", "public host"),
    ("https://printer.local", "public host"), ("https://intranet", "public host"),
    ("https://127.0.0.1", "private"), ("https://10.0.0.8:8443", "private"), ("https://192.168.1.1", "private"),
    ("https://169.254.169.254", "private"), ("https://[::1]", "private"), ("https://[fd00::1]", "private"),
    ("https://0.0.0.0", "private"), (42, "not a string"), ({"x": 1}, "not a string"), ("", "empty"),
]


@pytest.mark.parametrize(("value", "why"), HOSTILE)
def test_hostile_resource_domains_are_refused_with_a_reason(value, why):
    policy = csp.build({"resourceDomains": [value], "frameDomains": [value], "baseUriDomains": [value]})
    assert policy.header == DEFAULT  # nothing hostile reaches the header
    assert len(policy.refused) == 3
    assert all(why in reason for _, _, reason in policy.refused)


def test_hostile_connect_domains_never_widen_the_policy():
    policy = csp.build({"connectDomains": ["*", "http://api.example.com", "https://127.0.0.1:9000",
                                           "https://ok.example.com"]})
    assert directives(policy.header)["connect-src"] == "https://ok.example.com"
    assert len(policy.refused) == 3


def test_too_many_domains_are_cut():
    many = [f"https://h{i}.example.com" for i in range(csp.MAX_DOMAINS + 5)]
    policy = csp.build({"connectDomains": many})
    assert len(policy.domains["connectDomains"]) == csp.MAX_DOMAINS
    assert len(policy.refused) == 5


def test_permissions_only_declared_and_allowed():
    declared = {"camera": {}, "microphone": {}, "clipboardWrite": {}, "usb": {}}
    assert csp.allow_attribute(declared) == ""
    assert csp.allow_attribute(declared, {"clipboardWrite", "geolocation", "usb"}) == "clipboard-write"
    assert csp.allow_attribute("camera", {"camera"}) == ""


def test_tool_meta():
    app_tool = {"name": "t", "_meta": {"ui": {"resourceUri": "ui://x/app.html"}}}
    assert meta.resource_uri(app_tool) == "ui://x/app.html"
    assert meta.resource_uri({"_meta": {"ui/resourceUri": "ui://flat"}}) == "ui://flat"
    for bad in ("https://evil.example/app.html", "ui://", 7, "ui://a\nb"):
        assert meta.resource_uri({"_meta": {"ui": {"resourceUri": bad}}}) is None
    assert meta.resource_uri({"name": "plain"}) is None and meta.resource_uri(None) is None
    assert not meta.app_only(app_tool)
    assert meta.app_only({"_meta": {"ui": {"visibility": ["app"]}}})
    assert not meta.app_only({"_meta": {"ui": {"visibility": ["model"]}}})
    assert not meta.app_only({"_meta": {"ui": {"visibility": "app"}}})  # not a list: the default
    assert meta.visibility({"_meta": {"ui": {"visibility": [1]}}}) == ("model", "app")
