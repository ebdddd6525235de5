"""``prompts/get`` and ``resources/read`` from the server page, with their input_required rounds
through the same consent card (against the real demo server)."""

from __future__ import annotations

import pytest
from django.test import AsyncClient

from mrtrweb import operations
from mrtrweb.models import Operation
from tests.answering import post_answer

pytestmark = [pytest.mark.django_db(transaction=True)]


async def _client(user) -> AsyncClient:
    c = AsyncClient()
    await c.aforce_login(user)
    return c


async def _op(resp) -> Operation:
    assert resp.status_code == 302, resp.content.decode()[:400]
    await operations.wait_idle()
    return await Operation.objects.select_related("server").aget(pk=resp["Location"].rstrip("/").split("/")[-1])


async def test_server_page_lists_prompts_and_resource_templates(seeded):
    client = await _client(seeded["users"]["alice"])
    page = (await client.get(f"/mcp/servers/{seeded['servers']['acme'].pk}/")).content.decode()
    assert 'data-prompt="release_notes"' in page and 'data-template="demo://reports/{team}"' in page


async def test_prompt_round_through_the_card(seeded):
    client, server, mcp = await _client(seeded["users"]["alice"]), seeded["servers"]["acme"], seeded["mcp"]
    form = await client.get(f"/mcp/servers/{server.pk}/prompts/release_notes/")
    assert form.status_code == 200 and 'name="arg-version"' in form.content.decode()
    missing = await client.post(f"/mcp/servers/{server.pk}/prompts/release_notes/", {})
    assert missing.status_code == 200 and "This field is required" in missing.content.decode()
    op = await _op(await client.post(f"/mcp/servers/{server.pk}/prompts/release_notes/", {"arg-version": "2.0"}))
    assert op.method == "prompts/get" and op.status == "awaiting_input", (op.error_code, op.error_message)
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert "Who will read the notes for 2.0?" in page
    assert "Your answer goes to Demo server as the retry of prompts/get release_notes." in page
    resp = await post_answer(client, f"/mcp/operations/{op.id}/answer/", {"action": "accept", "round": "1",
                                                                             "in-audience-audience": "customers"})
    assert resp.status_code == 302
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=op.pk)
    assert op.status == "completed", (op.error_code, op.error_message)
    assert "for customers" in (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    retries = [r for r in mcp.log.records("prompts/get") if r.is_retry]
    assert len(retries) == 1 and retries[0].params["inputResponses"]["audience"]["content"] == {"audience": "customers"}


async def test_resource_template_round_through_the_card(seeded):
    client, server, mcp = await _client(seeded["users"]["alice"]), seeded["servers"]["acme"], seeded["mcp"]
    url = f"/mcp/servers/{server.pk}/resources/?template=demo%3A%2F%2Freports%2F%7Bteam%7D"
    assert 'name="arg-team"' in (await client.get(url)).content.decode()
    op = await _op(await client.post(url, {"arg-team": "core ops"}))
    assert op.method == "resources/read" and op.name == "demo://reports/core%20ops"
    assert op.status == "awaiting_input", (op.error_code, op.error_message)
    await client.get(f"/mcp/operations/{op.id}/")
    bad = await post_answer(client, f"/mcp/operations/{op.id}/answer/", {"action": "accept", "round": "1",
                                                                            "in-period-since": "2026-02-30"})
    assert bad.status_code == 400 and len([r for r in mcp.log.records("resources/read") if r.is_retry]) == 0
    resp = await post_answer(client, f"/mcp/operations/{op.id}/answer/", {"action": "accept", "round": "1",
                                                                             "in-period-since": "2026-01-05"})
    assert resp.status_code == 302
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=op.pk)
    assert op.status == "completed", (op.error_code, op.error_message)
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert "Report for team core ops since 2026-01-05" in page
    assert (await client.get(f"/mcp/servers/{server.pk}/resources/?template=nope")).status_code == 404
    assert (await client.get(f"/mcp/servers/{server.pk}/prompts/nope/")).status_code == 404
