"""Smoke test of the benchmark suite: every benchmark runs in its tiny mode against the real
services (private PostgreSQL database, Redis database 12 under private prefixes), writes its JSON
of the documented shape, and the report renders. No timing assertion: performance goals live in
the benchmark's report, not in tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mrtrweb.bench.common import ROOT, ROUND_PATHS, standard_round, wait_port

pytestmark = [pytest.mark.services]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench-out")
    docs = tmp_path_factory.mktemp("bench-docs")
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    proc = subprocess.run([sys.executable, "-m", "mrtrweb.bench", "--tiny", "--out", str(out), "--docs", str(docs)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, docs, proc.stdout


def _json(out: Path, name: str) -> dict:
    data = json.loads((out / f"{name}.json").read_text())
    assert "error" not in data, data.get("error")
    assert data["mode"] == "tiny"
    return data


def _latency(x: dict) -> None:
    assert {"n", "p50_ms", "p99_ms"} <= set(x)
    assert x["n"] > 0 and x["p99_ms"] >= x["p50_ms"] >= 0


def test_machine(run):
    out, _, _ = run
    m = json.loads((out / "machine.json").read_text())
    for key in ("cpu", "cores", "ram_gib", "python", "django", "mcp", "redis", "postgresql", "started"):
        assert key in m


def test_gate_core(run):
    d = _json(run[0], "gate_core")
    for key in ("inmemory", "redis"):
        assert d[key]["rounds_per_s"] > 0 and d[key]["rounds"] > 0
    assert d["memory_inmemory"]["rounds"] > 0 and "held_bytes_per_round" in d["memory_inmemory"]
    assert d["memory_inmemory_after_ttl"]["store"] == {"records": 0, "index": 0, "claims": 0}
    assert d["memory_redis"]["rounds"] > 0
    assert d["inmemory_profile"]["own"] and d["inmemory_profile"]["cumulative"]


def test_growth(run):
    d = _json(run[0], "growth")
    assert [x["fields"] for x in d["schema"]] == [1, 5, 10, 25, 50]
    assert d["state"][-1]["state_bytes"] == d["state_cap_bytes"] == 65536
    assert all(x["us_per_round"] > 0 for x in d["schema"] + d["state"])


def test_vs_sdk(run):
    d = _json(run[0], "vs_sdk")
    for key in ("a_sdk", "b_headless", "c_browser"):
        _latency(d[key]["latency"])
        assert d[key]["throughput_rounds_per_s"] > 0
    assert set(d["ratios"]) >= {"b_over_a_p50", "c_over_a_p50"}
    counts = d["mcp_server_counts"]
    assert counts["lost"] == counts["duplicated"] == counts["bad_answers"] == 0
    assert counts["answered_once"] == counts["operations"] > 0
    assert "gate.receive" in d["b_spans"]
    counts = d["headless_counts"]  # issue 16's per-round counts, as fields
    assert counts["sql_queries_per_round"] > 0 and counts["sync_to_async_hops_per_round"] > 0
    assert counts["source"] == "mrtrweb.headless.arun"
    assert counts["sql_queries_per_round"] == d["arun_spans"]["SQL (every query, incl. audit's)"]["calls"]
    assert d["goals"]["headless_over_sdk_goal"] == 3


def test_audit_append(run):
    d = _json(run[0], "audit_append")
    assert [(x["writers"], x["tenants"]) for x in d["levels"]] == [(1, 1), (8, 1), (8, 4)]
    for x in d["levels"]:
        _latency(x["latency"])
        assert x["errors"] == 0 and x["appends"] > 0 and x["appends_per_s"] > 0
        assert sum(x["threads_per_process"]) == x["writers"] and len(x["threads_per_process"]) <= 4
    assert len(d["chains"]) == 1 + 1 + 4 and d["chains_ok"]
    assert all(c["events"] == c["expected_events"] > 0 for c in d["chains"])
    assert d["statements_per_append"]["statements"] == 2  # the append, the read-back


def test_pending(run):
    d = _json(run[0], "pending")
    assert [x["pending"] for x in d["results"]] == d["sizes"]
    for x in d["results"]:
        _latency(x["push_latency_probe"])
        _latency(x["push_latency_fill"])
        assert x["redis_keys_per_pending_round"] > 0
        # the worker's collector census answered (mrtrweb.bench.worker_app) and saw the start-up freeze
        assert x["gc_frozen"] > 50_000 and all(x["gc_tracked"].values())
        assert x["gc_full_collection"]["ms"] > 0 and x["gc_live_objects_per_user"] is not None
        # every pending round's MCP session was released while it waited (a 2026-07-28 server)
        assert x["mcp_sessions_released"] >= x["pending"]
    md = d["mass_disconnect"]  # every socket closed at once at the end, without a worker error
    assert md["sockets"] == d["sizes"][-1] + 1
    assert md["worker_errors"]["asgi_exceptions"] == md["worker_errors"]["push_group_failures"] == 0


def test_scaleout(run):
    d = _json(run[0], "scaleout")
    for key in ("workers_1", "workers_2"):
        cpu = d[key]["cpu"]
        assert 0 < cpu["cores_busy"] <= cpu["cores"] + 0.1
        assert cpu["by_process_cores"]["ASGI workers"] > 0
    assert d["workers_1"]["workers"] == 1 and d["workers_2"]["workers"] == 2
    assert d["workers_1"]["errors"] == d["workers_2"]["errors"] == 0
    assert d["lost"] == 0 and d["duplicated"] == 0
    race = d["double_submit_race"]
    assert race["mcp_server_counts"]["answered_once"] == race["rounds"]


def test_loopstall(run):
    d = _json(run[0], "loopstall")
    assert set(d["cases"]) == {"listing_server_page", "listing_prompt_page", "many_blocks_result",
                               "many_requests_round"}
    for c in d["cases"].values():
        assert len(c["runs_max_gap_ms"]) == d["runs"] and c["max_gap_ms"] == max(c["runs_max_gap_ms"]) > 0
    assert d["cases"]["listing_server_page"]["outcomes"] == ["HTTP 200"]
    assert d["cases"]["many_blocks_result"]["outcomes"] == ["completed"]
    assert not d["full_sizes"] and d["goals"]["goal_ms"] == 800


def test_report(run):
    _, docs, stdout = run
    text = (docs / "README.md").read_text()
    for heading in ("## Machine", "## Goals", "## 1. Gate core", "## 2. Against the bare SDK",
                    "## 3. Pending capacity", "## 4. Scale-out", "## 5. Growth", "## 6. Audit appends",
                    "## 7. Event-loop gap under hostile input"):
        assert heading in text
    assert "_Failed" not in text and "_Not run._" not in text
    goals = text.split("## Goals", 1)[1].split("## 1.", 1)[0]
    assert "not measured" not in goals.replace("not measured at 5,000", ""), goals  # every benchmark ran
    assert "≥ 500/s" in goals and "≤ 3x" in goals
    for png in ("growth_schema.png", "growth_state.png", "vs_sdk_latency.png", "pending_push.png", "scaleout.png"):
        assert (docs / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "report:" in stdout


def test_the_standard_round_ships_with_the_package():
    """A clone anywhere can run the suite: the package carries the standard round, identical to the
    workplace's shared/bench/round.json when that is beside the checkout."""
    shared, packaged = ROUND_PATHS
    assert packaged.is_file()
    assert (ROOT / "mrtrweb" / "bench" / "round.json") == packaged
    if shared.is_file():
        assert json.loads(shared.read_text()) == json.loads(packaged.read_text()) == standard_round()
    assert standard_round()["result"]["resultType"] == "input_required"


def test_a_process_that_does_not_start_is_explained(tmp_path):
    log = tmp_path / "server.log"
    proc = subprocess.Popen([sys.executable, "-c", "import sys; print('round.json is missing'); sys.exit(3)"],
                            stdout=log.open("w"), stderr=subprocess.STDOUT)
    with pytest.raises(RuntimeError) as err:
        wait_port(1, timeout_s=20, proc=proc, log=log)
    text = str(err.value)
    assert "exited with code 3" in text and str(log) in text and "round.json is missing" in text


def test_a_process_that_starts_too_late_is_killed(tmp_path):
    """A process still starting when the wait ends is killed, not leaked into the rest of the run."""
    log = tmp_path / "server.log"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                            stdout=log.open("w"), stderr=subprocess.STDOUT)
    try:
        with pytest.raises(RuntimeError) as err:
            wait_port(1, timeout_s=1, proc=proc, log=log)
        assert "within 1 s (the process was killed)" in str(err.value)
        assert proc.poll() is not None
    finally:
        proc.kill()
