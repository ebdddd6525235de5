"""A FastMCP server exposing the FastMCP features people use, for the third-party matrix
(``tests/thirdparty.py``, ``tests/interop/test_thirdparty*.py``).

Run by the FastMCP venv's own Python (``var/fastmcp3``: fastmcp 3.x, ``var/fastmcp4``: 4.x), never
by ours::

    var/fastmcp4/bin/python tests/thirdparty_servers/fastmcp_features.py --port 8931

Streamable HTTP on ``http://127.0.0.1:PORT/mcp``; prints ``starting http://127.0.0.1:PORT/mcp``
on stdout before it binds the port (FastMCP's own banner is off; the launcher waits for the port).

Every tool's result is one text block saying exactly what the tool got from the client (answers,
sampled text, roots), as JSON with sorted keys, so a test checks what arrived at the server:

* ``echo(text)`` -- a plain tool: ``echo: TEXT``.
* ``fail(reason)`` -- raises ``ToolError``: an ``isError`` result ``refused: REASON``.
* ``order_form(item)`` -- ``ctx.elicit`` with a model whose every field has a default (string
  with a pattern, integer and number bounds, boolean, enum, multi-select enum).
* ``profile_form()`` -- ``ctx.elicit`` with every field type: required strings with length bounds
  and ``format: email``, a pattern, a ``format: date``, integer/number bounds, a boolean, an enum
  (single select), a titled ``oneOf`` single select, a multi-select with ``minItems``/``maxItems``,
  defaults on the optional ones.
* ``pick_priority()`` -- FastMCP's titled dict syntax (``{"low": {"title": ...}}``: ``oneOf``).
* ``pick_tags()`` -- FastMCP's multi-select list syntax (``[["a", "b"]]``: array of ``enum``).
* ``confirm()`` -- a scalar ``bool`` elicitation (FastMCP wraps it as ``{"value": bool}``).
* ``ask_nothing()`` -- FastMCP 3 only: ``ctx.elicit(message, None)``, an empty form (only the action).
* ``summarize(text)`` -- ``ctx.sample``: ``sampled: TEXT-THE-CLIENT-RETURNED``.
* ``show_roots()`` -- ``ctx.list_roots``: ``roots: [{"name":..,"uri":..}, ...]``.
* ``count_up(steps)`` -- ``ctx.report_progress`` each step, then ``counted STEPS``.
* ``ship(shipment, note)`` -- Pydantic models (a nested model, ``Optional[int]``, ``list[str]``, a
  list of models, an enum with a default) that FastMCP turns into ``$defs``/``$ref``/``anyOf``
  schemas (FastMCP 3 inlines the ``$defs`` and drops the titles): ``ship: {"note": .., "shipment":
  {..}}``, the arguments as Pydantic read them.
* ``plant(tree)`` -- a self-recursive model (kept as ``$defs`` with a ``$ref`` to itself):
  ``plant: {tree}``.
* ``guard_form(item)`` -- FastMCP 4 only: the 2026-07-28 guard pattern (returns an
  ``InputRequiredResult`` asking ``order``, reads ``ctx.input_responses`` on the retry).

Elicitation outcomes are reported as ``ACTION: {json content}`` (``accept``), ``decline`` or
``cancel``.
"""

from __future__ import annotations

import argparse
import enum
import json
from typing import Annotated, Any, Literal

import fastmcp
from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError
from pydantic import BaseModel, Field

MAJOR = int(fastmcp.__version__.split(".")[0])

mcp = FastMCP(f"fastmcp{MAJOR}-features")


def _said(result: Any) -> str:
    """``accept: {content}``, ``decline`` or ``cancel`` for a FastMCP elicitation result."""
    action = getattr(result, "action", "?")
    if action != "accept":
        return action
    data = result.data
    if isinstance(data, BaseModel):
        data = data.model_dump(mode="json")
    elif hasattr(data, "value"):
        data = {"value": data.value}
    return "accept: " + json.dumps(data, sort_keys=True)


@mcp.tool
def echo(text: str) -> str:
    """Echo the text back (a plain tool)."""
    return f"echo: {text}"


@mcp.tool
def fail(reason: str = "always") -> str:
    """Always fail with a tool error."""
    raise ToolError(f"refused: {reason}")


class Order(BaseModel):
    """Every field has a default: accept-defaults can accept it."""

    code: Annotated[str, Field(pattern=r"^[A-Z]{3}-[0-9]{3}$", description="Order code")] = "ABC-123"
    seats: Annotated[int, Field(ge=1, le=10, description="Seats")] = 2
    tip: Annotated[float, Field(ge=0, le=100, description="Tip, percent")] = 12.5
    gift: Annotated[bool, Field(description="Gift wrap")] = True
    size: Annotated[Literal["s", "m", "l"], Field(description="Size")] = "m"
    toppings: Annotated[list[Literal["cheese", "basil", "olives"]], Field(description="Toppings")] = ["cheese"]


@mcp.tool
async def order_form(item: str, ctx: Context) -> str:
    """Ask for an order whose every field has a default."""
    result = await ctx.elicit(f"Order details for {item}", response_type=Order)
    return f"order {item}: {_said(result)}"


class Profile(BaseModel):
    """Every field type: required ones without a default, optional ones with defaults."""

    name: Annotated[str, Field(min_length=2, max_length=40, description="Full name")]
    email: Annotated[str, Field(json_schema_extra={"format": "email"}, description="Email")]
    team: Annotated[str, Field(pattern=r"^[a-z]+$", description="Team (lower-case letters)")] = "ops"
    birthday: Annotated[str, Field(json_schema_extra={"format": "date"}, description="Birthday")] = "2000-01-31"
    age: Annotated[int, Field(ge=18, le=120, description="Age")] = 30
    height: Annotated[float, Field(ge=0.5, le=2.5, description="Height in metres")] = 1.75
    subscribe: Annotated[bool, Field(description="Subscribe")] = False
    plan: Annotated[Literal["free", "pro", "team"], Field(description="Plan")] = "free"
    colour: Annotated[str, Field(description="Colour", json_schema_extra={"oneOf": [
        {"const": "r", "title": "Red"}, {"const": "g", "title": "Green"}, {"const": "b", "title": "Blue"}]})] = "g"
    languages: Annotated[list[Literal["en", "de", "fr", "nl"]],
                         Field(min_length=1, max_length=2, description="Languages")] = ["en"]


@mcp.tool
async def profile_form(ctx: Context) -> str:
    """Ask for a profile with every field type."""
    return "profile: " + _said(await ctx.elicit("Your profile", response_type=Profile))


@mcp.tool
async def pick_priority(ctx: Context) -> str:
    """Titled single select (FastMCP dict syntax)."""
    result = await ctx.elicit("Priority?", response_type={"low": {"title": "Low"}, "high": {"title": "High"}})
    return "priority: " + _said(result)


@mcp.tool
async def pick_tags(ctx: Context) -> str:
    """Untitled multi select (FastMCP list-of-list syntax)."""
    return "tags: " + _said(await ctx.elicit("Tags?", response_type=[["red", "green", "blue"]]))


@mcp.tool
async def confirm(ctx: Context) -> str:
    """A scalar boolean elicitation."""
    return "confirm: " + _said(await ctx.elicit("Proceed?", response_type=bool))


if MAJOR < 4:  # FastMCP 4 refuses response_type=None ("ambiguous under the MCP spec")
    @mcp.tool
    async def ask_nothing(ctx: Context) -> str:
        """An elicitation with no fields (only the action matters)."""
        return "nothing: " + _said(await ctx.elicit("Shall I go on?", response_type=None))


@mcp.tool
async def summarize(text: str, ctx: Context) -> str:
    """Ask the client's model (sampling) to summarize the text."""
    result = await ctx.sample(f"Summarize: {text}", max_tokens=50)
    return f"sampled: {result.text}"


@mcp.tool
async def show_roots(ctx: Context) -> str:
    """List the client's roots."""
    roots = await ctx.list_roots()
    return "roots: " + json.dumps([{"uri": str(r.uri), "name": r.name} for r in roots], sort_keys=True)


@mcp.tool
async def count_up(ctx: Context, steps: int = 3) -> str:
    """Report progress for each step."""
    for i in range(1, steps + 1):
        await ctx.report_progress(i, steps, f"step {i}")
    return f"counted {steps}"


class Speed(str, enum.Enum):
    """How fast a parcel goes (a ``$defs`` enum behind a ``$ref``)."""

    standard = "standard"
    express = "express"


class Address(BaseModel):
    street: str = Field(title="Street", min_length=1)
    city: str = Field(title="City")
    zip_code: str | None = Field(default=None, title="ZIP code")  # anyOf [string, null]


class Parcel(BaseModel):
    label: str
    weight_kg: float = Field(gt=0, le=30, description="Weight in kg")


class Shipment(BaseModel):
    recipient: str = Field(title="Recipient")
    address: Address  # a nested model: $ref to $defs
    speed: Speed = Speed.standard  # an enum with a default
    insured_value: int | None = None  # Optional[int]
    tags: list[str] = []  # a list of strings
    parcels: list[Parcel] = Field(default_factory=list, max_length=5)  # a list of models


class TreeNode(BaseModel):
    name: str
    children: list[TreeNode] = []  # a model holding itself: FastMCP keeps a $defs entry and a $ref to it


@mcp.tool
def plant(tree: TreeNode) -> str:
    """A self-recursive model (``$ref`` back to itself): says exactly the tree it received."""
    return "plant: " + json.dumps(tree.model_dump(mode="json"), sort_keys=True)


@mcp.tool
def ship(shipment: Shipment, note: str | None = None) -> str:
    """Pydantic models with nested and Optional fields: says exactly the arguments it received."""
    got = {"shipment": shipment.model_dump(mode="json"), "note": note}
    return "ship: " + json.dumps(got, sort_keys=True)


if MAJOR >= 4:
    from mcp_types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult

    @mcp.tool
    async def guard_form(item: str, ctx: Context) -> Any:
        """The 2026-07-28 guard pattern: ask for the order in an InputRequiredResult."""
        responses = ctx.input_responses
        if not responses or "order" not in responses:
            schema = {"type": "object", "properties": {
                "seats": {"type": "integer", "minimum": 1, "maximum": 10, "default": 2},
                "note": {"type": "string", "maxLength": 50}}, "required": ["seats"]}
            return InputRequiredResult(input_requests={"order": ElicitRequest(params=ElicitRequestFormParams(
                message=f"Order details for {item}", requested_schema=schema))}, request_state=f"item={item}")
        answer = responses["order"]
        dumped = answer.model_dump(mode="json", exclude_none=True) if hasattr(answer, "model_dump") else answer
        return f"guard {item} (state {ctx.request_state}): " + json.dumps(dumped, sort_keys=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    print(f"starting http://127.0.0.1:{args.port}/mcp", flush=True)  # tests/thirdparty.py waits for the port
    mcp.run(transport="http", host="127.0.0.1", port=args.port, path="/mcp", show_banner=False,
            log_level="warning")


if __name__ == "__main__":
    main()
