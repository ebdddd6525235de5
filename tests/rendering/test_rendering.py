"""Results as people read them (:mod:`mrtrweb.rendering`), rule by rule, with hostile inputs: media
shown only when the bytes are what they claim, Markdown never a live link or a loaded image,
structured content checked against the output schema without fetching anything, one copy of
repeated JSON, roles and audiences, and the page's bounds."""

from __future__ import annotations

import base64
import struct
import zlib

import pytest

from mrtrweb import rendering
from mrtrweb.rendering import markdown


def _png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00\x00\x00\x00")) + chunk(b"IEND", b""))


WAV = b"RIFF\x24\x00\x00\x00WAVEfmt " + b"\x00" * 28
SVG = b"<svg xmlns='http://www.w3.org/2000/svg' onload='alert(1)'/>"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _call(*content, **extra):
    return rendering.render("tools/call", {"content": list(content), **extra})


def test_a_png_and_a_wav_are_shown_and_played():
    out = _call({"type": "image", "data": b64(_png()), "mimeType": "image/png"},
                {"type": "audio", "data": b64(WAV), "mimeType": "audio/wav"})
    image, audio = out["blocks"]
    assert image["kind"] == "image" and image["src"] == "data:image/png;base64," + b64(_png())
    assert audio["kind"] == "audio" and audio["src"].startswith("data:audio/wav;base64,")


@pytest.mark.parametrize("item,why", [
    ({"type": "image", "data": b64(SVG), "mimeType": "image/png"}, "mismatch"),   # an SVG declared as PNG
    ({"type": "image", "data": b64(SVG), "mimeType": "image/svg+xml"}, "type"),   # SVG: never shown
    ({"type": "image", "data": b64(b"<html>"), "mimeType": "text/html"}, "type"),
    ({"type": "audio", "data": b64(_png()), "mimeType": "audio/mpeg"}, "mismatch"),
    ({"type": "image", "data": "!!!", "mimeType": "image/png"}, "encoding"),
    ({"type": "image", "data": "A" * (6 * 1024 * 1024), "mimeType": "image/png"}, "size"),  # never decoded
])
def test_media_that_is_not_what_it_claims_is_a_download_not_a_dump(item, why):
    out = _call(item)
    (block,) = out["blocks"]
    assert block["kind"] == "media_refused" and block["why"] == why and block["index"] == 0
    assert "text" not in block  # no base64 dump
    assert rendering.item_bytes("tools/call", {"content": [item]}, 0) is not None or why == "encoding"


def test_a_truncated_copy_never_shows_the_encoded_run():
    stored = {"mrtrweb_truncated": {"original_bytes": 20_000_000, "stored_bytes": 1000},
              "text": '{"content":[{"type":"image","data":"' + "QUFB" * 300, "isError": False}
    (block,) = rendering.render("tools/call", stored)["blocks"]
    assert "QUFBQUFB" not in block["text"] and '"data":"[… 1200 characters of encoded data not shown]' in block["text"]


def test_resource_links_and_embedded_resources():
    out = _call({"type": "resource_link", "uri": "file:///etc/passwd", "name": "passwd", "title": "The file",
                 "mimeType": "text/plain", "size": 1234},
                {"type": "resource", "resource": {"uri": "memo://1", "mimeType": "text/markdown", "text": "# Memo"}},
                {"type": "resource", "resource": {"uri": "img://1", "mimeType": "image/png", "blob": b64(_png())}},
                {"type": "resource", "resource": {"uri": "bin://1", "mimeType": "application/zip", "blob": b64(b"PK")}})
    link, text, image, binary = out["blocks"]
    assert (link["kind"], link["uri"], link["title"], link["size"]) == ("resource_link", "file:///etc/passwd",
                                                                       "The file", 1234)
    assert text["kind"] == "resource_text" and "<h1>Memo</h1>" in text["html"]
    assert image["kind"] == "image" and image["uri"] == "img://1"
    assert binary["kind"] == "media_refused" and binary["media"] == "file"
    assert rendering.item_bytes("tools/call", {"content": [{}, {}, {}, {"type": "resource", "resource": {
        "uri": "bin://1", "blob": b64(b"PK")}}]}, 3) == (b"PK", "application/octet-stream")


@pytest.mark.parametrize("source,absent,present", [
    ("[click](javascript:alert(1))", ["<a", "href"], ["javascript:alert(1)"]),  # not even a link: text
    ("[click](https://evil.example/)", ["<a", "href"], ['<span class="md-link">click</span> <code class="md-url">https://evil.example/</code>']),
    ("<https://evil.example/x>", ["<a", "href"], ["https://evil.example/x"]),
    ("![pixel](https://tracker.example/p.gif)", ["<img", "src="], ["image not loaded: pixel", "https://tracker.example/p.gif"]),
    ("**bold** <script>alert(1)</script>", ["<script"], ["<strong>bold</strong>", "&lt;script&gt;"]),
    ("# Title\n\n<img src=x onerror=alert(1)>", ["<img"], ["<h1>Title</h1>", "&lt;img"]),
    ("| a | b |\n|---|---|\n| 1 | 2 |", ["<a "], ["<table>", "<td>1</td>"]),
    ("`x` \u202eevil", ["\u202e"], ["<code>x</code>", "\u27e8U+202E\u27e9"]),
    ("[x](https://xn--e1afmkfd.example/)", [], ["https://xn--e1afmkfd.example/"]),
])
def test_markdown_is_rendered_but_never_a_live_link_or_a_loaded_image(source, absent, present):
    assert markdown.looks_like_markdown(source)
    html = markdown.render(source)
    for a in absent:
        assert a not in html, (a, html)
    for p in present:
        assert p in html, (p, html)


def test_plain_text_stays_plain():
    (block,) = _call({"type": "text", "text": "Worked for 8 s."})["blocks"]
    assert block == {"kind": "text", "text": "Worked for 8 s.", "markdown": False, "folded": False, "role": None}


def test_structured_content_checked_against_the_output_schema_and_shown_once():
    schema = {"type": "object", "properties": {"temperature": {"type": "number"}, "city": {"type": "string"}},
              "required": ["temperature"]}
    value = {"temperature": 21.5, "city": "Lyon"}
    repeated = {"type": "text", "text": '{"temperature": 21.5, "city": "Lyon"}'}
    out = rendering.render("tools/call", {"content": [repeated], "structuredContent": value}, schema)
    assert out["blocks"] == [] and out["duplicate_dropped"] is True
    s = out["structured"]
    assert s["verdict"] == "valid" and s["table"]["rows"] == [["temperature", "21.5"], ["city", "Lyon"]]
    bad = rendering.render("tools/call", {"content": [], "structuredContent": {"city": 3}}, schema)["structured"]
    assert bad["verdict"] == "invalid" and any("temperature" in p for p in bad["problems"])
    outside = {"$ref": "https://evil.example/schema.json"}
    unchecked = rendering.render("tools/call", {"content": [], "structuredContent": value}, outside)["structured"]
    assert unchecked["verdict"] == "unchecked" and unchecked["unchecked_reason"] == "schema_ref_outside"
    assert rendering.render("tools/call", {"content": [], "structuredContent": value})["structured"]["verdict"] \
        == "no_schema"


def test_structured_lists_are_tables_and_nested_values_trees():
    rows = {"items": [{"name": "a", "n": 1}, {"name": "b", "n": 2, "extra": True}]}
    table = rendering.render("tools/call", {"content": [], "structuredContent": rows})["structured"]["table"]
    assert table["columns"] == ["name", "n", "extra"] and table["rows"] == [["a", "1", ""], ["b", "2", "true"]]
    nested = {"a": {"b": [1, {"c": None}]}, "d": "e"}
    tree = rendering.render("tools/call", {"content": [], "structuredContent": nested})["structured"]["tree"]
    assert [(line["depth"], line["key"], line["value"]) for line in tree] == [
        (0, "a", None), (1, "b", None), (2, "[0]", "1"), (2, "[1]", None), (3, "c", "null"), (0, "d", "e")]


def test_roles_audiences_errors_and_folding():
    prompt = rendering.render("prompts/get", {"messages": [
        {"role": "user", "content": {"type": "text", "text": "Hi"}},
        {"role": "assistant", "content": {"type": "text", "text": "Hello"}}]})
    assert [b["role"] for b in prompt["blocks"]] == ["user", "assistant"]
    out = _call({"type": "text", "text": "for the model", "annotations": {"audience": ["assistant"]}},
                {"type": "text", "text": "for both", "annotations": {"audience": ["user", "assistant"]}},
                isError=True)
    assert [b["folded"] for b in out["blocks"]] == [True, False] and out["is_error"] is True
    assert _call(*[{"type": "text", "text": "x"}] * 7)["foldable"] is True
    assert _call({"type": "text", "text": "short"})["foldable"] is False


def test_the_page_budget_holds(settings):
    settings.MRTRWEB = {"MAX_SHOWN_CHARS": 100}
    out = _call({"type": "text", "text": "a" * 80}, {"type": "text", "text": "b" * 80}, {"type": "text", "text": "c"})
    assert [len(b["text"]) for b in out["blocks"]] == [80, 20]
    assert out["result_cut"] is True and out["shown_chars"] == 100 and out["total_chars"] == 161


# --------------------------------------------------------------------------------------------
# the attack pass on issue 28's code: each a fault found by trying to break it
# --------------------------------------------------------------------------------------------


def test_a_resource_link_renders_with_its_read_form(settings):
    """A resource_link block carries its index: the page's Read form has its URL (was a 500)."""
    import uuid

    from django.template.loader import render_to_string

    from mrtrweb.models import McpServer, Operation

    op = Operation(id=uuid.uuid4(), method="tools/call", name="t", status="completed",
                   server=McpServer(name="S", url="http://127.0.0.1:1/mcp"))
    result = {"content": [{"type": "resource_link", "uri": "file:///x", "name": "x", "size": 10**400},
                          {"type": "resource_link", "uri": "u://" + "a" * 3000, "name": "long"}]}
    ctx = {"op": op, "csrf_token": "t", **rendering.render("tools/call", result)}
    html = render_to_string("mrtrweb/_result.html", ctx)
    assert html.count(f"/mcp/operations/{op.id}/content/0/read/") == 1  # the long URI: shown, no Read
    assert "/content/1/read/" not in html


def test_markdown_detection_is_linear_on_hostile_text():
    import time

    for text in ("[" * 30000, "<a:" * 10000, "[a](" * 8000, "**" * 20000):
        start = time.process_time()
        markdown.looks_like_markdown(text)
        assert time.process_time() - start < 0.5, text[:10]


@pytest.mark.parametrize("entity", ["&#x202E;", "&rlm;", "&#x200B;", "&#xE0041;", "&#x2066;"])
def test_entities_do_not_smuggle_bidi_or_invisible_characters(entity):
    html = markdown.render(f"**Invoice** for {entity}fdp.exe\n\n| a |\n|---|\n| {entity}x |")
    assert not any(ch in html for ch in "\u202e\u200f\u200b\U000e0041\u2066"), html
    assert "\u27e8U+" in html


def test_deep_nesting_is_not_amplified_by_indentation():
    deep: list = [0] * 5000
    for _ in range(150):
        deep = [deep]
    out = rendering.render("tools/call", {"content": [], "structuredContent": {"v": deep}})
    assert len(out["structured"]["json"]) <= 100_100 and out["total_chars"] < 200_000
    from mrtrweb import catalog

    assert len(catalog.pretty_schema({"default": deep})) < 20_100


def test_schema_problem_lines_are_bounded():
    value = {("k" * 200_000) + str(i): "x" for i in range(5)}
    view = rendering.render("tools/call", {"content": [], "structuredContent": value},
                            {"type": "object", "additionalProperties": {"type": "integer"}})["structured"]
    assert view["verdict"] == "invalid" and all(len(p) < 700 for p in view["problems"])


def test_a_bare_signature_is_not_an_image():
    """Eight bytes of PNG signature (a hostile server's "image") are no PNG: a download, no <img>."""
    (block,) = _call({"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"})["blocks"]
    assert block["kind"] == "media_refused" and block["why"] == "mismatch"
