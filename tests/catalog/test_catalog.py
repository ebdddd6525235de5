"""The catalog's rules (:mod:`mrtrweb.catalog`), one by one, with hostile inputs: annotations read
with the MCP defaults, icons only as checked ``data:`` raster images (never a URL), schemas and
identity bounded."""

from __future__ import annotations

import base64
import io
import struct
import zlib

import pytest

from mrtrweb import catalog
from mrtrweb.catalog import icons


def _png(width: int = 1, height: int = 1, pad: int = 0) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = b"".join(b"\x00" + b"\x00\x00\x00" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + (chunk(b"tEXt", b"c\x00" + b"x" * pad) if pad else b"")
            + chunk(b"IEND", b""))


GIF = b"GIF89a\x01\x00\x01\x00\x00\x00\x00;"


def _data(kind: str, data: bytes) -> str:
    return f"data:{kind};base64,{base64.b64encode(data).decode()}"


@pytest.mark.parametrize("annotations,badges,destructive", [
    (None, ["maybe_destructive"], True),  # says nothing: destructive by the defaults
    ({}, ["maybe_destructive"], True),
    ({"readOnlyHint": True}, ["read_only"], False),
    ({"readOnlyHint": True, "destructiveHint": True}, ["read_only"], False),  # read-only wins
    ({"destructiveHint": False}, [], False),
    ({"destructiveHint": True}, ["destructive"], True),
    ({"destructiveHint": False, "idempotentHint": True, "openWorldHint": True}, ["idempotent", "open_world"], False),
    ({"readOnlyHint": True, "idempotentHint": True, "openWorldHint": False}, ["read_only"], False),
    ({"readOnlyHint": "true", "destructiveHint": 0}, ["maybe_destructive"], True),  # not booleans: absent
    ("read-only", ["maybe_destructive"], True),
])
def test_annotations_read_with_the_spec_defaults(annotations, badges, destructive):
    tool = {"name": "t", "inputSchema": {"type": "object"}}
    if annotations is not None:
        tool["annotations"] = annotations
    assert catalog.tool_hints(tool).badges() == badges
    assert catalog.is_destructive(tool) is destructive
    assert catalog.describe("tool", tool)["catalog"]["destructive"] is destructive


def test_a_checked_png_and_gif_are_shown_re_encoded():
    png = _png()
    assert catalog.icon_src([{"src": _data("image/png", png)}]) == _data("image/png", png)
    assert catalog.icon_src([{"src": _data("image/gif", GIF), "mimeType": "image/gif"}]) == _data("image/gif", GIF)
    # base64 with line breaks (as some encoders write it) is the same icon
    b64 = base64.b64encode(png).decode()
    wrapped = "data:image/png;base64," + "\n".join(b64[i:i + 20] for i in range(0, len(b64), 20))
    assert catalog.icon_src([{"src": wrapped}]) == _data("image/png", png)


@pytest.mark.parametrize("icon", [
    {"src": "https://icons.example/x.png"},                             # a URL: never fetched
    {"src": "http://127.0.0.1:1/x.png", "mimeType": "image/png"},
    {"src": "file:///etc/passwd"},
    {"src": "//evil.example/x.png"},
    {"src": _data("image/svg+xml", b"<svg xmlns='http://www.w3.org/2000/svg'><script>alert(1)</script></svg>")},
    {"src": _data("image/png", b"<svg xmlns='http://www.w3.org/2000/svg'/>")},  # an SVG declared as PNG
    {"src": _data("image/png", GIF)},                                   # a GIF declared as PNG
    {"src": _data("image/png", _png()), "mimeType": "image/gif"},       # the two types disagree
    {"src": _data("text/html", b"<b>x</b>")},
    {"src": "data:image/png," + "%89PNG"},                               # not base64
    {"src": "data:image/png;base64,!!!notbase64"},
    {"src": _data("image/png", _png(pad=70 * 1024))},                   # over MAX_ICON_BYTES
    {"src": "data:image/png;base64," + "A" * (20 * 1024 * 1024)},       # 20 MB of text: not decoded
    {"src": 7}, "x", None,
])
def test_anything_else_is_no_icon(icon):
    assert catalog.icon_src([icon]) is None


def test_the_first_icon_that_passes_is_the_one():
    png = _png()
    assert catalog.icon_src([{"src": "https://x.example/a.png"}, {"src": _data("image/png", png)}]) \
        == _data("image/png", png)
    assert catalog.icon_src("nope") is None and catalog.icon_src([]) is None


def test_sniffing_knows_the_four_raster_types_only():
    assert icons.sniff(_png()) == "image/png"
    assert icons.sniff(b"\xff\xd8\xff\xe0rest") == "image/jpeg"
    assert icons.sniff(GIF) == "image/gif"
    assert icons.sniff(b"RIFF\x00\x00\x00\x00WEBPVP8 ") == "image/webp"
    assert icons.sniff(b"<svg") is None and icons.sniff(b"") is None


def test_titles_and_schemas():
    tool = {"name": "create_entities", "description": "Create Entities In The Graph",
            "annotations": {"title": "Create entities"},
            "inputSchema": {"type": "object", "properties": {"e": {"$ref": "https://evil.example/s.json"}}},
            "outputSchema": {"type": "object"}}
    entry = catalog.describe("tool", tool)
    assert entry["name"] == "create_entities" and entry["description"] == tool["description"]
    c = entry["catalog"]
    assert c["title"] == "Create entities"
    assert '"$ref": "https://evil.example/s.json"' in catalog.pretty_schema(tool["inputSchema"])  # text only
    assert catalog.pretty_schema(tool["outputSchema"]) == '{\n  "type": "object"\n}'
    # "title" wins over annotations.title; a title equal to the name is not repeated
    assert catalog.describe("tool", {**tool, "title": "Make"})["catalog"]["title"] == "Make"
    assert catalog.describe("prompt", {"name": "p", "title": "p"})["catalog"]["title"] is None


def test_a_huge_schema_is_cut_and_says_how_much():
    schema = {"type": "object", "description": "x" * 50000}
    text = catalog.pretty_schema(schema)
    assert len(text) < 20100 and text.endswith("more characters)")
    assert catalog.pretty_schema("not a schema") is None and catalog.pretty_schema(None) is None


def test_resources_say_their_type_and_size():
    r = catalog.describe("resource", {"uri": "file:///a", "mimeType": "text/plain", "size": 2048})["catalog"]
    assert (r["mime_type"], r["size"]) == ("text/plain", 2048)
    bad = catalog.describe("resource", {"uri": "x", "mimeType": 5, "size": -1})["catalog"]
    assert (bad["mime_type"], bad["size"]) == (None, None)
    assert catalog.describe("resource", {"uri": "x", "size": True})["catalog"]["size"] is None


def test_the_server_identity_is_bounded_and_never_a_link():
    ident = catalog.server_identity(
        {"name": "memory", "title": "Knowledge graph", "version": "1.2.3", "websiteUrl": "https://evil.example",
         "icons": [{"src": "https://evil.example/i.png"}]},
        "I" * 10000, {"tools": {"listChanged": True}, "resources": {"subscribe": True, "listChanged": False},
                      "logging": {}, "experimental": "x"})
    assert ident["name"] == "memory" and ident["title"] == "Knowledge graph" and ident["version"] == "1.2.3"
    assert ident["website"] == "https://evil.example" and ident["icon"] is None
    assert len(ident["instructions"]) == 4000
    assert ident["capabilities"] == ["experimental", "logging", "resources (subscribe)", "tools (listChanged)"]
    empty = catalog.server_identity(None, None, None)
    assert empty == {"name": None, "title": None, "version": None, "website": None, "icon": None,
                     "instructions": None, "capabilities": []}
