"""``mrtrweb.consent.argschema`` (the JSON editor's check of tool arguments) and the gate's pattern bounds,
without Django: nothing named is retrieved, every bound gives its code, local refs still work."""

from __future__ import annotations

import http.server
import threading
import time

import pytest

from mrtrweb.consent import argschema
from mrtrweb.gate import schema as gate_schema
from mrtrweb.gate.schema import ContentMismatch, SchemaRefused, check_requested_schema, compile_pattern

from .. import hostile_refs


@pytest.fixture(scope="module")
def listener():
    handle = hostile_refs.listener()
    yield handle
    handle.stop()


def code_of(schema, value) -> str:
    try:
        errors = argschema.check_arguments(schema, value)
    except argschema.SchemaUnchecked as exc:
        return exc.code
    return "errors:" + ",".join(f"{'/'.join(map(str, e.absolute_path))}:{e.validator}" for e in errors) if errors \
        else "ok"


def test_the_registry_refuses_every_uri_and_the_listener_sees_nothing(listener, tmp_path):
    local = tmp_path / "s.json"
    local.write_text('{"type": "integer"}')
    for ref in (f"{listener.url}/a.json", local.as_uri(), "urn:example:x", "https://json-schema.org/unknown",
                f"{listener.url}/a.json#/definitions/x"):
        assert code_of({"type": "object", "properties": {"x": {"$ref": ref}}}, {"x": "s"}) == "schema_ref_outside"
    assert code_of({"$id": f"{listener.url}/dir/root.json", "properties": {"x": {"$ref": "sibling.json"}}},
                   {"x": "s"}) == "schema_ref_outside"
    assert code_of({"properties": {"x": {"$dynamicRef": f"{listener.url}/d.json#n"}}}, {"x": "s"}) == \
        "schema_ref_outside"
    # an unknown dialect is 2020-12, never looked up (at the root or inside)
    assert code_of({"$schema": f"{listener.url}/dialect.json", "properties": {"x": {"type": "integer"}}},
                   {"x": "s"}) == "errors:x:type"
    assert code_of({"$defs": {"d": {"$schema": f"{listener.url}/inner.json", "type": "integer"}},
                    "properties": {"x": {"$ref": "#/$defs/d"}}}, {"x": "s"}) == "errors:x:type"
    assert listener.hits == []


def test_local_refs_anchors_and_bundled_metaschemas_resolve():
    defs = {"$defs": {"n": {"type": "integer"}}, "properties": {"x": {"$ref": "#/$defs/n"}}}
    assert code_of(defs, {"x": 1}) == "ok"
    assert code_of(defs, {"x": "s"}) == "errors:x:type"
    anchored = {"$defs": {"n": {"$anchor": "num", "type": "integer"}}, "properties": {"x": {"$ref": "#num"}}}
    assert code_of(anchored, {"x": "s"}) == "errors:x:type"
    own_id = {"$id": "https://tool.example/s.json", "$defs": {"n": {"type": "integer"}},
              "properties": {"x": {"$ref": "https://tool.example/s.json#/$defs/n"}}}
    assert code_of(own_id, {"x": "s"}) == "errors:x:type"
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", "definitions": {"n": {"type": "integer"}},
              "properties": {"x": {"$ref": "#/definitions/n"}, "self": {"$ref": "#"}}}
    assert code_of(draft7, {"x": 1, "self": {"x": "s"}}) == "errors:self/x:type"
    meta = {"properties": {"x": {"$ref": "https://json-schema.org/draft/2020-12/schema"}}}
    assert code_of(meta, {"x": {"type": "string"}}) == "ok"
    assert code_of(meta, {"x": {"type": 5}}).startswith("errors:x")


def test_an_invalid_schema_is_left_to_the_server():
    assert code_of({"type": "object", "required": True}, {}) == "ok"  # draft-3 style: not 2020-12
    assert code_of({"properties": {"x": {"type": "strin"}}}, {"x": 1}) == "ok"
    assert code_of("not a schema", {}) == "ok"


@pytest.mark.parametrize("dialect", [5, ["https://json-schema.org/draft/2020-12/schema"], {"a": 1}, None, True])
def test_a_dialect_that_is_not_a_string_is_no_dialect(dialect):
    """A ``$schema`` that is no string (a hostile server's) is checked as 2020-12, never an
    exception (it was an AttributeError: jsonschema parses ``$schema`` as a URI, so a 500 on the tool page)."""
    schema = {"$schema": dialect, "type": "object", "properties": {"a": {"type": "integer"}}}
    assert [e.validator for e in argschema.check_arguments(schema, {"a": "x"})] == ["type"]
    assert argschema.check_arguments(schema, {"a": 1}) == []


def test_a_large_schema_is_checked_within_the_deadline():
    """No metaschema pass (jsonschema's check_schema runs unbounded: 1.8 s for 20,000 nodes)."""
    props = {f"p{i}": {"type": "string", "pattern": "^a", "minLength": 1, "description": "d"} for i in range(9000)}
    started = time.monotonic()
    outcome = code_of({"type": "object", "properties": props}, {f"p{i}": "a" for i in range(9000)})
    assert outcome in ("ok", "check_timeout") and time.monotonic() - started < 3 * argschema.CHECK_TIMEOUT_S + 1


def test_patterns_are_ecma_and_bounded(monkeypatch):
    assert code_of({"properties": {"x": {"pattern": "^\\d+$"}}}, {"x": "12"}) == "ok"
    assert code_of({"properties": {"x": {"pattern": "^\\d+$"}}}, {"x": "12\n"}) == "errors:x:pattern"  # $ is the end
    assert code_of({"patternProperties": {"^a": {"type": "integer"}}, "additionalProperties": False},
                   {"ab": 1, "b": 2}) == "errors::additionalProperties"
    assert code_of({"patternProperties": {"^a": {"type": "integer"}}}, {"ab": "s"}) == "errors:ab:type"
    assert code_of({"properties": {"x": {"pattern": "(unclosed"}}}, {}) == "schema_pattern_invalid"
    assert code_of({"properties": {"x": {"pattern": "[a-z]{4294967294}"}}}, {}) == "schema_pattern_invalid"
    # The bound is the mechanism, not a wall clock (a loaded machine is slow to start the thread and
    # to notice the timeout): the search is given what is left of the check's budget as its timeout,
    # and it is that timeout which ends it (Python re would never end here).
    searches: list[tuple[float, str]] = []  # (the timeout given, how the search ended)

    class Spied:
        def __init__(self, compiled):
            self.compiled = compiled

        def search(self, value, *args, timeout=None, **kwargs):
            try:
                found = self.compiled.search(value, *args, timeout=timeout, **kwargs)
            except TimeoutError:
                searches.append((timeout, "timeout"))
                raise
            searches.append((timeout, "ended"))
            return found

    compile_pattern_ = argschema.compile_pattern
    monkeypatch.setattr(argschema, "compile_pattern", lambda *a, **k: Spied(compile_pattern_(*a, **k)))
    slow = {"properties": {"x": {"pattern": hostile_refs.SLOW_PATTERN}}}
    assert code_of(slow, {"x": hostile_refs.SLOW_VALUE}) == "check_timeout"
    assert len(searches) == 1 and searches[0][1] == "timeout", searches
    assert searches[0][0] is not None and 0 < searches[0][0] <= argschema.CHECK_TIMEOUT_S, searches
    assert code_of(slow, {"x": "aaaa"}) == "ok"


def test_a_slow_pattern_does_not_hold_the_gil():
    """Matching runs with the GIL released: another thread keeps running during a slow match."""
    ticks: list[float] = []
    stop = threading.Event()

    def beat() -> None:
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.01)

    thread = threading.Thread(target=beat)
    thread.start()
    try:
        assert not gate_schema.pattern_matches(hostile_refs.SLOW_PATTERN, hostile_refs.SLOW_VALUE, 0.5)
    finally:
        stop.set()
        thread.join()
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    assert gaps and max(gaps) < 0.3, max(gaps)


def _deep(levels: int) -> dict:
    node: dict = {"type": "string"}
    for _ in range(levels):
        node = {"type": "object", "properties": {"a": node}}
    return node


def test_depth_size_and_time_bounds_have_codes():
    assert code_of(_deep(20), {}) == "ok"
    assert code_of(_deep(5000), {}) == "schema_too_deep"  # surveyed without recursion: no RecursionError
    assert code_of({"properties": {"x": {"enum": list(range(100_000))}}}, {"x": 1}) == "schema_too_large"
    exponential = {"properties": {"x": {"$ref": "#/$defs/n"}},
                   "$defs": {"n": {"oneOf": [{"items": {"$ref": "#/$defs/n"}}, {"items": {"$ref": "#/$defs/n"}}]}}}
    nested: list = []
    for _ in range(40):
        nested = [nested]
    assert code_of(exponential, {"x": nested}) == "check_timeout"
    assert code_of({"properties": {"x": {"$ref": "#/$defs/t"}}, "$defs": {"t": {"items": {"$ref": "#/$defs/t"}}}},
                   {"x": nested}) == "ok"
    cyclic = {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "properties": {"x": {"$ref": "#/$defs/a"}}}
    assert code_of(cyclic, {"x": 1}) == "schema_too_deep"
    assert code_of({"$defs": {"d": {"$schema": "http://json-schema.org/draft-07/schema#"}}}, {}) == \
        "schema_dialect_nested"
    assert code_of({"patternProperties": {"^a": {}}, "unevaluatedProperties": False}, {}) == "schema_unsupported"
    assert argschema.arguments_too_deep({"a": [[[[]]]]}) is False
    too_deep: list = []
    for _ in range(argschema.MAX_ARGUMENT_DEPTH + 1):
        too_deep = [too_deep]
    assert argschema.arguments_too_deep({"a": too_deep}) is True


def test_unique_items_is_linear_with_json_equality():
    schema = {"properties": {"x": {"type": "array", "uniqueItems": True}}}
    many = [{"n": i, "tags": [str(i)]} for i in range(20_000)]
    started = time.monotonic()
    assert code_of(schema, {"x": many}) == "ok"  # jsonschema's pairwise comparison: minutes
    assert time.monotonic() - started < 10
    assert code_of(schema, {"x": many + [{"tags": ["7"], "n": 7.0}]}) == "errors:x:uniqueItems"
    assert code_of(schema, {"x": [1, True]}) == "ok" and code_of(schema, {"x": [1, 1.0]}) == "errors:x:uniqueItems"


@pytest.mark.parametrize("pattern", ["[a-z]{4294967294}", "(?:a{1000}){1000}", "a{60000}" * 4, "x{99999999999}",
                                     "(?:(?:a{100}){100}){100}"])
def test_the_gate_refuses_patterns_that_expand_too_much(pattern):
    with pytest.raises(SchemaRefused, match="repeats too much"):
        compile_pattern(pattern)
    with pytest.raises(SchemaRefused):
        check_requested_schema({"type": "object", "properties": {"x": {"type": "string", "pattern": pattern}}})


def test_the_patterns_of_one_schema_are_bounded_together():
    """Properties each with a pattern within the single bound compile for a long time together:
    refused in one pass instead of compiled (in the event loop, for a tool page)."""
    heavy = {"type": "object", "properties": {
        f"f{i}": {"type": "string", "pattern": f"^[a-z]{{{60_000 + i}}}$"} for i in range(4)}}
    started = time.monotonic()
    with pytest.raises(SchemaRefused, match="repeat too much together"):
        check_requested_schema(heavy)
    assert time.monotonic() - started < 2
    long = {"type": "object", "properties": {f"f{i}": {"type": "string", "pattern": "a" * 9000 + str(i)}
                                             for i in range(12)}}
    with pytest.raises(SchemaRefused, match="too long together"):
        check_requested_schema(long)
    fine = {"type": "object", "properties": {f"f{i}": {"type": "string", "pattern": f"^[a-z]{{1,{i + 1}}}$"}
                                             for i in range(200)}}
    assert len(check_requested_schema(fine).fields) == 200


def test_huge_enums_and_many_patterns_are_refused_in_one_pass():
    enums = {"type": "object", "properties": {
        f"f{i}": {"type": "string", "enum": [f"v{j}" for j in range(1000)]} for i in range(4096)}}
    titled = {"type": "object", "properties": {
        f"f{i}": {"type": "array", "items": {"anyOf": [{"const": f"v{j}", "title": "t"} for j in range(1000)]}}
        for i in range(4096)}}
    patterns = {"type": "object", "properties": {
        f"f{i}": {"type": "string", "pattern": f"^(?:[a-z]{{10}}|x{i})$"} for i in range(4096)}}
    for schema, message in ((enums, "options in all"), (titled, "options in all"), (patterns, "patterns")):
        started = time.monotonic()
        with pytest.raises(SchemaRefused, match=message):
            check_requested_schema(schema)
        assert time.monotonic() - started < 3  # 19 s for the enums before the bound
    at_bound = {"type": "object", "properties": {
        f"f{i}": {"type": "string", "enum": [f"v{j}" for j in range(1000)]} for i in range(10)}}
    assert len(check_requested_schema(at_bound).fields) == 10


@pytest.mark.parametrize("pattern, weight", [("abc", 3), ("^\\d{3}-\\d{4}$", 10), ("(a|b){3}", 9),
                                             ("[{]{5}", 5), ("\\p{L}{2}", 2), ("a{0}", 1), ("a{,5}", 5)])
def test_pattern_weight(pattern, weight):
    assert gate_schema.pattern_weight(pattern) == weight
    compile_pattern(pattern)


def test_all_pattern_checks_of_one_answer_share_one_budget():
    fields = 40
    checked = check_requested_schema({"type": "object", "properties": {
        f"f{i}": {"type": "string", "pattern": hostile_refs.SLOW_PATTERN} for i in range(fields)}})
    started = time.monotonic()
    with pytest.raises(ContentMismatch) as info:
        checked.validate({f"f{i}": hostile_refs.SLOW_VALUE for i in range(fields)})
    elapsed = time.monotonic() - started
    assert sorted(info.value.errors) == sorted(f"f{i}" for i in range(fields))
    assert elapsed < 10, elapsed  # not 40 x PATTERN_TIMEOUT_S (20 s); generous for a loaded machine
    assert checked.validate({f"f{i}": "aa" for i in range(fields)}) == {f"f{i}": "aa" for i in range(fields)}
