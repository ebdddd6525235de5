"""Property tests: whatever JSON a server or a browser sends, the gate returns a Round/Retry or
raises GateRejection -- never another exception -- and a rejection leaves the operation as it was.

(a) arbitrary JSON as the whole result; (b) arbitrary JSON in the holes of a plausible
``input_required`` result (entries, ``requestedSchema``, ``url``, ``mode``, ``requestState``);
(c) arbitrary answers, retry ids, identities and params against an open round.
The example counts keep this file well under a minute.
"""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrtrweb.gate import (
    ALL_CODES,
    Gate,
    GateRejection,
    InMemoryBindingStore,
    ManualClock,
    Policy,
    Retry,
    Round,
    UnsafeUrl,
    UrlView,
    check_url,
)
from mrtrweb.gate import formats

ORIGIN = "https://mcp.example.test"
PARAMS = {"name": "deploy", "arguments": {"env": "prod", "replicas": 3}}
FUZZ = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                         HealthCheck.too_slow])




# ---------------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------------

WORDS = ["input_required", "elicitation/create", "sampling/createMessage", "roots/list", "form", "url", "object",
         "string", "number", "integer", "boolean", "array", "email", "uri", "date", "date-time", "accept", "decline",
         "cancel", "content", "action", "#/$defs/x", "#", "https://a.test/", "file:///x", "", "1", "k", "x"]
# JSON text has no lone surrogates; check_url and the format checkers also get them (``any_char``).
# (An explicit alphabet also spares Hypothesis building its UTF-8 codec table, ~10 s on a fresh checkout.)
text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12) | st.sampled_from(WORDS)
any_char = st.characters()
numbers = (st.integers() | st.integers(min_value=-(10**400), max_value=10**400)
           | st.sampled_from([0, -0.0, 2**53 + 1, 2**63, -(2**63), 10**300, 10**400, -(10**400), 1e308, 5e-324])
           | st.floats(allow_nan=False, allow_infinity=False))
scalars = st.none() | st.booleans() | numbers | text
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(text, children, max_size=4),
    max_leaves=16,
)


def maybe(key, strategy):
    """A one-key dict or an empty one (so a field may be absent)."""
    return st.one_of(st.just({}), strategy.map(lambda v: {key: v}))


def merged(*parts):
    return st.tuples(*parts).map(lambda ds: {k: v for d in ds for k, v in d.items()})


prop_schema = merged(
    maybe("type", st.sampled_from(["string", "number", "integer", "boolean", "array", "object", "null"]) | json_values),
    maybe("format", st.sampled_from(["email", "uri", "date", "date-time", "time", "uuid", "hostname"]) | json_values),
    maybe("enum", st.lists(scalars, max_size=4) | json_values),
    maybe("oneOf", st.lists(merged(maybe("const", scalars), maybe("title", text)), max_size=3) | json_values),
    maybe("items", merged(maybe("type", st.just("string") | json_values),
                          maybe("enum", st.lists(text, max_size=3)),
                          maybe("anyOf", st.lists(merged(maybe("const", text), maybe("title", text)), max_size=3)))
          | json_values),
    maybe("minLength", numbers | json_values), maybe("maxLength", numbers), maybe("pattern", text | json_values),
    maybe("minimum", numbers | json_values), maybe("maximum", numbers), maybe("multipleOf", numbers),
    maybe("minItems", numbers), maybe("maxItems", numbers), maybe("uniqueItems", json_values),
    maybe("default", json_values), maybe("enumNames", json_values), maybe("title", json_values),
    maybe("$ref", st.sampled_from(["#/$defs/x", "#/$defs/y", "#", "#/properties/a", "https://e.test/s", "#x"])
          | json_values),
)
requested_schema = merged(
    maybe("type", st.just("object") | json_values),
    maybe("properties", st.dictionaries(text, prop_schema, max_size=3) | json_values),
    maybe("required", st.lists(text, max_size=3) | json_values),
    maybe("$defs", st.dictionaries(st.sampled_from(["x", "y"]), prop_schema, max_size=2) | json_values),
    maybe("additionalProperties", json_values),
) | json_values
urls = (text | st.sampled_from(["https://a.test/", "https://[::1", "https://a.test:99999", "javascript:alert(1)",
                                "https://u@a.test/", "https://xn--zz.com/", "https://пример.рф/", "//a.test/x"])
        | text.map(lambda t: "https://" + t) | json_values)
elicitation_params = merged(
    maybe("message", text | json_values),
    maybe("mode", st.sampled_from(["form", "url", "Form", "other"]) | json_values),
    maybe("requestedSchema", requested_schema),
    maybe("url", urls),
)
entry = st.one_of(
    merged(maybe("method", st.sampled_from(["elicitation/create", "sampling/createMessage", "roots/list"]) | text
                 | json_values),
           maybe("params", elicitation_params | json_values)),
    json_values,
)
keys = st.sampled_from(["a", "b", "confirm", "K.9_-x", "k" * 64, "k" * 65, "has space", "", "é"]) | text
plausible_result = merged(
    maybe("resultType", st.just("input_required") | json_values),
    maybe("inputRequests", st.dictionaries(keys, entry, max_size=3) | json_values),
    maybe("requestState", text | json_values),
)
request_ids = st.integers() | text | numbers | json_values


def _gate(policy):
    return Gate(InMemoryBindingStore(), policy, ManualClock(1_000_000.0))


def _snapshot(gate, handle):
    return gate.state(handle), gate.store.load(handle.tenant, handle.operation_id)


def _deliver(result, policy=Policy(allow_deprecated={"sampling/createMessage", "roots/list"}), request_id=1,
             origin=ORIGIN):
    gate = _gate(policy)
    handle = gate.register(request_id=1, server_id="srv", origin=ORIGIN, user="alice", tenant="acme",
                           method="tools/call", params=PARAMS)
    before, sent = _snapshot(gate, handle), copy.deepcopy(result)
    try:
        rnd = gate.receive(tenant="acme", user="alice", request_id=request_id, origin=origin, result=result)
    except GateRejection as exc:
        assert result == sent  # the gate never changes what it judges
        assert exc.code in ALL_CODES
        assert _snapshot(gate, handle) == before  # a rejection changes nothing
        return gate, handle, None
    assert result == sent
    assert isinstance(rnd, Round) and rnd.handle == handle
    assert gate.state(handle).status == "round_open"
    return gate, handle, rnd


# ---------------------------------------------------------------------------------------------
# (a) the whole result
# ---------------------------------------------------------------------------------------------

@FUZZ
@given(result=json_values)
def test_any_json_as_the_whole_result(result):
    _deliver(result)


@FUZZ
@given(result=json_values, request_id=request_ids, origin=text | json_values)
def test_any_json_with_any_request_id_and_origin(result, request_id, origin):
    _deliver(result, request_id=request_id, origin=origin)


# ---------------------------------------------------------------------------------------------
# (b) values inside a plausible input_required result
# ---------------------------------------------------------------------------------------------

@settings(FUZZ, max_examples=120)
@given(result=plausible_result)
def test_any_json_inside_a_plausible_result(result):
    gate, handle, rnd = _deliver(result)
    if rnd is not None:
        json.dumps(result, allow_nan=False)  # an accepted result is JSON
        assert set(rnd.requests) == set(result.get("inputRequests") or {})


@settings(FUZZ, max_examples=120)
@given(schema=requested_schema, state=maybe("requestState", text))
def test_any_requested_schema(schema, state):
    _deliver({"resultType": "input_required",
              "inputRequests": {"k": {"method": "elicitation/create",
                                      "params": {"message": "m", "requestedSchema": schema}}}, **state})


KEYWORDS = ["type", "format", "enum", "oneOf", "anyOf", "items", "minLength", "maxLength", "pattern", "minimum",
            "maximum", "exclusiveMinimum", "multipleOf", "minItems", "maxItems", "uniqueItems", "default", "enumNames",
            "title", "$ref", "const", "required", "properties", "additionalProperties"]


@settings(FUZZ, max_examples=150)
@given(base=st.sampled_from([{"type": t} for t in ("string", "number", "integer", "boolean")]
                            + [{"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
                               {"type": "string", "enum": ["a"]}]),
       keyword=st.sampled_from(KEYWORDS), value=st.one_of(numbers, st.lists(numbers, max_size=3), json_values),
       where=st.sampled_from(["property", "items", "root"]))
def test_any_value_of_one_keyword(base, keyword, value, where):
    """One keyword at a time, so every check of the subset is reached with arbitrary values."""
    prop, schema = dict(base), {"type": "object", "properties": {}}
    if where == "items" and "items" in prop:
        prop["items"] = {**prop["items"], keyword: value}
    elif where == "root":
        schema[keyword] = value
    else:
        prop[keyword] = value
    schema["properties"] = schema["properties"] if where == "root" and keyword == "properties" else {"f": prop}
    gate, handle, rnd = _deliver({"resultType": "input_required", "inputRequests": {"k": {
        "method": "elicitation/create", "params": {"message": "m", "requestedSchema": schema}}}})
    if rnd is not None:  # then any answer is judged without a crash
        for content in ({}, {"f": value}, {"f": "a"}, {"f": ["a"]}, value):
            _respond(gate, handle, retry_id=2, responses={"k": {"action": "accept", "content": content}},
                     user="alice", tenant="acme", expect_round=False)


@FUZZ
@given(url=urls, mode=st.sampled_from(["url"]) | json_values)
def test_any_url_and_mode(url, mode):
    _deliver({"resultType": "input_required",
              "inputRequests": {"u": {"method": "elicitation/create", "params": {"mode": mode, "url": url}}}})


@settings(FUZZ, max_examples=120)
@given(url=st.text(any_char, max_size=40) | st.text(any_char, max_size=12).map(lambda t: "https://" + t)
       | st.text(any_char, max_size=12).map(lambda t: "https://a.test" + t))
def test_check_url_only_ever_refuses_with_unsafe_url(url):
    try:
        view = check_url(url)
    except UnsafeUrl:
        return
    assert isinstance(view, UrlView) and view.url == url and url.lower().startswith("https://")


@settings(FUZZ, max_examples=120)
@given(value=st.text(any_char, max_size=30) | st.sampled_from(["a@b.c", "2026-02-29", "2026-01-01T00:00:00Z", "x:y"]))
def test_format_checkers_never_raise(value):
    for check in formats.CHECKERS.values():
        assert check(value) in (True, False)


# ---------------------------------------------------------------------------------------------
# (c) answers, responses, retry ids
# ---------------------------------------------------------------------------------------------

ROUND = {
    "resultType": "input_required",
    "inputRequests": {
        "f": {"method": "elicitation/create", "params": {"message": "m", "requestedSchema": {
            "type": "object",
            "properties": {"s": {"type": "string", "format": "email", "default": "a@b.test"},
                           "n": {"type": "integer", "minimum": 0, "maximum": 10},
                           "c": {"type": "string", "oneOf": [{"const": "x", "title": "X"}]},
                           "m": {"type": "array", "items": {"type": "string", "enum": ["p", "q"]}},
                           "d": {"type": "string", "format": "date"}},
            "required": ["n"]}}},
        "u": {"method": "elicitation/create", "params": {"mode": "url", "url": "https://a.test/x", "message": "m"}},
        "s": {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 3}},
        "r": {"method": "roots/list", "params": {}},
    },
    "requestState": "st",
}
answer = st.one_of(
    merged(maybe("action", st.sampled_from(["accept", "decline", "cancel"]) | json_values),
           maybe("content", st.dictionaries(st.sampled_from(["s", "n", "c", "m", "d", "zz"]), json_values, max_size=5)
                 | json_values),
           maybe("_meta", json_values)),
    merged(maybe("role", st.sampled_from(["assistant", "user"]) | json_values),
           maybe("model", text | json_values),
           maybe("content", st.fixed_dictionaries({"type": st.just("text"), "text": text}) | json_values)),
    merged(maybe("roots", st.lists(merged(maybe("uri", st.just("file:///x") | text), maybe("name", json_values)),
                                   max_size=2) | json_values)),
    json_values,
)
responses = st.one_of(
    st.fixed_dictionaries({"f": answer, "u": answer, "s": answer, "r": answer}),
    st.dictionaries(st.sampled_from(["f", "u", "s", "r", "x"]), answer, max_size=5),
    json_values,
)


def _open_round():
    gate, handle, rnd = _deliver(copy.deepcopy(ROUND))
    assert rnd is not None
    return gate, handle


def _respond(gate, handle, expect_round=True, **kwargs):
    before, sent = _snapshot(gate, handle), copy.deepcopy(kwargs)
    try:
        retry = gate.respond(handle, **kwargs)
    except GateRejection as exc:
        assert kwargs == sent  # the gate never changes the answers it judges
        assert exc.code in ALL_CODES
        assert _snapshot(gate, handle) == before  # the round stays open, nothing changed
        return None
    assert isinstance(retry, Retry) and kwargs == sent
    json.dumps(retry.params, allow_nan=False)
    state = gate.state(handle)
    assert state.status == "awaiting_result" and state.round is None and state.latest_id == retry.id
    if not expect_round:
        return retry
    assert set(retry.params) == set(PARAMS) | {"inputResponses", "requestState"}
    assert retry.params["requestState"] == "st" and set(retry.params["inputResponses"]) == {"f", "u", "r", "s"}
    return retry


@settings(FUZZ, max_examples=120)
@given(resp=responses)
def test_any_answers(resp):
    gate, handle = _open_round()
    retry = _respond(gate, handle, retry_id=2, responses=copy.deepcopy(resp), user="alice", tenant="acme")
    if retry is not None:
        f = retry.params["inputResponses"]["f"]
        assert f["action"] in ("accept", "decline", "cancel")
        assert set(f) <= {"action", "content", "_meta"}


GOOD_ANSWERS = {"f": {"action": "accept", "content": {"n": 1}}, "u": {"action": "accept"},
                "s": {"role": "assistant", "model": "m", "content": {"type": "text", "text": "t"}}, "r": {"roots": []}}


@settings(FUZZ, max_examples=120)
@given(key=st.sampled_from(["f", "u", "s", "r"]), one=answer,
       content=st.dictionaries(st.sampled_from(["s", "n", "c", "m", "d"]), json_values, min_size=1, max_size=3)
       | json_values)
def test_any_single_answer_among_valid_ones(key, one, content):
    """One answer arbitrary (and, separately, an accepted form's content arbitrary), the rest valid."""
    gate, handle = _open_round()
    _respond(gate, handle, retry_id=2, responses={**copy.deepcopy(GOOD_ANSWERS), key: one}, user="alice",
             tenant="acme")
    gate, handle = _open_round()
    retry = _respond(gate, handle, retry_id=2, user="alice", tenant="acme",
                     responses={**copy.deepcopy(GOOD_ANSWERS), "f": {"action": "accept", "content": content}})
    if retry is not None:  # the content that went out is valid and default-filled
        sent = retry.params["inputResponses"]["f"]["content"]
        assert set(sent) >= {"s", "n"} and 0 <= sent["n"] <= 10 and "@" in sent["s"]


@FUZZ
@given(retry_id=request_ids, user=st.sampled_from(["alice", "bob"]) | json_values,
       tenant=st.sampled_from(["acme", "globex"]) | json_values,
       params=st.none() | st.just(PARAMS) | json_values)
def test_any_retry_id_identity_and_params(retry_id, user, tenant, params):
    gate, handle = _open_round()
    retry = _respond(gate, handle, retry_id=retry_id, responses=GOOD_ANSWERS, user=user, tenant=tenant, params=params)
    if retry is not None:
        assert retry.id == retry_id and user == "alice" and tenant == "acme"


@FUZZ
@given(first=responses, second=responses)
def test_after_any_rejected_answer_a_valid_one_still_goes_through_once(first, second):
    gate, handle = _open_round()
    sent = 0
    for resp in (first, second, GOOD_ANSWERS):
        sent += _respond(gate, handle, retry_id=2, responses=copy.deepcopy(resp), user="alice",
                         tenant="acme") is not None
        if sent:
            break
    assert sent == 1
    with pytest.raises(GateRejection) as info:
        gate.respond(handle, retry_id=3, responses=GOOD_ANSWERS, user="alice", tenant="acme")
    assert info.value.code == "inactive_mrtr_round"
