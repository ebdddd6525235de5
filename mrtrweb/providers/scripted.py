"""The scripted demo model: **not a language model**. A few phrases are mapped to the demo
server's tools, so that a newcomer sees proposals, approvals and rounds without a model server
(``./dev demo`` offers it; ``MRTRWEB["MODEL_DEMO"]``). It follows the same path as a real model:
its calls are proposals the person approves, its "reply" streams to the page.

Phrases (case does not matter): ``echo <text>`` (the ``echo`` tool), ``deploy [production]
[<n> replicas]`` (``deploy``, a destructive tool that asks a round), ``report [on <topic>]`` (``busy_report``),
``book a trip to <place>`` (``book_trip``), ``status [of <service>]`` (``service_status``, whose
MCP App shows the result). Anything else: what it understands and how to set up a real model.

Which server: the tool of the server named :data:`DEMO_SERVER` ("Demo server", the demo's own,
as docs/chat.md promises), whatever else the conversation offers (the legacy and OAuth demo servers
have tools of the same names); without one, the first server offering the tool in the order the
tools were offered. A tool's server is read from the description the conversation gives each tool
(``[Tool 'echo' of MCP server 'Demo server'] ...``, :mod:`mrtrweb.chat.tools`), or else from its
offered name (``demo_server_<id>__echo``).

After the results of its calls (the tool messages, :func:`mrtrweb.chat.context.result_for_model`'s
JSON), it answers one short sentence per call -- what the server answered (quoted as data), that the
person declined it ("You declined the call to `busy_report` on Demo server; nothing was sent."),
or how it ended -- and signs it as the scripted demo model.
"""

from __future__ import annotations

import ast
import json
import re
import uuid
from typing import Any

from .base import OnText, Reply, ToolCall, ToolSpec

#: the demo's own server (mrtrweb_demo.DEMO_SERVER), preferred when several offer a tool
DEMO_SERVER = "Demo server"
#: how each reply after a call ends: the model says what it is
SIGNATURE = "*— the scripted demo model (not a language model)*"
#: the most characters of a server's answer quoted
QUOTE_CHARS = 600

HELP = ("I am the **scripted demo model**, not a language model: I map a few phrases to the demo "
        "server's tools. Try `echo hello`, `deploy 2 replicas to staging`, `report`, `book a trip to Lisbon` "
        "or `status of checkout` (its MCP App shows the result). "
        "To talk to a real model, ask your deployer to set `MODEL_PROVIDERS` and a tenant admin to choose it "
        "(see the chat documentation).")

_QUOTED = r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\""
_DESCRIBED = re.compile(rf"^\[Tool (?P<tool>{_QUOTED}) of MCP server (?P<server>{_QUOTED})\]")
_DEMO_PREFIX = re.compile(r"^demo_server_\d+__")
#: the product's reason for a call the person denied (mrtrweb.chat.context)
_DENIED = "The person denied this call"


def _described(spec: ToolSpec) -> tuple[str, str] | None:
    """``(tool, server)`` as the conversation described the tool, or None."""
    m = _DESCRIBED.match(spec.description or "")
    if m is None:
        return None
    try:
        tool, server = ast.literal_eval(m.group("tool")), ast.literal_eval(m.group("server"))
    except (ValueError, SyntaxError):
        return None
    return (tool, server) if isinstance(tool, str) and isinstance(server, str) else None


def _tool(tools: list[ToolSpec], base: str) -> str | None:
    """The offered name of tool ``base``: the demo server's when it offers it, else the first."""
    found = []
    for t in tools:
        described = _described(t)
        if described is not None:
            if described[0] != base:
                continue
            found.append((described[1] != DEMO_SERVER, t.name))
        elif t.name == base or t.name.endswith("__" + base):
            found.append((not _DEMO_PREFIX.match(t.name), t.name))
    if not found:
        return None
    return min(found, key=lambda item: item[0])[1]  # stable: the first of the best


def _plain(text: Any, limit: int = 80) -> str:
    """A name shown in Markdown as plain text (its markup characters escaped), on one line."""
    one = " ".join(str(text or "").split())[:limit]
    return re.sub(r"([\\`*_\[\]<>#|~!])", r"\\\1", one)


def _code(text: Any, limit: int = 80) -> str:
    one = " ".join(str(text or "").split())[:limit].replace("`", "'")
    return f"`{one}`" if one else "the tool"


def _quote(text: str) -> str:
    cut = text[:QUOTE_CHARS] + ("…" if len(text) > QUOTE_CHARS else "")
    return "\n".join("> " + line for line in (cut.splitlines() or [""]))


def _said_about(content: str) -> str:
    """One readable sentence (and the server's words, quoted) about one tool message."""
    try:
        data = json.loads(content)
    except ValueError:
        data = None
    if not isinstance(data, dict) or "outcome" not in data:
        return "The server answered (quoted as data):\n\n" + _quote(content)
    call = _code(data.get("tool"))
    if data.get("server"):
        call += f" on {_plain(data.get('server'))}"
    outcome = str(data.get("outcome"))
    reason = str(data.get("reason") or "")
    if outcome == "completed":
        answer = str(data.get("data_from_server") or "")
        if data.get("is_error") is True:
            return f"{call} answered with an error (quoted as data):\n\n" + _quote(answer)
        if not answer.strip():
            return f"{call} answered, without any text."
        return f"{call} answered (quoted as data):\n\n" + _quote(answer)
    if outcome == "not_called":
        if reason.startswith(_DENIED):
            return f"You declined the call to {call}; nothing was sent."
        return f"The call to {call} was not made: {_plain(reason, 300)}"
    said = f"The call to {call} ended without a result ({_plain(outcome, 40)})."
    return said + (f" The product said: {_plain(reason, 300)}" if reason else "")


class ScriptedDemoModel:
    kind = "demo"
    name = "demo"
    model = "scripted"

    async def reply(self, messages: list[dict[str, Any]], tools: list[ToolSpec], on_text: OnText) -> Reply:
        last = messages[-1] if messages else {}
        if last.get("role") == "tool":
            results = []
            for m in reversed(messages):
                if m.get("role") != "tool":
                    break
                results.append(str(m.get("content", "")))
            text = "\n\n".join(_said_about(r) for r in reversed(results)) + "\n\n" + SIGNATURE
            return await _say(text, on_text)
        said = str(last.get("content", "")) if last.get("role") == "user" else ""
        call = _call_for(said.strip(), tools)
        if call is None:
            return await _say(HELP, on_text)
        name, arguments = call
        described = next((_described(t) for t in tools if t.name == name), None)
        text = (f"I propose to call {_code(described[0])} on {_plain(described[1])} (offered to me as `{name}`)."
                if described else f"I propose to call `{name}`.")
        await on_text(text)
        return Reply(text=text, tool_calls=(ToolCall(id=f"call_{uuid.uuid4().hex[:12]}", name=name,
                                                     arguments=json.dumps(arguments)),))


def _call_for(said: str, tools: list[ToolSpec]) -> tuple[str, dict[str, Any]] | None:
    low = said.lower()
    if low.startswith("echo") and (name := _tool(tools, "echo")):
        return name, {"text": said[4:].strip() or "hello"}
    if "deploy" in low and (name := _tool(tools, "deploy")):
        n = re.search(r"(\d{1,2})", low)
        return name, {"env": "production" if "production" in low else "staging", "replicas": int(n.group(1)) if n else 1}
    if "report" in low and (name := _tool(tools, "busy_report")):
        topic = re.search(r"\bon\s+(.+)$", said, re.IGNORECASE)
        return name, {"topic": (topic.group(1).strip() if topic else "the week")[:60]}
    if ("trip" in low or "book" in low) and (name := _tool(tools, "book_trip")):
        place = re.search(r"\bto\s+(.+)$", said, re.IGNORECASE)
        return name, {"destination": (place.group(1).strip() if place else "Lisbon")[:60]}
    if "status" in low and (name := _tool(tools, "service_status")):
        service = re.search(r"\b(?:of|for)\s+([A-Za-z0-9_-]{1,40})", said, re.IGNORECASE)
        return name, {"service": service.group(1).lower() if service else "checkout"}
    return None


async def _say(text: str, on_text: OnText) -> Reply:
    for piece in re.findall(r"\S+\s*|\s+", text):
        await on_text(piece)
    return Reply(text=text)
