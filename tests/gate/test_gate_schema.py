"""The MCP restricted ``requestedSchema`` subset, answer validation, real formats and URL-mode
safety, through the gate (shared/docs/mrtr-gate.md §1 ``invalid_form_requestedSchema`` /
``unsafe_url_elicitation`` and §2 ``input_response_schema_mismatch``).

Every spec-valid schema of the 2026-07-28 elicitation schema (StringSchema with its formats,
Number/Integer, Boolean, untitled/titled single select, legacy ``enumNames``, untitled/titled multi
select, ``default`` everywhere -- SEP-1034) must be accepted and its content validated; the rest of
JSON Schema is refused. The last section pins the faults of a naive gate that this one must not have.
"""

from __future__ import annotations

import copy

import pytest

from mrtrweb.gate import Gate, GateRejection, InMemoryBindingStore, ManualClock, Policy, Retry, Round
from mrtrweb.gate.schema import check_requested_schema

ORIGIN = "https://mcp.example.test"
PARAMS = {"name": "deploy", "arguments": {"env": "prod"}}




def _gate(policy=None):
    return Gate(InMemoryBindingStore(), policy or Policy(), ManualClock(1_000_000.0))


def _register(gate, request_id=1, user="alice", tenant="acme", method="tools/call"):
    return gate.register(request_id=request_id, server_id="srv", origin=ORIGIN, user=user, tenant=tenant,
                         method=method, params=copy.deepcopy(PARAMS))


def _outcome(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except GateRejection as exc:
        return exc.code


def receive(requests, *, state=None, gate=None, request_id=1):
    """Register an operation and deliver one result; returns (gate, handle, Round or code)."""
    gate = gate or _gate()
    handle = _register(gate, request_id)
    result = {"resultType": "input_required", "inputRequests": copy.deepcopy(requests)}
    if state is not None:
        result["requestState"] = state
    got = _outcome(gate.receive, tenant="acme", user="alice", request_id=request_id, origin=ORIGIN, result=result)
    return gate, handle, got


def elicit(schema):
    return {"method": "elicitation/create", "params": {"message": "Fill in", "requestedSchema": schema}}


def obj(**props):
    return {"type": "object", "properties": props}


def judge_schema(schema):
    """``"ok"`` or the code the gate gives a round asking for ``schema``."""
    _, _, got = receive({"k": elicit(schema)})
    return "ok" if isinstance(got, Round) else got


def answer(schema, content, *, absent=False):
    """The code (or the Retry) for an ``accept`` with ``content`` to a round asking for ``schema``."""
    gate, handle, rnd = receive({"k": elicit(schema)})
    assert isinstance(rnd, Round), rnd
    ans = {"action": "accept"} if absent else {"action": "accept", "content": copy.deepcopy(content)}
    return _outcome(gate.respond, handle, retry_id=2, responses={"k": ans}, user="alice", tenant="acme")


# ---------------------------------------------------------------------------------------------
# Spec-valid property schemas: accepted, and their content validated
# ---------------------------------------------------------------------------------------------

SPEC_PROPERTIES = [
    # (id, property schema, valid values, invalid values)
    ("string", {"type": "string", "title": "Name", "description": "Your name", "minLength": 2, "maxLength": 5},
     ["ab", "abcde", "é😀"], ["a", "abcdef", 5, None, True, ["ab"]]),
    ("string-pattern", {"type": "string", "pattern": "^[a-z]+-[0-9]{2}$"}, ["ab-12", "x-00"],
     ["AB-12", "ab-1", "ab-123", ""]),
    ("string-email", {"type": "string", "format": "email", "default": "ops@example.test"},
     ["ops@example.test", "a.b+tag@sub.example.co.uk", "x@[192.0.2.1]"],
     ["not an address", "ops@", "@example.test", "ops@localhost", "ops@example..test", "a@b@example.test",
      "ops@exa mple.test", "ops@-example.test", 7]),
    ("string-uri", {"type": "string", "format": "uri"},
     ["https://example.test/x?y=1#z", "urn:isbn:0451450523", "mailto:ops@example.test", "https://[::1]:8443/",
      "file:///etc/hosts", "https:host"],
     ["not a uri", "example.test/x", "/relative/path", "//example.test/x", "https://exa mple.test/",
      "https://example.test/ü", "1http://x", "https://[::1/", "https://a:1:2/", "http://[zz::1]/"]),
    ("string-date", {"type": "string", "format": "date", "title": "Day"},
     ["2026-01-05", "2024-02-29", "2026-12-31"],
     ["2026-02-30", "2026-02-29", "2026-13-01", "2026-00-10", "2026-1-5", "05/01/2026", "2026-01-05T10:00:00Z",
      "20260105", "２０２６-01-05", "2026-01-05\n"]),
    ("string-date-time", {"type": "string", "format": "date-time"},
     ["2026-01-05T10:00:00Z", "2026-01-05T10:00:00.123+01:00", "2026-01-05t10:00:00z", "2026-12-31T23:59:60Z"],
     ["2026-01-05T10:00:00", "2026-01-05 10:00:00Z", "2026-01-05T24:00:00Z", "2026-02-30T10:00:00Z",
      "2026-01-05T10:00Z", "2026-01-05T10:61:00Z", "2026-01-05T10:00:00+25:00", "2026-01-05"]),
    ("number", {"type": "number", "minimum": 0.5, "maximum": 9.5, "default": 1.5}, [0.5, 9.5, 3, 7.25],
     [0.4, 9.6, "3", True, None]),
    ("integer", {"type": "integer", "minimum": 1, "maximum": 10, "default": 3}, [1, 10, 5.0],
     [0, 11, 1.5, "5", False]),
    ("boolean", {"type": "boolean", "default": False, "title": "OK"}, [True, False], [0, 1, "true", None]),
    ("untitled-single", {"type": "string", "enum": ["red", "green"], "default": "red"}, ["red", "green"],
     ["blue", "Red", 0, ["red"]]),
    ("titled-single", {"type": "string", "oneOf": [{"const": "eu", "title": "Europe"},
                                                   {"const": "us", "title": "United States"}], "default": "eu"},
     ["eu", "us"], ["Europe", "asia", None]),
    ("legacy-enum-names", {"type": "string", "enum": ["s", "m", "l"], "enumNames": ["Small", "Medium", "Large"],
                           "default": "m"},
     ["s", "l"], ["Small", "xl"]),
    ("untitled-multi", {"type": "array", "minItems": 1, "maxItems": 2,
                        "items": {"type": "string", "enum": ["a", "b", "c"]}, "default": ["a"]},
     [["a"], ["b", "c"]], [[], ["a", "b", "c"], ["d"], "a", [1]]),
    ("titled-multi", {"type": "array", "items": {"anyOf": [{"const": "x", "title": "Ex"},
                                                           {"const": "y", "title": "Why"}]}, "default": ["x"]},
     [["x"], ["x", "y"], []], [["z"], ["Ex"], "x"]),
    ("annotations", {"type": "string", "title": "T", "description": "D", "x-widget": "textarea",
                     "examples": ["e"], "$comment": "c", "deprecated": False}, ["anything"], [1]),
]


@pytest.mark.parametrize("prop, valid, invalid", [p[1:] for p in SPEC_PROPERTIES], ids=[p[0] for p in SPEC_PROPERTIES])
def test_spec_valid_property_is_accepted_and_its_content_checked(prop, valid, invalid):
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
              "properties": {"f": prop}, "required": ["f"]}
    assert judge_schema(schema) == "ok"
    for value in valid:
        retry = answer(schema, {"f": value})
        assert isinstance(retry, Retry), (value, retry)
        assert retry.params["inputResponses"]["k"]["content"] == {"f": value}
    for value in invalid:
        assert answer(schema, {"f": value}) == "input_response_schema_mismatch", value


@pytest.mark.parametrize("prop", [p[1] for p in SPEC_PROPERTIES if "default" in p[1]],
                         ids=[p[0] for p in SPEC_PROPERTIES if "default" in p[1]])
def test_default_fills_an_absent_field(prop):
    schema = {"type": "object", "properties": {"f": prop}, "required": ["f"]}
    for absent_content in (True, False):
        retry = answer(schema, {}, absent=absent_content)
        assert retry.params["inputResponses"]["k"] == {"action": "accept", "content": {"f": prop["default"]}}
    retry = answer(schema, {"f": prop["default"]})
    assert retry.params["inputResponses"]["k"]["content"] == {"f": prop["default"]}


def test_the_spec_example_form_with_every_kind_at_once():
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "title": "Name", "minLength": 1, "maxLength": 50, "default": "Ada"},
            "email": {"type": "string", "format": "email", "title": "Email"},
            "site": {"type": "string", "format": "uri"},
            "birthday": {"type": "string", "format": "date"},
            "when": {"type": "string", "format": "date-time"},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "score": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.5},
            "agree": {"type": "boolean", "default": False},
            "color": {"type": "string", "enum": ["red", "green"], "enumNames": ["Red", "Green"]},
            "size": {"type": "string", "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}]},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "default": ["a"]},
            "regions": {"type": "array", "items": {"anyOf": [{"const": "eu", "title": "EU"}]}, "maxItems": 1},
        },
        "required": ["email", "age"],
    }
    gate, handle, rnd = receive({"k": elicit(schema)})
    assert isinstance(rnd, Round)
    fields = {f.name: f for f in rnd.requests["k"].schema.fields}
    assert [o.label for o in fields["color"].options] == ["Red", "Green"]
    assert [(o.value, o.label) for o in fields["size"].options] == [("s", "Small"), ("l", "Large")]
    assert [o.label for o in fields["regions"].options] == ["EU"]
    assert fields["email"].required and fields["email"].constraints["format"] == "email"
    assert fields["name"].has_default and fields["name"].default == "Ada"
    retry = gate.respond(handle, retry_id=2, user="alice", tenant="acme",
                         responses={"k": {"action": "accept", "content": {"email": "ada@example.test", "age": 36}}})
    assert retry.params["inputResponses"]["k"]["content"] == {
        "email": "ada@example.test", "age": 36, "name": "Ada", "score": 0.5, "agree": False, "tags": ["a"]}


def test_answer_may_not_add_undeclared_fields_even_when_additional_properties_allowed():
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": True}
    assert judge_schema(schema) == "ok"
    assert answer(schema, {"a": "x", "b": "y"}) == "input_response_schema_mismatch"


def test_empty_properties_is_a_plain_confirmation():
    assert isinstance(answer({"type": "object", "properties": {}}, {}), Retry)
    assert isinstance(answer({"type": "object"}, None, absent=True), Retry)
    assert answer({"type": "object"}, {"x": 1}) == "input_response_schema_mismatch"


def test_required_field_without_default_must_be_present():
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}, "required": ["a"]}
    assert isinstance(answer(schema, {"a": ""}), Retry)
    assert answer(schema, {"b": "x"}) == "input_response_schema_mismatch"


def test_invalid_default_is_an_annotation_until_it_fills_an_answer():
    schema = obj(d={"type": "string", "format": "email", "default": "not-an-email"})
    assert judge_schema(schema) == "ok"
    assert answer(schema, {}) == "input_response_schema_mismatch"
    assert isinstance(answer(schema, {"d": "a@example.test"}), Retry)


# ---------------------------------------------------------------------------------------------
# $ref: local accepted, leaving the document or cyclic refused
# ---------------------------------------------------------------------------------------------

def test_local_refs_are_accepted_and_resolved():
    schema = {"type": "object", "$defs": {"mail": {"type": "string", "format": "email"},
                                          "pick": {"type": "string", "enum": ["a", "b"]}},
              "definitions": {"n": {"type": "integer", "maximum": 3}},
              "properties": {"to": {"$ref": "#/$defs/mail", "title": "To"}, "n": {"$ref": "#/definitions/n"},
                             "many": {"type": "array", "items": {"$ref": "#/$defs/pick"}},
                             "alias": {"$ref": "#/properties/to"}},
              "required": ["to"]}
    assert judge_schema(schema) == "ok"
    assert isinstance(answer(schema, {"to": "a@example.test", "n": 3, "many": ["b"]}), Retry)
    assert answer(schema, {"to": "nope"}) == "input_response_schema_mismatch"
    assert answer(schema, {"to": "a@example.test", "n": 4}) == "input_response_schema_mismatch"
    assert answer(schema, {"to": "a@example.test", "many": ["c"]}) == "input_response_schema_mismatch"
    assert answer(schema, {"to": "a@example.test", "alias": "x"}) == "input_response_schema_mismatch"


@pytest.mark.parametrize("schema", [
    obj(a={"$ref": "https://schemas.example.test/a.json"}),
    obj(a={"$ref": "a.json"}),
    obj(a={"$ref": "a.json#/$defs/x"}),
    obj(a={"$ref": "//evil.test/x"}),
    obj(a={"$ref": "file:///etc/passwd"}),
    {"$id": "https://s.example.test/root.json", "type": "object", "$defs": {"x": {"type": "string"}},
     "properties": {"a": {"$ref": "https://s.example.test/other.json#/$defs/x"}}},
    {"type": "object", "$defs": {"x": {"$ref": "https://evil.test/x"}}, "properties": {"a": {"$ref": "#/$defs/x"}}},
    {"type": "object", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
     "properties": {"x": {"$ref": "#/$defs/a"}}},
    {"type": "object", "$defs": {"a": {"$ref": "#/$defs/a"}}, "properties": {"x": {"$ref": "#/$defs/a"}}},
    obj(x={"$ref": "#"}),
    obj(x={"$ref": "#/properties/x"}),
    obj(x={"$ref": "#/$defs/missing"}),
    obj(x={"$ref": "#anchor"}),
    obj(x={"$ref": 5}),
    obj(x={"$ref": None}),
    obj(x={"$dynamicRef": "#meta"}),
    {"$ref": "#/$defs/root", "$defs": {"root": {"type": "object", "properties": {}}}, "type": "object"},
], ids=["absolute", "relative", "relative-fragment", "network-path", "file", "same-id-other-doc",
        "external-through-defs", "cycle", "self-cycle", "root", "property-self", "dangling", "anchor",
        "number-ref", "null-ref", "dynamic-ref", "root-level-ref"])
def test_refs_leaving_the_document_or_cyclic_are_refused(schema):
    assert judge_schema(schema) == "invalid_form_requestedSchema"


# ---------------------------------------------------------------------------------------------
# Outside the subset: refused
# ---------------------------------------------------------------------------------------------

REFUSED = [
    ("not-an-object", ["type", "object"]),
    ("root-type-array", {"type": "array", "items": {"type": "string"}}),
    ("root-type-missing", {"properties": {"a": {"type": "string"}}}),
    ("root-allOf", {"type": "object", "properties": {}, "allOf": [{"required": []}]}),
    ("root-patternProperties", {"type": "object", "properties": {}, "patternProperties": {".*": {}}}),
    ("root-additionalProperties-schema", {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}}),
    ("properties-list", {"type": "object", "properties": [{"type": "string"}]}),
    ("required-undeclared", {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]}),
    ("required-not-list", {"type": "object", "properties": {"a": {"type": "string"}}, "required": "a"}),
    ("nested-object", obj(o={"type": "object", "properties": {"x": {"type": "string"}}})),
    ("array-of-strings", obj(a={"type": "array", "items": {"type": "string"}})),
    ("array-of-objects", obj(a={"type": "array", "items": {"type": "object", "properties": {}}})),
    ("array-no-items", obj(a={"type": "array"})),
    ("array-tuple", obj(a={"type": "array", "prefixItems": [{"type": "string", "enum": ["a"]}]})),
    ("array-of-arrays", obj(a={"type": "array", "items": {"type": "array", "items": {"enum": ["a"]}}})),
    ("allOf-property", obj(a={"allOf": [{"type": "string"}]})),
    ("anyOf-property", obj(a={"anyOf": [{"type": "string"}, {"type": "number"}]})),
    ("anyOf-with-type", obj(a={"type": "string", "anyOf": [{"minLength": 1}]})),
    ("oneOf-of-types", obj(a={"oneOf": [{"type": "string"}, {"type": "integer"}]})),
    ("oneOf-without-title", obj(a={"type": "string", "oneOf": [{"const": "a"}]})),
    ("oneOf-with-schemas", obj(a={"type": "string", "oneOf": [{"const": "a", "title": "A", "minLength": 3}]})),
    ("not-property", obj(a={"type": "string", "not": {"const": "x"}})),
    ("if-then", obj(a={"type": "string", "if": {"const": "a"}, "then": {"minLength": 2}})),
    ("type-null", obj(a={"type": "null"})),
    ("type-list", obj(a={"type": ["string", "null"]})),
    ("type-missing", obj(a={"title": "no type"})),
    ("boolean-schema", obj(a=True)),
    ("unknown-format", obj(a={"type": "string", "format": "credit-card"})),
    ("enum-type-mismatch", obj(a={"type": "string", "enum": ["a", 1]})),
    ("enum-empty", obj(a={"type": "string", "enum": []})),
    ("minLength-negative", obj(a={"type": "string", "minLength": -1})),
    ("minLength-string", obj(a={"type": "string", "minLength": "2"})),
    ("maximum-string", obj(a={"type": "number", "maximum": "9"})),
    ("pattern-invalid", obj(a={"type": "string", "pattern": "("})),
    ("minLength-on-number", obj(a={"type": "number", "minLength": 1})),
    ("const-property", obj(a={"type": "string", "const": "x"})),
    ("dependentRequired", {"type": "object", "properties": {"a": {"type": "string"}},
                           "dependentRequired": {"a": ["b"]}}),
]


@pytest.mark.parametrize("schema", [r[1] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_outside_the_subset_is_refused(schema):
    assert judge_schema(schema) == "invalid_form_requestedSchema"


def test_refused_schema_never_reaches_validation_of_other_keys():
    _, _, got = receive({"a": elicit(obj(x={"type": "string"})),
                         "b": elicit(obj(o={"type": "object", "properties": {}}))})
    assert got == "invalid_form_requestedSchema"


# ---------------------------------------------------------------------------------------------
# Formats really checked (beyond jsonschema's FormatChecker)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt, value, ok", [
    ("email", "ops@example.test", True), ("email", "ops", False), ("email", "ops@", False),
    ("email", "ops@localhost", False), ("email", "ops@.test", False), ("email", "o ps@example.test", False),
    ("email", "Ops <ops@example.test>", False), ("email", "ops@example.test.", False),
    ("uri", "https://example.test", True), ("uri", "urn:x:y", True), ("uri", "example.test", False),
    ("uri", "https://ex ample.test", False), ("uri", "https://ex\u00e9.test", False), ("uri", "", False),
    ("uri", "http://a/%zz", False), ("uri", "http://a/%41", True),
    ("date", "2000-02-29", True), ("date", "1900-02-29", False), ("date", "2026-04-31", False),
    ("date", "2026-4-30", False), ("date", "+2026-04-30", False),
    ("date-time", "1985-04-12T23:20:50.52Z", True), ("date-time", "1996-12-19T16:39:57-08:00", True),
    ("date-time", "1990-12-31T15:59:60-08:00", True), ("date-time", "1985-04-12T23:20:50.Z", False),
    ("date-time", "1985-04-12T23:20:50+0100", False), ("date-time", "1985-04-12T23:20:50 Z", False),
])
def test_formats_are_really_checked(fmt, value, ok):
    schema = {"type": "object", "properties": {"v": {"type": "string", "format": fmt}}, "required": ["v"]}
    got = answer(schema, {"v": value})
    assert (isinstance(got, Retry)) is ok, (fmt, value, got)
    if not ok:
        assert got == "input_response_schema_mismatch"


@pytest.mark.parametrize("fmt", ["email", "uri", "date", "date-time", "time", "uuid", "ipv4", "ipv6", "hostname"])
@pytest.mark.parametrize("value", [5, 10**30, 1.5, True, None, [], {}])
def test_format_on_a_non_string_is_a_type_mismatch_not_a_crash(fmt, value):
    schema = {"type": "object", "properties": {"v": {"type": "string", "format": fmt}}}
    assert answer(schema, {"v": value}) == "input_response_schema_mismatch"


def test_huge_numbers_in_a_schema_do_not_crash():
    big = 10**400
    assert judge_schema(obj(n={"type": "integer", "minimum": big})) == "ok"
    assert judge_schema(obj(n={"type": "integer", "enum": [big, 1]})) == "ok"
    assert judge_schema(obj(n={"type": "number", "maximum": -big, "default": big})) == "ok"
    assert judge_schema(obj(n={"type": "string", "maxLength": big})) == "ok"
    assert answer(obj(n={"type": "integer", "minimum": big}), {"n": 5}) == "input_response_schema_mismatch"
    assert isinstance(answer(obj(n={"type": "integer", "enum": [big, 1]}), {"n": big}), Retry)
    got = answer(obj(n={"type": "number", "multipleOf": 0.1}), {"n": big})  # fails closed or passes, never crashes
    assert isinstance(got, Retry) or got == "input_response_schema_mismatch"


# ---------------------------------------------------------------------------------------------
# URL mode
# ---------------------------------------------------------------------------------------------

URLS = [
    ("https://auth.example.test/connect?x=1", True),
    ("HTTPS://ok.test/", True),
    ("https://auth.example.test:8443/x#frag", True),
    ("https://[::1]/x", True),
    ("https://192.0.2.1/", True),
    ("https://пример.рф/", True),
    ("https://xn--80ak6aa92e.com/", True),
    ("https://xn--fa-hia.de/", True),
    ("https://[::1", False),
    ("https://a.test:99999", False),
    ("https://a.test:-1/", False),
    ("https://a.test:abc/", False),
    ("https://exa mple.test", False),
    (" https://a.test/", False),
    ("https://a.test/\n", False),
    ("https://a.test\\@evil.test/", False),
    ("javascript:alert(1)", False),
    ("JavaScript:alert(1)//https://a.test", False),
    ("data:text/html;base64,PHNjcmlwdD4=", False),
    ("data:,https://a.test", False),
    ("vbscript:msgbox", False),
    ("file:///etc/passwd", False),
    ("http://auth.example.test/", False),
    ("ftp://auth.example.test/", False),
    ("wss://auth.example.test/", False),
    ("//host/x", False),
    ("/relative", False),
    ("auth.example.test/x", False),
    ("https:host", False),
    ("https:/host/x", False),
    ("https:///x", False),
    ("https://", False),
    ("https://user@host/", False),
    ("https://user:pw@host/", False),
    ("https://@host/", False),
    ("https://a.test@evil.test/", False),
    ("https://a..b/", False),
    ("https://-a.test/", False),
    ("https://a_b.test/", True),  # the URL standard accepts "_" in hosts
    ("https://%65vil.test/", False),
    ("https://xn--zz.com/", False),
    ("https://xn--/", False),
    ("https://[v1.x]/", False),
    ("https://[fe80::1%25eth0]/", False),
    ("https://a.test\u3000b/", False),
    ("https://a.test\u0000/", False),
    ("https://\ud800.test/", False),
    ("", False),
    ("https://" + "a" * 9000 + ".test/", False),
    (None, False),
    (42, False),
    (["https://a.test/"], False),
    ({"href": "https://a.test/"}, False),
]


@pytest.mark.parametrize("url, ok", URLS, ids=[repr(u)[:40] for u, _ in URLS])
def test_url_mode_accepts_only_parseable_absolute_https_without_user_info(url, ok):
    request = {"method": "elicitation/create", "params": {"mode": "url", "message": "Open", "url": url}}
    _, _, got = receive({"u": request})
    if ok:
        assert isinstance(got, Round), got
        view = got.requests["u"].url
        assert view.url == url and view.host and view.registrable
    else:
        assert got == "unsafe_url_elicitation"


def test_idn_and_punycode_hosts_are_flagged():
    for url, display in (("https://xn--80ak6aa92e.com/", "аррӏе.com"), ("https://пример.рф/x", "пример.рф")):
        _, _, rnd = receive({"u": {"method": "elicitation/create", "params": {"mode": "url", "url": url}}})
        view = rnd.requests["u"].url
        assert view.display_host == display and view.host.isascii()
        assert any("punycode" in w for w in view.warnings)


# ---------------------------------------------------------------------------------------------
# Faults of a naive gate this one must not have
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("prop", [
    {"type": "string", "format": "email"}, {"type": "string", "format": "uri"},
    {"type": "string", "format": "date"}, {"type": "string", "format": "date-time"},
    {"type": "string", "enum": ["a", "b"], "enumNames": ["A", "B"]},
    {"type": "string", "enum": ["a", "b"], "enumNames": ["only one"]},
    {"type": "string", "oneOf": [{"const": "a", "title": "A"}, {"const": "b", "title": "B"}]},
    {"type": "array", "items": {"anyOf": [{"const": "a", "title": "A"}]}},
    {"type": "boolean", "default": True}, {"type": "integer", "default": 2},
    {"type": "string", "default": "x", "title": "T", "description": "D"},
], ids=["email", "uri", "date", "date-time", "enumNames", "enumNames-short", "titled-oneOf", "titled-multi",
        "bool-default", "int-default", "string-default"])
def test_naive_fault_spec_valid_schema_rejected_or_crashing(prop):
    assert judge_schema({"type": "object", "properties": {"f": prop}}) == "ok"
    checked = check_requested_schema({"type": "object", "properties": {"f": prop}})
    assert checked.fields[0].name == "f"


def test_naive_fault_garbage_url_crashing():
    for url, _ in URLS:
        request = {"method": "elicitation/create", "params": {"mode": "url", "url": url}}
        _, _, got = receive({"u": request})  # raises anything but GateRejection -> the test errors
        assert isinstance(got, Round) or got == "unsafe_url_elicitation"


def test_naive_fault_second_round_refused():
    gate, handle, rnd = receive({"k": elicit(obj(ok={"type": "boolean"}))}, state="s1")
    gate.respond(handle, retry_id=2, user="alice", tenant="acme",
                 responses={"k": {"action": "accept", "content": {"ok": True}}})
    second = gate.receive(tenant="acme", user="alice", request_id=2, origin=ORIGIN,
                          result={"resultType": "input_required", "inputRequests": {"k2": elicit(obj())},
                                  "requestState": "s2"})
    assert second.number == 2 and second.handle == handle
    retry = gate.respond(handle, retry_id=3, user="alice", tenant="acme", responses={"k2": {"action": "accept"}})
    assert retry.params == {**PARAMS, "inputResponses": {"k2": {"action": "accept", "content": {}}},
                            "requestState": "s2"}


def test_naive_fault_input_required_accepted_on_tools_list():
    gate = _gate()
    gate.register(request_id=1, server_id="srv", origin=ORIGIN, user="alice", tenant="acme", method="tools/list",
                  params={})
    got = _outcome(gate.receive, tenant="acme", user="alice", request_id=1, origin=ORIGIN,
                   result={"resultType": "input_required", "inputRequests": {"k": elicit(obj())}})
    assert got == "input_required_not_allowed_for_method"


def test_naive_fault_equal_ids_crossing_users():
    gate = _gate()
    alice = _register(gate, request_id=7, user="alice")
    bob = gate.register(request_id=7, server_id="srv", origin=ORIGIN, user="bob", tenant="acme", method="tools/call",
                        params={"name": "deploy", "arguments": {"env": "bob"}})
    r_bob = gate.receive(tenant="acme", user="bob", request_id=7, origin=ORIGIN,
                         result={"resultType": "input_required", "requestState": "bob-secret"})
    assert r_bob.handle == bob
    assert gate.state(alice).status == "awaiting_result"
    r_alice = gate.receive(tenant="acme", user="alice", request_id=7, origin=ORIGIN,
                           result={"resultType": "input_required", "requestState": "alice-secret"})
    assert r_alice.handle == alice
    assert gate.respond(alice, retry_id=8, user="alice", tenant="acme").params["requestState"] == "alice-secret"
    assert gate.respond(bob, retry_id=8, user="bob", tenant="acme").params == {
        "name": "deploy", "arguments": {"env": "bob"}, "requestState": "bob-secret"}


# --- the validation shortcut agrees with jsonschema -------------------------------------------------

from unittest import mock  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_SHORTCUT_SCHEMA = {
    "type": "object",
    "properties": {
        "s": {"type": "string", "minLength": 2, "maxLength": 5},
        "e": {"type": "string", "enum": ["a", "b"]},
        "m": {"type": "string", "format": "email"},
        "d": {"type": "string", "format": "date"},
        "i": {"type": "integer", "minimum": -3, "maximum": 7},
        "n": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1.5},
        "b": {"type": "boolean"},
        "p": {"type": "string", "pattern": "^x"},
        "c": {"type": "array", "items": {"enum": ["u", "v"]}, "minItems": 1},
    },
    "required": ["s", "i"],
}
_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-10, 10), st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from(["", "a", "b", "ab", "abcdef", "x@example.com", "x@", "2024-02-29",
                                     "2023-02-29", "xy", "yx"]),
                    st.lists(st.sampled_from(["u", "v", "w"]), max_size=3))


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(["s", "e", "m", "d", "i", "n", "b", "p", "c", "zz"]), _VALUES))
def test_validation_shortcut_never_skips_an_error(content):
    """``validate`` skips jsonschema only when jsonschema would find nothing: the same answers
    pass and fail, with the same messages, as with jsonschema alone."""
    from jsonschema import Draft202012Validator

    from mrtrweb.gate import content as content_mod, schema_cache

    checked = check_requested_schema(_SHORTCUT_SCHEMA)
    filled = dict(content)
    if content_mod._surely_valid(checked.normalized, filled):  # noqa: SLF001
        validator = Draft202012Validator(checked.normalized, format_checker=content_mod._FORMAT_CHECKER)  # noqa: SLF001
        assert not list(validator.iter_errors(filled)), content
    shared, _ = schema_cache.check_requested_schema_cached(copy.deepcopy(_SHORTCUT_SCHEMA), shared=True)
    outcomes = []
    for candidate, shortcut in ((checked, False), (checked, True), (shared, True)):
        with mock.patch.object(content_mod, "_surely_valid", content_mod._surely_valid if shortcut  # noqa: SLF001
                               else lambda *_: False):
            try:
                outcomes.append(candidate.validate(copy.deepcopy(content)))
            except content_mod.ContentMismatch as exc:
                outcomes.append(exc.errors)
    assert outcomes[0] == outcomes[1] == outcomes[2]


def test_checked_schema_cache_is_bounded():
    """The cache of checked schemas stays within its count and size bounds, and a schema too big
    to keep is still checked (every time)."""
    from mrtrweb.gate import schema_cache as schema_mod

    for i in range(schema_mod.CACHE_MAX_ENTRIES + 50):
        checked, digest_ = schema_mod.check_requested_schema_cached(
            {"type": "object", "properties": {f"p{i}": {"type": "string", "title": "x" * (i % 7000)}}})
        assert checked.fields[0].name == f"p{i}" and digest_.startswith("sha256:")
        assert len(schema_mod._cache) <= schema_mod.CACHE_MAX_ENTRIES  # noqa: SLF001
        assert schema_mod._cache_chars == sum(map(len, schema_mod._cache))  # noqa: SLF001
        assert schema_mod._cache_chars <= schema_mod.CACHE_MAX_TOTAL_CHARS  # noqa: SLF001
    big = {"type": "object", "properties": {"a": {"type": "string", "description": "d" * 20000}}}
    assert schema_mod.check_requested_schema_cached(big)[0] == check_requested_schema(big)


def test_checked_schema_cache_tells_apart_what_the_check_tells_apart():
    """Schemas with the same digest (key order, ``1`` vs ``1.0``, a tuple for a list) are not one
    cache entry: each gets what an uncached check gives it (or its refusal)."""
    from mrtrweb.gate import schema_cache as schema_mod
    from mrtrweb.gate.schema import SchemaRefused

    a = {"type": "object", "properties": {"x": {"type": "integer", "minimum": 1}, "y": {"type": "boolean"}}}
    b = {"type": "object", "properties": {"y": {"type": "boolean"}, "x": {"type": "integer", "minimum": 1.0}}}
    for schema in (a, b, a, b):
        cached, _ = schema_mod.check_requested_schema_cached(copy.deepcopy(schema))
        plain = check_requested_schema(copy.deepcopy(schema))
        assert cached == plain
        assert [f.name for f in cached.fields] == list(schema["properties"])
        assert repr(cached.fields[[f.name for f in cached.fields].index("x")].constraints["minimum"]) == \
            repr(schema["properties"]["x"]["minimum"])
    with_list = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}
    schema_mod.check_requested_schema_cached(with_list)
    with pytest.raises(SchemaRefused):
        schema_mod.check_requested_schema_cached({**with_list, "required": ("x",)})
