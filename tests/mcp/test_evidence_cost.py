"""The HTTP evidence of a request (:class:`mrtrweb.mcp.evidence.HttpEvidence`) costs no second
parse of an answer the SDK returns: a JSON body is judged (a JSON-RPC error or not) only when the
SDK raised for the request (:func:`~mrtrweb.mcp.evidence.classify` asks ``HttpSeen.body``), and
the kept body never shows in a repr (a result may carry what a person answered)."""

from __future__ import annotations

import asyncio
import json

import httpx2
from mcp.shared.exceptions import MCPError

from mrtrweb.mcp import evidence

RID = "3f1c0b1e-7a52-4f55-9c0f-1b2d3e4f5a6b"
REQUEST = {"jsonrpc": "2.0", "id": RID, "method": "tools/call", "params": {"name": "deploy", "arguments": {}}}


def _response(body: dict, status: int = 200) -> httpx2.Response:
    request = httpx2.Request("POST", "http://127.0.0.1:1/mcp", content=json.dumps(REQUEST).encode())
    return httpx2.Response(status, headers={"content-type": "application/json"},
                           content=json.dumps(body).encode(), request=request)


class _CountingJson:
    """``evidence.json`` with ``loads`` counted (what it parsed)."""

    def __init__(self) -> None:
        self.parsed: list[object] = []

    def loads(self, data: object) -> object:
        self.parsed.append(data)
        return json.loads(data)  # type: ignore[arg-type]


def _seen(body: dict, monkeypatch, status: int = 200) -> tuple[evidence.HttpSeen | None, _CountingJson]:
    counting = _CountingJson()
    monkeypatch.setattr(evidence, "json", counting)
    ev = evidence.HttpEvidence()
    ev.expect(RID)
    asyncio.run(ev.on_response(_response(body, status)))
    return ev.take(RID), counting


def test_an_answer_is_not_parsed_again_for_the_evidence(monkeypatch):
    secret = "the person's answer, 7391"
    seen, counting = _seen({"jsonrpc": "2.0", "id": RID, "result": {"content": [{"type": "text", "text": secret}]}},
                           monkeypatch)
    assert seen is not None and seen.status == 200 and seen.content_type == "application/json"
    # only the request's own body (to know its id): the answer is the SDK's to parse, once
    assert len(counting.parsed) == 1 and json.loads(counting.parsed[0]) == REQUEST
    assert secret not in repr(seen)
    # asked (only on the error path): judged then
    assert seen.body == "other"


def test_a_json_rpc_error_body_is_still_told_apart(monkeypatch):
    seen, _counting = _seen({"jsonrpc": "2.0", "id": RID, "error": {"code": -32000, "message": "boom"}},
                            monkeypatch, status=200)
    assert seen is not None and seen.body == "error"
    error = evidence.classify(MCPError(-32000, "boom"), seen, "tools/call")
    assert error.code == "jsonrpc_error" and error.rpc_code == -32000


def test_an_unusable_body_is_other(monkeypatch):
    seen, _counting = _seen({"jsonrpc": "2.0", "id": RID, "error": "not an object"}, monkeypatch, status=500)
    assert seen is not None and seen.body == "other"
    error = evidence.classify(MCPError(-32000, "x"), seen, "tools/call")
    assert error.code == "transport_error" and error.http_status == 500


def test_a_body_past_the_parse_bound_is_never_judged(monkeypatch):
    monkeypatch.setattr(evidence, "_EVIDENCE_PARSE_BYTES", 64)
    seen, counting = _seen({"jsonrpc": "2.0", "id": RID, "error": {"code": 1, "message": "x" * 100}}, monkeypatch)
    assert seen is not None and seen.body == "other"
    assert len(counting.parsed) == 1  # the request's body only
