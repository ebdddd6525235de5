"""An app's ``sampling/createMessage`` decided on the server (mrtrweb.appcalls.sampling), without a
browser: the host's endpoints driven with Django's client against our app server
(tests/apps_server.py) and the scripted model (tests/chat/model_server.py) through the ``openai`` SDK.

Not offered (``not_offered``, JSON-RPC ``-32601``, no model asked) without a model or without the
admin's allowance. The app's request reaches the model only when the person asks for a draft (the
scripted model's requests counted); a reply the person writes, or a refusal, never reaches it. A
model that fails drafts nothing and the request still waits; the app's one waiting slot outlives
the drafting; a reply the product does not take keeps the card waiting; a decision is taken once,
and only by the page's person; neither a card's token nor the draft is in a log."""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from mrtrweb.models import AuditEvent, McpServer, TenantModel
from tests.mcpapps.app_requests import ask as _ask, client_for as _client, rendered as _rendered

pytestmark = [pytest.mark.django_db(transaction=True)]

ASK = {"method": "sampling/createMessage",
       "params": {"messages": [{"role": "user", "content": {"type": "text", "text": "hello"}}], "maxTokens": 20}}


@pytest.fixture
def model(model_endpoint, sandbox):
    """The scripted model endpoint, apps' sandbox at a host nothing listens on (no browser here)."""
    return model_endpoint


async def test_sampling_is_not_offered_without_a_model_or_the_admins_allowance(seeded, own, model):  # noqa: F811
    host, client = await _rendered(seeded, own)
    server = await McpServer.objects.aget(name="Panel app")
    await TenantModel.objects.acreate(tenant_id=server.tenant_id, provider="local", model="scripted-1")
    status, body = await _ask(client, host, ASK)  # a model, but sampling not allowed for the server
    assert (status, body["error"], body["rpc"]) == (404, "not_offered", -32601)
    await McpServer.objects.filter(pk=server.pk).aupdate(allow_sampling=True)
    await TenantModel.objects.all().adelete()
    status, body = await _ask(client, host, ASK)  # allowed, but no model
    assert (status, body["error"], body["rpc"]) == (404, "not_offered", -32601)
    assert model.requests == []
    assert not await AuditEvent.objects.filter(method="sampling/createMessage").aexists()


def _token(card: str) -> str:
    return re.search(r'name="token" value="([^"]+)"', card).group(1)


def _ttl(key: str) -> float:
    """Seconds the binding cache still keeps ``key`` (django-redis's ``ttl``, or the local-memory cache's expiry)."""
    from mrtrweb.appcalls.host import cache

    store = cache()
    if hasattr(store, "ttl"):
        return float(store.ttl(key))
    return store._expire_info[store.make_key(key)] - time.time()


async def _events() -> list[AuditEvent]:
    return [e async for e in AuditEvent.objects.filter(method="sampling/createMessage").order_by("sequence")]


async def _allowed(seeded, own):  # noqa: F811
    host, client = await _rendered(seeded, own)
    server = await McpServer.objects.aget(name="Panel app")
    await McpServer.objects.filter(pk=server.pk).aupdate(allow_sampling=True)
    await TenantModel.objects.acreate(tenant_id=server.tenant_id, provider="local", model="scripted-1")
    return host, client, server


async def test_nothing_reaches_the_model_before_the_person_asks_it_to_draft(seeded, own, model, caplog):  # noqa: F811
    caplog.set_level("INFO")
    host, client, server = await _allowed(seeded, own)
    model.script({"text": "drafted-4410"})
    status, body = await _ask(client, host, ASK)
    assert status == 200 and body["status"] == "confirm", body
    assert model.requests == [] and await _events() == []  # the app asked: the model did not see it
    card = body["card"]
    assert 'value="draft"' in card and 'value="write"' in card and 'value="refuse"' in card
    assert 'value="send"' not in card and "hello" in card  # the request shown, no draft
    url = re.search(r'action="([^"]+/app/sampling/)"', card).group(1)
    token = _token(card)
    # a Send without a draft does not fit the card: refused, the card still waits, no model asked
    answer = await client.post(url, {"token": token, "decision": "send", "reply": "x"})
    assert answer.status_code == 400 and answer.json()["error"] == "bad_request"
    # only the page's person asks for a draft
    carol = await _client(seeded["users"]["carol"])
    assert (await carol.post(url, {"token": token, "decision": "draft"})).status_code == 404
    assert model.requests == []

    model.steps.clear()
    model.script({"status": 500})  # the person asks; the model fails: the request still waits
    answer = await client.post(url, {"token": token, "decision": "draft"})
    assert answer.status_code == 502 and answer.json()["error"] == "model_failed"
    assert len(model.requests) == 1
    model.script({"text": "drafted-4410"})
    answer = await client.post(url, {"token": token, "decision": "draft"})
    assert answer.status_code == 200 and answer.json()["status"] == "drafted", answer.content
    assert len(model.requests) == 2
    assert model.requests[-1]["body"]["messages"] == [{"role": "user", "content": "hello"}]
    drafted = answer.json()["card"]
    assert "drafted-4410" in drafted and 'value="send"' in drafted and 'value="draft"' not in drafted
    new = _token(drafted)
    assert new != token
    again = await client.post(url, {"token": token, "decision": "write", "reply": "late"})  # the old card: used
    assert again.status_code == 410 and again.json()["error"] == "expired"
    # a reply the product does not take: said, the draft still waits
    for reply in ("", "   ", "x" * 20001):
        answer = await client.post(url, {"token": new, "decision": "send", "reply": reply})
        assert answer.status_code == 400 and answer.json()["error"] == "bad_reply"
    assert (await carol.post(url, {"token": new, "decision": "send", "reply": "mine"})).status_code == 404
    answer = await client.post(url, {"token": new, "decision": "send", "reply": "drafted-4410"})
    assert answer.status_code == 200 and answer.json() == {"status": "sampled", "result": {
        "role": "assistant", "content": {"type": "text", "text": "drafted-4410"}, "model": "scripted-1",
        "stopReason": "endTurn"}}
    again = await client.post(url, {"token": new, "decision": "refuse"})  # taken once
    assert again.status_code == 410 and again.json()["error"] == "expired"
    assert [(e.event, e.code) for e in await _events()] == [("proposed", "drafted"), ("approved", "approved")]
    assert len(model.requests) == 2
    for secret in (token, new, "drafted-4410"):
        assert secret not in caplog.text  # the cards' tokens, the draft: no log
    # the tenant's history shows them as the app's, and the draft's text nowhere
    history = (await client.get("/mcp/tenants/acme/history/?initiator=app&per_page=200")).content.decode()
    rows = re.findall(r'<tr class="event event-[a-z_]+" data-event="([a-z_]+)"', history)
    assert "proposed" in rows and "approved" in rows and "app_rendered" not in rows
    assert "sampling/createMessage" in history and "drafted-4410" not in history and "hello" not in history


async def test_written_by_the_person_or_refused_the_model_is_never_asked(seeded, own, model):  # noqa: F811
    host, client, server = await _allowed(seeded, own)
    status, body = await _ask(client, host, ASK)
    url = re.search(r'action="([^"]+/app/sampling/)"', body["card"]).group(1)
    token = _token(body["card"])
    for reply in ("", "  ", "x" * 20001):
        answer = await client.post(url, {"token": token, "decision": "write", "reply": reply})
        assert answer.status_code == 400 and answer.json()["error"] == "bad_reply"
    answer = await client.post(url, {"token": token, "decision": "write", "reply": "written-7731\r\nby me"})
    assert answer.status_code == 200 and answer.json()["result"] == {
        "role": "assistant", "content": {"type": "text", "text": "written-7731\nby me"}, "model": "human",
        "stopReason": "endTurn"}
    # refused before any draft: the app is told, the model never asked
    status, body = await _ask(client, host, ASK)
    assert status == 200, body  # the app's one waiting slot was freed by the decision
    answer = await client.post(url, {"token": _token(body["card"]), "decision": "refuse"})
    assert answer.status_code == 409 and answer.json()["error"] == "declined"
    assert model.requests == []
    events = await _events()
    assert [(e.event, e.code) for e in events] == [("edited", "written"), ("proposal_denied", "refused")]
    assert events[0].initiator_detail["model"] == "human" and set(events[0].actions) == {"reply"}
    assert set(events[1].actions) == {"request"} and events[0].operation_id != events[1].operation_id


async def test_the_busy_slot_outlives_the_drafting_and_the_allowance_is_read_again(seeded, own, model,  # noqa: F811
                                                                                  settings):
    from mrtrweb.appcalls.sampling import _BUSY

    settings.MRTRWEB = {**settings.MRTRWEB, "APPS_CALL_TIMEOUT_S": 30, "MODEL_REPLY_TIMEOUT_S": 2}
    host, client, server = await _allowed(seeded, own)
    busy = _BUSY + str(host.pk)
    status, body = await _ask(client, host, ASK)
    url = re.search(r'action="([^"]+/app/sampling/)"', body["card"]).group(1)
    token = _token(body["card"])
    assert 28 < _ttl(busy) <= 31
    model.script({"hang": True})  # the model drafts for longer than it may: the slot lives on meanwhile
    drafting = asyncio.ensure_future(client.post(url, {"token": token, "decision": "draft"}))
    for _ in range(400):  # until the model holds the request (a wait, not a timed assertion)
        if model.requests:
            break
        await asyncio.sleep(0.025)
    assert len(model.requests) == 1
    assert 31 < _ttl(busy) <= 33  # APPS_CALL_TIMEOUT_S + MODEL_REPLY_TIMEOUT_S + 1
    status, body = await _ask(client, host, ASK)  # the app asks again meanwhile: one waits
    assert (status, body["error"]) == (409, "busy")
    answer = await drafting
    assert answer.status_code == 502 and answer.json()["error"] == "model_failed"
    assert 28 < _ttl(busy) <= 31  # reset: the request still waits for the person
    # the admin withdraws sampling before the person's decision: nothing is drafted or sent
    await McpServer.objects.filter(pk=server.pk).aupdate(allow_sampling=False)
    answer = await client.post(url, {"token": token, "decision": "draft"})
    assert answer.status_code == 404 and answer.json()["error"] == "not_offered"
    assert len(model.requests) == 1 and await _events() == []
    await McpServer.objects.filter(pk=server.pk).aupdate(allow_sampling=True)
    model.script({"text": "a late draft"})
    status, body = await _ask(client, host, ASK)  # the slot was freed
    assert status == 200, body
    answer = await client.post(url, {"token": _token(body["card"]), "decision": "draft"})
    new = _token(answer.json()["card"])
    await McpServer.objects.filter(pk=server.pk).aupdate(allow_sampling=False)
    answer = await client.post(url, {"token": new, "decision": "send", "reply": "a late draft"})
    assert answer.status_code == 404 and answer.json()["error"] == "not_offered"
    assert [e.event for e in await _events()] == ["proposed"]
