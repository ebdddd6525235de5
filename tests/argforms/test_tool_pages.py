"""The tool page's generated fields against real third-party servers, in process (Django's test
client; the servers are real processes on loopback):

* npm ``@modelcontextprotocol/server-memory`` 2026.8.31 (stdio) behind ``supergateway`` 4.0.0
  (:mod:`tests.thirdparty_memory`): ``create_entities`` takes an array of objects each holding an
  array of strings -- rows added and removed by a POST that sends nothing, the entities created,
  and "Change the arguments" putting them back into their fields;
* PyPI ``fastmcp`` 3.4.11 (:mod:`tests.thirdparty`): ``ship`` takes Pydantic models (a nested
  model, ``Optional[int]``, ``list[str]``, a list of models, an enum with a default), which FastMCP
  lists as ``$defs``/``$ref``/``anyOf`` schemas -- the arguments Pydantic received are the ones
  typed, empty optional fields left out, ``null`` where chosen (FastMCP 3 lists the models inlined,
  titles dropped); ``plant`` takes a self-recursive model (a real ``$ref`` cycle): the JSON box;
* the hostile schemas of :mod:`tests.hostile_refs` (outside references, a recursive one, a deep
  one): the JSON box, started from the schema, nothing fetched.
"""

from __future__ import annotations

import html
import json
import re

import pytest
from django.test import AsyncClient

from mrtrweb import operations
from mrtrweb.models import McpServer, Operation
from mrtrweb.text import names
from tests import hostile_refs
from tests.thirdparty import FASTMCP3, start_fastmcp
from tests.thirdparty_memory import start_memory

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def third_party(tmp_path_factory):
    base = tmp_path_factory.mktemp("argforms")
    memory = start_memory(base / "graph.jsonl", base / "memory.log")
    try:
        fastmcp = start_fastmcp(FASTMCP3, base / "fastmcp.log")
    except BaseException:
        memory.stop()
        raise
    listener = hostile_refs.listener()
    hostile = hostile_refs.serve(listener.url, (base / "none.json").as_uri())
    yield {"memory": memory, "fastmcp": fastmcp, "hostile": hostile, "listener": listener}
    for handle in (memory, fastmcp, hostile, listener):
        handle.stop()


@pytest.fixture
async def client(seeded, third_party, settings):
    settings.MRTRWEB = {"MAX_STARTS_PER_MINUTE": 10_000, "MAX_TENANT_STARTS_PER_MINUTE": 10_000}
    acme = seeded["servers"]["acme"].tenant
    servers = {}
    for key, handle in third_party.items():
        if key != "listener":
            servers[key] = await McpServer.objects.acreate(tenant=acme, name=key, url=handle.url)
    c = AsyncClient()
    await c.aforce_login(seeded["users"]["alice"])
    c.servers = servers
    return c


def _text(resp) -> str:
    return html.unescape(resp.content.decode())


def _fields(page: str) -> dict[str, str]:
    """name -> value of the text inputs and hidden inputs of a page."""
    return {html.unescape(m.group(1)): html.unescape(m.group(2) or "") for m in re.finditer(
        r'<input type="(?:text|hidden|number)" name="([^"]+)"(?: value="([^"]*)")?', page)}


async def _done(resp) -> Operation:
    assert resp.status_code == 302, _text(resp)[:3000]
    await operations.wait_idle()
    return await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])


async def test_memory_create_entities_rows_then_the_graph(client, third_party):
    url = names.call_url("tool", client.servers["memory"].pk, "create_entities")
    page = (await client.get(url)).content.decode()
    assert set(_fields(page)) >= {"arg-entities.__rows", "arg-entities.0.name", "arg-entities.0.entityType",
                                  "arg-entities.0.observations.0"}
    assert "Add a row" in page and 'name="arguments"' not in page
    typed = {"arg-entities.__rows": "1", "arg-entities.0.name": "Ada", "arg-entities.0.entityType": "person",
             "arg-entities.0.observations.__rows": "1", "arg-entities.0.observations.0": "wrote the first program"}
    # "Add a row" (a second entity, a second observation) and "Remove": the page again, nothing sent
    added = await client.post(url, {**typed, "arg-__row_action": "add:entities"})
    assert added.status_code == 200 and "arg-entities.1.name" in _fields(added.content.decode())
    more = await client.post(url, {**_fields(added.content.decode()),
                                   "arg-__row_action": "add:entities.0.observations"})
    shown = _fields(more.content.decode())
    assert shown["arg-entities.0.name"] == "Ada" and "arg-entities.0.observations.1" in shown
    removed = await client.post(url, {**shown, "arg-__row_action": "remove:entities:1"})
    assert "arg-entities.1.name" not in _fields(removed.content.decode())
    assert "This field is required" not in _text(removed)  # not checked: the person is still typing
    assert await Operation.objects.acount() == 0  # nothing was called
    filled = {**_fields(removed.content.decode()), "arg-entities.0.observations.1": "liked engines"}
    op = await _done(await client.post(url, filled))
    assert op.status == Operation.Status.COMPLETED, op.result
    assert op.params["arguments"] == {"entities": [{"name": "Ada", "entityType": "person",
                                                    "observations": ["wrote the first program", "liked engines"]}]}
    created = json.loads(op.result["content"][0]["text"])
    assert created == [{"name": "Ada", "entityType": "person",
                        "observations": ["wrote the first program", "liked engines"]}]
    # "Change the arguments": the nested values back in their fields, rows and all
    again = _fields((await client.get(f"{url}&from={op.pk}")).content.decode())
    assert again["arg-entities.0.observations.__rows"] == "2"
    assert again["arg-entities.0.observations.1"] == "liked engines" and again["arg-entities.0.name"] == "Ada"


async def test_fastmcp_pydantic_models_reach_the_tool_as_typed(client):
    url = names.call_url("tool", client.servers["fastmcp"].pk, "ship")
    page = (await client.get(url)).content.decode()
    fields = _fields(page)
    assert {"arg-shipment.recipient", "arg-shipment.address.street", "arg-shipment.address.zip_code",
            "arg-shipment.insured_value", "arg-note"} <= set(fields), sorted(fields)
    assert 'name="arg-shipment.speed"' in page and '<option value="standard" selected>' in page  # the enum's default
    assert 'name="arg-note.__null"' in page  # Optional: null is a choice, never sent unless chosen
    typed = {"arg-shipment.recipient": "Ada", "arg-shipment.address.street": "1 Loop Rd",
             "arg-shipment.address.city": "London", "arg-shipment.speed": "express",
             "arg-shipment.tags.__rows": "2", "arg-shipment.tags.0": "fragile", "arg-shipment.tags.1": "",
             "arg-shipment.parcels.__rows": "1", "arg-shipment.parcels.0.label": "box",
             "arg-shipment.parcels.0.weight_kg": "31"}
    refused = await client.post(url, typed)  # over the model's le=30: said on its field, nothing sent
    assert refused.status_code == 200 and "less than or equal to 30" in _text(refused)
    assert await Operation.objects.acount() == 0
    op = await _done(await client.post(url, {**typed, "arg-shipment.parcels.0.weight_kg": "2.5",
                                              "arg-note.__null": "on"}))
    assert op.status == Operation.Status.COMPLETED, op.result
    text = op.result["content"][0]["text"]
    assert text.startswith("ship: ")
    received = json.loads(text.removeprefix("ship: "))
    assert received == {"note": None, "shipment": {
        "recipient": "Ada", "address": {"street": "1 Loop Rd", "city": "London", "zip_code": None},
        "speed": "express", "insured_value": None, "tags": ["fragile"],
        "parcels": [{"label": "box", "weight_kg": 2.5}]}}
    # what was sent: the optional fields left empty are not there at all
    assert op.params["arguments"] == {"note": None, "shipment": {
        "recipient": "Ada", "address": {"street": "1 Loop Rd", "city": "London"}, "speed": "express",
        "tags": ["fragile"], "parcels": [{"label": "box", "weight_kg": 2.5}]}}


async def test_fastmcp_self_recursive_model_gets_the_json_box_started_from_the_schema(client):
    """``plant(tree: TreeNode)``: the model holds itself (``$ref`` back to ``#/$defs/TreeNode``):
    no fields can show it, so the JSON box, its text built from the schema (the cycle not followed)."""
    url = names.call_url("tool", client.servers["fastmcp"].pk, "plant")
    page = _text(await client.get(url))
    box = re.search(r'<textarea name="arguments"[^>]*>(.*?)</textarea>', page, re.S)
    assert box and json.loads(box.group(1)) == {"tree": {"name": "", "children": []}}
    assert "cannot be shown as fields here" in page and "Fill in fields instead" not in page
    tree = {"tree": {"name": "oak", "children": [{"name": "acorn", "children": []}]}}
    bad = await client.post(url, {"arguments": json.dumps({"tree": {"children": []}})})
    assert bad.status_code == 200 and "at tree: required" in _text(bad)  # the schema check, before anything is sent
    op = await _done(await client.post(url, {"arguments": json.dumps(tree)}))
    assert op.result["content"][0]["text"] == "plant: " + json.dumps(tree["tree"], sort_keys=True)


async def test_hostile_schemas_get_the_json_box_started_from_the_schema(client, third_party):
    server = client.servers["hostile"]
    for tool in ("ref_http", "ref_file", "id_relative", "exponential", "deep", "dynamic_ref"):
        resp = await client.get(names.call_url("tool", server.pk, tool))
        page = _text(resp)
        assert resp.status_code == 200 and 'name="arguments"' in page, tool
        assert "cannot be shown as fields here" in page and "argcheck.js" in page, tool
    local = _text(await client.get(names.call_url("tool", server.pk, "local_ref")))  # a local $ref: fields
    assert 'name="arg-x"' in local and 'name="arguments"' not in local
    boxed = _text(await client.get(names.call_url("tool", server.pk, "local_ref") + "&json=1"))
    assert 'name="arguments"' in boxed and "Fill in fields instead" in boxed
    wrong = _text(await client.post(names.call_url("tool", server.pk, "local_ref") + "&json=1",
                                    {"arguments": '{"x": "text"}'}))  # the JSON box posted: checked, said, kept
    assert "Arguments do not match the tool's schema at x: type" in wrong and "Fill in fields instead" in wrong
    assert await Operation.objects.acount() == 0
    assert third_party["listener"].hits == []


async def test_the_json_box_is_checked_against_the_schema_as_the_person_types(client, third_party, seeded):
    """``check_only=1`` (argcheck.js, as the person types): the same check as "Call tool", its
    verdict as JSON, nothing sent; CSRF-checked as every POST; a schema that refers outside itself
    is said to be uncheckable, and nothing is fetched."""
    url = names.call_url("tool", client.servers["fastmcp"].pk, "plant")
    missing = await client.post(url, {"arguments": json.dumps({"tree": {"children": []}}), "check_only": "1"})
    assert missing.status_code == 200 and missing.json()["ok"] is False
    assert "at tree: required" in missing.json()["error"]
    assert (await client.post(url, {"arguments": "[1]", "check_only": "1"})).json() == {
        "ok": False, "error": "The arguments must be a JSON object."}
    tree = {"tree": {"name": "oak", "children": [{"name": "acorn", "children": []}]}}
    assert (await client.post(url, {"arguments": json.dumps(tree), "check_only": "1"})).json() == {"ok": True}
    outside = names.call_url("tool", client.servers["hostile"].pk, "ref_http")
    said = (await client.post(outside, {"arguments": '{"x": 1}', "check_only": "1"})).json()  # reaches the $ref
    assert said["ok"] is False and "never fetches one" in said["error"]
    assert await Operation.objects.acount() == 0 and third_party["listener"].hits == []
    strict = AsyncClient(enforce_csrf_checks=True)
    await strict.aforce_login(seeded["users"]["alice"])
    assert (await strict.post(url, {"arguments": "{}", "check_only": "1"})).status_code == 403
