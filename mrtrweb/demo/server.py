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

requestState: each tool mints a small JSON plaintext; ``MCPServer``'s built-in
``RequestStateBoundary`` seals it (AES-256-GCM under a process-local key, bound to the method,
tool name, argument digest and audience, 600 s TTL) before it reaches the wire and verifies it on
the retry, so a tool only ever reads plaintext it minted. A tampered, expired or re-targeted state
is answered with JSON-RPC error -32602 "Invalid or expired requestState". Restarting the server
(or a second instance) invalidates outstanding states.

Every received JSON-RPC request is recorded by an ASGI middleware (:class:`CallLog`), so tests can
assert which ids reached the server and that a retry arrived exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import json
import socket
import threading
import time
import urllib.parse
import uuid
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any, Literal

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import (
    CreateMessageRequest,
    CreateMessageRequestParams,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestURLParams,
    InputRequiredResult,
    ListRootsRequest,
    ModelHint,
    ModelPreferences,
    RequestParams,
    SamplingMessage,
    TextContent,
)

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

SERVER_NAME = "mrtr-demo"
MCP_PATH = "/mcp"
#: Base of the URL-mode elicitation target (a reserved ``.test`` name: never resolvable).
CONNECT_URL_BASE = "https://auth.example.test/connect"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# --------------------------------------------------------------------------------------------
# Elicitation schemas (the spec's restricted JSON Schema subset: flat object, primitive fields)
# --------------------------------------------------------------------------------------------

DEPLOY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "confirm": {
            "type": "boolean",
            "title": "Confirm deployment",
            "description": "Tick to confirm you want to deploy now.",
        },
        "ticket": {
            "type": "string",
            "title": "Change ticket",
            "description": "The change-management ticket id (3 to 32 characters).",
            "minLength": 3,
            "maxLength": 32,
        },
        "email": {
            "type": "string",
            "title": "Contact email",
            "description": "Who to contact if the deployment fails.",
            "format": "email",
        },
        "window": {
            "type": "integer",
            "title": "Maintenance window (hours)",
            "description": "How long the maintenance window lasts, in hours.",
            "minimum": 1,
            "maximum": 24,
            "default": 2,
        },
        "region": {
            "type": "string",
            "title": "Region",
            "description": "The region to deploy to.",
            "oneOf": [
                {"const": "eu-west-1", "title": "Europe (Ireland)"},
                {"const": "us-east-1", "title": "US East (N. Virginia)"},
                {"const": "ap-south-1", "title": "Asia Pacific (Mumbai)"},
            ],
        },
        "notify": {
            "type": "array",
            "title": "Notify",
            "description": "Channels to notify when the deployment finishes.",
            "items": {"type": "string", "enum": ["email", "slack", "pager"]},
        },
    },
    "required": ["confirm", "ticket"],
}

GO_ON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"go": {"type": "boolean", "title": "Go on", "default": True}},
    "required": ["go"],
}

TRIP_DATES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "start": {
            "type": "string",
            "title": "Check-in date",
            "description": "First night of the stay.",
            "format": "date",
        },
        "nights": {
            "type": "integer",
            "title": "Nights",
            "description": "How many nights to stay.",
            "minimum": 1,
            "maximum": 30,
        },
    },
    "required": ["start", "nights"],
}

TRIP_SEAT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "seat": {
            "type": "string",
            "title": "Seat",
            "description": "Seat preference for the flight.",
            "enum": ["window", "aisle", "middle"],
        },
        "confirm": {
            "type": "boolean",
            "title": "Confirm booking",
            "description": "Tick to book the trip.",
        },
    },
    "required": ["seat", "confirm"],
}

TEAM_PROFILE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "display_name": {
            "type": "string",
            "title": "Display name",
            "description": "Letters, digits, spaces, dots, dashes and underscores (2 to 40).",
            "minLength": 2,
            "maxLength": 40,
            "pattern": "^[A-Za-z0-9 ._-]+$",
        },
        "budget": {
            "type": "number",
            "title": "Monthly budget (EUR)",
            "description": "What the team may spend each month.",
            "minimum": 0,
            "maximum": 10000,
            "default": 250.5,
        },
        "homepage": {"type": "string", "title": "Team page", "description": "Its web address.", "format": "uri"},
        "channels": {
            "type": "array",
            "title": "Channels",
            "description": "Where the team talks.",
            "items": {"anyOf": [{"const": "chat", "title": "Team chat"}, {"const": "mail", "title": "Mailing list"},
                                {"const": "wiki", "title": "Wiki"}]},
            "minItems": 1,
            "maxItems": 2,
        },
        "size": {"type": "string", "title": "Team size", "enum": ["small", "medium", "large"],
                 "enumNames": ["1 to 5 people", "6 to 20 people", "more than 20 people"]},
    },
    "required": ["display_name", "channels"],
}
#: Base of ``onboard_team``'s URL-mode request (a reserved ``.test`` name: never resolvable).
SSO_URL_BASE = "https://sso.example.test/enrol"

REPORT_FORMAT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "format": {
            "type": "string",
            "title": "Format",
            "description": "How the report should be delivered.",
            "oneOf": [
                {"const": "pdf", "title": "PDF document"},
                {"const": "html", "title": "Web page"},
                {"const": "csv", "title": "CSV data"},
            ],
        }
    },
    "required": ["format"],
}


# --------------------------------------------------------------------------------------------
# Tool helpers
# --------------------------------------------------------------------------------------------


def _form(message: str, schema: dict[str, Any]) -> ElicitRequest:
    return ElicitRequest(params=ElicitRequestFormParams(message=message, requested_schema=schema))


def _ask(requests: dict[str, ElicitRequest] | None, state: dict[str, Any]) -> InputRequiredResult:
    """An ``input_required`` round; ``state`` is minted as compact JSON (the SDK seals it)."""
    return InputRequiredResult(input_requests=requests, request_state=json.dumps(state, separators=(",", ":")))


def _read_state(ctx: Context) -> dict[str, Any]:
    """The plaintext state this server minted for the previous round, or ``{}`` on round one."""
    raw = ctx.request_state
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _answer(ctx: Context, key: str) -> tuple[str, dict[str, Any]] | None:
    """``(action, content)`` of the client's response under ``key``, or ``None`` when absent."""
    responses = ctx.input_responses or {}
    response = responses.get(key)
    if response is None:
        return None
    action = getattr(response, "action", None)
    if action not in ("accept", "decline", "cancel"):
        return None
    content = getattr(response, "content", None)
    return action, dict(content) if isinstance(content, Mapping) else {}


def _refused(what: str, action: str) -> str:
    return f"{what} {'declined' if action == 'decline' else 'cancelled'} by the user; nothing was done."


class _BadAnswer(ValueError):
    """A response that does not satisfy the requested schema (reported as a tool error)."""


def _str_field(content: Mapping[str, Any], name: str, *, required: bool) -> str | None:
    value = content.get(name)
    if value is None:
        if required:
            raise _BadAnswer(f"{name} is required")
        return None
    if not isinstance(value, str):
        raise _BadAnswer(f"{name} must be a string")
    return value


def _int_field(content: Mapping[str, Any], name: str, lo: int, hi: int, *, default: int | None = None) -> int:
    value = content.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise _BadAnswer(f"{name} must be an integer")
    if not lo <= value <= hi:
        raise _BadAnswer(f"{name} must be between {lo} and {hi}")
    return int(value)


def _bool_field(content: Mapping[str, Any], name: str) -> bool:
    value = content.get(name)
    if not isinstance(value, bool):
        raise _BadAnswer(f"{name} must be true or false")
    return value


# --------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------


AUDIENCE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "audience": {"type": "string", "title": "Audience", "enum": ["developers", "customers", "executives"],
                     "default": "developers"},
    },
    "required": ["audience"],
}
PERIOD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"since": {"type": "string", "format": "date", "title": "Since"}},
    "required": ["since"],
}


def add_prompts_and_resources(mcp: MCPServer) -> None:
    """A prompt and a resource template that ask a question before answering (``prompts/get`` and
    ``resources/read`` rounds)."""

    @mcp.prompt()
    async def release_notes(version: str, ctx: Context) -> str | InputRequiredResult:
        """Draft release notes; asks who will read them first."""
        answer = _answer(ctx, "audience")
        if answer is None:
            return _ask({"audience": _form(f"Who will read the notes for {version}?", AUDIENCE_SCHEMA)},
                        {"prompt": "release_notes"})
        action, content = answer
        if action != "accept":
            return f"Write short, neutral release notes for version {version}."
        return f"Write release notes for version {version} for {content.get('audience')}."

    @mcp.resource("demo://reports/{team}", mime_type="text/plain")
    async def team_report(team: str, ctx: Context) -> str | InputRequiredResult:
        """A team's activity report; asks for the start date first."""
        answer = _answer(ctx, "period")
        if answer is None:
            return _ask({"period": _form(f"Report for team {team}: since when?", PERIOD_SCHEMA)},
                        {"resource": "team_report"})
        action, content = answer
        if action != "accept":
            return f"No report for {team}: {action}."
        return f"Report for team {team} since {content.get('since')}: 12 changes, 3 releases."


def build_demo_server(**server_options: Any) -> MCPServer:
    """Build the demo ``MCPServer`` (tools described in the module docstring).

    The server uses the SDK's default request-state protection: a process-local key, so states
    do not survive a restart. ``server_options`` go to ``MCPServer`` as they are (e.g. ``auth=``
    an ``AuthSettings`` and ``token_verifier=``: the demo as an OAuth-protected resource server,
    as ``tests/oauth_as/mcp_server.py`` runs it).
    """
    mcp = MCPServer(
        name=SERVER_NAME,
        title="MRTR demo server",
        version="0.1.0",
        instructions="Demo tools that ask the user questions through input_required rounds.",
        log_level="WARNING",
        **server_options,
    )

    @mcp.tool(structured_output=False)
    async def deploy(
        env: Literal["staging", "production"], replicas: int, ctx: Context
    ) -> str | InputRequiredResult:
        """Deploy the service to an environment, after a confirmation form."""
        answer = _answer(ctx, "confirm_deploy")
        if answer is None:
            return _ask(
                {"confirm_deploy": _form(f"Deploy {replicas} replica(s) to {env}?", DEPLOY_SCHEMA)},
                {"tool": "deploy", "round": 1},
            )
        action, content = answer
        if action != "accept":
            return _refused("Deployment", action)
        try:
            confirm = _bool_field(content, "confirm")
            ticket = _str_field(content, "ticket", required=True) or ""
            if not 3 <= len(ticket) <= 32:
                raise _BadAnswer("ticket must be 3 to 32 characters")
            email = _str_field(content, "email", required=False)
            window = _int_field(content, "window", 1, 24, default=2)
            region = _str_field(content, "region", required=False) or "eu-west-1"
            notify = content.get("notify") or []
            if not isinstance(notify, list) or not all(n in ("email", "slack", "pager") for n in notify):
                raise _BadAnswer("notify must be a list of email, slack, pager")
        except _BadAnswer as exc:
            return f"Invalid answer: {exc}."
        if not confirm:
            return "Deployment not confirmed; nothing was deployed."
        parts = [f"ticket {ticket}", f"region {region}", f"window {window}h"]
        if email:
            parts.append(f"contact {email}")
        parts.append(f"notify {', '.join(notify) if notify else 'nobody'}")
        return f"Deployed {replicas} replica(s) to {env} ({'; '.join(parts)})."

    @mcp.tool(structured_output=False)
    async def book_trip(destination: str, ctx: Context) -> str | InputRequiredResult:
        """Book a trip: asks for the dates, then for the seat and a confirmation."""
        state = _read_state(ctx)
        if state.get("round") == 2:
            answer = _answer(ctx, "seat")
            if answer is None:
                return _ask({"seat": _form("Choose your seat and confirm.", TRIP_SEAT_SCHEMA)}, state)
            action, content = answer
            if action != "accept":
                return _refused("Trip booking", action)
            try:
                seat = _str_field(content, "seat", required=True)
                if seat not in ("window", "aisle", "middle"):
                    raise _BadAnswer("seat must be window, aisle or middle")
                confirm = _bool_field(content, "confirm")
            except _BadAnswer as exc:
                return f"Invalid answer: {exc}."
            if not confirm:
                return "Trip not confirmed; nothing was booked."
            return (
                f"Booked {state.get('nights')} night(s) in {destination} from {state.get('start')}, "
                f"{seat} seat."
            )
        answer = _answer(ctx, "dates")
        if answer is None:
            return _ask({"dates": _form(f"When do you travel to {destination}?", TRIP_DATES_SCHEMA)},
                        {"tool": "book_trip", "round": 1})
        action, content = answer
        if action != "accept":
            return _refused("Trip booking", action)
        try:
            start = _str_field(content, "start", required=True)
            nights = _int_field(content, "nights", 1, 30)
        except _BadAnswer as exc:
            return f"Invalid answer: {exc}."
        return _ask(
            {"seat": _form(f"{nights} night(s) from {start}. Choose your seat and confirm.", TRIP_SEAT_SCHEMA)},
            {"tool": "book_trip", "round": 2, "start": start, "nights": nights},
        )

    @mcp.tool(structured_output=False)
    async def connect_account(provider: str, ctx: Context) -> str | InputRequiredResult:
        """Connect an account at a provider through an out-of-band (URL mode) authorization page."""
        answer = _answer(ctx, "authorize")
        if answer is None:
            elicitation_id = str(uuid.uuid4())
            url = f"{CONNECT_URL_BASE}?{urllib.parse.urlencode({'provider': provider})}"
            request = ElicitRequest(
                params=ElicitRequestURLParams(
                    message=f"Sign in to {provider} to connect your account.",
                    url=url,
                    elicitation_id=elicitation_id,
                )
            )
            return _ask({"authorize": request}, {"tool": "connect_account", "elicitation": elicitation_id})
        action, _content = answer
        if action != "accept":
            return _refused("Account connection", action)
        return f"Account at {provider} connected."

    @mcp.tool(structured_output=False)
    async def busy_report(topic: str, ctx: Context) -> str | InputRequiredResult:
        """Build a report; the server is busy at first and asks the client to come back."""
        state = _read_state(ctx)
        phase = state.get("phase")
        if phase is None:
            # Load shedding: no questions, just "retry later with this state".
            return _ask(None, {"tool": "busy_report", "phase": "queued", "queued_at": time.time()})
        if phase == "queued":
            return _ask({"format": _form(f"Report on {topic}: choose a format.", REPORT_FORMAT_SCHEMA)},
                        {"tool": "busy_report", "phase": "format"})
        answer = _answer(ctx, "format")
        if answer is None:
            return _ask({"format": _form(f"Report on {topic}: choose a format.", REPORT_FORMAT_SCHEMA)}, state)
        action, content = answer
        if action != "accept":
            return _refused("Report", action)
        fmt = content.get("format")
        if fmt not in ("pdf", "html", "csv"):
            return "Invalid answer: format must be pdf, html or csv."
        # Progress reaches the client only when its request carried a progressToken.
        await ctx.report_progress(1, 2, "collecting data")
        await ctx.report_progress(2, 2, "rendering")
        return f"Report on {topic} ready as {fmt}."

    @mcp.tool(structured_output=False)
    async def endless(ctx: Context) -> InputRequiredResult:
        """Never finishes: every call answers another requestState-only round."""
        count = _read_state(ctx).get("n", 0)
        if not isinstance(count, int):
            count = 0
        return _ask(None, {"tool": "endless", "n": count + 1})

    @mcp.tool(structured_output=False)
    async def onboard_team(team: str, ctx: Context) -> str | InputRequiredResult:
        """Onboard a team: one card with two requests, a profile form and a single sign-on page."""
        profile, sso = _answer(ctx, "profile"), _answer(ctx, "sso")
        if profile is None or sso is None:
            url = f"{SSO_URL_BASE}?{urllib.parse.urlencode({'team': team})}"
            return _ask({
                "profile": _form(f"Describe team {team}.", TEAM_PROFILE_SCHEMA),
                "sso": ElicitRequest(params=ElicitRequestURLParams(
                    message=f"Enrol team {team} in single sign-on.", url=url, elicitation_id=str(uuid.uuid4()))),
            }, {"tool": "onboard_team"})
        (p_action, content), (s_action, _content) = profile, sso
        if p_action != "accept" or s_action != "accept":
            return _refused("Onboarding", p_action if p_action != "accept" else s_action)
        try:
            name = _str_field(content, "display_name", required=True)
            budget = content.get("budget", 250.5)
            if isinstance(budget, bool) or not isinstance(budget, int | float) or not 0 <= budget <= 10000:
                raise _BadAnswer("budget must be a number from 0 to 10000")
            channels = content.get("channels")
            if not isinstance(channels, list) or not 1 <= len(channels) <= 2:
                raise _BadAnswer("choose one or two channels")
            homepage = _str_field(content, "homepage", required=False)
            size = _str_field(content, "size", required=False)
        except _BadAnswer as exc:
            return f"Invalid answer: {exc}."
        parts = [f"name {name}", f"budget {budget:g} EUR", f"channels {', '.join(map(str, channels))}"]
        if homepage:
            parts.append(f"page {homepage}")
        if size:
            parts.append(f"size {size}")
        return f"Team {team} onboarded ({'; '.join(parts)}); single sign-on confirmed."

    @mcp.tool(structured_output=False)
    async def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @mcp.tool(structured_output=False)
    async def long_task(seconds: int, ctx: Context) -> str:
        """Work for a while (at most 60 s), reporting progress every second, then answer."""
        seconds = max(0, min(int(seconds), 60))
        for done in range(seconds):
            await ctx.report_progress(done, seconds, f"{done} of {seconds} s")
            await asyncio.sleep(1)
        return f"Worked for {seconds} s."

    @mcp.tool(structured_output=False)
    async def wait_then_ask(seconds: int, ctx: Context) -> str | InputRequiredResult:
        """Think for a few seconds (at most 30), then ask one yes/no question."""
        answer = _answer(ctx, "go_on")
        if answer is None:
            await asyncio.sleep(max(0, min(int(seconds), 30)))
            return _ask({"go_on": _form("Go on?", GO_ON_SCHEMA)}, {"tool": "wait_then_ask"})
        action, content = answer
        if action != "accept":
            return _refused("Waiting task", action)
        return "Went on." if content.get("go") is True else "Stopped."

    @mcp.tool(structured_output=False)
    async def summarize_with_sampling(text: str, ctx: Context) -> str | InputRequiredResult:
        """Summarize a text by asking the client to sample a model (deprecated: allowed per server)."""
        response = (ctx.input_responses or {}).get("summary")
        if response is None:
            request = CreateMessageRequest(params=CreateMessageRequestParams(
                messages=[SamplingMessage(role="user", content=TextContent(type="text", text=f"Summarize: {text}"))],
                system_prompt="You are a concise summarizer. Answer in one sentence.",
                max_tokens=200,
                model_preferences=ModelPreferences(hints=[ModelHint(name="claude-sonnet")], intelligence_priority=0.8),
            ))
            return InputRequiredResult(input_requests={"summary": request},
                                       request_state=json.dumps({"tool": "summarize_with_sampling"}))
        content = getattr(response, "content", None)
        blocks = content if isinstance(content, list) else [content]
        texts = [b.text for b in blocks if getattr(b, "type", None) == "text" and isinstance(b.text, str)]
        if not texts:
            return "Invalid answer: the sampling result carried no text."
        return f"Summary ({getattr(response, 'model', '?')}): {' '.join(texts)}"

    @mcp.tool(structured_output=False)
    async def list_my_roots(ctx: Context) -> str | InputRequiredResult:
        """List the client's filesystem roots (asks roots/list: deprecated, allowed per server)."""
        response = (ctx.input_responses or {}).get("roots")
        if response is None:
            # params present (empty): an input request is an object with an object ``params``
            return InputRequiredResult(input_requests={"roots": ListRootsRequest(params=RequestParams())},
                                       request_state=json.dumps({"tool": "list_my_roots"}))
        roots = getattr(response, "roots", None)
        if not isinstance(roots, list):
            return "Invalid answer: not a list of roots."
        if not roots:
            return "No roots."
        return "Roots: " + "; ".join(f"{r.uri}" + (f" ({r.name})" if r.name else "") for r in roots)

    add_prompts_and_resources(mcp)
    return mcp


# --------------------------------------------------------------------------------------------
# Request recording (ASGI middleware)
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RecordedRequest:
    """One JSON-RPC request as the server received it.

    ``request_id`` is the wire id verbatim (str or int); ``tool`` is ``params.name`` for
    ``tools/call`` (else ``None``); ``params`` is the params object as received (sealed state
    included).
    """

    request_id: str | int | None
    method: str
    tool: str | None
    has_input_responses: bool
    has_request_state: bool
    params: Mapping[str, Any]

    @property
    def is_retry(self) -> bool:
        """Whether the request carried ``inputResponses`` or ``requestState``."""
        return self.has_input_responses or self.has_request_state


@dataclasses.dataclass(frozen=True)
class RecordedResponse:
    """One JSON-RPC response the client POSTed to the server (an answer to a server-to-client
    request, e.g. an ``ElicitResult``): its id, and its ``result`` or ``error`` object."""

    request_id: str | int | None
    result: Mapping[str, Any] | None
    error: Mapping[str, Any] | None


class CallLog:
    """Thread-safe record of the JSON-RPC requests the demo server received (and of the responses
    the client sent to the server's own requests)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[RecordedRequest] = []
        self._responses: list[RecordedResponse] = []

    def add(self, record: RecordedRequest) -> None:
        with self._lock:
            self._records.append(record)

    def add_response(self, response: RecordedResponse) -> None:
        with self._lock:
            self._responses.append(response)

    def responses(self) -> list[RecordedResponse]:
        """The client's responses to the server's requests, oldest first."""
        with self._lock:
            return list(self._responses)

    def records(self, method: str | None = None) -> list[RecordedRequest]:
        """All records (oldest first), optionally only those of ``method``."""
        with self._lock:
            return [r for r in self._records if method is None or r.method == method]

    def tool_calls(self, tool: str | None = None) -> list[RecordedRequest]:
        """The ``tools/call`` records, optionally only those for ``tool``."""
        return [r for r in self.records("tools/call") if tool is None or r.tool == tool]

    def ids(self, method: str | None = None) -> list[str | int | None]:
        """The wire ids received, in order."""
        return [r.request_id for r in self.records(method)]

    def counts(self) -> collections.Counter[tuple[str | None, bool]]:
        """``tools/call`` counts keyed by ``(tool name, is_retry)``."""
        return collections.Counter((r.tool, r.is_retry) for r in self.tool_calls())

    def clear(self) -> None:
        with self._lock:
            self._records.clear()
            self._responses.clear()


class CountingMiddleware:
    """ASGI middleware recording every JSON-RPC request POSTed to the app into a :class:`CallLog`.

    It buffers the request body, records what parses (a single message or a batch; anything
    unparseable is ignored), and replays the body to the wrapped app unchanged.
    """

    def __init__(self, app: ASGIApp, log: CallLog) -> None:
        self.app = app
        self.log = log

    async def _read_body(self, scope: Scope, receive: Receive, send: Send) -> bytes | None:
        """The whole request body; ``None`` when the client went away before it was complete (the
        wrapped app has then been called with that event passed on as-is)."""
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message.get("type") != "http.request":
                replayed = False

                async def replay_disconnect() -> Message:
                    nonlocal replayed
                    if not replayed:
                        replayed = True
                        return message
                    return await receive()

                await self.app(scope, replay_disconnect, send)
                return None
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        body = await self._read_body(scope, receive, send)
        if body is None:
            return
        self._record(body)
        await self.app(scope, replaying(body, receive), send)

    def _record(self, body: bytes) -> None:
        try:
            payload = json.loads(body)
        except ValueError:
            return
        for item in payload if isinstance(payload, list) else [payload]:
            if isinstance(item, dict) and "method" not in item and "id" in item and ("result" in item or "error" in item):
                result, error = item.get("result"), item.get("error")
                self.log.add_response(RecordedResponse(item["id"], result if isinstance(result, dict) else None,
                                                       error if isinstance(error, dict) else None))
                continue
            if not isinstance(item, dict) or not isinstance(item.get("method"), str) or "id" not in item:
                continue  # notifications are not requests
            params = item.get("params")
            params = params if isinstance(params, dict) else {}
            name = params.get("name") if item["method"] == "tools/call" else None
            self.log.add(
                RecordedRequest(
                    request_id=item.get("id"),
                    method=item["method"],
                    tool=name if isinstance(name, str) else None,
                    has_input_responses="inputResponses" in params,
                    has_request_state="requestState" in params,
                    params=params,
                )
            )


# --------------------------------------------------------------------------------------------
# Serving
# --------------------------------------------------------------------------------------------


def build_demo_app(server: MCPServer | None = None, *, host: str = "127.0.0.1") -> ASGIApp:
    """The demo server's Streamable HTTP ASGI app (endpoint :data:`MCP_PATH`)."""
    mcp = server or build_demo_server()
    return mcp.streamable_http_app(streamable_http_path=MCP_PATH, host=host)


class DemoServerHandle:
    """A server running under uvicorn in a daemon thread (see :func:`serve_in_thread`).

    Attributes:
        host, port: where it listens.
        url: the Streamable HTTP endpoint, e.g. ``http://127.0.0.1:PORT/mcp``.
        log: the :class:`CallLog` of received JSON-RPC requests.
    """

    def __init__(
        self, host: str, port: int, path: str, log: CallLog, server: uvicorn.Server, thread: threading.Thread
    ) -> None:
        self.host = host
        self.port = port
        self.log = log
        self._server = server
        self._thread = thread
        netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.url = f"http://{netloc}{path}"

    @property
    def calls(self) -> collections.Counter[tuple[str | None, bool]]:
        """``tools/call`` requests received so far, keyed by ``(tool name, carried inputResponses/requestState)``."""
        return self.log.counts()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask uvicorn to exit and wait (up to ``timeout_s`` seconds) for the thread to end."""
        self._server.should_exit = True
        self._thread.join(timeout_s)

    def __enter__(self) -> DemoServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def replaying(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands an app ``body`` (already read by a middleware) as one
    ``http.request`` message, then defers to the real ``receive`` (a disconnect, later)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def read_body(receive: Receive) -> bytes:
    """The whole body of an HTTP request (every ``http.request`` message until ``more_body`` is false)."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body", False):
            return body


def serve_asgi_in_thread(
    app: ASGIApp, host: str = "127.0.0.1", port: int = 0, *, path: str = MCP_PATH, start_timeout_s: float = 15.0
) -> DemoServerHandle:
    """Serve any ASGI ``app`` (wrapped in a :class:`CountingMiddleware`) under uvicorn in a daemon thread.

    The server runs on its own event loop. ``port=0`` picks a free port; ``path`` only shapes the
    handle's ``url``. Returns once the socket accepts connections.

    Raises:
        RuntimeError: the server did not start within ``start_timeout_s`` seconds.
        OSError: the address could not be bound.
    """
    return serve_built_in_thread(lambda _port: app, host, port, path=path, start_timeout_s=start_timeout_s)


def serve_built_in_thread(
    make_app: Callable[[int], ASGIApp], host: str = "127.0.0.1", port: int = 0, *, path: str = MCP_PATH,
    start_timeout_s: float = 15.0,
) -> DemoServerHandle:
    """As :func:`serve_asgi_in_thread`, for an app that must know its own port (an OAuth resource
    or authorization server names its URL): the socket is bound first, then ``make_app(port)``
    builds the app. Same errors."""
    log = CallLog()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        bound_port = sock.getsockname()[1]
        app = make_app(bound_port)
    except BaseException:
        sock.close()
        raise
    config = uvicorn.Config(
        CountingMiddleware(app, log),
        log_level="warning",
        lifespan="on",
        loop="asyncio",
        timeout_graceful_shutdown=2,
        access_log=False,
    )
    userver = uvicorn.Server(config)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(userver.serve(sockets=[sock]))
        except BaseException as exc:  # reported to the starting thread
            errors.append(exc)
        finally:
            sock.close()

    thread = threading.Thread(target=run, name=f"mcp-test-server-{bound_port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not userver.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            userver.should_exit = True
            raise RuntimeError(f"server did not start: {errors[0] if errors else 'timeout'}")
        time.sleep(0.01)
    return DemoServerHandle(host, bound_port, path, log, userver, thread)


def serve_in_thread(
    host: str = "127.0.0.1", port: int = 0, *, server: MCPServer | None = None, start_timeout_s: float = 15.0
) -> DemoServerHandle:
    """Start the demo server (or ``server``) over Streamable HTTP in a daemon thread.

    See :func:`serve_asgi_in_thread`; ``handle.url`` is ``http://HOST:PORT/mcp``.
    """
    return serve_asgi_in_thread(build_demo_app(server, host=host), host, port, start_timeout_s=start_timeout_s)


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m mrtrweb.demo.server [--host 127.0.0.1] [--port 8765]``."""
    parser = argparse.ArgumentParser(description="Run the MRTR demo MCP server (Streamable HTTP).")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="port to bind (default 8765)")
    args = parser.parse_args(argv)
    app = CountingMiddleware(build_demo_app(host=args.host), CallLog())
    netloc = f"[{args.host}]:{args.port}" if ":" in args.host else f"{args.host}:{args.port}"
    print(f"MRTR demo server on http://{netloc}{MCP_PATH}", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info", lifespan="on")


if __name__ == "__main__":
    main()
