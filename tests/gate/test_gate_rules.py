"""The rows of the MRTR gate contract (shared/docs/mrtr-gate.md §1 and §2), one by one and in order.

Every rejection code is shown by a minimal input that fails that row only; the order between rows
is shown by inputs failing two rows; per-entry rows of §1 run entry by entry in sorted key order,
the per-answer rows of §2 row by row (see the report: the contract says "the same ordering rule
applies: rows top to bottom"). A rejected step changes nothing. These tests use the framework-free
gate only (no Django).
"""

from __future__ import annotations

import copy
import itertools
import threading
import time

import pytest

from mrtrweb.gate import (
    ACCEPT_CODES,
    RETRY_CODES,
    Gate,
    GateRejection,
    InMemoryBindingStore,
    ManualClock,
    Policy,
    Retry,
    Round,
)

ORIGIN = "https://mcp.example.test"
PARAMS = {"name": "deploy", "arguments": {"env": "prod", "replicas": 3}}
T0 = 1_000_000.0
BOOL_SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean", "title": "OK"}}, "required": ["ok"]}
CMR = {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m-1", "stopReason": "endTurn"}
ROOTS_OK = {"roots": [{"uri": "file:///home/alice/project", "name": "project"}]}
LATEST = object()
FRESH = object()
_ids = itertools.count(1000)




def form(schema=BOOL_SCHEMA, **params):
    return {"method": "elicitation/create", "params": {"message": "m", "requestedSchema": schema, **params}}


def url_req(url="https://auth.example.test/connect?x=1"):
    return {"method": "elicitation/create", "params": {"mode": "url", "message": "Sign in", "url": url}}


SAMPLING = {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}}
ROOTS = {"method": "roots/list", "params": {}}
ALLOW_ALL = Policy(allow_deprecated={"sampling/createMessage", "roots/list"})


def ir(requests=None, state=None, **extra):
    """An ``input_required`` result."""
    result = {"resultType": "input_required", **extra}
    if requests is not None:
        result["inputRequests"] = requests
    if state is not None:
        result["requestState"] = state
    return result


def code(fn, *args, **kwargs):
    """``"ok"`` or the rejection code (any other exception propagates and fails the test)."""
    try:
        fn(*args, **kwargs)
    except GateRejection as exc:
        return exc.code
    return "ok"


def rejection(fn, *args, **kwargs) -> GateRejection:
    with pytest.raises(GateRejection) as info:
        fn(*args, **kwargs)
    return info.value


class Op:
    """One registered operation on its own gate (ManualClock, InMemoryBindingStore)."""

    def __init__(self, *, policy=None, method="tools/call", request_id=1, user="alice", tenant="acme",
                 params=PARAMS, gate=None):
        self.gate = gate or Gate(InMemoryBindingStore(), policy or Policy(), ManualClock(T0))
        self.user, self.tenant = user, tenant
        self.params = copy.deepcopy(params)
        self.handle = self.gate.register(request_id=request_id, server_id="srv-1", origin=ORIGIN, user=user,
                                         tenant=tenant, method=method, params=copy.deepcopy(params))
        self.latest = request_id

    @property
    def clock(self) -> ManualClock:
        return self.gate.clock  # type: ignore[return-value]

    def receive(self, result, *, request_id=LATEST, origin=ORIGIN, user=None, tenant=None) -> Round:
        return self.gate.receive(tenant=self.tenant if tenant is None else tenant,
                                 user=self.user if user is None else user,
                                 request_id=self.latest if request_id is LATEST else request_id,
                                 origin=origin, result=result)

    def respond(self, responses=None, *, retry_id=FRESH, user=None, tenant=None, params=None) -> Retry:
        retry = self.gate.respond(self.handle, retry_id=f"r-{next(_ids)}" if retry_id is FRESH else retry_id,
                                  responses=responses, user=self.user if user is None else user,
                                  tenant=self.tenant if tenant is None else tenant, params=params)
        self.latest = retry.id
        return retry

    def record(self):
        return self.gate.store.load(self.handle.tenant, self.handle.operation_id)


def valid_answers(result):
    """Answers that pass every §2 row for the requests of ``result`` (None for a state-only round)."""
    reqs = result.get("inputRequests") or {}
    if not reqs:
        return None
    out = {}
    for key, entry in reqs.items():
        if entry["method"] == "sampling/createMessage":
            out[key] = copy.deepcopy(CMR)
        elif entry["method"] == "roots/list":
            out[key] = copy.deepcopy(ROOTS_OK)
        else:
            out[key] = {"action": "decline"}
    return out


# ---------------------------------------------------------------------------------------------
# §1: every code by a minimal input
# ---------------------------------------------------------------------------------------------

GOOD = ir({"confirm": form()}, "s-1")

ACCEPT_REJECTIONS = [
    # (id, Op kwargs, receive kwargs, result, code)
    ("unknown-id", {}, {"request_id": 99}, GOOD, "no_live_request"),
    ("string-id-for-number", {}, {"request_id": "1"}, GOOD, "no_live_request"),
    ("number-id-for-string", {"request_id": "1"}, {"request_id": 1}, GOOD, "no_live_request"),
    ("bool-id", {}, {"request_id": True}, GOOD, "no_live_request"),
    ("null-id", {}, {"request_id": None}, GOOD, "no_live_request"),
    ("other-user", {}, {"user": "bob"}, GOOD, "no_live_request"),
    ("other-tenant", {}, {"tenant": "globex"}, GOOD, "no_live_request"),
    ("other-host", {}, {"origin": "https://evil.example.test"}, GOOD, "server_origin_mismatch"),
    ("http-downgrade", {}, {"origin": "http://mcp.example.test"}, GOOD, "server_origin_mismatch"),
    ("other-port", {}, {"origin": "https://mcp.example.test:8443"}, GOOD, "server_origin_mismatch"),
    ("suffix-host", {}, {"origin": "https://mcp.example.test.evil.test"}, GOOD, "server_origin_mismatch"),
    ("userinfo-origin", {}, {"origin": "https://mcp.example.test@evil.test"}, GOOD, "server_origin_mismatch"),
    ("null-origin", {}, {"origin": None}, GOOD, "server_origin_mismatch"),
    ("tools-list", {"method": "tools/list", "params": {}}, {}, GOOD, "input_required_not_allowed_for_method"),
    ("resources-list", {"method": "resources/list", "params": {}}, {}, GOOD,
     "input_required_not_allowed_for_method"),
    ("initialize", {"method": "initialize", "params": {}}, {}, GOOD, "input_required_not_allowed_for_method"),
    ("complete", {}, {}, {"resultType": "complete", "inputRequests": {"confirm": form()}},
     "invalid_result_type"),
    ("no-result-type", {}, {}, {"inputRequests": {"confirm": form()}}, "invalid_result_type"),
    ("null-result-type", {}, {}, {"resultType": None, "requestState": "s"}, "invalid_result_type"),
    ("cased-result-type", {}, {}, {"resultType": "Input_Required", "requestState": "s"}, "invalid_result_type"),
    ("list-result-type", {}, {}, {"resultType": ["input_required"], "requestState": "s"}, "invalid_result_type"),
    ("array-result", {}, {}, [GOOD], "invalid_result_type"),
    ("null-result", {}, {}, None, "invalid_result_type"),
    ("string-result", {}, {}, "input_required", "invalid_result_type"),
    ("nothing", {}, {}, ir(), "input_required_payload_empty"),
    ("empty-both", {}, {}, ir({}, ""), "input_required_payload_empty"),
    ("null-both", {}, {}, ir(None, None, inputRequests=None, requestState=None), "input_required_payload_empty"),
    ("requests-list-no-state", {}, {}, ir([form()]), "input_required_payload_empty"),
    ("empty-state-with-requests", {}, {}, ir({"confirm": form()}, ""), "invalid_requestState"),
    ("null-state-with-requests", {}, {}, ir({"confirm": form()}, None, requestState=None), "invalid_requestState"),
    ("number-state", {}, {}, ir({"confirm": form()}, 5), "invalid_requestState"),
    ("object-state", {}, {}, ir({"confirm": form()}, {"s": 1}), "invalid_requestState"),
    ("state-over-cap", {"policy": Policy(max_state_bytes=4)}, {}, ir(None, "abcde"), "invalid_requestState"),
    ("lone-surrogate-state", {}, {}, ir(None, "a\ud800b"), "invalid_requestState"),
    ("requests-list", {}, {}, ir([form()], "s"), "invalid_named_input_request"),
    ("requests-null", {}, {}, ir(None, "s", inputRequests=None), "invalid_named_input_request"),
    ("requests-string", {}, {}, ir("confirm", "s"), "invalid_named_input_request"),
    ("key-space", {}, {}, ir({"has space": form()}), "invalid_named_input_request"),
    ("key-65", {}, {}, ir({"k" * 65: form()}), "invalid_named_input_request"),
    ("key-empty", {}, {}, ir({"": form()}), "invalid_named_input_request"),
    ("key-slash", {}, {}, ir({"a/b": form()}), "invalid_named_input_request"),
    ("key-unicode", {}, {}, ir({"clé": form()}), "invalid_named_input_request"),
    ("key-newline", {}, {}, ir({"a\n": form()}), "invalid_named_input_request"),
    ("entry-null", {}, {}, ir({"confirm": None}), "invalid_named_input_request"),
    ("entry-list", {}, {}, ir({"confirm": [form()]}), "invalid_named_input_request"),
    ("method-missing", {}, {}, ir({"confirm": {"params": form()["params"]}}), "invalid_named_input_request"),
    ("method-null", {}, {}, ir({"confirm": {"method": None, "params": form()["params"]}}),
     "invalid_named_input_request"),
    ("method-number", {}, {}, ir({"confirm": {"method": 1, "params": form()["params"]}}),
     "invalid_named_input_request"),
    ("params-missing", {}, {}, ir({"confirm": {"method": "elicitation/create"}}), "invalid_named_input_request"),
    ("params-null", {}, {}, ir({"confirm": {"method": "elicitation/create", "params": None}}),
     "invalid_named_input_request"),
    ("params-list", {}, {}, ir({"confirm": {"method": "elicitation/create", "params": []}}),
     "invalid_named_input_request"),
    ("schema-missing", {}, {}, ir({"confirm": {"method": "elicitation/create", "params": {"message": "m"}}}),
     "invalid_form_requestedSchema"),
    ("schema-null", {}, {}, ir({"confirm": form(None)}), "invalid_form_requestedSchema"),
    ("schema-array", {}, {}, ir({"confirm": form({"type": "array", "items": {"type": "string"}})}),
     "invalid_form_requestedSchema"),
    ("schema-nested", {}, {}, ir({"confirm": form(
        {"type": "object", "properties": {"o": {"type": "object", "properties": {}}}})}),
     "invalid_form_requestedSchema"),
    ("schema-external-ref", {}, {}, ir({"confirm": form(
        {"type": "object", "properties": {"a": {"$ref": "https://schemas.example.test/a.json"}}})}),
     "invalid_form_requestedSchema"),
    ("schema-explicit-form-mode", {}, {}, ir({"confirm": form({"type": "string"}, mode="form")}),
     "invalid_form_requestedSchema"),
    ("url-http", {}, {}, ir({"login": url_req("http://auth.example.test/")}), "unsafe_url_elicitation"),
    ("url-null", {}, {}, ir({"login": url_req(None)}), "unsafe_url_elicitation"),
    ("url-missing", {}, {}, ir({"login": {"method": "elicitation/create", "params": {"mode": "url"}}}),
     "unsafe_url_elicitation"),
    ("mode-cased", {}, {}, ir({"k": form(mode="Form")}), "unknown_elicitation_mode"),
    ("mode-null", {}, {}, ir({"k": form(mode=None)}), "unknown_elicitation_mode"),
    ("mode-number", {}, {}, ir({"k": form(mode=1)}), "unknown_elicitation_mode"),
    ("mode-other", {}, {}, ir({"k": form(mode="oauth")}), "unknown_elicitation_mode"),
    ("sampling-default", {}, {}, ir({"s": SAMPLING}), "unapproved_deprecated_client_request"),
    ("roots-default", {}, {}, ir({"r": ROOTS}), "unapproved_deprecated_client_request"),
    ("sampling-when-only-roots", {"policy": Policy(allow_deprecated={"roots/list"})}, {}, ir({"s": SAMPLING}),
     "unapproved_deprecated_client_request"),
    ("other-method", {"policy": ALLOW_ALL}, {}, ir({"x": {"method": "tools/call", "params": {}}}),
     "unapproved_deprecated_client_request"),
    ("cased-elicitation", {}, {}, ir({"x": {"method": "Elicitation/create", "params": form()["params"]}}),
     "unapproved_deprecated_client_request"),
]


def test_every_accept_code_is_shown():
    assert {c for *_, c in ACCEPT_REJECTIONS} | {"mrtr_round_limit_exceeded"} == set(ACCEPT_CODES)


@pytest.mark.parametrize("op_kw, recv_kw, result, expected", [p[1:] for p in ACCEPT_REJECTIONS],
                         ids=[p[0] for p in ACCEPT_REJECTIONS])
def test_accept_rejection_codes_and_nothing_changes(op_kw, recv_kw, result, expected):
    op = Op(**op_kw)
    before = op.record()
    assert code(op.receive, result, **recv_kw) == expected
    assert op.record() == before  # a rejected result changes nothing
    assert op.gate.state(op.handle).status == "awaiting_result" and op.gate.state(op.handle).round is None
    # the binding is still live and unused: the right result from the right server is accepted
    if expected != "input_required_not_allowed_for_method":
        assert isinstance(op.receive(ir(None, "ok")), Round)


def test_round_limit_is_the_last_row_and_changes_nothing():
    op = Op(policy=Policy(max_rounds=1))
    op.receive(ir(None, "a"))
    op.respond()
    before = op.record()
    exc = rejection(op.receive, ir(None, "b"))
    assert exc.code == "mrtr_round_limit_exceeded"
    assert op.record() == before


def test_default_round_limit_is_ten():
    op = Op()
    for n in range(1, 11):
        assert op.receive(ir(None, f"s{n}")).number == n
        op.respond()
    assert code(op.receive, ir(None, "s11")) == "mrtr_round_limit_exceeded"


def test_valid_results_of_each_kind_are_accepted():
    for method in ("tools/call", "prompts/get", "resources/read"):
        op = Op(method=method, params={"uri": "file:///x"} if method == "resources/read" else PARAMS)
        assert isinstance(op.receive(GOOD), Round)
    op = Op(policy=ALLOW_ALL)
    rnd = op.receive(ir({"f": form(), "u": url_req(), "s": SAMPLING, "r": ROOTS}, "st"))
    assert [(k, v.kind) for k, v in rnd.requests.items()] == [("f", "form"), ("r", "roots"), ("s", "sampling"),
                                                            ("u", "url")]
    assert rnd.has_state and rnd.state_digest.startswith("sha256:") and not rnd.state_only
    assert isinstance(Op().receive(ir({}, "state")), Round)  # an empty inputRequests object beside a state
    assert Op().receive(ir({"k" * 64: form(), "A.b_c-9": form()})).number == 1  # keys at the edge of the pattern


def test_same_origin_spelled_differently_is_the_bound_origin():
    """Interpretation (see report): origins compare as RFC 6454 triples (scheme and host
    case-insensitive, default port explicit); anything else, a path or user info included, differs."""
    for origin in ("https://MCP.Example.TEST", "HTTPS://mcp.example.test", "https://mcp.example.test:443"):
        assert isinstance(Op().receive(GOOD, origin=origin), Round), origin
    for origin in ("https://mcp.example.test/", "https://mcp.example.test.", "https://mcp.example.test:80",
                   "mcp.example.test", "https://mcp.example.test#x", 443):
        assert code(Op().receive, GOOD, origin=origin) == "server_origin_mismatch", origin


# ---------------------------------------------------------------------------------------------
# §1: order between rows
# ---------------------------------------------------------------------------------------------

# Faults that live in the result itself, by row (an entry fault sits under key "a").
RESULT_FAULTS = {
    "invalid_result_type": lambda: {"resultType": "complete", "inputRequests": {"a": form()}},
    "input_required_payload_empty": lambda: ir({}),
    "invalid_requestState": lambda: ir({"a": form()}, ""),
    "invalid_named_input_request": lambda: ir({"a": None}),
    "invalid_form_requestedSchema": lambda: ir({"a": form({"type": "object", "properties": {"x": {}}})}),
    "unsafe_url_elicitation": lambda: ir({"a": url_req("javascript:alert(1)")}),
    "unknown_elicitation_mode": lambda: ir({"a": form(mode="popup")}),
    "unapproved_deprecated_client_request": lambda: ir({"a": SAMPLING}),
}
ENTRY_FAULTS = {  # one bad entry each (rows 7 to 11)
    "invalid_named_input_request": {"method": "elicitation/create", "params": None},
    "invalid_form_requestedSchema": form({"type": "object", "properties": {"x": {"type": "null"}}}),
    "unsafe_url_elicitation": url_req("https://user@auth.example.test/"),
    "unknown_elicitation_mode": form(mode="sms"),
    "unapproved_deprecated_client_request": ROOTS,
}


def _env_fault(op_kw, recv_kw, row):
    if row == "no_live_request":
        recv_kw["request_id"] = 42
    elif row == "server_origin_mismatch":
        recv_kw["origin"] = "https://evil.example.test"
    elif row == "input_required_not_allowed_for_method":
        op_kw.update(method="prompts/list", params={})


ENV_ROWS = ["no_live_request", "server_origin_mismatch", "input_required_not_allowed_for_method"]
ENV_PAIRS = [(a, b) for i, a in enumerate(ENV_ROWS) for b in ENV_ROWS[i + 1:] + list(RESULT_FAULTS)]


@pytest.mark.parametrize("first, second", ENV_PAIRS, ids=[f"{a}>{b}" for a, b in ENV_PAIRS])
def test_accept_rows_before_result_rows(first, second):
    op_kw, recv_kw = {}, {}
    _env_fault(op_kw, recv_kw, first)
    if second in ENV_ROWS:
        _env_fault(op_kw, recv_kw, second)
        result = ir({"a": form()})
    else:
        result = RESULT_FAULTS[second]()
    assert code(Op(**op_kw).receive, result, **recv_kw) == first


@pytest.mark.parametrize("second", list(RESULT_FAULTS)[1:])
def test_result_type_row_comes_before_payload_rows(second):
    result = RESULT_FAULTS[second]()
    result["resultType"] = "done"
    assert code(Op().receive, result) == "invalid_result_type"


@pytest.mark.parametrize("result", [ir(None, ""), ir(None, None, requestState=None), ir([]), ir({}, ""),
                                    ir(None, 7), ir([form()], "")],
                         ids=["empty-state", "null-state", "list-requests", "empty-both", "number-state",
                              "list-requests-empty-state"])
def test_payload_empty_comes_before_state_and_named_rows(result):
    assert code(Op().receive, result) == "input_required_payload_empty"


@pytest.mark.parametrize("second", list(ENTRY_FAULTS))
def test_state_row_comes_before_entry_rows(second):
    op = Op(policy=Policy(max_state_bytes=3))
    assert code(op.receive, ir({"a": ENTRY_FAULTS[second]}, "four")) == "invalid_requestState"


def test_inputrequests_shape_is_named_row_even_when_state_is_fine():
    assert code(Op().receive, ir([form()], "s")) == "invalid_named_input_request"


@pytest.mark.parametrize("second", [k for k in ENTRY_FAULTS if k != "invalid_named_input_request"])
def test_bad_key_comes_before_the_entry_rows_of_the_same_entry(second):
    assert code(Op().receive, ir({"bad key": ENTRY_FAULTS[second]})) == "invalid_named_input_request"


ENTRY_PAIRS = list(itertools.permutations(ENTRY_FAULTS, 2))


@pytest.mark.parametrize("first, second", ENTRY_PAIRS, ids=[f"a:{a}|b:{b}" for a, b in ENTRY_PAIRS])
def test_entry_rows_run_entry_by_entry_in_sorted_key_order(first, second):
    """Key "a" is judged completely before key "b", whatever rows their faults are on, and whatever
    the order of the keys in the JSON object."""
    for requests in ({"a": ENTRY_FAULTS[first], "b": ENTRY_FAULTS[second]},
                     {"b": ENTRY_FAULTS[second], "a": ENTRY_FAULTS[first]}):
        exc = rejection(Op().receive, ir(requests))
        assert (exc.code, exc.key) == (first, "a")


def test_key_order_is_code_point_order_and_bad_keys_take_their_place():
    exc = rejection(Op().receive, ir({"b": ROOTS, "B": form(mode="x")}))
    assert (exc.code, exc.key) == ("unknown_elicitation_mode", "B")  # "B" < "b"
    exc = rejection(Op().receive, ir({"b": form(mode="x"), "a b": form()}))
    assert exc.code == "invalid_named_input_request"  # "a b" < "b"
    exc = rejection(Op().receive, ir({"c": form(mode="x"), "a": form(), "b": url_req("data:text/html,x")}))
    assert (exc.code, exc.key) == ("unsafe_url_elicitation", "b")
    exc = rejection(Op().receive, ir({"b1": ROOTS, "b0": ROOTS, "a": form()}))
    assert (exc.code, exc.key) == ("unapproved_deprecated_client_request", "b0")


@pytest.mark.parametrize("first", list(RESULT_FAULTS))
def test_round_limit_comes_after_every_other_row(first):
    op = Op(policy=Policy(max_rounds=1))
    op.receive(ir(None, "a"))
    op.respond()
    assert code(op.receive, RESULT_FAULTS[first]()) == first


# ---------------------------------------------------------------------------------------------
# §2: every code by a minimal input
# ---------------------------------------------------------------------------------------------

TWO_FORMS = ir({"a": form(), "b": form()})
MAIL = form({"type": "object", "properties": {"mail": {"type": "string", "format": "email"}}, "required": ["mail"]})

RETRY_REJECTIONS = [
    # (id, round result, Op kwargs, respond kwargs, code)
    ("reuse-original-id", GOOD, {}, {"responses": {"confirm": {"action": "decline"}}, "retry_id": 1},
     "retry_requires_new_jsonrpc_id"),
    ("reuse-original-id-as-float", GOOD, {}, {"responses": {"confirm": {"action": "decline"}}, "retry_id": 1.0},
     "retry_requires_new_jsonrpc_id"),
    ("bool-retry-id", GOOD, {}, {"responses": {"confirm": {"action": "decline"}}, "retry_id": True},
     "retry_requires_new_jsonrpc_id"),
    ("false-retry-id", GOOD, {}, {"responses": {"confirm": {"action": "decline"}}, "retry_id": False},
     "retry_requires_new_jsonrpc_id"),
    ("null-retry-id", GOOD, {}, {"responses": {"confirm": {"action": "decline"}}, "retry_id": None},
     "retry_requires_new_jsonrpc_id"),
    ("list-retry-id", GOOD, {}, {"responses": {"confirm": {"action": "decline"}}, "retry_id": [2]},
     "retry_requires_new_jsonrpc_id"),
    ("object-retry-id", GOOD, {}, {"responses": {"confirm": {"action": "decline"}}, "retry_id": {"id": 2}},
     "retry_requires_new_jsonrpc_id"),
    ("nan-retry-id", GOOD, {}, {"responses": {"confirm": {"action": "decline"}}, "retry_id": float("nan")},
     "retry_requires_new_jsonrpc_id"),
    ("other-user", GOOD, {}, {"responses": {"confirm": {"action": "decline"}}, "user": "mallory"},
     "mrtr_identity_or_argument_mismatch"),
    ("other-tenant", GOOD, {}, {"responses": {"confirm": {"action": "decline"}}, "tenant": "globex"},
     "mrtr_identity_or_argument_mismatch"),
    ("changed-argument", GOOD, {}, {"responses": {"confirm": {"action": "decline"}},
                                    "params": {"name": "deploy", "arguments": {"env": "prod", "replicas": 300}}},
     "mrtr_identity_or_argument_mismatch"),
    ("changed-tool", GOOD, {}, {"responses": {"confirm": {"action": "decline"}},
                                "params": {"name": "destroy", "arguments": {"env": "prod", "replicas": 3}}},
     "mrtr_identity_or_argument_mismatch"),
    ("number-as-string", GOOD, {}, {"responses": {"confirm": {"action": "decline"}},
                                    "params": {"name": "deploy", "arguments": {"env": "prod", "replicas": "3"}}},
     "mrtr_identity_or_argument_mismatch"),
    ("extra-param", GOOD, {}, {"responses": {"confirm": {"action": "decline"}},
                               "params": {**PARAMS, "_meta": {"progressToken": 1}}},
     "mrtr_identity_or_argument_mismatch"),
    ("params-not-object", GOOD, {}, {"responses": {"confirm": {"action": "decline"}}, "params": []},
     "mrtr_identity_or_argument_mismatch"),
    ("missing-key", TWO_FORMS, {}, {"responses": {"a": {"action": "decline"}}}, "input_response_population_mismatch"),
    ("extra-key", GOOD, {}, {"responses": {"confirm": {"action": "decline"}, "other": {"action": "decline"}}},
     "input_response_population_mismatch"),
    ("no-responses", GOOD, {}, {"responses": None}, "input_response_population_mismatch"),
    ("list-responses", GOOD, {}, {"responses": [{"action": "decline"}]}, "input_response_population_mismatch"),
    ("answers-to-state-only", ir(None, "s"), {}, {"responses": {"confirm": {"action": "decline"}}},
     "input_response_population_mismatch"),
    ("bad-action", GOOD, {}, {"responses": {"confirm": {"action": "approve"}}}, "invalid_input_response"),
    ("cased-action", GOOD, {}, {"responses": {"confirm": {"action": "Accept", "content": {"ok": True}}}},
     "invalid_input_response"),
    ("no-action", GOOD, {}, {"responses": {"confirm": {"content": {"ok": True}}}}, "invalid_input_response"),
    ("null-action", GOOD, {}, {"responses": {"confirm": {"action": None}}}, "invalid_input_response"),
    ("list-action", GOOD, {}, {"responses": {"confirm": {"action": ["accept"]}}}, "invalid_input_response"),
    ("null-answer", GOOD, {}, {"responses": {"confirm": None}}, "invalid_input_response"),
    ("string-answer", GOOD, {}, {"responses": {"confirm": "accept"}}, "invalid_input_response"),
    ("decline-with-content", GOOD, {}, {"responses": {"confirm": {"action": "decline", "content": {"ok": True}}}},
     "non_accept_response_must_not_have_content"),
    ("cancel-with-empty-content", GOOD, {}, {"responses": {"confirm": {"action": "cancel", "content": {}}}},
     "non_accept_response_must_not_have_content"),
    ("decline-with-null-content", GOOD, {}, {"responses": {"confirm": {"action": "decline", "content": None}}},
     "non_accept_response_must_not_have_content"),
    ("wrong-type", GOOD, {}, {"responses": {"confirm": {"action": "accept", "content": {"ok": "yes"}}}},
     "input_response_schema_mismatch"),
    ("missing-required", GOOD, {}, {"responses": {"confirm": {"action": "accept", "content": {}}}},
     "input_response_schema_mismatch"),
    ("absent-content", GOOD, {}, {"responses": {"confirm": {"action": "accept"}}}, "input_response_schema_mismatch"),
    ("null-content", ir({"k": form({"type": "object", "properties": {}})}), {},
     {"responses": {"k": {"action": "accept", "content": None}}}, "input_response_schema_mismatch"),
    ("list-content", GOOD, {}, {"responses": {"confirm": {"action": "accept", "content": [True]}}},
     "input_response_schema_mismatch"),
    ("undeclared-key", GOOD, {}, {"responses": {"confirm": {"action": "accept", "content": {"ok": True, "x": 1}}}},
     "input_response_schema_mismatch"),
    ("null-field", GOOD, {}, {"responses": {"confirm": {"action": "accept", "content": {"ok": None}}}},
     "input_response_schema_mismatch"),
    ("bad-email", ir({"k": MAIL}), {}, {"responses": {"k": {"action": "accept", "content": {"mail": "ops@"}}}},
     "input_response_schema_mismatch"),
    ("url-accept-with-content", ir({"u": url_req()}), {}, {"responses": {"u": {"action": "accept", "content": {}}}},
     "url_elicitation_response_must_not_have_content"),
    ("url-accept-with-null-content", ir({"u": url_req()}), {},
     {"responses": {"u": {"action": "accept", "content": None}}}, "url_elicitation_response_must_not_have_content"),
    ("sampling-declined-with-action", ir({"s": SAMPLING}), {"policy": ALLOW_ALL},
     {"responses": {"s": {"action": "decline"}}}, "invalid_deprecated_response"),
    ("sampling-without-model", ir({"s": SAMPLING}), {"policy": ALLOW_ALL},
     {"responses": {"s": {"role": "assistant", "content": {"type": "text", "text": "x"}}}},
     "invalid_deprecated_response"),
    ("sampling-bad-role", ir({"s": SAMPLING}), {"policy": ALLOW_ALL},
     {"responses": {"s": {**CMR, "role": "system"}}}, "invalid_deprecated_response"),
    ("sampling-bad-block", ir({"s": SAMPLING}), {"policy": ALLOW_ALL},
     {"responses": {"s": {**CMR, "content": {"type": "text"}}}}, "invalid_deprecated_response"),
    ("sampling-null-stop-reason", ir({"s": SAMPLING}), {"policy": ALLOW_ALL},
     {"responses": {"s": {**CMR, "stopReason": None}}}, "invalid_deprecated_response"),
    ("sampling-null", ir({"s": SAMPLING}), {"policy": ALLOW_ALL}, {"responses": {"s": None}},
     "invalid_deprecated_response"),
    ("roots-http", ir({"r": ROOTS}), {"policy": ALLOW_ALL},
     {"responses": {"r": {"roots": [{"uri": "https://example.test/x"}]}}}, "invalid_deprecated_response"),
    ("roots-null-name", ir({"r": ROOTS}), {"policy": ALLOW_ALL},
     {"responses": {"r": {"roots": [{"uri": "file:///x", "name": None}]}}}, "invalid_deprecated_response"),
    ("roots-missing", ir({"r": ROOTS}), {"policy": ALLOW_ALL}, {"responses": {"r": {}}},
     "invalid_deprecated_response"),
    ("roots-cancelled", ir({"r": ROOTS}), {"policy": ALLOW_ALL}, {"responses": {"r": {"action": "cancel"}}},
     "invalid_deprecated_response"),
]


def test_every_retry_code_is_shown():
    assert {c for *_, c in RETRY_REJECTIONS} | {"inactive_mrtr_round"} == set(RETRY_CODES)


@pytest.mark.parametrize("result, op_kw, resp_kw, expected", [p[1:] for p in RETRY_REJECTIONS],
                         ids=[p[0] for p in RETRY_REJECTIONS])
def test_retry_rejection_codes_and_nothing_changes(result, op_kw, resp_kw, expected):
    op = Op(**op_kw)
    op.receive(result)
    resp_kw = {"retry_id": "r-2", **resp_kw}
    before = op.record()
    assert code(op.respond, **resp_kw) == expected
    assert op.record() == before  # a rejected answer changes nothing
    state = op.gate.state(op.handle)
    assert state.status == "round_open" and state.round.number == 1  # the round stays open
    # ... and the id it carried counts as unused
    new_id = resp_kw["retry_id"] if expected != "retry_requires_new_jsonrpc_id" else "r-fresh"
    retry = op.respond(valid_answers(result), retry_id=new_id)
    assert retry.id == new_id
    assert code(op.respond, valid_answers(result)) == "inactive_mrtr_round"


def test_inactive_round_before_any_result_after_answer_after_close():
    op = Op()
    assert code(op.respond, None) == "inactive_mrtr_round"  # no round yet
    op.receive(GOOD)
    op.respond({"confirm": {"action": "accept", "content": {"ok": True}}}, retry_id=2)
    assert code(op.respond, {"confirm": {"action": "accept", "content": {"ok": True}}}, retry_id=3) == \
        "inactive_mrtr_round"  # a replay of an answered round
    op2 = Op()
    op2.receive(GOOD)
    op2.gate.close(op2.handle)
    assert code(op2.respond, {"confirm": {"action": "decline"}}) == "inactive_mrtr_round"
    assert op2.gate.state(op2.handle) is None


def test_retry_id_must_differ_from_every_earlier_id_of_the_operation():
    op = Op(request_id="one")
    op.receive(ir(None, "a"))
    op.respond(retry_id=2)
    op.receive(ir(None, "b"))
    for used in ("one", 2, 2.0):
        assert code(op.respond, retry_id=used) == "retry_requires_new_jsonrpc_id"
    retry = op.respond(retry_id="2")  # "2" is not 2
    assert retry.id == "2"
    assert code(op.receive, ir(None, "c"), request_id=2) == "no_live_request"
    assert isinstance(op.receive(ir(None, "c"), request_id="2"), Round)


def test_params_digest_ignores_key_order_and_number_spelling():
    op = Op()
    op.receive(GOOD)
    held = {"arguments": {"replicas": 3.0, "env": "prod"}, "name": "deploy"}  # same JSON value
    retry = op.respond({"confirm": {"action": "decline"}}, params=held)
    # the retry is built from the binding, not from the params the caller holds
    assert retry.params == {**PARAMS, "inputResponses": {"confirm": {"action": "decline"}}, "requestState": "s-1"}
    assert type(retry.params["arguments"]["replicas"]) is int


# ---------------------------------------------------------------------------------------------
# §2: order between rows
# ---------------------------------------------------------------------------------------------

ANSWER_FAULTS = {  # row -> (request, bad answer); the request kinds are set so each fault is alone
    "invalid_input_response": (form(), {"action": "approve"}),
    "non_accept_response_must_not_have_content": (form(), {"action": "cancel", "content": {"ok": True}}),
    "input_response_schema_mismatch": (form(), {"action": "accept", "content": {"ok": 1}}),
    "url_elicitation_response_must_not_have_content": (url_req(), {"action": "accept", "content": {"x": 1}}),
    "invalid_deprecated_response": (SAMPLING, {"action": "accept"}),
}
RETRY_ENV_ROWS = ["inactive_mrtr_round", "retry_requires_new_jsonrpc_id", "mrtr_identity_or_argument_mismatch",
                  "input_response_population_mismatch"]


def _open_with(fault_rows, key_of=lambda i: "abcdefgh"[i]):
    requests, answers = {}, {}
    for i, row in enumerate(fault_rows):
        req, ans = ANSWER_FAULTS[row]
        requests[key_of(i)], answers[key_of(i)] = req, ans
    op = Op(policy=ALLOW_ALL)
    op.receive(ir(requests, "s"))
    return op, answers


RETRY_ENV_PAIRS = [(a, b) for i, a in enumerate(RETRY_ENV_ROWS) for b in RETRY_ENV_ROWS[i + 1:] + list(ANSWER_FAULTS)]


@pytest.mark.parametrize("first, second", RETRY_ENV_PAIRS, ids=[f"{a}>{b}" for a, b in RETRY_ENV_PAIRS])
def test_retry_rows_before_answer_rows(first, second):
    op, answers = _open_with([second] if second in ANSWER_FAULTS else ["input_response_schema_mismatch"])
    kw = {"retry_id": "fresh"}
    faults = {first, second}
    if "inactive_mrtr_round" in faults:
        op.clock.advance(600)  # the round expired
    if "retry_requires_new_jsonrpc_id" in faults:
        kw["retry_id"] = 1
    if "mrtr_identity_or_argument_mismatch" in faults:
        kw["user"] = "mallory"
    if "input_response_population_mismatch" in faults:
        answers["zzz"] = {"action": "decline"}
    if second not in ANSWER_FAULTS:  # make the answers otherwise valid
        answers["a"] = {"action": "decline"}
    assert code(op.respond, answers, **kw) == first


ANSWER_PAIRS = list(itertools.combinations(ANSWER_FAULTS, 2))


@pytest.mark.parametrize("first, second", ANSWER_PAIRS, ids=[f"{a}>{b}" for a, b in ANSWER_PAIRS])
def test_answer_rows_run_row_by_row_across_keys(first, second):
    """Interpretation (see report): §2 says "rows top to bottom", so the earlier row wins even
    when its answer's key sorts after the other's."""
    for keys in (("a", "b"), ("b", "a")):
        op, answers = _open_with([first, second], key_of=lambda i: keys[i])
        exc = rejection(op.respond, answers)
        assert (exc.code, exc.key) == (first, keys[0])


def test_answer_rows_within_one_answer():
    op, _ = _open_with(["invalid_input_response"])
    assert code(op.respond, {"a": {"action": "yes", "content": {"ok": 1}}}) == "invalid_input_response"
    assert code(op.respond, {"a": {"action": "decline", "content": {"ok": 1}}}) == \
        "non_accept_response_must_not_have_content"


def test_same_row_on_two_keys_names_the_first_key():
    op = Op()
    op.receive(ir({"b": form(), "a": form(), "c": form()}))
    exc = rejection(op.respond, {"c": {"action": "no"}, "b": {"action": "no"}, "a": {"action": "decline"}})
    assert (exc.code, exc.key) == ("invalid_input_response", "b")


# ---------------------------------------------------------------------------------------------
# Null is present; ids keep their JSON type; bools are not ids
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("result, expected", [
    (ir({"a": form()}, None, requestState=None), "invalid_requestState"),
    (ir(None, "s", inputRequests=None), "invalid_named_input_request"),
    (ir({"a": None}), "invalid_named_input_request"),
    (ir({"a": {"method": None, "params": {}}}), "invalid_named_input_request"),
    (ir({"a": {"method": "elicitation/create", "params": None}}), "invalid_named_input_request"),
    (ir({"a": form(None)}), "invalid_form_requestedSchema"),
    (ir({"a": form({"type": "object", "properties": None})}), "invalid_form_requestedSchema"),
    (ir({"a": form({"type": "object", "properties": {"x": None}})}), "invalid_form_requestedSchema"),
    (ir({"a": form({"type": "object", "properties": {"x": {"type": "string"}}, "required": None})}),
     "invalid_form_requestedSchema"),
    (ir({"a": form({"type": "object", "properties": {"x": {"type": "string", "format": None}}})}),
     "invalid_form_requestedSchema"),
    (ir({"a": form({"type": "object", "properties": {"x": {"type": "string", "enum": None}}})}),
     "invalid_form_requestedSchema"),
    (ir({"a": form(mode=None)}), "unknown_elicitation_mode"),
    (ir({"a": url_req(None)}), "unsafe_url_elicitation"),
    ({"resultType": None, "requestState": "s"}, "invalid_result_type"),
], ids=lambda v: None if not isinstance(v, str) else v)
def test_json_null_counts_as_present(result, expected):
    assert code(Op().receive, result) == expected


def test_null_in_answers_counts_as_present():
    op = Op()
    op.receive(ir({"f": form({"type": "object", "properties": {"x": {"type": "string", "default": "d"}}}),
                   "u": url_req()}))
    assert code(op.respond, {"f": {"action": None}, "u": {"action": "decline"}}) == "invalid_input_response"
    assert code(op.respond, {"f": {"action": "decline", "content": None}, "u": {"action": "decline"}}) == \
        "non_accept_response_must_not_have_content"
    assert code(op.respond, {"f": {"action": "accept", "content": None}, "u": {"action": "decline"}}) == \
        "input_response_schema_mismatch"
    assert code(op.respond, {"f": {"action": "accept", "content": {"x": None}}, "u": {"action": "decline"}}) == \
        "input_response_schema_mismatch"  # a null field is present: no default fills it
    assert code(op.respond, {"f": {"action": "decline"}, "u": {"action": "accept", "content": None}}) == \
        "url_elicitation_response_must_not_have_content"
    retry = op.respond({"f": {"action": "accept"}, "u": {"action": "accept"}})  # absent content counts as {}
    assert retry.params["inputResponses"] == {"f": {"action": "accept", "content": {"x": "d"}},
                                              "u": {"action": "accept"}}


@pytest.mark.parametrize("registered, answered, live", [
    (1, 1, True), (1, 1.0, True), ("1", "1", True), (1, "1", False), ("1", 1, False), (0, False, False),
    (1, True, False), ("a", "A", False), (-1, -1, True), (2**70, 2**70, True), (2**70, 2**70 + 1, False),
    (1.5, 1.5, True), ("", "", True),
])
def test_ids_are_compared_with_their_json_type(registered, answered, live):
    op = Op(request_id=registered)
    assert code(op.receive, GOOD, request_id=answered) == ("ok" if live else "no_live_request")


@pytest.mark.parametrize("bad", [True, False, None, [1], {"id": 1}, float("inf"), float("nan")])
def test_bools_and_non_scalars_are_not_ids(bad):
    with pytest.raises(ValueError):
        Gate(InMemoryBindingStore(), Policy(), ManualClock(T0)).register(
            request_id=bad, server_id="s", origin=ORIGIN, user="alice", tenant="acme", method="tools/call",
            params=PARAMS)
    op = Op()
    op.receive(ir(None, "s"))
    assert code(op.respond, retry_id=bad) == "retry_requires_new_jsonrpc_id"


# ---------------------------------------------------------------------------------------------
# requestState: byte cap (inclusive, UTF-8) and surrogates
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("state, cap, ok", [
    ("abcdef", 6, True), ("abcdefg", 6, False),
    ("ééé", 6, True), ("éééx", 6, False),          # 2-byte characters: 3 chars, 6 bytes
    ("€€", 6, True), ("€€x", 6, False),             # 3-byte characters
    ("😀", 4, True), ("😀", 3, False),              # 4 bytes, 1 code point (2 UTF-16 units)
    ("😀😀x", 8, False), ("a😀b", 6, True),
    ("\u0000", 1, True),                             # NUL is 1 byte of valid text
    ("\ud83d\ude00", 8, False),                      # a lone surrogate pair (two lone surrogates in Python)
    ("\udc00", 64, False),                           # a lone surrogate is not UTF-8 text: refused
])
def test_request_state_byte_cap(state, cap, ok):
    op = Op(policy=Policy(max_state_bytes=cap))
    assert code(op.receive, ir(None, state)) == ("ok" if ok else "invalid_requestState")
    if ok:
        assert op.respond().params["requestState"] == state  # echoed exactly


def test_request_state_is_echoed_exactly():
    state = "  opaque/+=\u00e9\u4e2d😀\n\t\"\\ "
    op = Op()
    op.receive(ir({"confirm": form()}, state))
    retry = op.respond({"confirm": {"action": "accept", "content": {"ok": False}}})
    assert retry.params["requestState"] == state
    assert retry.params["requestState"].encode("utf-8") == state.encode("utf-8")


# ---------------------------------------------------------------------------------------------
# The retry: built by the gate from the binding, once
# ---------------------------------------------------------------------------------------------

def test_retry_params_are_stripped_and_default_filled():
    stale = {**PARAMS, "inputResponses": {"old": {"action": "accept"}}, "requestState": "stale"}
    op = Op(params=stale)
    schema = {"type": "object", "properties": {
        "ok": {"type": "boolean"}, "n": {"type": "integer", "default": 3, "minimum": 1},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "default": ["a"]},
        "who": {"type": "string", "default": "ops@example.test", "format": "email"}}, "required": ["ok", "n"]}
    op.receive(ir({"k": form(schema), "u": url_req()}, "s-1"))
    retry = op.respond({"k": {"action": "accept", "content": {"ok": True, "who": "me@example.test"}},
                        "u": {"action": "cancel"}}, retry_id=7)
    assert retry.id == 7 and retry.method == "tools/call" and retry.round_number == 1
    assert retry.params == {
        **PARAMS,
        "inputResponses": {"k": {"action": "accept", "content": {"ok": True, "n": 3, "tags": ["a"],
                                                                 "who": "me@example.test"}},
                           "u": {"action": "cancel"}},
        "requestState": "s-1",
    }
    assert retry.actions == {"k": "accept", "u": "cancel"}


def test_retry_carries_only_the_answer_fields():
    op = Op()
    op.receive(GOOD)
    retry = op.respond({"confirm": {"action": "accept", "content": {"ok": True}, "note": "from the browser",
                                    "_meta": {"k": 1}}})
    assert retry.params["inputResponses"] == {"confirm": {"action": "accept", "content": {"ok": True},
                                                          "_meta": {"k": 1}}}


def test_state_only_round_is_retried_with_its_state_only_and_paced():
    op = Op()
    rnd = op.receive(ir(None, "busy"))
    assert rnd.state_only and rnd.requests == {} and rnd.backoff_s > 0
    assert op.respond(retry_id=2).params == {**PARAMS, "requestState": "busy"}
    rnd2 = op.receive(ir({}, "busy-2"))
    assert rnd2.state_only and rnd2.backoff_s >= rnd.backoff_s  # paced, never rejected
    assert op.respond({}, retry_id=3).params == {**PARAMS, "requestState": "busy-2"}
    rnd3 = op.receive(ir({"confirm": form()}))
    assert rnd3.backoff_s == 0 and not rnd3.has_state


def test_requests_only_round_sends_no_state_and_the_next_round_strips_the_last():
    op = Op()
    op.receive(ir({"confirm": form()}, "s1"))
    r1 = op.respond({"confirm": {"action": "accept", "content": {"ok": True}}}, retry_id=2)
    assert r1.params["requestState"] == "s1"
    op.receive(ir({"again": form()}))
    r2 = op.respond({"again": {"action": "decline"}}, retry_id=3)
    assert r2.params == {**PARAMS, "inputResponses": {"again": {"action": "decline"}}}
    op.receive(ir(None, "s3"))
    assert op.respond(retry_id=4).params == {**PARAMS, "requestState": "s3"}


def test_second_round_is_bound_to_the_retry_id():
    op = Op(request_id=1)
    op.receive(GOOD)
    op.respond({"confirm": {"action": "accept", "content": {"ok": True}}}, retry_id="r-2")
    assert code(op.receive, GOOD, request_id=1) == "no_live_request"  # the original id is spent
    assert code(op.receive, GOOD, request_id="r-3") == "no_live_request"
    rnd = op.receive(ir({"confirm": form()}, "s2"), request_id="r-2")
    assert rnd.number == 2 and rnd.request_id == "r-2" and rnd.handle == op.handle
    assert code(op.receive, GOOD, request_id="r-2") == "no_live_request"  # used
    assert code(op.respond, {"confirm": {"action": "decline"}}, retry_id="r-2") == "retry_requires_new_jsonrpc_id"
    assert op.respond({"confirm": {"action": "decline"}}, retry_id="r-3").round_number == 2


def test_decline_and_cancel_are_sent_as_answers():
    for action in ("decline", "cancel"):
        op = Op()
        op.receive(ir({"confirm": form()}, "s"))
        retry = op.respond({"confirm": {"action": action}})
        assert retry.params == {**PARAMS, "inputResponses": {"confirm": {"action": action}}, "requestState": "s"}


# ---------------------------------------------------------------------------------------------
# Expiry (ManualClock)
# ---------------------------------------------------------------------------------------------

def test_binding_expires_ttl_after_registration():
    op = Op(policy=Policy(ttl_s=600))
    op.clock.advance(599.999)
    assert code(op.receive, GOOD) == "ok"
    op = Op(policy=Policy(ttl_s=600))
    op.clock.advance(600)
    assert code(op.receive, GOOD) == "no_live_request"


def test_round_expires_ttl_after_its_request_not_after_the_result():
    op = Op(policy=Policy(ttl_s=600))
    op.clock.advance(500)
    rnd = op.receive(GOOD)
    assert rnd.expires_at == T0 + 600
    op.clock.advance(99)
    before = op.record()
    op.clock.advance(1)
    assert code(op.respond, {"confirm": {"action": "decline"}}) == "inactive_mrtr_round"
    assert op.record() == before


def test_binding_of_a_retry_expires_ttl_after_the_retry_was_built():
    op = Op(policy=Policy(ttl_s=600))
    op.receive(ir(None, "a"))
    op.clock.advance(550)
    op.respond(retry_id=2)
    op.clock.advance(599)  # 1149 s after registration, 599 s after the retry
    rnd = op.receive(ir({"confirm": form()}))
    assert rnd.expires_at == T0 + 550 + 600
    op.clock.advance(1)
    assert code(op.respond, {"confirm": {"action": "decline"}}) == "inactive_mrtr_round"
    op2 = Op(policy=Policy(ttl_s=600))
    op2.receive(ir(None, "a"))
    op2.clock.advance(550)
    op2.respond(retry_id=2)
    op2.clock.advance(600)
    assert code(op2.receive, ir(None, "b")) == "no_live_request"


# ---------------------------------------------------------------------------------------------
# Isolation: equal JSON-RPC ids never cross users, tenants
# ---------------------------------------------------------------------------------------------

def test_equal_ids_never_cross_users_or_tenants():
    gate = Gate(InMemoryBindingStore(), Policy(), ManualClock(T0))
    who = [("alice", "acme"), ("bob", "acme"), ("alice", "globex"), ("carol", "globex")]
    ops = {w: Op(gate=gate, request_id=1, user=w[0], tenant=w[1],
                 params={"name": "deploy", "arguments": {"owner": f"{w[0]}@{w[1]}"}}) for w in who}
    assert len({o.handle for o in ops.values()}) == 4
    for (user, tenant), op in ops.items():
        rnd = op.receive(ir({"confirm": form()}, f"state-of-{user}@{tenant}"))
        assert rnd.handle == op.handle
    for (user, tenant), op in reversed(list(ops.items())):
        # someone else cannot answer this round, even with a handle in hand
        other = next(w for w in who if w != (user, tenant))
        assert code(op.respond, {"confirm": {"action": "decline"}}, user=other[0], tenant=other[1]) == \
            "mrtr_identity_or_argument_mismatch"
        retry = op.respond({"confirm": {"action": "accept", "content": {"ok": True}}}, retry_id=2)
        assert retry.params == {"name": "deploy", "arguments": {"owner": f"{user}@{tenant}"},
                                "inputResponses": {"confirm": {"action": "accept", "content": {"ok": True}}},
                                "requestState": f"state-of-{user}@{tenant}"}
    for (user, tenant), op in ops.items():  # each second round lands in its own operation
        rnd = op.receive(ir(None, f"two-{user}@{tenant}"), request_id=2)
        assert rnd.handle == op.handle and rnd.number == 2
        assert op.respond(retry_id=3).params["requestState"] == f"two-{user}@{tenant}"


def test_a_result_for_one_user_is_not_found_for_another():
    gate = Gate(InMemoryBindingStore(), Policy(), ManualClock(T0))
    alice = Op(gate=gate, user="alice", tenant="acme")
    assert code(alice.receive, GOOD, user="bob") == "no_live_request"
    assert code(alice.receive, GOOD, tenant="globex") == "no_live_request"
    bob = Op(gate=gate, user="bob", tenant="acme")
    bob.receive(ir(None, "bob-state"))
    assert alice.gate.state(alice.handle).status == "awaiting_result"  # bob's result did not touch alice
    assert alice.receive(ir(None, "alice-state")).handle == alice.handle


# ---------------------------------------------------------------------------------------------
# Concurrency: a round is consumed once
# ---------------------------------------------------------------------------------------------

class SlowStore(InMemoryBindingStore):
    """A store whose writes take time (like a shared cache), widening every race window."""

    def save(self, *args, **kwargs):
        time.sleep(0.005)
        super().save(*args, **kwargs)


@pytest.mark.parametrize("store_cls", [InMemoryBindingStore, SlowStore])
@pytest.mark.parametrize("same_id", [False, True], ids=["distinct-ids", "same-id"])
def test_fifty_threads_answering_one_round_send_one_retry(store_cls, same_id):
    op = Op(gate=Gate(store_cls(), Policy(), ManualClock(T0)))
    op.receive(ir({"confirm": form()}, "s"))
    barrier = threading.Barrier(50)
    outcomes: list[object] = []
    lock = threading.Lock()

    def answer(i):
        barrier.wait()
        try:
            got: object = op.gate.respond(op.handle, retry_id="r" if same_id else f"r-{i}",
                                          responses={"confirm": {"action": "accept", "content": {"ok": True}}},
                                          user="alice", tenant="acme")
        except GateRejection as exc:
            got = exc.code
        with lock:
            outcomes.append(got)

    threads = [threading.Thread(target=answer, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    retries = [o for o in outcomes if isinstance(o, Retry)]
    assert len(outcomes) == 50 and len(retries) == 1
    assert sorted(o for o in outcomes if not isinstance(o, Retry)) == ["inactive_mrtr_round"] * 49
    state = op.gate.state(op.handle)
    assert state.latest_id == retries[0].id and state.status == "awaiting_result"


def test_concurrent_results_open_one_round():
    op = Op(gate=Gate(SlowStore(), Policy(), ManualClock(T0)))
    barrier = threading.Barrier(20)
    outcomes: list[str] = []

    def deliver():
        barrier.wait()
        outcomes.append(code(op.receive, ir(None, "s")))

    threads = [threading.Thread(target=deliver) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["no_live_request"] * 19 + ["ok"]


# ---------------------------------------------------------------------------------------------
# Methods and deprecated client requests
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("method", ["tools/list", "prompts/list", "resources/list", "resources/templates/list",
                                    "completion/complete", "ping", "tools/call ", "Tools/call", "sampling/createMessage"])
def test_input_required_refused_for_other_methods(method):
    op = Op(method=method, params={})  # any method can be registered
    assert code(op.receive, ir(None, "s")) == "input_required_not_allowed_for_method"


def test_sampling_and_roots_refused_by_default_accepted_when_allowed():
    assert Policy().allow_deprecated == frozenset()
    for req in (SAMPLING, ROOTS):
        assert code(Op().receive, ir({"x": req})) == "unapproved_deprecated_client_request"
    op = Op(policy=ALLOW_ALL)
    rnd = op.receive(ir({"s": SAMPLING, "r": ROOTS, "f": form()}))
    assert {k: v.kind for k, v in rnd.requests.items()} == {"f": "form", "r": "roots", "s": "sampling"}
    cmr = {"role": "assistant", "model": "m", "content": [{"type": "text", "text": "a"},
                                                           {"type": "image", "data": "AA==", "mimeType": "image/png"}]}
    retry = op.respond({"s": cmr, "r": {"roots": []}, "f": {"action": "decline"}})
    assert retry.params["inputResponses"] == {"s": cmr, "r": {"roots": []}, "f": {"action": "decline"}}
    assert retry.actions == {"f": "decline", "r": "result", "s": "result"}
    only_roots = Op(policy=Policy(allow_deprecated={"roots/list"}))
    assert isinstance(only_roots.receive(ir({"r": ROOTS})), Round)
    assert code(Op(policy=Policy(allow_deprecated={"roots/list"})).receive, ir({"s": SAMPLING})) == \
        "unapproved_deprecated_client_request"


def test_policy_refuses_unknown_deprecated_names():
    with pytest.raises(ValueError):
        Policy(allow_deprecated={"elicitation/create"})


def test_sampling_answers_with_tool_blocks_are_valid_create_message_results():
    tool_use = {"type": "tool_use", "id": "t1", "name": "lookup", "input": {"q": "x"}}
    tool_result = {"type": "tool_result", "toolUseId": "t1", "content": [{"type": "text", "text": "r"}],
                   "isError": False}
    for content in (tool_use, [{"type": "text", "text": "a"}, tool_use], [tool_result]):
        op = Op(policy=ALLOW_ALL)
        op.receive(ir({"s": SAMPLING}))
        answer = {"role": "assistant", "model": "m", "content": content, "stopReason": "toolUse"}
        assert op.respond({"s": answer}).params["inputResponses"] == {"s": answer}
    for bad in ({**tool_use, "input": "x"}, {**tool_use, "id": None}, {**tool_result, "content": "r"},
                {**tool_result, "isError": "no"}, {"type": "resource_link", "uri": "file:///x", "name": "x"}, []):
        op = Op(policy=ALLOW_ALL)
        op.receive(ir({"s": SAMPLING}))
        assert code(op.respond, {"s": {"role": "assistant", "model": "m", "content": bad}}) == \
            "invalid_deprecated_response", bad


def _deep(depth):
    value: object = "leaf"
    for i in range(depth):
        value = [value] if i % 2 else {"d": value}
    return value


@pytest.mark.parametrize("depth", [250, 600, 5000])
def test_deeply_nested_json_is_refused_not_a_crash(depth):
    """JSON parsers accept nesting far beyond Python's recursion limit; the gate must still only
    ever answer with a code (interpretation: an input request nested deeper than any legal one is
    not a usable request object, row ``invalid_named_input_request``)."""
    deep = _deep(depth)
    assert code(Op().receive, ir({"k": form(message=deep)})) == "invalid_named_input_request"
    assert isinstance(Op().receive(ir(None, "s", junk=deep)), Round)  # unread members are ignored
    op = Op(policy=ALLOW_ALL)
    op.receive(ir({"f": form({"type": "object", "properties": {"a": {"type": "string"}}}), "s": SAMPLING}))
    sampled = {"role": "assistant", "model": "m", "content": {"type": "tool_use", "id": "1", "name": "n",
                                                             "input": {"x": deep}}}
    assert code(op.respond, {"f": {"action": "accept", "content": {"a": deep}}, "s": CMR}) == \
        "input_response_schema_mismatch"
    assert code(op.respond, {"f": {"action": "decline"}, "s": sampled}) == "invalid_deprecated_response"
    assert code(op.respond, {"f": {"action": "decline"}, "s": CMR}, params={**PARAMS, "x": deep}) == \
        "mrtr_identity_or_argument_mismatch"
    retry = op.respond({"f": {"action": "decline", "_meta": {"deep": deep}}, "s": CMR})
    assert retry.params["inputResponses"]["f"] == {"action": "decline"}  # an unusable _meta is not forwarded


def test_in_memory_store_isolates_records():
    """A caller mutating the record it saved, or one it loaded, never changes what is stored
    (the gate mutates loaded records freely); shared sub-objects and tuples copy as deepcopy would."""
    from mrtrweb.gate.jsoncopy import json_copy

    store = InMemoryBindingStore()
    shared = [1, {"x": "y"}]
    record = {"a": {"b": [1, 2.5, None, True, "s"]}, "t": (shared, 3), "s1": shared, "s2": shared}
    pristine = copy.deepcopy(record)
    store.save("t", "op", record, 60)
    record["a"]["b"].append("mutated")
    shared[1]["x"] = "z"
    loaded = store.load("t", "op")
    assert loaded == pristine
    assert loaded["s1"] is loaded["s2"] and loaded["t"][0] is loaded["s1"]  # sharing kept, like deepcopy
    loaded["a"]["b"].clear()
    loaded["s1"].append("mutated")
    assert store.load("t", "op") == pristine
    cyclic: dict = {"k": []}
    cyclic["k"].append(cyclic)
    copied = json_copy(cyclic)
    assert copied is not cyclic and copied["k"][0] is copied


def test_schema_views_are_not_shared_between_rounds():
    """Each round's view carries its own checked schema: mutating one never changes another."""
    first, second = Op(), Op()
    schema = {"type": "object", "properties": {"a": {"type": "string", "default": ["x"], "enum": ["x", "y"]}}}
    r1 = first.receive(ir({"f": form(copy.deepcopy(schema))}))
    r2 = second.receive(ir({"f": form(copy.deepcopy(schema))}))
    s1, s2 = r1.requests["f"].schema, r2.requests["f"].schema
    assert s1 == s2
    s1.normalized["properties"]["a"]["enum"].append("z")
    s1.fields[0].constraints["minLength"] = 99
    assert s2.normalized["properties"]["a"]["enum"] == ["x", "y"]
    assert s2.fields[0].constraints == {}


def test_policy_round_trip_memo_keeps_types_and_isolation():
    """``as_dict``/``from_dict`` are memoized: each call still returns a new dict, and records that
    differ only in ``600`` vs ``600.0`` (or ``0.0`` vs ``-0.0``) give policies of those values."""
    policy = Policy(allow_deprecated=frozenset({"roots/list"}))
    first = policy.as_dict()
    first["allow_deprecated"].append("x")
    first["ttl_s"] = 1
    assert policy.as_dict() == {**Policy().as_dict(), "allow_deprecated": ["roots/list"]}
    for a, b in ((600, 600.0), (0.0, -0.0)):
        pa = Policy.from_dict({"ttl_s": 5, "state_only_backoff_s": a})
        pb = Policy.from_dict({"ttl_s": 5, "state_only_backoff_s": b})
        assert repr(pa.state_only_backoff_s) == repr(a) and repr(pb.state_only_backoff_s) == repr(b)
    assert Policy.from_dict(policy.as_dict()) == policy
