"""The consent card's fields and the review, as a person reads them (issue 17):

* required fields are marked (an asterisk, ``aria-required``, a note; a checkbox group's legend
  says "(required)"), with no HTML ``required`` (the card is ``novalidate``, checked on the server);
* each bound is said once (one phrase per group; none when the description already states it);
* a pattern error quotes the server's pattern (escaped, in ``<code>``) and its description;
* the review shows yes/no, option titles, chosen options as a list, numbers as typed and dates,
  with the exact JSON one click away; a number's integral value is sent as an int, and an integer
  field's value arrives as an int on the retry.
"""

from __future__ import annotations

import html
import json
import re

import pytest
from django.template.loader import render_to_string

from mrtrweb.consent import fieldhints
from mrtrweb import operations
from mrtrweb.demo.server import DEPLOY_SCHEMA, TEAM_PROFILE_SCHEMA
from mrtrweb.consent.forms import SchemaForm
from mrtrweb.gate import ContentMismatch, check_requested_schema
from mrtrweb.views.review import _form_rows, _readable, _sent_json


def _form(schema, data=None) -> SchemaForm:
    return SchemaForm(check_requested_schema(schema), data, prefix="in-k")


def _page(form: SchemaForm) -> str:
    return render_to_string("mrtrweb/_fields.html", {"form": form})


def _help(page: str, name: str) -> str:
    m = re.search(rf'<small class="help" id="id_in-k-{name}_helptext">(.*?)</small>', page, re.S)
    return html.unescape(m.group(1)) if m else ""


def _string(**kw):
    return {"type": "object", "properties": {"s": {"type": "string", **kw}}}


# -- each bound once ------------------------------------------------------------------------------


def test_the_issues_ticket_help_says_its_bounds_once():
    page = _page(_form(DEPLOY_SCHEMA))
    assert _help(page, "ticket") == "The change-management ticket id (3 to 32 characters)."
    assert "at least 3" not in page and "at most 32" not in page


@pytest.mark.parametrize("prop, description, expected", [
    # strings: one phrase for both bounds; singular; exact
    ({"type": "string", "minLength": 3, "maxLength": 32}, "", ["3 to 32 characters"]),
    ({"type": "string", "minLength": 1}, "", ["at least 1 character"]),
    ({"type": "string", "maxLength": 8}, "Short.", ["at most 8 characters"]),
    ({"type": "string", "minLength": 6, "maxLength": 6}, "", ["exactly 6 characters"]),
    # stated by the description: left out; stated only in part: kept (both numbers are needed)
    ({"type": "string", "minLength": 3, "maxLength": 32}, "An id of 3-32 chars.", []),
    ({"type": "string", "minLength": 3, "maxLength": 32}, "At least 3 letters.", ["3 to 32 characters"]),
    ({"type": "string", "maxLength": 32}, "Up to 32 characters", []),
    # numbers, exclusive bounds, multiples (an integral float bound reads as an integer)
    ({"type": "integer", "minimum": 1, "maximum": 24}, "In hours.", ["1 to 24"]),
    ({"type": "integer", "minimum": 1, "maximum": 24}, "Hours (1 to 24).", []),
    ({"type": "number", "minimum": 0.5, "maximum": 99.5}, "", ["0.5 to 99.5"]),
    ({"type": "number", "minimum": 0.5, "maximum": 99.5}, "Between 0.5 and 99.5 k€.", []),
    ({"type": "number", "minimum": 2.0}, "", ["at least 2"]),
    ({"type": "number", "maximum": 10}, "", ["at most 10"]),
    ({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}, "", ["greater than 0", "less than 1"]),
    ({"type": "integer", "multipleOf": 5}, "", ["a multiple of 5"]),
    ({"type": "integer", "multipleOf": 5}, "Steps of 5.", []),
    # item counts
    ({"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 2}, "",
     ["choose 1 to 2"]),
    ({"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 2},
     "Pick 1 or 2.", []),
    ({"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "minItems": 2, "maxItems": 2}, "",
     ["choose exactly 2"]),
    ({"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "maxItems": 1}, "", ["choose at most 1"]),
    # a format and a pattern are always said
    ({"type": "string", "format": "email", "maxLength": 50}, "Max 50.", ["an email address, name@domain.example"]),
    ({"type": "string", "pattern": "^[0-9]+$"}, "", ["must match the pattern the server gave"]),
])
def test_bound_hints_one_phrase_per_group_and_none_the_description_states(prop, description, expected):
    checked = check_requested_schema({"type": "object", "properties": {"f": prop}})
    assert fieldhints.bound_hints(checked.fields[0].constraints, description) == expected
    # and the field's help text says the description once, then the hints once
    page = _page(_form({"type": "object", "properties": {"f": dict(prop, description=description)}}))
    help_text = _help(page, "f")
    want = " ".join(([description] if description else []) + (["(" + "; ".join(expected) + ")"] if expected else []))
    assert help_text == want


def test_stated_numbers_and_number_text():
    assert fieldhints.stated_numbers("Between 0.5 and 99.5 k€, step 5. Up to 10000.") == {0.5, 99.5, 5.0, 10000.0}
    assert fieldhints.stated_numbers("CHG-1042 or v2") == {1042.0}  # "-1042" after a letter is not a number
    assert fieldhints.stated_numbers("10,000") == {10.0, 0.0}  # a grouped number is not 10000
    assert [fieldhints.number_text(v) for v in (1200.0, 1200, 0.5, -3.0, 1e20, True)] == [
        "1200", "1200", "0.5", "-3", "1e+20", "True"]


# -- required fields marked ------------------------------------------------------------------------


def test_required_fields_are_marked_with_aria_required_and_a_note():
    page = _page(_form(TEAM_PROFILE_SCHEMA))
    assert 'class="required-note"' in page and "are required." in page
    # a required text input: its label has the class the asterisk hangs on, the input aria-required
    assert '<label for="id_in-k-display_name" class="required">Display name:</label>' in page
    assert re.search(r'<input type="text" name="in-k-display_name"[^>]* aria-required="true"', page)
    # optional fields are not marked
    assert re.search(r'<input type="number" name="in-k-budget"[^>]*>', page).group(0).count("aria-required") == 0
    assert '<label for="id_in-k-budget">' in page
    assert re.search(r'<select name="in-k-size"[^>]*>', page).group(0).count("aria-required") == 0
    # a required checkbox group: a fieldset whose legend says so (aria-required is not allowed on a
    # group), and no box says it is required on its own
    assert ('<fieldset class="field required" aria-describedby="id_in-k-channels_helptext">\n'
            '  <legend class="required">Channels:<span class="visually-hidden"> (required)</span></legend>') in page
    assert all("aria-required" not in box for box in re.findall(r'<input type="checkbox" name="in-k-channels"[^>]*>',
                                                                 page))
    # the card is novalidate and checked on the server: no HTML required attribute anywhere
    assert not re.search(r"<(input|select|textarea)[^>]*\srequired[\s>=]", page)


def test_a_required_select_without_default_is_marked_and_a_form_with_nothing_required_has_no_note():
    page = _page(_form({"type": "object", "properties": {"pick": {"type": "string", "enum": ["x", "y"]}},
                        "required": ["pick"]}))
    assert re.search(r'<select name="in-k-pick"[^>]* aria-required="true"', page)
    assert 'class="required-note"' in page
    page = _page(_form({"type": "object", "properties": {"note": {"type": "string"},
                                                         "ok": {"type": "boolean"}}, "required": ["ok"]}))
    # a required boolean is answered by its box either way (unticked is "false"): nothing to mark
    assert "required-note" not in page and "aria-required" not in page and 'class="required"' not in page


# -- a pattern error says what is expected ---------------------------------------------------------


def _gate_errors(form: SchemaForm) -> None:
    assert form.is_valid(), form.errors
    with pytest.raises(ContentMismatch) as exc:
        form.checked.validate(form.content())
    form.add_gate_errors(exc.value.errors)


def test_a_pattern_error_quotes_the_pattern_escaped_and_the_description_as_a_hint():
    pattern = "^<b>[A-Z]{3}</b>&\"$"
    description = "Three capitals <i>in bold</i> & quoted."
    form = _form(_string(pattern=pattern, description=description), {"in-k-s": "abc"})
    _gate_errors(form)
    page = _page(form)
    error = re.search(r'<div class="field-error" id="id_in-k-s_error" role="alert">(.*?)</div>', page, re.S).group(1)
    assert "<p>Enter a value in the requested pattern.</p>" in error
    assert f'<code class="expected-pattern" dir="ltr">{html.escape(pattern)}</code>' in error
    assert f"<p class=\"expected-hint\">The server's hint: {html.escape(description)}</p>" in error
    assert "<b>" not in page and "<i>" not in page  # server text never markup


def test_a_pattern_error_without_description_has_no_hint_and_a_long_pattern_is_cut():
    form = _form(_string(pattern="^" + "[a-z]" * 100 + "$"), {"in-k-s": "1"})
    _gate_errors(form)
    page = _page(form)
    code = re.search(r'<code class="expected-pattern" dir="ltr">(.*?)</code>', page, re.S).group(1)
    assert code.startswith("^[a-z][a-z]") and len(code) < 400 and "more characters" in code
    assert "expected-hint" not in page


def test_other_errors_do_not_quote_a_pattern():
    form = _form(_string(pattern="^[a-z]+$", minLength=3), {"in-k-s": "ab"})
    assert not form.is_valid()
    page = _page(form)
    assert "field-error" in page and "expected-pattern" not in page
    form = _form(_string(format="email"), {"in-k-s": "nope"})
    _gate_errors(form)
    assert "Enter an email address (name@domain.example)." in _page(form)  # a format error names the format


# -- the review reads as text; what is sent ---------------------------------------------------------


READ_SCHEMA = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean", "title": "OK"},
        "n": {"type": "integer", "title": "Count"},
        "x": {"type": "number", "title": "Amount"},
        "day": {"type": "string", "format": "date", "title": "Day"},
        "note": {"type": "string", "title": "Note"},
        "tier": {"type": "string", "oneOf": [{"const": "g", "title": "Gold"}, {"const": "s", "title": "Silver"}]},
        "plain": {"type": "string", "enum": ["a", "b"]},
        "tags": {"type": "array", "items": {"anyOf": [{"const": "slack", "title": "Slack"},
                                                      {"const": "mail", "title": "E-mail"}]}},
        "opt": {"type": "string", "title": "Optional"},
        "dflt": {"type": "integer", "default": 7},
    },
    "required": ["tags"],
}


def test_the_review_reads_each_kind_naturally_and_keeps_the_exact_json():
    form = _form(READ_SCHEMA, {"in-k-ok": "", "in-k-n": "1200", "in-k-x": "1200", "in-k-day": "2026-12-24",
                               "in-k-tier": "g", "in-k-plain": "b", "in-k-tags": ["slack"]})
    assert form.is_valid(), form.errors
    content = dict(form.content(), note="")  # "" is sent only as a server's default, or typed in a required field
    # an integer and an integral number are sent as ints (1200, never 1200.0)
    assert type(content["n"]) is int and type(content["x"]) is int and content["x"] == 1200
    rows = {r["name"]: r for r in _form_rows(form, content)}
    assert rows["ok"]["text"] == "No"
    assert rows["n"]["text"] == "1200" and rows["x"]["text"] == "1200"
    assert rows["day"]["iso"] == "2026-12-24" and rows["day"]["text"] != "2026-12-24"  # as the language writes it
    assert rows["note"]["text"] == ""  # said as "(empty text)" by the template
    assert rows["tier"]["text"] == "Gold" and rows["plain"]["text"] == "b"
    assert rows["tags"]["items"] == ["Slack"] and rows["tags"]["text"] is None
    assert rows["opt"]["omitted"] and rows["dflt"]["default"] and rows["dflt"]["text"] == "7"
    assert json.loads(_sent_json(form, content)) == {
        "ok": False, "n": 1200, "x": 1200, "day": "2026-12-24", "note": "", "tier": "g", "plain": "b",
        "tags": ["slack"], "dflt": 7}
    for row in rows.values():  # no Python repr nor raw JSON anywhere
        shown = row["text"] if row["text"] is not None else ", ".join(row["items"] or [])
        assert not re.search(r"True|False|None|\[|\]|\.0\b", shown), row


def test_readable_values_of_other_shapes():
    fields = {f.name: f for f in check_requested_schema(READ_SCHEMA).fields}
    assert _readable(fields["ok"], True, {}) == {"text": "Yes"}
    assert _readable(fields["x"], 0.25, {}) == {"text": "0.25"}
    assert _readable(fields["day"], "not-a-date", {}) == {"text": "not-a-date"}
    assert _readable(fields["tags"], [], {}) == {"items": []}
    assert _readable(fields["tags"], ["zzz"], {}) == {"items": ["zzz"]}  # an unknown value as itself
    assert _readable(fields["n"], {"odd": 1}, {}) == {"text": '{"odd": 1}'}  # a type the field has not: JSON


def test_the_review_template_says_empty_text_lists_choices_and_shows_the_json():
    form = _form(READ_SCHEMA, {"in-k-tags": ["slack", "mail"], "in-k-n": "3"})
    assert form.is_valid(), form.errors
    content = dict(form.content(), note="")
    item = {"key": "k", "kind": "form", "message": "", "rows": _form_rows(form, content),
            "json": _sent_json(form, content)}
    page = render_to_string("mrtrweb/_review.html", {"review": {"token": "t", "items": [item], "hidden": []},
                                                     "op": _FakeOp(), "round": _FakeRound()})
    assert '<dd data-name="tags"><ul class="review-value review-list"><li>Slack</li><li>E-mail</li></ul>' in page
    assert '<span class="review-value muted review-empty">(empty text)</span>' in page
    assert '<dd data-name="n"><span class="review-value">3</span>' in page
    assert '<dd data-name="opt"><span class="muted">(left empty: not sent)</span>' in page
    assert '<details class="review-json"><summary>Exactly what will be sent (JSON)</summary>' in page
    sent = page.split('<pre class="review-json-text" dir="ltr">')[1].split("</pre>")[0]
    assert json.loads(html.unescape(sent))["tags"] == ["slack", "mail"]


class _FakeServer:
    name = "Srv"
    origin = "http://srv.test"


class _FakeOp:
    id = "00000000-0000-0000-0000-000000000000"
    server = _FakeServer()
    method = "tools/call"
    name = "t"


class _FakeRound:
    number = 1


# -- on the wire -----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_integers_and_integral_numbers_arrive_as_ints_on_the_retry(seeded):
    from tests.answering import DEPLOY_OK, ONBOARD_OK, answer_url, reload_op, reviewed_page, signed_client, start_call

    mcp = seeded["mcp"]
    client = await signed_client(seeded["users"]["alice"])
    op = await start_call(client, seeded["servers"]["acme"], "deploy", {"env": "production", "replicas": "3"})
    page, token = await reviewed_page(client, op, dict(DEPLOY_OK, **{"in-confirm_deploy-window": "12"}))
    assert '<dd data-name="window"><span class="review-value">12</span>' in page
    resp = await client.post(answer_url(op), dict(DEPLOY_OK, action="send", round="1", review_token=token,
                                            **{"in-confirm_deploy-window": "12"}))
    assert resp.status_code == 302
    await operations.wait_idle()
    retry = [r for r in mcp.log.tool_calls("deploy") if r.is_retry]
    window = retry[0].params["inputResponses"]["confirm_deploy"]["content"]["window"]
    assert window == 12 and type(window) is int

    op = await start_call(client, seeded["servers"]["acme"], "onboard_team", {"team": "core"})
    page, token = await reviewed_page(client, op, dict(ONBOARD_OK, **{"in-profile-budget": "1200"}))
    assert '<dd data-name="budget"><span class="review-value">1200</span>' in page and "1200.0" not in page
    resp = await client.post(answer_url(op), dict(ONBOARD_OK, action="send", round="1", review_token=token,
                                            **{"in-profile-budget": "1200"}))
    assert resp.status_code == 302
    await operations.wait_idle()
    assert (await reload_op(op)).status == "completed"
    retry = [r for r in mcp.log.tool_calls("onboard_team") if r.is_retry]
    budget = retry[0].params["inputResponses"]["profile"]["content"]["budget"]
    assert budget == 1200 and type(budget) is int


@pytest.mark.django_db(transaction=True)
async def test_a_call_page_marks_its_required_arguments_like_the_card(seeded):
    """The tool's and the prompt's argument forms mark what must be given (the label's class the
    stylesheet puts an asterisk on, and the note explaining it); no browser-side ``required``: the
    server checks."""
    from django.test import AsyncClient

    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    server = seeded["servers"]["acme"]
    page = (await client.get(f"/mcp/servers/{server.pk}/tools/?name=deploy")).content.decode()
    assert '<p class="required-note">Fields marked <span class="required-mark" aria-hidden="true">*</span> are required.</p>' in page
    labels = re.findall(r'<label[^>]*class="required"[^>]*>([^<]*)</label>', page)
    assert labels and all(label.strip() for label in labels), page
    assert " required" not in re.sub(r'class="required[^"]*"|required-\w+|are required', "", page)
    prompt = (await client.get(f"/mcp/servers/{server.pk}/prompts/?name=release_notes")).content.decode()
    assert re.search(r'<label[^>]*class="required"', prompt) and "required-note" in prompt
