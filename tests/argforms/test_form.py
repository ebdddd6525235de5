""":class:`mrtrweb.argforms.NestedArgumentsForm` in process (no server): fields named by paths, rows
added and removed by a POST, empty optional parts left out, ``null`` only when chosen, variants,
prefill, the schema check as the truth, server text escaped, every bound."""

from __future__ import annotations

import html

import pytest
from django.http import QueryDict
from django.template.loader import render_to_string

from mrtrweb.argforms import NestedArgumentsForm, Unsupported, read_schema
from mrtrweb.argforms import form as argform

from tests.argforms.schemas import MEMORY, PYDANTIC


def _form(schema, data=None, **kwargs):
    return NestedArgumentsForm(schema, read_schema(schema), _data(data) if data is not None else None, **kwargs)


def _data(values: dict) -> QueryDict:
    q = QueryDict(mutable=True)
    for k, v in values.items():
        q.setlist(f"arg-{k}", v if isinstance(v, list) else [v])
    return q


def _valid(schema, data):
    form = _form(schema, data)
    assert form.is_valid(), form.errors
    return form.content()


def test_memory_entities_rows_of_objects_with_rows_of_strings():
    form = _form(MEMORY)
    # a required array starts with one row; the row's own array (required) one row too
    assert list(form.fields) == ["entities.0.name", "entities.0.entityType", "entities.0.observations.0"]
    assert _valid(MEMORY, {"entities.__rows": "2", "entities.0.name": "Ada", "entities.0.entityType": "person",
                           "entities.0.observations.__rows": "3", "entities.0.observations.0": "wrote notes",
                           "entities.0.observations.1": "", "entities.0.observations.2": "liked engines",
                           "entities.1.name": "", "entities.1.entityType": "",
                           "entities.1.observations.__rows": "1", "entities.1.observations.0": ""}) == {
        "entities": [{"name": "Ada", "entityType": "person", "observations": ["wrote notes", "liked engines"]}]}
    # a row begun but not finished: its required field says so (nothing is assembled)
    form = _form(MEMORY, {"entities.__rows": "1", "entities.0.name": "Ada", "entities.0.observations.__rows": "0"})
    assert not form.is_valid() and form.errors["entities.0.entityType"] == ["This field is required."]


def test_add_and_remove_rows_shift_what_was_typed():
    posted = _data({"entities.__rows": "2", "entities.0.name": "A", "entities.0.observations.__rows": "1",
                    "entities.0.observations.0": "a1", "entities.1.name": "B", "entities.1.observations.__rows": "2",
                    "entities.1.observations.0": "b1", "entities.1.observations.1": "b2",
                    "__row_action": "add:entities"})
    added = NestedArgumentsForm.rows_changed(posted, "add:entities")
    assert added["arg-entities.__rows"] == "3" and "arg-__row_action" not in added
    form = NestedArgumentsForm(MEMORY, read_schema(MEMORY), added).quiet()
    assert "entities.2.name" in form.fields and not form.errors  # shown without complaining
    removed = NestedArgumentsForm.rows_changed(added, "remove:entities:0")
    assert removed["arg-entities.__rows"] == "2"
    assert removed["arg-entities.0.name"] == "B" and removed.getlist("arg-entities.0.observations.1") == ["b2"]
    assert "arg-entities.1.name" not in removed  # B moved up; the added row is now row 1 (still empty)
    inner = NestedArgumentsForm.rows_changed(removed, "remove:entities.0.observations:0")
    assert inner["arg-entities.0.observations.0"] == "b2" and inner["arg-entities.0.observations.__rows"] == "1"
    for bogus in ("add:nowhere", "remove:entities:x", "remove:entities", "delete:entities:0", ""):
        assert NestedArgumentsForm.rows_changed(posted, bogus) is None


def test_tampered_row_actions_and_counts_are_no_rows_never_an_exception():
    """A row index or count that is not ASCII digits ("²" is ``str.isdigit`` but not ``int``; "١" is
    both), or a row the page does not have, changes nothing: the page is shown as posted, never a 500."""
    posted = _data({"entities.__rows": "2", "entities.0.name": "A", "entities.1.name": "B",
                    "entities.\u00b2.name": "tampered"})
    for bogus in ("remove:entities:\u00b2", "remove:entities:\u0661", "remove:entities:2", "remove:entities:-1",
                  "remove:entities: 1", "remove:entities:1_0", "remove:entities:" + "9" * 5000):
        assert NestedArgumentsForm.rows_changed(posted, bogus) is None, bogus
    removed = NestedArgumentsForm.rows_changed(posted, "remove:entities:0")  # a key "²" is no row: left as is
    assert removed["arg-entities.0.name"] == "B" and removed["arg-entities.\u00b2.name"] == "tampered"
    for count in ("\u00b2", "\u0661", "1_0", " 3"):
        assert NestedArgumentsForm.rows_changed(_data({"entities.__rows": count}), "add:entities") is None
        assert _form(MEMORY, {"entities.__rows": count}).rows["entities"] == 0


@pytest.mark.parametrize("bounds", [{"format": [1]}, {"format": True}, {"pattern": 5}, {"minimum": {}},
                                    {"maximum": "9"}, {"exclusiveMinimum": [1]}, {"multipleOf": None},
                                    {"minLength": 1.5}, {"maxLength": -1},
                                    {"maximum": float("nan")}, {"minItems": "2", "maxItems": {}}])
def test_bounds_of_the_wrong_type_are_not_shown_or_applied(bounds):
    """A server's ``"format": [1]`` or ``"minimum": {}`` raised building the form (a 500 on the tool
    page); a bound of the wrong type is left to the schema check (which leaves an invalid schema to
    the server), the field shown without it."""
    schema = {"type": "object", "properties": {"s": {"type": "string", **bounds}, "n": {"type": "number", **bounds},
                                               "t": {"type": "array", "items": {"type": "string"}, **bounds}}}
    form = _form(schema)
    render_to_string("mrtrweb/_argform.html", {"form": form})
    assert form["s"].field.help_text == ""
    posted = _form(schema, {"s": "x", "n": "1", "t.__rows": "1", "t.0": "y"})
    posted.is_valid()
    assert "s" in posted.fields


def test_rows_are_bounded():
    # a posted row count is clamped (not a number, negative, huge); maxItems caps the rows too
    for posted, rows in (("abc", 0), ("-5", 0), ("99999", argform.MAX_ROWS)):
        form = _form({"type": "object", "properties": {"t": {"type": "array", "items": {"type": "string"}}}},
                     {"t.__rows": posted})
        assert form.rows["t"] == rows
    shipment = _form(PYDANTIC, {"shipment.parcels.__rows": "40"})
    assert shipment.rows["shipment.parcels"] == 5  # maxItems
    assert not [e for e in shipment.items if e["t"] == "add" and e["path"] == "shipment.parcels"][0]["can_add"]
    with pytest.raises(Unsupported):  # 50 rows of 4 fields: more inputs than one page takes
        _form({"type": "object", "properties": {"t": {"type": "array", "items": {
            "type": "object", "properties": {k: {"type": "string"} for k in "abcd"}}}}}, {"t.__rows": "50"})


def test_pydantic_shipment_nested_optional_null_and_defaults():
    form = _form(PYDANTIC)
    assert form["shipment.speed"].initial == "standard" and form.rows["shipment.tags"] == 0
    base = {"shipment.recipient": "Ada", "shipment.address.street": "1 Loop Rd", "shipment.address.city": "Lovelace",
            "shipment.speed": "express", "shipment.tags.__rows": "2", "shipment.tags.0": "fragile",
            "shipment.tags.1": "", "shipment.parcels.__rows": "1", "shipment.parcels.0.label": "box",
            "shipment.parcels.0.weight_kg": "2.0"}
    # empty optional fields are left out, not sent as "" or null; 2.0 is the JSON number 2
    assert _valid(PYDANTIC, base) == {"shipment": {
        "recipient": "Ada", "address": {"street": "1 Loop Rd", "city": "Lovelace"}, "speed": "express",
        "tags": ["fragile"], "parcels": [{"label": "box", "weight_kg": 2}]}}
    # null only where the person chose it (anyOf [T, null]); a value where typed
    chosen = {**base, "note.__null": "on", "shipment.insured_value": "250", "shipment.address.zip_code.__null": "on"}
    got = _valid(PYDANTIC, chosen)
    assert got["note"] is None and got["shipment"]["insured_value"] == 250
    assert got["shipment"]["address"]["zip_code"] is None
    # a required nested field left empty, and a bound the fields know (exclusiveMinimum is the schema's)
    form = _form(PYDANTIC, {**base, "shipment.address.city": "", "shipment.parcels.0.weight_kg": "0"})
    assert not form.is_valid() and form.errors["shipment.address.city"] == ["This field is required."]
    form = _form(PYDANTIC, {**base, "shipment.parcels.0.weight_kg": "0"})
    assert not form.is_valid()
    assert form.errors["shipment.parcels.0.weight_kg"] == [
        "Arguments do not match the tool's schema at shipment/parcels/0/weight_kg: exclusiveMinimum"]


def test_variants_and_titled_choices():
    schema = {"type": "object", "required": ["target"], "properties": {
        "target": {"oneOf": [{"title": "By id", "type": "object", "properties": {"id": {"type": "integer"}},
                              "required": ["id"], "additionalProperties": False},
                             {"title": "By name", "type": "object", "properties": {"name": {"type": "string"}},
                              "required": ["name"], "additionalProperties": False}]},
        "level": {"oneOf": [{"const": 1, "title": "Low"}, {"const": 2, "title": "High"}]},
        "flags": {"type": "array", "items": {"enum": ["a", "b", "c"]}},
        "on": {"type": "boolean"}}}
    assert _valid(schema, {"target.__variant": "1", "target.~v1.name": "ada", "target.~v0.id": "7",
                           "level": "2", "flags": ["a", "c"], "on": "false"}) == {
        "target": {"name": "ada"}, "level": 2, "flags": ["a", "c"], "on": False}
    form = _form(schema, {"target.~v0.id": "7"})  # no variant chosen for a required part
    assert not form.is_valid() and form.errors["target.__variant"] == ["This field is required."]
    prefilled = _form(schema, values={"target": {"id": 9}, "level": 1, "flags": ["b"], "on": True})
    assert (prefilled["target.__variant"].initial, prefilled["target.~v0.id"].initial) == ("0", 9)
    assert (prefilled["level"].initial, prefilled["flags"].initial, prefilled["on"].initial) == ("1", ["b"], True)


def test_change_the_arguments_puts_nested_values_back():
    previous = {"shipment": {"recipient": "Ada", "address": {"street": "1 Loop Rd", "city": "L", "zip_code": None},
                             "tags": ["x", "y"], "parcels": [{"label": "box", "weight_kg": 1.5}]}, "note": "hi"}
    form = _form(PYDANTIC, values=previous)
    assert form.rows == {"shipment.tags": 2, "shipment.parcels": 1}
    assert form["shipment.tags.1"].initial == "y" and form["shipment.parcels.0.weight_kg"].initial == 1.5
    assert form["shipment.address.zip_code.__null"].initial is True and form["note"].initial == "hi"
    page = render_to_string("mrtrweb/_argform.html", {"form": form})
    assert 'name="arg-shipment.tags.1" value="y"' in page and 'name="arg-shipment.parcels.__rows" value="1"' in page
    assert "(at most 5)" in page  # the rows' bound (maxItems), said once on their group


def test_server_text_is_escaped_and_odd_names_get_stand_ins():
    evil = "<img src=x onerror=alert(1)>\u202eevil"
    schema = {"type": "object", "properties": {
        evil: {"type": "object", "title": evil, "description": evil,
               "properties": {"a b": {"type": "string", "title": evil, "description": evil, "default": evil}}}}}
    form = _form(schema)
    assert list(form.fields) == ["~0.~0"]  # neither name is a plain word: keyed by position
    page = render_to_string("mrtrweb/_argform.html", {"form": form})
    assert "<img" not in page and "\u202e" not in page
    assert html.escape("<img src=x onerror=alert(1)>") in page
    assert 'value="' not in page.split('name="arg-~0.~0"')[1].split(">")[0]  # a default with a bidi mark: not filled
    assert _valid(schema, {"~0.~0": "typed"}) == {evil: {"a b": "typed"}}


def test_json_values_booleans_and_a_property_named_like_a_control():
    schema = {"type": "object", "properties": {
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},  # a map: one JSON value
        "rows": {"type": "integer"}, "__rows": {"type": "string"},  # names the form's own controls use
        "dry": {"type": "boolean", "default": True},
        "cfg": {"type": "object", "properties": {"on": {"type": "boolean"}}}}}
    form = _form(schema)
    assert list(form.fields) == ["labels", "rows", "~2", "dry", "cfg.on"]
    page = render_to_string("mrtrweb/_argform.html", {"form": form})
    assert '<option value="true" selected>' in page  # the boolean's default shown
    assert 'name="arg-rows"' in page and 'name="arg-__row_action"' not in page  # no rows here: no row buttons
    assert _valid(schema, {"labels": '{"a": "b"}', "rows": "3", "~2": "x", "dry": "false", "cfg.on": ""}) == {
        "labels": {"a": "b"}, "rows": 3, "__rows": "x", "dry": False}
    bad = _form(schema, {"labels": "{not json", "dry": ""})
    assert not bad.is_valid() and bad.errors["labels"] == ["Enter valid JSON."]
    mismatch = _form(schema, {"labels": '{"a": 1}'})  # the schema check says where
    assert not mismatch.is_valid()
    assert mismatch.errors["labels"] == ["Arguments do not match the tool's schema at labels/a: type"]
    prefilled = _form(schema, values={"labels": {"k": "v"}, "dry": False})
    again = render_to_string("mrtrweb/_argform.html", {"form": prefilled})
    assert "&quot;k&quot;: &quot;v&quot;" in again and '<option value="false" selected>' in again
