"""Lone surrogates (issue 12, attack pass F11): text that is not valid Unicode never starts a call,
answers a round, or breaks a page.

A browser never posts a lone surrogate in a form field (Django decodes invalid UTF-8 as U+FFFD),
but a JSON ``\\ud800`` escape decodes to one. Every form that starts a call or answers a round
refuses one with the form error ``lone_surrogate`` (nothing is sent); text already stored with one
(an operation's params or result) is shown with a visible marker, never a 500, on every page and
in the admin.
"""

from __future__ import annotations

import pytest
from django.test import AsyncClient

from mrtrweb.text import display
from mrtrweb.consent.forms import JsonArgumentsForm, SchemaForm, has_lone_surrogate
from mrtrweb.gate import check_requested_schema
from mrtrweb.models import Operation
from mrtrweb.views import PromptArgumentsForm, ResourceTemplateForm


def _codes(form) -> set[str]:
    return {e.code for errors in form.errors.as_data().values() for e in errors}


def test_has_lone_surrogate_looks_at_strings_keys_and_items():
    assert not has_lone_surrogate({"a": ["b", 1, None, {"c": "\U0001f600"}]})
    assert has_lone_surrogate("x\ud800y") and has_lone_surrogate({"\udc00": 1}) and has_lone_surrogate([["\udfff"]])


@pytest.mark.parametrize("arguments", ['{"u": "x\\ud800y"}', '{"\\udc00": 1}', '{"a": ["\\ud83d"]}'])
def test_the_json_editor_refuses_a_lone_surrogate(arguments):
    form = JsonArgumentsForm({"type": "object"}, data={"arguments": arguments})
    assert not form.is_valid() and _codes(form) == {"lone_surrogate"}
    # a surrogate pair written as two escapes is one character: fine
    assert JsonArgumentsForm({"type": "object"}, data={"arguments": '{"u": "\\ud83d\\ude00"}'}).is_valid()


def test_the_schema_form_refuses_a_lone_surrogate():
    checked = check_requested_schema({"type": "object", "properties": {"s": {"type": "string"}}})
    form = SchemaForm(checked, data={"in-q-s": "x\ud800"}, prefix="in-q")
    assert not form.is_valid() and _codes(form) == {"lone_surrogate"}
    assert SchemaForm(checked, data={"in-q-s": "fine"}, prefix="in-q").is_valid()


def test_prompt_arguments_and_template_variables_refuse_a_lone_surrogate():
    form = PromptArgumentsForm([{"name": "a"}], {"arg-a": "\ud800"}, prefix="arg")
    assert not form.is_valid() and _codes(form) == {"lone_surrogate"}
    form = ResourceTemplateForm("r://{x}", {"arg-x": "a\udfffb"}, prefix="arg")
    assert not form.is_valid() and _codes(form) == {"lone_surrogate"}


def test_display_marks_lone_surrogates():
    assert display.shown("a\ud800b") == "a⟨U+D800⟩b"
    assert display.shown_text("a\udc00\nb") == "a⟨U+DC00⟩\nb"
    assert display.json_text({"u": "\ud800"}) == '{"u": "\\ud800"}'


@pytest.mark.django_db(transaction=True)
async def test_stored_text_with_a_lone_surrogate_breaks_no_page(seeded):
    from django.contrib.auth import get_user_model

    alice = seeded["users"]["alice"]
    server = seeded["servers"]["acme"]
    op = await Operation.objects.acreate(
        tenant=server.tenant, user=alice, server=server, method="tools/call", name="echo",
        params={"name": "echo", "arguments": {"u": "x\ud800y", "\udc00": 1}}, request_id="mrtr-s", latest_request_id="mrtr-s",
        status=Operation.Status.COMPLETED, result={"content": [{"type": "text", "text": "r\ud800"}], "isError": False})
    client = AsyncClient()
    await client.aforce_login(alice)
    staff = AsyncClient()
    await staff.aforce_login(await get_user_model().objects.aget(username="admin"))
    for who, path in ((staff, f"/admin/mrtrweb/operation/{op.pk}/change/"), (staff, "/admin/mrtrweb/operation/"),
                      (client, f"/mcp/operations/{op.pk}/"), (client, f"/mcp/operations/{op.pk}/panel/"),
                      (client, f"/mcp/history/operations/{op.pk}/"), (client, "/mcp/history/")):
        resp = await who.get(path)
        assert resp.status_code == 200, path
    admin_page = (await staff.get(f"/admin/mrtrweb/operation/{op.pk}/change/")).content.decode()
    assert "\\ud800" in admin_page
