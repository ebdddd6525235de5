"""A hostile MCP server (raw JSON-RPC over Streamable HTTP, JSON responses) whose answers are
heavy to parse and check: a huge listing, a tool result of very many blocks, a round of very many
input requests. The ``loopstall`` benchmark (:mod:`.loopstall`) measures the event loop's longest
gap while the product reads them; the attack-pass tests (``tests/views/test_attack_pass*.py``) build
their hostile answers with the same functions.

Every body is made once, as JSON text, before the server starts: the server thread only sends bytes.
"""

from __future__ import annotations

import json
from typing import Any

DISCOVER: dict[str, Any] = {"supportedVersions": ["2026-07-28"],
                            "capabilities": {"tools": {}, "prompts": {}, "resources": {}},
                            "resultType": "complete", "ttlMs": 0, "cacheScope": "public"}
_LISTING = {"resultType": "complete", "ttlMs": 0, "cacheScope": "private"}


def huge_listing_bodies(n: int) -> dict[str, str]:
    """method -> the JSON text of a listing result of ``n`` items, for ``tools/list``,
    ``prompts/list``, ``resources/list`` and ``resources/templates/list`` (30,000 each: about 15 MB
    in all). Only the text is returned: the objects are dropped at once (kept, every full garbage
    collection of the measuring process would walk them)."""
    lists = {
        "tools/list": {"tools": [{"name": f"t{i}", "description": "d" * 50, "inputSchema": {"type": "object"}}
                                 for i in range(n)]},
        "prompts/list": {"prompts": [{"name": f"p{i}", "description": "d" * 50,
                                      "arguments": [{"name": f"a{j}"} for j in range(3)]} for i in range(n)]},
        "resources/list": {"resources": [{"uri": f"r://{i}", "name": f"r{i}"} for i in range(n)]},
        "resources/templates/list": {"resourceTemplates": [{"uriTemplate": f"t://{i}/{{x}}", "name": f"tp{i}"}
                                                           for i in range(n)]},
    }
    return {method: json.dumps({**value, **_LISTING}) for method, value in lists.items()}


def many_blocks_body(n: int) -> str:
    """The JSON text of a ``tools/call`` result of ``n`` small text blocks (200,000: about 6 MB)."""
    return json.dumps({"content": [{"type": "text", "text": "b%06d" % i} for i in range(n)], "isError": False})


def many_requests_round(requests: int, fields: int, choices: bool) -> dict[str, Any]:
    """An ``input_required`` round of ``requests`` elicitations of ``fields`` string fields each
    (with 8 choices each when ``choices``); 20,000 x 5 choice fields is about 16 MB of JSON."""
    field: dict[str, Any] = {"type": "string", "title": "t" * 50}
    if choices:
        field["enum"] = list("abcdefgh")
    return {"resultType": "input_required", "requestState": "many", "inputRequests": {
        f"k{i}": {"method": "elicitation/create", "params": {"message": f"m{i}", "requestedSchema": {
            "type": "object", "properties": {f"f{j}": dict(field) for j in range(fields)}}}}
        for i in range(requests)}}


DONE = json.dumps({"content": [{"type": "text", "text": "done"}], "isError": False})


def _response(rid: Any, result_json: str) -> Any:
    from starlette.responses import Response

    return Response('{"jsonrpc":"2.0","id":%s,"result":%s}' % (json.dumps(rid), result_json),
                    media_type="application/json")


def listing_endpoint(bodies: dict[str, str]):
    """A Starlette endpoint answering ``server/discover`` and the listings in ``bodies``
    (method -> result JSON, :func:`huge_listing_bodies`); any other method: "Method not found"."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response

    discover = json.dumps(DISCOVER)

    async def endpoint(request: Request) -> Response:
        message = await request.json()
        if "id" not in message:
            return Response(status_code=202)
        method = message.get("method")
        body = bodies.get(method) or (discover if method == "server/discover" else None)
        if body is None:
            return JSONResponse({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "nf"}})
        return _response(message["id"], body)

    return endpoint


def tools_endpoint(results: dict[str, str]):
    """A Starlette endpoint listing the tools named in ``results`` (tool name -> the JSON text of
    its first result); a call that carries ``inputResponses`` (a retry) completes with "done"."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response

    listing = json.dumps({"tools": [{"name": n, "description": "d", "inputSchema": {"type": "object", "properties": {}}}
                                    for n in results], **_LISTING})
    discover = json.dumps({**DISCOVER, "capabilities": {"tools": {}}})

    async def endpoint(request: Request) -> Response:
        message = await request.json()
        if "id" not in message:
            return Response(status_code=202)
        rid, method, params = message["id"], message.get("method"), message.get("params") or {}
        if method == "server/discover":
            return _response(rid, discover)
        if method == "tools/list":
            return _response(rid, listing)
        if method == "tools/call" and params.get("name") in results:
            return _response(rid, DONE if params.get("inputResponses") else results[params["name"]])
        return JSONResponse({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}})

    return endpoint


def app(*, listed: int, blocks: int, requests: int, fields: int = 5):
    """The benchmark's server: ``/huge/mcp`` lists ``listed`` items of each kind; ``/mcp`` has the
    tools ``many_blocks`` (a result of ``blocks`` text blocks) and ``very_many_requests`` (a round
    of ``requests`` input requests of ``fields`` choice fields)."""
    from starlette.applications import Starlette
    from starlette.routing import Route

    results = {"many_blocks": many_blocks_body(blocks),
               "very_many_requests": json.dumps(many_requests_round(requests, fields, True))}
    return Starlette(routes=[Route("/mcp", tools_endpoint(results), methods=["POST"]),
                             Route("/huge/mcp", listing_endpoint(huge_listing_bodies(listed)), methods=["POST"])])


def main(argv: list[str] | None = None) -> None:
    """``python -m mrtrweb.bench.hostile --port N --listed N --blocks N --requests N``: serve
    :func:`app` on 127.0.0.1 (the loopstall benchmark runs it in its own process, so that serving
    megabytes never competes for the measured process's GIL)."""
    import argparse

    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m mrtrweb.bench.hostile")
    for name in ("port", "listed", "blocks", "requests"):
        parser.add_argument(f"--{name}", type=int, required=True)
    args = parser.parse_args(argv)
    uvicorn.run(app(listed=args.listed, blocks=args.blocks, requests=args.requests), host="127.0.0.1",
                port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
