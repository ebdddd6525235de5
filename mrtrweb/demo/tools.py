"""The demo ``MCPServer`` and its tools, prompt and resource template (:func:`build_demo_server`;
the tools are described in :mod:`mrtrweb.demo.server`'s docstring). Each asks through
``input_required`` rounds (:mod:`.rounds`) with the schemas of :mod:`.schemas`, and returns text.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
import uuid
from typing import Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import (
    CreateMessageRequest,
    CreateMessageRequestParams,
    ElicitRequest,
    ElicitRequestURLParams,
    InputRequiredResult,
    ListRootsRequest,
    ModelHint,
    ModelPreferences,
    RequestParams,
    SamplingMessage,
    TextContent,
    ToolAnnotations,
)

from .rounds import BadAnswer, ask, bool_field, form_request, int_field, read_state, refused, response_to, str_field
from .schemas import (AUDIENCE_SCHEMA, CONNECT_URL_BASE, DEPLOY_SCHEMA, GO_ON_SCHEMA, PERIOD_SCHEMA,
                      REPORT_FORMAT_SCHEMA, SSO_URL_BASE, TEAM_PROFILE_SCHEMA, TRIP_DATES_SCHEMA, TRIP_SEAT_SCHEMA)

__all__ = ["SERVER_NAME", "add_prompts_and_resources", "build_demo_server"]

SERVER_NAME = "mrtr-demo"


#: the demo tools' annotations (issue 28: the server page's badges, a destructive tool's warning)
_READS = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)
_CHANGES = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False)
_DESTRUCTIVE = ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=False, openWorldHint=False)


def add_prompts_and_resources(mcp: MCPServer) -> None:
    """A prompt and a resource template that ask a question before answering (``prompts/get`` and
    ``resources/read`` rounds)."""

    @mcp.prompt()
    async def release_notes(version: str, ctx: Context) -> str | InputRequiredResult:
        """Draft release notes; asks who will read them first."""
        answer = response_to(ctx, "audience")
        if answer is None:
            return ask({"audience": form_request(f"Who will read the notes for {version}?", AUDIENCE_SCHEMA)},
                       {"prompt": "release_notes"})
        action, content = answer
        if action != "accept":
            return f"Write short, neutral release notes for version {version}."
        return f"Write release notes for version {version} for {content.get('audience')}."

    @mcp.resource("demo://reports/{team}", mime_type="text/plain")
    async def team_report(team: str, ctx: Context) -> str | InputRequiredResult:
        """A team's activity report; asks for the start date first."""
        answer = response_to(ctx, "period")
        if answer is None:
            return ask({"period": form_request(f"Report for team {team}: since when?", PERIOD_SCHEMA)},
                       {"resource": "team_report"})
        action, content = answer
        if action != "accept":
            return f"No report for {team}: {action}."
        return f"Report for team {team} since {content.get('since')}: 12 changes, 3 releases."


def build_demo_server(*, assist: bool = False, **server_options: Any) -> MCPServer:
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

    @mcp.tool(structured_output=False, title="Deploy a service", annotations=_DESTRUCTIVE)
    async def deploy(
        env: Literal["staging", "production"], replicas: int, ctx: Context
    ) -> str | InputRequiredResult:
        """Deploy the service to an environment, after a confirmation form."""
        answer = response_to(ctx, "confirm_deploy")
        if answer is None:
            return ask(
                {"confirm_deploy": form_request(f"Deploy {replicas} replica(s) to {env}?", DEPLOY_SCHEMA)},
                {"tool": "deploy", "round": 1},
            )
        action, content = answer
        if action != "accept":
            return refused("Deployment", action)
        try:
            confirm = bool_field(content, "confirm")
            ticket = str_field(content, "ticket", required=True) or ""
            if not 3 <= len(ticket) <= 32:
                raise BadAnswer("ticket must be 3 to 32 characters")
            email = str_field(content, "email", required=False)
            window = int_field(content, "window", 1, 24, default=2)
            region = str_field(content, "region", required=False) or "eu-west-1"
            notify = content.get("notify") or []
            if not isinstance(notify, list) or not all(n in ("email", "slack", "pager") for n in notify):
                raise BadAnswer("notify must be a list of email, slack, pager")
        except BadAnswer as exc:
            return f"Invalid answer: {exc}."
        if not confirm:
            return "Deployment not confirmed; nothing was deployed."
        parts = [f"ticket {ticket}", f"region {region}", f"window {window}h"]
        if email:
            parts.append(f"contact {email}")
        parts.append(f"notify {', '.join(notify) if notify else 'nobody'}")
        return f"Deployed {replicas} replica(s) to {env} ({'; '.join(parts)})."

    @mcp.tool(structured_output=False, title="Book a trip", annotations=_CHANGES)
    async def book_trip(destination: str, ctx: Context) -> str | InputRequiredResult:
        """Book a trip: asks for the dates, then for the seat and a confirmation."""
        state = read_state(ctx)
        if state.get("round") == 2:
            answer = response_to(ctx, "seat")
            if answer is None:
                return ask({"seat": form_request("Choose your seat and confirm.", TRIP_SEAT_SCHEMA)}, state)
            action, content = answer
            if action != "accept":
                return refused("Trip booking", action)
            try:
                seat = str_field(content, "seat", required=True)
                if seat not in ("window", "aisle", "middle"):
                    raise BadAnswer("seat must be window, aisle or middle")
                confirm = bool_field(content, "confirm")
            except BadAnswer as exc:
                return f"Invalid answer: {exc}."
            if not confirm:
                return "Trip not confirmed; nothing was booked."
            return (
                f"Booked {state.get('nights')} night(s) in {destination} from {state.get('start')}, "
                f"{seat} seat."
            )
        answer = response_to(ctx, "dates")
        if answer is None:
            return ask({"dates": form_request(f"When do you travel to {destination}?", TRIP_DATES_SCHEMA)},
                       {"tool": "book_trip", "round": 1})
        action, content = answer
        if action != "accept":
            return refused("Trip booking", action)
        try:
            start = str_field(content, "start", required=True)
            nights = int_field(content, "nights", 1, 30)
        except BadAnswer as exc:
            return f"Invalid answer: {exc}."
        return ask(
            {"seat": form_request(f"{nights} night(s) from {start}. Choose your seat and confirm.", TRIP_SEAT_SCHEMA)},
            {"tool": "book_trip", "round": 2, "start": start, "nights": nights},
        )

    @mcp.tool(structured_output=False, title="Connect an account", annotations=_CHANGES)
    async def connect_account(provider: str, ctx: Context) -> str | InputRequiredResult:
        """Connect an account at a provider through an out-of-band (URL mode) authorization page."""
        answer = response_to(ctx, "authorize")
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
            return ask({"authorize": request}, {"tool": "connect_account", "elicitation": elicitation_id})
        action, _content = answer
        if action != "accept":
            return refused("Account connection", action)
        return f"Account at {provider} connected."

    @mcp.tool(structured_output=False, title="Write a report", annotations=_READS)
    async def busy_report(topic: str, ctx: Context) -> str | InputRequiredResult:
        """Build a report; the server is busy at first and asks the client to come back."""
        state = read_state(ctx)
        phase = state.get("phase")
        if phase is None:
            # Load shedding: no questions, just "retry later with this state".
            return ask(None, {"tool": "busy_report", "phase": "queued", "queued_at": time.time()})
        if phase == "queued":
            return ask({"format": form_request(f"Report on {topic}: choose a format.", REPORT_FORMAT_SCHEMA)},
                       {"tool": "busy_report", "phase": "format"})
        answer = response_to(ctx, "format")
        if answer is None:
            return ask({"format": form_request(f"Report on {topic}: choose a format.", REPORT_FORMAT_SCHEMA)}, state)
        action, content = answer
        if action != "accept":
            return refused("Report", action)
        fmt = content.get("format")
        if fmt not in ("pdf", "html", "csv"):
            return "Invalid answer: format must be pdf, html or csv."
        # Progress reaches the client only when its request carried a progressToken.
        await ctx.report_progress(1, 2, "collecting data")
        await ctx.report_progress(2, 2, "rendering")
        return f"Report on {topic} ready as {fmt}."

    @mcp.tool(structured_output=False, title="Ask forever", annotations=_READS)
    async def endless(ctx: Context) -> InputRequiredResult:
        """Never finishes: every call answers another requestState-only round."""
        count = read_state(ctx).get("n", 0)
        if not isinstance(count, int):
            count = 0
        return ask(None, {"tool": "endless", "n": count + 1})

    @mcp.tool(structured_output=False, title="Onboard a team", annotations=_CHANGES)
    async def onboard_team(team: str, ctx: Context) -> str | InputRequiredResult:
        """Onboard a team: one card with two requests, a profile form and a single sign-on page."""
        profile, sso = response_to(ctx, "profile"), response_to(ctx, "sso")
        if profile is None or sso is None:
            url = f"{SSO_URL_BASE}?{urllib.parse.urlencode({'team': team})}"
            return ask({
                "profile": form_request(f"Describe team {team}.", TEAM_PROFILE_SCHEMA),
                "sso": ElicitRequest(params=ElicitRequestURLParams(
                    message=f"Enrol team {team} in single sign-on.", url=url, elicitation_id=str(uuid.uuid4()))),
            }, {"tool": "onboard_team"})
        (p_action, content), (s_action, _content) = profile, sso
        if p_action != "accept" or s_action != "accept":
            return refused("Onboarding", p_action if p_action != "accept" else s_action)
        try:
            name = str_field(content, "display_name", required=True)
            budget = content.get("budget", 250.5)
            if isinstance(budget, bool) or not isinstance(budget, int | float) or not 0 <= budget <= 10000:
                raise BadAnswer("budget must be a number from 0 to 10000")
            channels = content.get("channels")
            if not isinstance(channels, list) or not 1 <= len(channels) <= 2:
                raise BadAnswer("choose one or two channels")
            homepage = str_field(content, "homepage", required=False)
            size = str_field(content, "size", required=False)
        except BadAnswer as exc:
            return f"Invalid answer: {exc}."
        parts = [f"name {name}", f"budget {budget:g} EUR", f"channels {', '.join(map(str, channels))}"]
        if homepage:
            parts.append(f"page {homepage}")
        if size:
            parts.append(f"size {size}")
        return f"Team {team} onboarded ({'; '.join(parts)}); single sign-on confirmed."

    @mcp.tool(structured_output=False, title="Echo", annotations=_READS)
    async def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @mcp.tool(structured_output=False, title="Work for a while", annotations=_READS)
    async def long_task(seconds: int, ctx: Context) -> str:
        """Work for a while (at most 60 s), reporting progress every second, then answer."""
        seconds = max(0, min(int(seconds), 60))
        for done in range(seconds):
            await ctx.report_progress(done, seconds, f"{done} of {seconds} s")
            await asyncio.sleep(1)
        return f"Worked for {seconds} s."

    @mcp.tool(structured_output=False, title="Wait, then ask", annotations=_READS)
    async def wait_then_ask(seconds: int, ctx: Context) -> str | InputRequiredResult:
        """Think for a few seconds (at most 30), then ask one yes/no question."""
        answer = response_to(ctx, "go_on")
        if answer is None:
            await asyncio.sleep(max(0, min(int(seconds), 30)))
            return ask({"go_on": form_request("Go on?", GO_ON_SCHEMA)}, {"tool": "wait_then_ask"})
        action, content = answer
        if action != "accept":
            return refused("Waiting task", action)
        return "Went on." if content.get("go") is True else "Stopped."

    @mcp.tool(structured_output=False, title="Summarize (sampling)", annotations=_READS)
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

    @mcp.tool(structured_output=False, title="List my roots", annotations=_READS)
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
    from .status_app import add_status_app

    add_status_app(mcp)  # service_status and its MCP App (docs/apps.md, "The demo's app")
    if assist:  # completions, logging and chatty (issue 28): .assist
        from .assist import add_assistance

        add_assistance(mcp)
    return mcp
