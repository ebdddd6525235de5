""":mod:`mrtrweb.argforms.shapes` without Django: which schema shapes become fields, which fall back
to the JSON box (with the code said in the log), and the JSON box's starting text."""

from __future__ import annotations

import json
import time

import pytest

from mrtrweb.argforms import Unsupported, read_schema, template_for
from mrtrweb.argforms import shapes
from tests.argforms.schemas import MEMORY, PYDANTIC

def _props(node):
    return {name: (sub.kind, required) for name, sub, required in node.properties}


def test_pydantic_models_become_groups_rows_and_nullable_fields():
    root = read_schema(PYDANTIC)
    assert _props(root) == {"shipment": ("object", True), "note": ("string", False)}
    note = root.properties[1][1]
    assert note.nullable and note.has_default and note.default is None and note.title == "Note"
    shipment = root.properties[0][1]
    assert _props(shipment) == {"recipient": ("string", True), "address": ("object", True),
                                "speed": ("enum", False), "insured_value": ("integer", False),
                                "tags": ("array", False), "parcels": ("array", False)}
    by_name = {name: sub for name, sub, _r in shipment.properties}
    assert by_name["speed"].options == [("standard", None), ("express", None)]
    assert (by_name["speed"].default, by_name["speed"].title) == ("standard", "Speed")  # a $ref's sibling kept
    assert by_name["insured_value"].nullable and by_name["tags"].item.kind == "string"
    assert by_name["parcels"].constraints == {"maxItems": 5} and by_name["parcels"].item.kind == "object"
    weight = by_name["parcels"].item.properties[1][1]
    assert weight.constraints == {"exclusiveMinimum": 0, "maximum": 30} and weight.description == "Weight in kg"
    zip_code = by_name["address"].properties[2][1]
    assert (zip_code.kind, zip_code.nullable) == ("string", True)


def test_an_array_of_objects_holding_an_array_of_strings():
    entities = read_schema(MEMORY).properties[0][1]
    assert entities.kind == "array" and _props(entities.item) == {
        "name": ("string", True), "entityType": ("string", True), "observations": ("array", True)}


@pytest.mark.parametrize("schema, kinds", [
    # titled choices: oneOf of const with titles; enum with null (nullable); const alone
    ({"properties": {"p": {"oneOf": [{"const": "lo", "title": "Low"}, {"const": "hi", "title": "High"}]}}},
     {"p": ("enum", False)}),
    ({"properties": {"p": {"enum": ["a", None]}}}, {"p": ("enum", True)}),
    ({"properties": {"p": {"type": ["integer", "null"]}}}, {"p": ("integer", True)}),
    ({"properties": {"p": {"oneOf": [{"type": "null"}, {"$ref": "#/definitions/n"}]}},
      "definitions": {"n": {"type": "number"}}}, {"p": ("number", True)}),
    # parts without fields of their own: one JSON value (a map, any value, mixed scalars, a tuple)
    ({"properties": {"s": {"type": "string"}, "m": {"type": "object", "additionalProperties": {"type": "string"}},
                     "a": {}, "x": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                     "t": {"type": "array", "prefixItems": [{"type": "string"}]}}},
     {"s": ("string", False), "m": ("json", False), "a": ("json", False), "x": ("json", False), "t": ("json", False)}),
    # an allOf of one schema is that schema (pydantic <2.9 wrote a $ref with a default that way)
    ({"properties": {"p": {"allOf": [{"$ref": "#/$defs/e"}], "default": "b"}}, "$defs": {"e": {"enum": ["a", "b"]}}},
     {"p": ("enum", False)}),
])
def test_shapes(schema, kinds):
    root = read_schema({"type": "object", **schema})
    assert {name: (sub.kind, sub.nullable) for name, sub, _r in root.properties} == kinds


def test_object_variants_are_a_choice():
    schema = {"type": "object", "properties": {"target": {"oneOf": [
        {"title": "By id", "type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
        {"$ref": "#/$defs/ByName"}, {"type": "null"}]}},
        "$defs": {"ByName": {"title": "By name", "type": "object", "properties": {"name": {"type": "string"}}}}}
    target = read_schema(schema).properties[0][1]
    assert target.kind == "choice" and target.nullable
    assert [v.title for v in target.variants] == ["By id", "By name"]


@pytest.mark.parametrize("schema, code", [
    # a reference outside the document: never fetched, never followed (nor an anchor, nor an $id base)
    ({"properties": {"x": {"$ref": "http://127.0.0.1:1/x.json"}}}, "ref_outside"),
    ({"properties": {"x": {"$ref": "file:///etc/passwd"}}}, "ref_outside"),
    ({"properties": {"x": {"$ref": "#anchor"}}, "$defs": {"a": {"$anchor": "anchor"}}}, "ref_outside"),
    ({"properties": {"x": {"$ref": "#/$defs/missing"}}}, "ref_unresolvable"),
    ({"properties": {"x": {"$id": "http://127.0.0.1:1/", "type": "string"}}}, "dialect_nested"),
    ({"properties": {"x": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "string"}}},
     "dialect_nested"),
    # a recursive schema (a tree): a cycle of references, directly, through an array, or through "#"
    ({"properties": {"node": {"$ref": "#/$defs/Node"}},
      "$defs": {"Node": {"type": "object", "properties": {"children": {"type": "array",
                                                                       "items": {"$ref": "#/$defs/Node"}}}}}},
     "ref_cycle"),
    ({"properties": {"x": {"$ref": "#/$defs/a"}}, "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}},
     "ref_cycle"),
    ({"properties": {"self": {"$ref": "#"}}}, "ref_cycle"),
    # combining keywords the fields cannot say
    ({"properties": {"x": {"allOf": [{"type": "string"}, {"minLength": 2}]}}}, "combinator"),
    ({"properties": {"x": {"not": {"type": "string"}}}}, "combinator"),
    ({"patternProperties": {"^a": {"type": "string"}}, "properties": {"x": {"type": "string"}}}, "combinator"),
    ({"properties": {"x": {"type": "string", "anyOf": [{"minLength": 1}, {"maxLength": 0}]}}}, "combinator"),
    ({"properties": {"x": {"if": {"type": "string"}, "then": {"minLength": 1}}}}, "combinator"),
    # nothing a field could show
    ({"properties": {"cfg": {"type": "object"}}}, "no_fields"),
    ({"type": "array"}, "root_not_object"),
    ({"properties": {"x": False}}, "not_schema"),
])
def test_what_falls_back_to_the_json_box(schema, code):
    with pytest.raises(Unsupported) as raised:
        read_schema({"type": "object", **schema} if "type" not in schema else schema)
    assert raised.value.code == code


def test_deep_huge_and_exponential_schemas_end_quickly_with_a_code():
    deep: dict = {"type": "string"}
    for _ in range(5000):
        deep = {"type": "object", "properties": {"a": deep}}
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(50_000)}}
    # every level refers four times to the next: 4^6 paths if references were expanded without a bound
    defs = {f"d{i}": {"type": "object", "properties": {k: {"$ref": f"#/$defs/d{i + 1}"} for k in "abcd"}}
            for i in range(6)}
    defs["d6"] = {"type": "string"}
    exponential = {"type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}}, "$defs": defs}
    hops = {"type": "object", "properties": {"x": {"$ref": "#/$defs/h0"}},
            "$defs": {**{f"h{i}": {"$ref": f"#/$defs/h{i + 1}"} for i in range(100)}, "h100": {"type": "string"}}}
    for schema, code in ((deep, "too_deep"), (wide, "too_large"), (exponential, "too_large"), (hops, "too_deep")):
        started = time.monotonic()
        with pytest.raises(Unsupported) as raised:
            read_schema(schema)
        assert raised.value.code == code and time.monotonic() - started < 1.0
    big_enum = {"type": "object", "properties": {"x": {"enum": list(range(100_000))}, "y": {"type": "string"}}}
    assert read_schema(big_enum).properties[0][1].kind == "json"  # too many options: typed as JSON


def test_the_json_box_template_from_the_schema():
    # required keys with a value of their type, and every default
    assert json.loads(template_for(PYDANTIC)) == {
        "shipment": {"recipient": "", "address": {"street": "", "city": "", "zip_code": None}, "speed": "standard",
                     "insured_value": None, "tags": []}, "note": None}
    assert json.loads(template_for(MEMORY)) == {"entities": []}
    recursive = {"type": "object", "required": ["node"], "properties": {"node": {"$ref": "#/$defs/N"}},
                 "$defs": {"N": {"type": "object", "required": ["name", "next"],
                                 "properties": {"name": {"type": "string"}, "next": {"$ref": "#/$defs/N"}}}}}
    filled = json.loads(template_for(recursive))  # a cycle ends with null where it would repeat
    assert filled == {"node": {"name": "", "next": None}}
    outside = {"type": "object", "required": ["x", "n"],
               "properties": {"x": {"$ref": "http://127.0.0.1:1/x.json"}, "n": {"type": "integer", "default": 3}}}
    assert json.loads(template_for(outside)) == {"x": None, "n": 3}
    assert template_for({"type": "array"}) == "{}" and template_for("nope") == "{}"
    huge = {"type": "object", "properties": {"x": {"default": "y" * (shapes.MAX_TEMPLATE_CHARS + 1)}}}
    assert template_for(huge) == "{}"
    names = [f"p{i}" for i in range(50_000)]  # every one required: looked up in a set, the budget ends the walk
    wide = {"type": "object", "required": names, "properties": {n: {"type": "string"} for n in names}}
    started = time.monotonic()
    assert len(json.loads(template_for(wide))) <= shapes.MAX_NODES and time.monotonic() - started < 1.0
