"""The worker's collector policy (:mod:`mrtrweb.runtime.gcpolicy`): start-up objects frozen and the
thresholds set in a worker started as in production, and ``MRTRWEB["GC_*"]`` validated."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
import urllib.request
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
           "MRTRWEB_SQLITE_PATH": str(tmp_path / "db.sqlite3"), "MRTRWEB_GC_THRESHOLDS": "12345 11 77"}
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
    settings.MRTRWEB = {"GC_FREEZE": False, "GC_THRESHOLDS": None}
    state = gcpolicy.configure()
    assert state["frozen"] == 0 and gc.get_freeze_count() == 0
    assert gc.get_threshold() == (700, 10, 10)


def test_the_defaults(settings):
    settings.MRTRWEB = {}
    assert conf.get("GC_FREEZE") is True
    assert conf.get("GC_THRESHOLDS") == conf.DEFAULTS["GC_THRESHOLDS"]
    # chosen by measurement (mrtrweb.runtime.gcpolicy: the pending benchmark at 5,000 users)
    assert conf.DEFAULTS["GC_THRESHOLDS"] == (5_000, 4, 400)


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
    got = conf.from_environ({"MRTRWEB_GC_THRESHOLDS": " 10000 10  100 ", "MRTRWEB_GC_FREEZE": "0"})
    assert got == {"GC_THRESHOLDS": (10000, 10, 100), "GC_FREEZE": False}
    with pytest.raises(ImproperlyConfigured, match="MRTRWEB_GC_THRESHOLDS"):
        conf.from_environ({"MRTRWEB_GC_THRESHOLDS": "10000 ten 100"})
