"""The benchmark's MCP server: a real SDK ``MCPServer`` on loopback whose ``deploy`` tool answers
the standard round (``shared/bench/round.json``: a 5-field form and an opaque ``requestState``) and
completes on the retry.

Every first call mints an operation nonce inside the ``requestState`` (sealed by the SDK); every
retry is counted against its nonce, so the benchmark can tell, per operation, whether its answer
arrived exactly once (``GET /bench/counts``; ``POST /bench/reset`` forgets).

Run: ``python -m mrtrweb.bench.mcpserver --port 8766`` (its own process, so that the client side
being measured never shares an interpreter with it).
"""

from __future__ import annotations

import argparse
import json
import threading
import uuid
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult

from .common import standard_round


class Counts:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.minted: set[str] = set()
        self.retries: dict[str, int] = {}
        self.bad: int = 0

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            per = [self.retries.get(n, 0) for n in self.minted]
            return {
                "operations": len(self.minted),
                "answered_once": sum(1 for c in per if c == 1),
                "lost": sum(1 for c in per if c == 0),
                "duplicated": sum(1 for c in per if c > 1),
                "extra_retries": sum(c - 1 for c in per if c > 1),
                "unknown_retries": sum(c for n, c in self.retries.items() if n not in self.minted),
                "bad_answers": self.bad,
            }

    def reset(self) -> None:
        with self.lock:
            self.minted.clear()
            self.retries.clear()
            self.bad = 0


def build(counts: Counts):
    r = standard_round()
    ((key, req),) = r["result"]["inputRequests"].items()
    message = req["params"]["message"]
    schema = req["params"]["requestedSchema"]
    expected = r["responses"][key]["content"]

    mcp = MCPServer(name="mrtr-bench", version="0.1.0", log_level="WARNING")

    @mcp.tool(structured_output=False)
    async def deploy(env: str, replicas: int, ctx: Context) -> str | InputRequiredResult:
        """The standard round: one 5-field confirmation form, then the result."""
        state = ctx.request_state
        responses = ctx.input_responses or {}
        if not state:
            nonce = uuid.uuid4().hex
            with counts.lock:
                counts.minted.add(nonce)
            return InputRequiredResult(
                input_requests={key: ElicitRequest(params=ElicitRequestFormParams(message=message,
                                                                                  requested_schema=schema))},
                request_state=json.dumps({"op": nonce}, separators=(",", ":")))
        try:
            nonce = json.loads(state)["op"]
        except (ValueError, KeyError, TypeError):
            nonce = "?"
        answer = responses.get(key)
        content = dict(getattr(answer, "content", None) or {})
        with counts.lock:
            counts.retries[nonce] = counts.retries.get(nonce, 0) + 1
            if getattr(answer, "action", None) != "accept" or content != expected:
                counts.bad += 1
        return f"Deployed {replicas} replica(s) to {env} (ticket {content.get('ticket')})."

    return mcp


def app(counts: Counts):
    mcp_app = build(counts).streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")

    async def asgi(scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith("/bench/"):
            if scope["path"] == "/bench/reset":
                counts.reset()
                body = b"{}"
            else:
                body = json.dumps(counts.snapshot()).encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": body})
            return
        await mcp_app(scope, receive, send)

    return asgi


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description="The benchmark's MCP server (standard round).")
    parser.add_argument("--port", type=int, default=8766)
    args = parser.parse_args(argv)
    uvicorn.run(app(Counts()), host="127.0.0.1", port=args.port, log_level="warning", lifespan="on",
                access_log=False, timeout_keep_alive=120, backlog=4096)


if __name__ == "__main__":
    main()
