"""A server.json of the MCP registry's schema fills in the Add form (issue 29, item 5):
``mrtrweb.serverconfig.registry.parse`` on a real-shaped file (tests/serverconfig/server.json: a
streamable-http remote with a URL variable and a secret header, an sse remote, an npm package run
over stdio), and its refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mrtrweb.serverconfig import registry

FIXTURE = Path(__file__).with_name("server.json")


def test_a_real_shaped_server_json_fills_the_streamable_http_remote_and_explains_the_rest():
    imported = registry.parse(FIXTURE.read_text())
    assert imported.name == "Weather (Example Org)"
    assert imported.url == "https://eu.weather.example.org/mcp"  # the variable's default filled in
    notes = "\n".join(imported.notes)
    assert "X-Api-Key" in notes and "a secret" in notes and "required" in notes
    assert "https://weather.example.org/sse" in notes and "SSE" in notes  # explained, not used
    assert "@example-org/weather-mcp" in notes and "npm" in notes and "stdio" in notes and "never starts" in notes


def test_a_placeholder_without_default_is_not_filled_in():
    doc = {"name": "io.example/x", "version": "1.0.0", "description": "x",
           "remotes": [{"type": "streamable-http", "url": "https://{tenant}.example.com/mcp",
                        "variables": {"tenant": {"description": "yours", "isRequired": True}}}]}
    imported = registry.parse(json.dumps(doc))
    assert imported.url == "" and imported.name == "io.example/x"
    assert any("tenant" in n and "by hand" in n for n in imported.notes)


def test_packages_only_fill_nothing_but_say_why():
    doc = json.loads(FIXTURE.read_text())
    del doc["remotes"]
    imported = registry.parse(json.dumps(doc))
    assert imported.url == "" and "no Streamable HTTP remote" in imported.notes[0]


@pytest.mark.parametrize(("text", "code"), [
    ("{not json", "bad_json"),
    ("[1, 2]", "not_object"),
    (json.dumps({"name": "io.example/x", "version": "1"}), "no_remote"),
    (b"\xff\xfe{}", "not_utf8"),
    ("{" + " " * registry.MAX_BYTES + "}", "too_large"),
    ("[" * 100_000 + "]" * 100_000, "too_large"),
])
def test_refusals_have_stable_codes(text, code):
    with pytest.raises(registry.RegistryError) as info:
        registry.parse(text)
    assert info.value.code == code and info.value.message


def test_deep_nesting_within_the_bound_is_a_clear_error():
    with pytest.raises(registry.RegistryError) as info:
        registry.parse("[" * 30_000 + "]" * 30_000)
    assert info.value.code in ("bad_json", "not_object")
