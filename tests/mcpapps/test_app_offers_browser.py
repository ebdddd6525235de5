"""An MCP App's ``ui/message`` and ``ui/update-model-context`` handed to the conversation (issue 31
item 4, issue 32 item 5), in Chromium: our app server (tests/apps_server.py), the scripted
OpenAI-compatible endpoint (tests/chat/model_server.py) through the ``openai`` SDK.

The model proposes the app's tool, the person approves it; on that call's page the app sends
``ui/message`` and ``ui/update-model-context``: the app gets an acknowledgement only (``{}``), the
host shows the person, as text, what was handed over; the conversation shows both as offers, and
only the one the person adds reaches the model. Once the tenant has no model, the same page
answers both with ``-32601`` and hands nothing over; nothing of the conversation reaches the frame.
"""

from __future__ import annotations

import json

import pytest

from tests import apps_server
from tests.browser import OP_URL, expect
from tests.mcpapps.registry_apps import RECORDER

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

#: the person's words to the model and the model's reply: neither may reach the app's frame
ASKED = "please open the panel-8841"
REPLIED = "The panel is open-5527."


def _reply(app, key: str) -> dict:
    out = app.locator(f"#o-{key}")
    expect(out).not_to_have_text("", timeout=20_000)
    return json.loads(out.text_content())


def test_an_apps_message_and_context_are_offered_to_the_conversation(signed_in, own, model, sandboxed):  # noqa: F811
    from mrtrweb.chat.tools import offered_name
    from mrtrweb.models import AppOffer, McpServer, Operation, TenantModel

    page = signed_in("Panel app", own.url, apps_enabled=True)
    server = McpServer.objects.get(name="Panel app")
    McpServer.objects.exclude(pk=server.pk).update(enabled=False)  # the model is offered this server's tools
    TenantModel.objects.create(tenant=server.tenant, provider="local", model="scripted-1")
    model.script({"calls": [{"id": "p1", "name": offered_name(server, "open_panel"), "arguments": "{}"}]},
                 {"text": REPLIED})
    recorded = []  # (frame url, message) of every message any frame received
    page.context.expose_binding("__record", lambda source, text: recorded.append((source["frame"].url, text)))
    page.context.add_init_script(RECORDER)

    page.get_by_role("link", name="Chat").click()
    page.get_by_role("button", name="New conversation").click()
    page.get_by_label("Your message").fill(ASKED)
    page.get_by_role("button", name="Send", exact=True).click()
    page.locator("section.proposal").get_by_role("button", name="Approve").click()
    expect(page.locator(".chat-assistant .chat-text").last).to_have_text(REPLIED, timeout=20_000)
    chat_url = page.url.split("#")[0]
    op = Operation.objects.get(name="open_panel")
    assert op.initiator == "model" and op.status == "completed"

    # the call's page: the app is offered message and context (its host capabilities say so)
    page.goto(f"/mcp/operations/{op.id}/")
    box = page.locator("#mcp-app")
    expect(box.locator(".app-status")).to_have_text("The app shows this result.", timeout=30_000)
    app = page.frame_locator("#mcp-app iframe.app-frame").frame_locator("iframe")
    expect(app.locator("#ready")).to_have_text("ready")
    app.locator("#b-message").click()
    assert _reply(app, "message") == {"result": {}}  # an acknowledgement, nothing of the conversation
    handed = box.locator(".app-request-holder[data-kind=offer]")
    expect(handed).to_have_count(1)
    expect(handed.locator("pre.app-offer-text")).to_have_text("hi")
    expect(handed).to_contain_text("It reaches the model only if you add it there")
    app.locator("#b-context").click()
    assert _reply(app, "context") == {"result": {}}
    expect(handed).to_have_count(2)
    expect(handed.nth(1).locator("pre.app-offer-text")).to_have_text("ctx")
    app.locator("#b-markup_message").click()  # markup: shown as text by the host
    assert _reply(app, "markup_message") == {"result": {}}
    expect(handed.nth(2).locator("pre.app-offer-text")).to_have_text(apps_server.MARKUP)
    assert handed.nth(2).locator("pre.app-offer-text *").count() == 0
    assert page.evaluate("window.__pwned === undefined")
    offers = list(AppOffer.objects.order_by("created_at").values_list("kind", "text", "status", "operation_id"))
    assert offers == [("message", "hi", "pending", op.id), ("context", "ctx", "pending", op.id),
                      ("message", apps_server.MARKUP, "pending", op.id)]
    assert len(model.requests) == 2  # nothing reached the model yet

    # in the conversation: the person adds the message; only then does the model read it
    model.script({"text": "Read the app's message."})
    handed.first.locator("a.app-open-conversation").click()
    page.wait_for_url(chat_url + "#offer-*")
    shown = page.locator("section.app-offer")
    expect(shown).to_have_count(3)
    message_offer = page.locator("section.app-offer[data-kind=message]").first
    expect(message_offer.locator(".app-offer-text")).to_have_text("hi")
    message_offer.get_by_role("button", name="Add to the conversation").click()
    expect(page.locator(".chat-assistant .chat-text").last).to_have_text("Read the app's message.", timeout=20_000)
    given = json.loads(model.requests[-1]["body"]["messages"][-1]["content"])
    assert given == {"message_from_app_of_server": "Panel app", "approved_by_the_person": True, "message": "hi"}
    assert "ctx" not in json.dumps(model.requests[-1]["body"]["messages"])  # the context waits, not added
    expect(page.locator("section.app-offer[data-kind=context]")).to_have_count(1)
    expect(page.locator("section.app-offer[data-kind=message] .app-offer-text")).to_have_text(apps_server.MARKUP)

    # no model for the tenant now: the same page refuses both (-32601), nothing handed over
    TenantModel.objects.all().delete()
    page.goto(f"/mcp/operations/{op.id}/")
    expect(box.locator(".app-status")).to_have_text("The app shows this result.", timeout=30_000)
    expect(app.locator("#ready")).to_have_text("ready")
    for key, method in (("message", "ui/message"), ("context", "ui/update-model-context")):
        app.locator(f"#b-{key}").click()
        error = _reply(app, key)["error"]
        assert error["code"] == -32601 and error["message"].startswith(method + ": not offered"), error
    assert AppOffer.objects.count() == 3
    expect(box.locator(".app-request-holder[data-kind=offer]")).to_have_count(0)

    # nothing of the conversation reached the frames
    to_frames = [text for url, text in recorded if url.startswith(sandboxed)]
    assert to_frames and not any(ASKED in text or REPLIED in text for text in to_frames)
    assert OP_URL.search(page.url)
