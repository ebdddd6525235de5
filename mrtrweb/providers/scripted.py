"""The scripted demo model: **not a language model**. A few phrases are mapped to the demo
server's tools, so that a newcomer sees proposals, approvals and rounds without a model server
(``./dev demo`` offers it; ``MRTRWEB["MODEL_DEMO"]``). It follows the same path as a real model:
its calls are proposals the person approves, its "reply" streams to the page.

Phrases (case does not matter): ``echo <text>`` (the ``echo`` tool), ``deploy [production]
[<n> replicas]`` (``deploy``, a destructive tool that asks a round), ``report [on <topic>]`` (``busy_report``),
``book a trip to <place>`` (``book_trip``). Anything else: what it understands and how to set up a
real model. After a call's result it says what the server answered, quoted as data.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from .base import OnText, Reply, ToolCall, ToolSpec

HELP = ("I am the **scripted demo model**, not a language model: I map a few phrases to the demo "
        "server's tools. Try `echo hello`, `deploy 2 replicas to staging`, `report` or `book a trip to Lisbon`. "
        "To talk to a real model, ask your deployer to set `MODEL_PROVIDERS` and a tenant admin to choose it "
        "(see the chat documentation).")


def _tool(tools: list[ToolSpec], base: str) -> str | None:
    for t in tools:
        if t.name == base or t.name.endswith("__" + base):
            return t.name
    return None


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
            text = "The server answered (quoted as data):\n\n" + "\n\n".join(
                "> " + r[:600].replace("\n", "\n> ") for r in reversed(results))
            return await _say(text, on_text)
        said = str(last.get("content", "")) if last.get("role") == "user" else ""
        call = _call_for(said.strip(), tools)
        if call is None:
            return await _say(HELP, on_text)
        name, arguments = call
        text = f"I propose to call `{name}`."
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
    return None


async def _say(text: str, on_text: OnText) -> Reply:
    for piece in re.findall(r"\S+\s*|\s+", text):
        await on_text(piece)
    return Reply(text=text)
