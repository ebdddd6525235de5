"""The worker's collector policy (:mod:`mrtrweb.runtime.gcpolicy`): start-up objects frozen, the
thresholds set and the spacer running in a worker started as in production; the spacer collecting
by the interpreter's rule when the allocation count does not, and adding nothing when it does;
``MRTRWEB["GC_*"]`` validated."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
import weakref
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from mrtrweb import conf
from mrtrweb.runtime import gcpolicy

ROOT = Path(__file__).resolve().parents[2]


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.status, resp.read()


def test_a_worker_started_as_in_production_has_frozen_its_start_up_and_set_its_thresholds(tmp_path):
    from mrtrweb.bench.machine import free_port

    port = free_port()  # a port of this test process's own range
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "mrtrweb.site.settings",
           "MRTRWEB_SQLITE_PATH": str(tmp_path / "db.sqlite3"), "MRTRWEB_GC_THRESHOLDS": "12345 11 77",
           "MRTRWEB_GC_EVERY_S": "0.25"}
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "tests.gc_probe_app:application", "--host", "127.0.0.1",
                             "--port", str(port), "--lifespan", "on"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                status, body = _get(f"http://127.0.0.1:{port}/__gc__")
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.2)
        assert status == 200
        state = json.loads(body)
        # Django, the app, the SDK: ~10^5 objects no collection walks again
        assert state["frozen"] > 50_000, state
        assert state["thresholds"] == [12345, 11, 77]
        assert state["every_s"] == 0.25 and "mrtrweb-gc-spacer" in state["threads"], state
        assert _get(f"http://127.0.0.1:{port}/healthz")[0] == 200  # the product answers as before
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=20)
    assert "Traceback" not in out, out[-2000:]


@pytest.fixture
def fresh_gc():
    """The collector as the interpreter starts it, restored to this process's afterwards."""
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    gcpolicy.reset()
    yield
    gcpolicy.reset()
    gc.set_threshold(*before)
    if frozen:
        gc.freeze()


def test_configure_freezes_once_and_sets_the_thresholds(settings, fresh_gc):
    settings.MRTRWEB = {"GC_THRESHOLDS": (20_000, 15, 50)}
    assert gc.get_freeze_count() == 0
    state = gcpolicy.configure()
    # (other threads of the suite may free frozen objects meanwhile: the count can only fall)
    assert 0 < gc.get_freeze_count() <= state["frozen"] and state["configured"]
    assert gc.get_threshold() == (20_000, 15, 50)
    frozen = gc.get_freeze_count()
    junk = [[i] for i in range(1000)]  # made after start-up: never frozen by a second call
    # (the count may only fall: frozen objects freed by their reference count leave it)
    assert gcpolicy.configure()["frozen"] <= frozen
    young = {id(o) for o in gc.get_objects()}  # the collector's generations, not the permanent one
    assert id(junk) in young and all(id(item) in young for item in junk)
    del junk


def test_freeze_off_and_thresholds_none_leave_the_collector_alone(settings, fresh_gc):
    settings.MRTRWEB = {"GC_FREEZE": False, "GC_THRESHOLDS": None, "GC_EVERY_S": None}
    state = gcpolicy.configure()
    assert state["frozen"] == 0 and gc.get_freeze_count() == 0
    assert gc.get_threshold() == (700, 10, 10)
    assert state["every_s"] is None and "mrtrweb-gc-spacer" not in {t.name for t in threading.enumerate()}


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def _young_collections() -> int:
    return int(gc.get_stats()[0]["collections"])


def test_the_spacer_collects_what_the_allocation_count_never_would(settings, fresh_gc):
    """Thresholds the allocation count never reaches here: the spacer alone collects -- a cycle
    made after start-up is freed within about ``GC_EVERY_S`` -- by the interpreter's rule: the
    young generation, generation 1 after more young collections than its threshold, no full
    collection before its count is due."""
    settings.MRTRWEB = {"GC_FREEZE": False, "GC_THRESHOLDS": (10**9, 2, 10**6), "GC_EVERY_S": 0.1}
    state = gcpolicy.configure()
    assert state["every_s"] == 0.1 and "mrtrweb-gc-spacer" in {t.name for t in threading.enumerate()}
    young, full = _young_collections(), int(gc.get_stats()[2]["collections"])
    ref = weakref.ref(_Cycle())  # garbage only a collection frees
    deadline = time.monotonic() + 10
    while ref() is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ref() is None
    time.sleep(1.0)  # 1 s at 0.1 s: young collections, every third one of generation 1
    assert _young_collections() - young >= 4
    assert int(gc.get_stats()[1]["collections"]) >= 1 and int(gc.get_stats()[2]["collections"]) == full
    gcpolicy.reset()  # stops it: no collection from it after
    assert gcpolicy.state()["every_s"] is None
    assert "mrtrweb-gc-spacer" not in {t.name for t in threading.enumerate()}


def test_the_spacer_never_makes_a_full_collection_itself(settings, fresh_gc):
    """Past the third threshold the spacer still collects generation 1 at most: the full
    collection stays the interpreter's (its count *and* its quarter rule), so an idle worker gets
    no full pause from the spacer. Its generation-1 collections count towards the interpreter's."""
    settings.MRTRWEB = {"GC_FREEZE": False, "GC_THRESHOLDS": (10**9, 1, 2), "GC_EVERY_S": 0.05}
    middle, full = int(gc.get_stats()[1]["collections"]), int(gc.get_stats()[2]["collections"])
    gcpolicy.configure()
    deadline = time.monotonic() + 10  # 2 young, then generation 1; 4 of those pass the third threshold
    while int(gc.get_stats()[1]["collections"]) - middle < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert int(gc.get_stats()[1]["collections"]) - middle >= 5
    assert gc.get_count()[2] > 2  # the interpreter's count is over its threshold ...
    assert int(gc.get_stats()[2]["collections"]) == full  # ... and no full collection came from the spacer


def test_the_spacer_adds_nothing_while_the_interpreter_collects_often(settings, fresh_gc):
    """Collections the allocation count brings reset its clock: a busy worker gets none extra."""
    settings.MRTRWEB = {"GC_FREEZE": False, "GC_THRESHOLDS": (10**9, 4, 10**6), "GC_EVERY_S": 0.4}
    gcpolicy.configure()
    before = _young_collections()
    deadline = time.monotonic() + 2.0
    ours = 0
    while time.monotonic() < deadline:
        gc.collect(0)  # the interpreter's own, every 0.1 s
        ours += 1
        time.sleep(0.1)
    assert _young_collections() - before == ours


def test_the_defaults(settings):
    settings.MRTRWEB = {}
    assert conf.get("GC_FREEZE") is True
    assert conf.get("GC_THRESHOLDS") == conf.DEFAULTS["GC_THRESHOLDS"]
    # chosen by measurement (mrtrweb.runtime.gcpolicy: the pending benchmark at 5,000 users)
    assert conf.DEFAULTS["GC_THRESHOLDS"] == (5_000, 4, 1000)
    assert conf.get("GC_EVERY_S") == conf.DEFAULTS["GC_EVERY_S"] == 0.25


@pytest.mark.parametrize("value", [0, -1, "0.5", True, float("nan"), float("inf"),
                                   1e-9, 0.001, 1e11])  # a spinning thread; past threading.TIMEOUT_MAX
def test_a_bad_spacing_is_refused_before_anything_changes(settings, fresh_gc, value):
    settings.MRTRWEB = {"GC_EVERY_S": value}
    with pytest.raises(ImproperlyConfigured, match="GC_EVERY_S"):
        gcpolicy.configure()
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == (700, 10, 10)
    assert "mrtrweb-gc-spacer" not in {t.name for t in threading.enumerate()}


@pytest.mark.parametrize("value", [(0, 10, 10), (700, 10), (700, 10, 10, 10), "700 10 10", (700.0, 10, 10),
                                   (True, 10, 10), (700, -1, 10), 700])
def test_bad_thresholds_are_refused_clearly(settings, fresh_gc, value):
    settings.MRTRWEB = {"GC_THRESHOLDS": value}
    with pytest.raises(ImproperlyConfigured, match="GC_THRESHOLDS"):
        conf.get("GC_THRESHOLDS")
    with pytest.raises(ImproperlyConfigured, match="GC_THRESHOLDS"):
        gcpolicy.configure()
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == (700, 10, 10)  # nothing was changed


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_a_non_boolean_freeze_is_refused(settings, value):
    settings.MRTRWEB = {"GC_FREEZE": value}
    with pytest.raises(ImproperlyConfigured, match="GC_FREEZE"):
        conf.get("GC_FREEZE")


def test_the_environment_variables():
    got = conf.from_environ({"MRTRWEB_GC_THRESHOLDS": " 10000 10  100 ", "MRTRWEB_GC_FREEZE": "0",
                             "MRTRWEB_GC_EVERY_S": "0.25"})
    assert got == {"GC_THRESHOLDS": (10000, 10, 100), "GC_FREEZE": False, "GC_EVERY_S": 0.25}
    with pytest.raises(ImproperlyConfigured, match="MRTRWEB_GC_THRESHOLDS"):
        conf.from_environ({"MRTRWEB_GC_THRESHOLDS": "10000 ten 100"})


def test_the_spacer_can_be_turned_off_from_the_environment():
    assert conf.from_environ({"MRTRWEB_GC_EVERY_S": "none"}) == {"GC_EVERY_S": None}
    assert conf.from_environ({"MRTRWEB_GC_EVERY_S": " Off "}) == {"GC_EVERY_S": None}
    with pytest.raises(ImproperlyConfigured, match="MRTRWEB_GC_EVERY_S"):
        conf.from_environ({"MRTRWEB_GC_EVERY_S": "never"})


def test_the_spacer_respects_automatic_collection_turned_off_by_a_zero_threshold(settings, fresh_gc):
    """``gc.set_threshold(0)`` turns automatic collection off (Python's documentation): the spacer
    collects nothing then, as with :func:`gc.disable`."""
    settings.MRTRWEB = {"GC_FREEZE": False, "GC_THRESHOLDS": None, "GC_EVERY_S": 0.05}
    gc.set_threshold(0)
    gcpolicy.configure()
    assert gcpolicy.state()["every_s"] == 0.05
    before = gcpolicy._collections()
    time.sleep(0.5)
    assert gcpolicy._collections() == before


def test_reset_stops_the_spacer_and_a_second_configure_starts_none(settings, fresh_gc):
    settings.MRTRWEB = {"GC_FREEZE": False, "GC_EVERY_S": 0.05}
    gcpolicy.configure()
    gcpolicy.configure()
    assert [t.name for t in threading.enumerate()].count("mrtrweb-gc-spacer") == 1
    gcpolicy.reset()
    assert "mrtrweb-gc-spacer" not in {t.name for t in threading.enumerate()}
    assert gcpolicy.state()["every_s"] is None
