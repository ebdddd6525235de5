"""Sampling with the tenant's model (``SAMPLING_PROVIDER = mrtrweb.chat.sampling.ModelDraftsReply``)
against the real demo MCP server and the scripted OpenAI-compatible endpoint: the model drafts the
reply, the person reviews it before it goes; a reply the person wrote wins; a failing model sends
nothing."""

from __future__ import annotations

import pytest

from mrtrweb.models import McpServer, Operation, TenantModel

from tests.answering import answer_card, post_review, reload_op, signed_client, start_call

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def sampling_setup(seeded, model_settings, model_server):
    model_settings.MRTRWEB = {**model_settings.MRTRWEB, "SAMPLING_PROVIDER": "mrtrweb.chat.sampling.ModelDraftsReply"}
    server = seeded["servers"]["acme"]
    McpServer.objects.filter(pk=server.pk).update(allow_sampling=True)
    TenantModel.objects.create(tenant=server.tenant, provider="local", model="scripted-1")
    return seeded["users"]["alice"], server, seeded["mcp"]


def _retries(mcp):
    return [r for r in mcp.log.tool_calls("summarize_with_sampling") if r.is_retry]


async def test_the_model_drafts_the_reply_and_the_person_reviews_it(sampling_setup, model_server):
    alice, server, mcp = sampling_setup
    model_server.script({"text": "A one-sentence summary."})
    client = await signed_client(alice)
    op = await start_call(client, server, "summarize_with_sampling", {"text": "long notes"})
    assert op.status == Operation.Status.AWAITING_INPUT
    await client.get(f"/mcp/operations/{op.id}/")
    resp, token = await post_review(client, f"/mcp/operations/{op.id}/answer/",
                                    {"round": str(op.rounds), "in-summary-approve": "on"})
    assert token is not None and "A one-sentence summary." in resp.content.decode()  # under review, not sent
    assert _retries(mcp) == []
    sent = model_server.requests[0]["body"]
    assert sent["messages"] == [{"role": "system", "content": "You are a concise summarizer. Answer in one sentence."},
                                {"role": "user", "content": "Summarize: long notes"}]
    assert "tools" not in sent
    await client.post(f"/mcp/operations/{op.id}/answer/", {"round": str(op.rounds), "in-summary-approve": "on",
                                                           "action": "send", "review_token": token})
    from mrtrweb import operations

    await operations.wait_idle()
    op = await reload_op(op)
    assert op.status == Operation.Status.COMPLETED
    assert op.result["content"][0]["text"] == "Summary (scripted-1): A one-sentence summary."
    assert len(model_server.requests) == 1  # drafted once, for the review


async def test_a_reply_the_person_wrote_is_sent_and_the_model_not_asked(sampling_setup, model_server):
    alice, server, mcp = sampling_setup
    client = await signed_client(alice)
    op = await start_call(client, server, "summarize_with_sampling", {"text": "x"})
    await answer_card(client, op, "accept", {"in-summary-approve": "on", "in-summary-reply": "Mine."})
    op = await reload_op(op)
    assert op.result["content"][0]["text"] == "Summary (human): Mine." and model_server.requests == []


async def test_a_failing_model_sends_nothing(sampling_setup, model_server):
    alice, server, mcp = sampling_setup
    model_server.script({"status": 429})
    client = await signed_client(alice)
    op = await start_call(client, server, "summarize_with_sampling", {"text": "x"})
    resp = await answer_card(client, op, "accept", {"in-summary-approve": "on"})
    assert resp.status_code == 502 and "could not produce an answer" in resp.content.decode()
    assert _retries(mcp) == [] and (await reload_op(op)).status == Operation.Status.AWAITING_INPUT
