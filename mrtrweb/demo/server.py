"""The demo MRTR server: an SDK ``MCPServer`` whose tools answer with ``input_required`` rounds.

It speaks MCP 2026-07-28 Multi Round-Trip Requests over Streamable HTTP on loopback, for local
development (``python -m mrtrweb.demo.server --port 8765``) and for the product's tests
(:func:`serve_in_thread`). Tools:

``deploy(env, replicas)``
    One form round (boolean, bounded string, email, bounded integer with a default, titled
    single-select, multi-select), then a text summary (or "declined"/"cancelled").
``book_trip(destination)``
    Two form rounds threaded through ``requestState``: dates, then seat + confirmation.
``connect_account(provider)``
    One URL-mode round (``https://auth.example.test/connect?provider=...``). The tool sets an
    ``elicitationId``, but the 2026-07-28 schema has no such field and the SDK's outbound result
    sieve drops it: on a 2026-07-28 wire the URL request carries ``mode``, ``message``, ``url`` only.
``busy_report(topic)``
    A ``requestState``-only round (load shedding: no questions), then a form round, then the result
    (reporting two ``notifications/progress`` when the final request carries a progress token).
``endless()``
    Always another ``requestState``-only round (the state carries a counter), to exercise round limits.
``onboard_team(team)``
    One round with two input requests answered together on one card: a form (pattern-checked
    string, number with a default, ``uri``, titled multi-select with bounds, legacy ``enumNames``
    single-select) and a URL-mode single sign-on page; then a summary.
``echo(text)``
    Returns ``text`` at once.
``long_task(seconds)``
    Works ``seconds`` (at most 60), reporting progress each second; no round.
``wait_then_ask(seconds)``
    Thinks ``seconds`` (at most 30), then asks one yes/no question.
``summarize_with_sampling(text)``
    One round asking ``sampling/createMessage`` (a deprecated client request: the client answers it
    only where a tenant admin allowed sampling for this server), then returns the sampled text.
``list_my_roots()``
    One round asking ``roots/list`` (deprecated, allowed per server), then lists the roots it got.
``service_status(service)``
    No round; has an MCP App (``ui://demo/service-status.html``) whose button calls the app-only
    ``refresh_status`` through the host (:mod:`.status_app`).

Run from the command line, it also has the notice board (:mod:`.board`: ``demo://board`` and
``update_board(text)``, a resource that changes while a person reads it).

requestState: each tool mints a small JSON plaintext; ``MCPServer``'s built-in
``RequestStateBoundary`` seals it (AES-256-GCM under a process-local key, bound to the method,
tool name, argument digest and audience, 600 s TTL) before it reaches the wire and verifies it on
the retry, so a tool only ever reads plaintext it minted. A tampered, expired or re-targeted state
is answered with JSON-RPC error -32602 "Invalid or expired requestState". Restarting the server
(or a second instance) invalidates outstanding states.

Every received JSON-RPC request is recorded by an ASGI middleware (:class:`CallLog`), so tests can
assert which ids reached the server and that a retry arrived exactly once.

The parts, re-exported here: :mod:`.schemas` (the elicitation schemas), :mod:`.rounds` (asking and
reading rounds), :mod:`.tools` (:func:`build_demo_server`), :mod:`.recording` (:class:`CallLog`,
:class:`CountingMiddleware`), :mod:`.serving` (:func:`serve_in_thread` and its kin).
"""

from __future__ import annotations

import argparse

import uvicorn

# re-exported: the names this module held before the split (issue 27)
from .recording import (ASGIApp, CallLog, CountingMiddleware, Message, Receive, RecordedRequest, RecordedResponse,
                        Scope, Send, read_body, replaying)
from .schemas import (AUDIENCE_SCHEMA, CONNECT_URL_BASE, DEPLOY_SCHEMA, GO_ON_SCHEMA, PERIOD_SCHEMA,
                      REPORT_FORMAT_SCHEMA, SSO_URL_BASE, TEAM_PROFILE_SCHEMA, TRIP_DATES_SCHEMA, TRIP_SEAT_SCHEMA)
from .board import add_notice_board
from .serving import (MCP_PATH, DemoServerHandle, build_demo_app, serve_asgi_in_thread, serve_built_in_thread,
                      serve_in_thread)
from .tools import SERVER_NAME, add_prompts_and_resources, build_demo_server

__all__ = [
    "CallLog",
    "CountingMiddleware",
    "DemoServerHandle",
    "RecordedRequest",
    "RecordedResponse",
    "build_demo_server",
    "main",
    "serve_asgi_in_thread",
    "serve_in_thread",
]


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m mrtrweb.demo.server [--host 127.0.0.1] [--port 8765]``."""
    parser = argparse.ArgumentParser(description="Run the MRTR demo MCP server (Streamable HTTP).")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="port to bind (default 8765)")
    args = parser.parse_args(argv)
    demo = build_demo_server()
    add_notice_board(demo)  # a resource that changes: a read resource's page follows it (.board)
    app = CountingMiddleware(build_demo_app(demo, host=args.host), CallLog())
    netloc = f"[{args.host}]:{args.port}" if ":" in args.host else f"{args.host}:{args.port}"
    print(f"MRTR demo server on http://{netloc}{MCP_PATH}", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info", lifespan="on")


if __name__ == "__main__":
    main()
