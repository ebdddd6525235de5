"""An MCP App's ``sampling/createMessage`` (issue 31 item 4, issue 32 item 5), in Chromium: our app
server (tests/apps_server.py), the scripted OpenAI-compatible endpoint (tests/chat/model_server.py)
through the ``openai`` SDK.

Where the tenant has a model and a tenant admin allowed sampling for the server, the app is offered
sampling (its host capabilities say so); its request is shown on a host-rendered card outside the
frame (the app's markup as text) and reaches the model only when the person clicks "Draft with the
model" (the scripted model's requests counted): the model is given the system prompt and the
messages' text, no tools; sent as drafted, the app receives the model's reply; edited, the person's
(``model`` ``"human"``); refused, a JSON-RPC error. "Write the reply myself" sends the person's text
and never asks the model; a refusal before a draft neither. One sampling of an app waits at a time;
a request without messages is refused before anything. Each draft and decision is an event
in the tenant's chain with initiator ``app`` and digests only. Without a model, or without the
admin's allowance, the same page answers ``-32601`` and asks no model.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from tests import apps_server
from tests.browser import OP_URL, expect
from tests.mcpapps.registry_apps import RECORDER

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DRAFTED = "The panel shows three <b>numbers</b>.\nAll fine."
EDITED = "The panel shows four numbers (edited by the person)."
REFUSED_DRAFT = "A draft the person refuses-6613."
WRITTEN = "Written by the person-5120, no model."


def _reply(app, key: str) -> dict:
    out = app.locator(f"#o-{key}")
    expect(out).not_to_have_text("", timeout=20_000)
    reply = json.loads(out.text_content())
    out.evaluate("e => { e.textContent = ''; }")  # the next reply is waited for afresh
    return reply


def _capabilities(recorded, sandboxed_origin: str) -> list[dict]:  # noqa: F811
    """The ``hostCapabilities`` of every ``ui/initialize`` answer a frame received, in order."""
    found = []
    for url, text in recorded:
        if not url.startswith(sandboxed_origin) or "hostCapabilities" not in text:
            continue
        message = json.loads(text)
        if isinstance(message, dict) and isinstance(message.get("result"), dict):
            found.append(message["result"]["hostCapabilities"])
    return found


def _open(page, server, box):
    page.goto(f"/mcp/servers/{server.pk}/tools/?name=open_panel")
    page.get_by_role("button", name="Call tool").click()
    page.wait_for_url(OP_URL)
    expect(box.locator(".app-status")).to_have_text("The app shows this result.", timeout=30_000)
    app = page.frame_locator("#mcp-app iframe.app-frame").frame_locator("iframe")
    expect(app.locator("#ready")).to_have_text("ready")
    return OP_URL.search(page.url).group(1), app


def test_an_apps_sampling_is_decided_by_the_person_before_the_model_drafts(signed_in, own, model,  # noqa: F811
                                                                              sandboxed):  # noqa: F811
    from mrtrweb.models import AuditEvent, McpServer, TenantModel

    page = signed_in("Panel app", own.url, apps_enabled=True, allow_sampling=True)
    server = McpServer.objects.get(name="Panel app")
    TenantModel.objects.create(tenant=server.tenant, provider="local", model="scripted-1")
    recorded = []  # (frame url, message) of every message any frame received
    page.context.expose_binding("__record", lambda source, text: recorded.append((source["frame"].url, text)))
    page.context.add_init_script(RECORDER)
    box = page.locator("#mcp-app")
    host_id, app = _open(page, server, box)
    assert _capabilities(recorded, sandboxed)[-1].get("sampling") == {}
    card = box.locator(".app-requests .app-request[data-kind=sampling]")

    # the app asks: the card shows the request, and nothing has gone to the model
    model.script({"text": DRAFTED})
    app.locator("#b-sampling").click()
    expect(card).to_have_count(1, timeout=20_000)
    expect(card.locator(".sampling-messages .message-text")).to_have_text(apps_server.SAMPLING_ASKS)
    assert card.locator(".sampling-messages img").count() == 0  # the app's markup is text
    expect(card.locator(".system-prompt")).to_have_text("Answer in one line.")
    expect(card.get_by_role("button", name="Draft with the model")).to_be_visible()
    assert model.requests == []  # not before the person asks for a draft
    assert card.locator("textarea.app-sampling-reply").input_value() == ""
    # sent as drafted: the model is asked on the person's click, the app receives its reply on Send
    card.get_by_role("button", name="Draft with the model").click()
    expect(card.locator("textarea.app-sampling-reply")).to_have_value(DRAFTED, timeout=20_000)
    assert len(model.requests) == 1
    asked = model.requests[-1]["body"]
    assert asked["messages"] == [{"role": "system", "content": "Answer in one line."},
                                 {"role": "user", "content": apps_server.SAMPLING_ASKS}]
    assert not asked.get("tools")
    assert app.locator("#o-sampling").text_content() == ""  # the app waits for the person
    card.get_by_role("button", name="Send this reply to the app").click()
    assert _reply(app, "sampling") == {"result": {"role": "assistant", "content": {"type": "text", "text": DRAFTED},
                                                  "model": "scripted-1", "stopReason": "endTurn"}}
    expect(card).to_have_count(0)
    assert page.evaluate("window.__pwned === undefined")

    # edited: the app receives the person's text; a second request meanwhile is refused (one waits)
    model.script({"text": "a draft the person rewrites"})
    app.locator("#b-sampling").click()
    expect(card).to_have_count(1, timeout=20_000)
    app.locator("#b-sampling").click()
    busy = _reply(app, "sampling")["error"]
    assert busy["code"] == -32001 and busy["data"]["reason"] == "busy", busy
    assert len(model.requests) == 1
    card.get_by_role("button", name="Draft with the model").click()
    expect(card.locator("textarea.app-sampling-reply")).to_have_value("a draft the person rewrites", timeout=20_000)
    assert len(model.requests) == 2
    card.locator("textarea.app-sampling-reply").fill(EDITED)
    card.get_by_role("button", name="Send this reply to the app").click()
    assert _reply(app, "sampling") == {"result": {"role": "assistant", "content": {"type": "text", "text": EDITED},
                                                  "model": "human", "stopReason": "endTurn"}}
    assert len(model.requests) == 2  # the person's edit is not sent to the model

    # refused after a draft: a JSON-RPC error
    model.script({"text": REFUSED_DRAFT})
    app.locator("#b-sampling").click()
    expect(card).to_have_count(1, timeout=20_000)
    card.get_by_role("button", name="Draft with the model").click()
    expect(card.locator("textarea.app-sampling-reply")).to_have_value(REFUSED_DRAFT, timeout=20_000)
    card.get_by_role("button", name="Refuse").click()
    refused = _reply(app, "sampling")["error"]
    assert refused["code"] == -32001 and refused["data"]["reason"] == "declined", refused
    expect(card).to_have_count(0)
    assert len(model.requests) == 3

    # written by the person: the app receives it, the model is never asked
    app.locator("#b-sampling").click()
    expect(card).to_have_count(1, timeout=20_000)
    card.get_by_text("Write the reply myself").click()
    card.locator("textarea.app-sampling-reply").fill(WRITTEN)
    card.get_by_role("button", name="Send my reply to the app").click()
    assert _reply(app, "sampling") == {"result": {"role": "assistant", "content": {"type": "text", "text": WRITTEN},
                                                  "model": "human", "stopReason": "endTurn"}}
    expect(card).to_have_count(0)
    # refused before any draft: a JSON-RPC error, the model never asked
    app.locator("#b-sampling").click()
    expect(card).to_have_count(1, timeout=20_000)
    card.get_by_role("button", name="Refuse").click()
    refused = _reply(app, "sampling")["error"]
    assert refused["code"] == -32001 and refused["data"]["reason"] == "declined", refused
    assert len(model.requests) == 3

    # a request without messages: refused before the model is asked
    asked_before = len(model.requests)
    app.locator("#b-sampling_empty").click()
    empty = _reply(app, "sampling_empty")["error"]
    assert empty["code"] == -32001 and empty["data"]["reason"] == "bad_request", empty
    assert len(model.requests) == asked_before

    # the audit: each draft and decision, initiator app, digests only
    events = list(AuditEvent.objects.filter(method="sampling/createMessage").order_by("sequence"))
    assert [(e.event, e.code) for e in events] == [
        ("proposed", "drafted"), ("approved", "approved"), ("proposed", "drafted"), ("edited", "edited"),
        ("proposed", "drafted"), ("proposal_denied", "refused"), ("edited", "written"),
        ("proposal_denied", "refused")]
    assert {e.initiator for e in events} == {"app"} and {e.server_id for e in events} == {str(server.pk)}
    assert all(e.initiator_detail["app_of"] == host_id and e.initiator_detail["provider"] == "local"
               for e in events)
    assert [e.initiator_detail["model"] for e in events] == ["scripted-1"] * 6 + ["human", ""]
    assert len({e.operation_id for e in events}) == 5  # one id per sampling, its draft and decision share it

    def digest(text: str) -> str:
        return "sha256:" + hashlib.sha256(json.dumps(text, ensure_ascii=False).encode()).hexdigest()

    assert events[3].actions == {"reply": digest(EDITED), "before": digest("a draft the person rewrites")}
    assert events[1].actions == {"reply": digest(DRAFTED)}
    rows = json.dumps([{f.name: str(getattr(e, f.name)) for f in AuditEvent._meta.fields} for e in events])
    assert events[6].actions == {"reply": digest(WRITTEN)}
    for text in (DRAFTED, EDITED, REFUSED_DRAFT, WRITTEN, "Summarise the panel", "Answer in one line"):
        assert text not in rows

    # nothing of the card (its decision URL, the person's edit before it was sent) reached a frame
    to_frames = [text for url, text in recorded if url.startswith(sandboxed)]
    assert to_frames and not any("/app/sampling/" in text or "csrf" in text.lower() for text in to_frames)

    # the admin's allowance withdrawn, the model still there: not offered (-32601), no model asked
    asked_before = len(model.requests)
    McpServer.objects.filter(pk=server.pk).update(allow_sampling=False)
    page.reload()
    expect(box.locator(".app-status")).to_have_text("The app shows this result.", timeout=30_000)
    expect(app.locator("#ready")).to_have_text("ready")
    assert "sampling" not in _capabilities(recorded, sandboxed)[-1]
    app.locator("#b-sampling").click()
    error = _reply(app, "sampling")["error"]
    assert error["code"] == -32601 and error["message"].startswith("sampling/createMessage: not offered"), error

    # allowed again, but no model for the tenant: not offered either
    McpServer.objects.filter(pk=server.pk).update(allow_sampling=True)
    TenantModel.objects.all().delete()
    page.reload()
    expect(box.locator(".app-status")).to_have_text("The app shows this result.", timeout=30_000)
    expect(app.locator("#ready")).to_have_text("ready")
    assert "sampling" not in _capabilities(recorded, sandboxed)[-1]
    app.locator("#b-sampling").click()
    error = _reply(app, "sampling")["error"]
    assert error["code"] == -32601 and error["message"].startswith("sampling/createMessage: not offered"), error
    assert len(model.requests) == asked_before
    expect(card).to_have_count(0)
    assert AuditEvent.objects.filter(method="sampling/createMessage").count() == 8
