"""The verification cases (shared/cases/README.md format) through ``mrtrweb.gate.verify.run_file``
with the InMemoryBindingStore and the default policy: the shared file beside the checkout (or under
``$MRTR_SHARED_DIR``) and this repository's ``tests/gate_cases_extra.jsonl``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mrtrweb.gate import ALL_CODES, InMemoryBindingStore, Policy
from mrtrweb.gate.verify import run_file

HERE = Path(__file__).resolve().parents[1]
EXTRA = HERE / "gate_cases_extra.jsonl"




def shared_cases() -> Path | None:
    candidates = [Path(__file__).resolve().parents[3] / "shared" / "cases" / "gate-cases.jsonl"]
    env = os.environ.get("MRTR_SHARED_DIR")
    if env:
        candidates += [Path(env) / "cases" / "gate-cases.jsonl", Path(env) / "gate-cases.jsonl"]
    return next((p for p in candidates if p.is_file()), None)


def run(path: Path) -> tuple[int, int, list[str]]:
    lines: list[str] = []
    with path.open(encoding="utf-8") as stream:
        passed, failed = run_file(stream, InMemoryBindingStore, Policy(), lines.append)
    return passed, failed, lines


def _check(path: Path) -> None:
    cases = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    passed, failed, lines = run(path)
    assert failed == 0, "\n".join(line for line in lines if not line.startswith("PASS"))
    assert passed == len(cases) > 0
    assert lines[-1] == f"{len(cases)} passed, 0 failed"


def test_shared_cases_pass():
    path = shared_cases()
    assert path is not None, "shared/cases/gate-cases.jsonl not found beside the checkout (set MRTR_SHARED_DIR)"
    _check(path)


def test_extra_cases_pass():
    _check(EXTRA)


def test_regression_cases_pass():
    """Cases from the adversarial review: deep nesting, 5000-digit integers, 1e400, ECMA patterns,
    a catastrophic pattern, year 0000, IDN origins, same-document $ref, file:// roots."""
    _check(HERE / "gate_cases_regressions.jsonl")


def test_extra_cases_cover_every_code_and_are_well_formed():
    names, expected = set(), set()
    for line in EXTRA.read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        assert case["name"] not in names
        names.add(case["name"])
        for step in case["steps"]:
            if "receive" in step or "respond" in step:
                assert step.get("expect", "ok") in ALL_CODES + ("ok",)
                expected.add(step.get("expect", "ok"))
    assert expected == set(ALL_CODES) | {"ok"}


def test_runner_reports_a_failing_case(tmp_path):
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text(json.dumps({
        "name": "expects-the-wrong-code",
        "operation": {"id": 1, "server": "https://mcp.example.test", "user": "alice", "tenant": "acme",
                      "method": "tools/call", "params": {}},
        "steps": [{"receive": {"result": {"resultType": "input_required"}}, "expect": "ok"}],
    }) + "\nnot json\n", encoding="utf-8")
    passed, failed, lines = run(wrong)
    assert (passed, failed) == (0, 2) and lines[-1] == "0 passed, 2 failed"
    assert any("got input_required_payload_empty" in line for line in lines)
