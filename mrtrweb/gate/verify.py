"""Play verification cases (``shared/cases/`` JSON Lines format) against a gate.

Framework-free: ``mrtr_verify`` (the Django command) passes the deployed store and policy.
Each case runs with its own :class:`ManualClock` (``wait_s`` advances it) and in its own
namespace in the store, and its operation is closed afterwards.
"""

from __future__ import annotations

import json
import math
import sys
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TextIO

from .clock import ManualClock
from .codes import GateRejection
from .gate import Gate
from .policy import Policy
from .store import BindingStore


def json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values: booleans are not numbers, ``1 == 1.0``, objects unordered."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b and not (isinstance(a, float) and math.isnan(a))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _parse_int(text: str) -> int:
    # JSON integers have no size limit; Python's str->int guard (4300 digits) does.
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        return int(text)
    finally:
        sys.set_int_max_str_digits(old)


def loads(text: str) -> Any:
    """``json.loads`` for any valid JSON: integers of any length, nesting as deep as the caller's
    stack allows (see :func:`run_file`, which runs with a raised recursion limit)."""
    return json.loads(text, parse_int=_parse_int)


def read_cases(lines: Iterable[str]) -> Iterator[tuple[int, dict[str, Any] | None, str | None]]:
    """Yield ``(line number, case or None, error)`` for each non-blank line."""
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            case = loads(line)
        except (ValueError, RecursionError) as exc:
            yield n, None, f"line {n} is not JSON the runner can read ({exc.__class__.__name__})"
            continue
        if not isinstance(case, dict) or not isinstance(case.get("operation"), dict) or \
                not isinstance(case.get("steps"), list):
            yield n, None, f"line {n} is not a case (needs operation and steps)"
            continue
        yield n, case, None


def run_case(case: dict[str, Any], store: BindingStore, base_policy: Policy,
             out: Callable[[str], None]) -> bool:
    """Run one case; print a line per step through ``out``; True when every step matched."""
    name = str(case.get("name", "unnamed"))
    op = case["operation"]
    ns = f"verify-{uuid.uuid4().hex[:12]}/"
    try:
        policy = base_policy.with_overrides(case.get("policy"))
    except (TypeError, ValueError) as exc:
        out(f"FAIL {name}: bad policy ({exc})")
        return False
    clock = ManualClock(start=0.0)  # integral times: exact TTL boundaries
    gate = Gate(store, policy, clock)
    try:
        handle = gate.register(
            request_id=op["id"], server_id=str(op["server"]), origin=op["server"], user=op["user"],
            tenant=ns + op["tenant"], method=op["method"], params=op.get("params", {}),
        )
    except Exception as exc:  # noqa: BLE001 -- a broken case is a failed case, never a crash
        out(f"FAIL {name}: cannot register the operation ({exc.__class__.__name__}: {exc})")
        return False
    latest = op["id"]
    ok = True
    try:
        for i, step in enumerate(case["steps"], 1):
            passed, line, latest = _run_step(gate, handle, op, ns, latest, clock, step)
            ok &= passed
            out(f"{'PASS' if passed else 'FAIL'} {name} step {i}: {line}")
    finally:
        gate.close(handle)
    return ok


def _outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except GateRejection as exc:
        return exc.code, None
    except Exception as exc:  # noqa: BLE001
        return f"error {exc.__class__.__name__}", None


def _run_step(gate: Gate, handle: Any, op: dict[str, Any], ns: str, latest: Any, clock: ManualClock,
              step: Any) -> tuple[bool, str, Any]:
    if not isinstance(step, dict):
        return False, "step is not an object", latest
    if "wait_s" in step:
        clock.advance(float(step["wait_s"]))
        return True, f"wait {step['wait_s']}s", latest
    expect = step.get("expect", "ok")
    if "receive" in step:
        spec = step["receive"] or {}
        rid = spec.get("request_id", latest)
        got, _ = _outcome(lambda: gate.receive(
            tenant=ns + op["tenant"], user=op["user"], request_id=rid,
            origin=spec.get("server", op["server"]), result=spec.get("result")))
        return got == expect, f"receive: expected {expect}, got {got}", latest
    if "respond" in step:
        spec = step["respond"] or {}
        got, retry = _outcome(lambda: gate.respond(
            handle, retry_id=spec.get("retry_id"), responses=spec.get("responses"),
            user=spec.get("user", op["user"]), tenant=ns + spec.get("tenant", op["tenant"]),
            params=spec.get("params")))
        passed = got == expect
        detail = f"respond: expected {expect}, got {got}"
        if retry is not None:
            latest = retry.id
            if "retry_params" in step and not json_equal(retry.params, step["retry_params"]):
                passed = False
                detail += "; retry params differ from retry_params"
        return passed, detail, latest
    return False, "unknown step kind", latest


def run_file(stream: TextIO, store_factory: Callable[[], BindingStore], base_policy: Policy,
             out: Callable[[str], None]) -> tuple[int, int]:
    """Run every case of a JSON Lines stream. Returns ``(passed, failed)`` case counts and prints
    the closing ``N passed, M failed`` line.

    The cases run in a thread with a large stack and a raised recursion limit, so that deeply
    nested JSON in a case is read and judged instead of crashing the runner."""
    result: list[tuple[int, int]] = []
    error: list[BaseException] = []

    def target() -> None:
        old = sys.getrecursionlimit()
        sys.setrecursionlimit(max(old, 60000))
        try:
            result.append(_run_file(stream, store_factory, base_policy, out))
        except BaseException as exc:  # noqa: BLE001 -- reported below
            error.append(exc)
        finally:
            sys.setrecursionlimit(old)

    old_size = threading.stack_size()
    threading.stack_size(512 * 1024 * 1024)
    try:
        thread = threading.Thread(target=target, name="mrtr-verify")
        thread.start()
    finally:
        threading.stack_size(old_size)
    thread.join()
    if error:
        raise error[0]
    return result[0]


def _run_file(stream: TextIO, store_factory: Callable[[], BindingStore], base_policy: Policy,
              out: Callable[[str], None]) -> tuple[int, int]:
    passed = failed = 0
    for n, case, error in read_cases(stream):
        if case is None:
            failed += 1
            out(f"FAIL {error}")
            continue
        if run_case(case, store_factory(), base_policy, out):
            passed += 1
        else:
            failed += 1
    out(f"{passed} passed, {failed} failed")
    return passed, failed
