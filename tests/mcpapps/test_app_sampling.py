"""An app's ``sampling/createMessage`` decided on the server (mrtrweb.appcalls.sampling), without a
browser: the host's endpoints driven with Django's client against our app server
(tests/apps_server.py) and the scripted model (tests/chat/model_server.py) through the ``openai`` SDK.

Not offered (``not_offered``, JSON-RPC ``-32601``, no model asked) without a model or without the
admin's allowance; a model that fails drafts nothing and frees the app's one waiting sampling; a
reply the product does not take keeps the draft waiting; a decision is taken once, and only by the
page's person; neither the card's token nor the draft is in a log."""

from __future__ import annotations

import re

import pytest

from mrtrweb.models import AuditEvent, McpServer, TenantModel
from tests.chat.model_server import ModelServer
from tests.mcpapps.test_app_calls import _ask, _client, _rendered, own, sandbox  # noqa: F401 -- fixtures

pytestmark = [pytest.mark.django_db(transaction=True)]

ASK = {"method": "sampling/createMessage",
       "params": {"messages": [{"role": "user", "content": {"type": "text", "text": "hello"}}], "maxTokens": 20}}


@pytest.fixture
def model(settings, sandbox):  # noqa: F811
    server = ModelServer().start()
    settings.MRTRWEB = {**settings.MRTRWEB, "MODEL_DEMO": False,
                        "MODEL_PROVIDERS": {"local": {"kind": "openai", "base_url": server.url,
                                                      "models": ["scripted-1"], "label": "Test endpoint"}},
                        "MODEL_URL_POLICY": {"allow_hosts": ["127.0.0.1"], "allow_http_hosts": ["127.0.0.1"]},
                        "MODEL_REPLY_TIMEOUT_S": 5}
    try:
        yield server
    finally:
        server.stop()


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


async def test_a_failed_draft_a_bad_reply_and_one_decision(seeded, own, model, caplog):  # noqa: F811
    caplog.set_level("INFO")
    host, client = await _rendered(seeded, own)
    server = await McpServer.objects.aget(name="Panel app")
    await McpServer.objects.filter(pk=server.pk).aupdate(allow_sampling=True)
    await TenantModel.objects.acreate(tenant_id=server.tenant_id, provider="local", model="scripted-1")

    model.script({"status": 500})  # the model fails: nothing held, the app's slot freed
    status, body = await _ask(client, host, ASK)
    assert (status, body["error"], body["rpc"]) == (502, "model_failed", -32001)
    model.script({"text": "drafted-4410"})
    status, body = await _ask(client, host, ASK)
    assert status == 200 and body["status"] == "confirm", body
    url = re.search(r'action="([^"]+/app/sampling/)"', body["card"]).group(1)
    token = re.search(r'name="token" value="([^"]+)"', body["card"]).group(1)
    # a reply the product does not take: said, the draft still waits
    for reply in ("", "   ", "x" * 20001):
        answer = await client.post(url, {"token": token, "decision": "send", "reply": reply})
        assert answer.status_code == 400 and answer.json()["error"] == "bad_reply"
    # only the page's person decides
    carol = await _client(seeded["users"]["carol"])
    assert (await carol.post(url, {"token": token, "decision": "send", "reply": "mine"})).status_code == 404
    answer = await client.post(url, {"token": token, "decision": "send", "reply": "drafted-4410"})
    assert answer.status_code == 200 and answer.json() == {"status": "sampled", "result": {
        "role": "assistant", "content": {"type": "text", "text": "drafted-4410"}, "model": "scripted-1",
        "stopReason": "endTurn"}}
    again = await client.post(url, {"token": token, "decision": "refuse"})  # taken once
    assert again.status_code == 410 and again.json()["error"] == "expired"
    events = [e async for e in AuditEvent.objects.filter(method="sampling/createMessage").order_by("sequence")]
    assert [e.event for e in events] == ["proposed", "approved"]
    assert token not in caplog.text and "drafted-4410" not in caplog.text  # the card's token, the draft: no log
    # the tenant's history shows them as the app's, and the draft's text nowhere
    history = (await client.get("/mcp/tenants/acme/history/?initiator=app&per_page=200")).content.decode()
    rows = re.findall(r'<tr class="event event-[a-z_]+" data-event="([a-z_]+)"', history)
    assert "proposed" in rows and "approved" in rows and "app_rendered" not in rows
    assert "sampling/createMessage" in history and "drafted-4410" not in history and "hello" not in history
    # the admin withdraws sampling between a draft and the person's Send: nothing is sent
    model.script({"text": "a late draft"})
    status, body = await _ask(client, host, ASK)
    assert status == 200, body
    token = re.search(r'name="token" value="([^"]+)"', body["card"]).group(1)
    await McpServer.objects.filter(pk=server.pk).aupdate(allow_sampling=False)
    answer = await client.post(url, {"token": token, "decision": "send", "reply": "a late draft"})
    assert answer.status_code == 404 and answer.json()["error"] == "not_offered"
    assert await AuditEvent.objects.filter(method="sampling/createMessage", event="approved").acount() == 1
