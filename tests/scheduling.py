"""How the suite is spread over pytest-xdist workers, and what each test cost (issue 25).

A pytest plugin (``tests/conftest.py`` loads it):

* **Order.** Test files go to the workers whole (``--dist loadfile``: a file's module-scoped peers
  -- a demo server, a topology, Chromium -- start once) and longest first, so that no long file
  starts last and holds the run open. The weights are the seconds each file took in a measured
  run, :data:`WEIGHTS_FILE` (``tests/durations.json``); a file missing there (a new one) weighs
  :data:`NEW_FILE_S`. Tests keep their order inside a file. The order is the same in every worker
  (pytest-xdist refuses collections that differ), so it depends only on that file and the ids.
* **Costs.** Every test's setup + call + teardown seconds, and the CPU seconds its process and the
  children it reaped used meanwhile (``os.times()``: a module's peers count where they start and
  stop; the machine's PostgreSQL and Redis not at all), are written, once per pytest run (by
  the xdist controller, which sees every worker's reports), to ``var/test-times/<run>.json``
  (``MRTRWEB_TEST_RUN`` names the run, default ``pytest``);
  ``tests/run_suite.py`` reads them back for the slowest tests and files and the budget, and
  ``./dev test --update-durations`` turns them into a new ``tests/durations.json``.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WEIGHTS_FILE = ROOT / "tests" / "durations.json"
TIMES_DIR = ROOT / "var" / "test-times"
#: seconds assumed for a test file that has no measured weight yet
NEW_FILE_S = 30.0
_CPU_AT_START = pytest.StashKey[float]()


def _cpu_now() -> float:
    """CPU seconds of this process and of the children it has reaped, user + system."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def file_of(nodeid: str) -> str:
    """``tests/gate/test_x.py::test_y[p]`` -> ``tests/gate/test_x.py``."""
    return nodeid.split("::", 1)[0]


def load_weights(path: Path = WEIGHTS_FILE) -> dict[str, float]:
    """``{file: seconds}`` of :data:`WEIGHTS_FILE` (empty if it is missing or unreadable)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.get("files", {}).items()}


def order_by_weight(items: list[pytest.Item], weights: dict[str, float]) -> list[pytest.Item]:
    """The items grouped by file, heaviest file first (ties by name); inside a file, as collected."""
    by_file: dict[str, list[pytest.Item]] = defaultdict(list)
    for item in items:
        by_file[file_of(item.nodeid)].append(item)
    files = sorted(by_file, key=lambda f: (-weights.get(f, NEW_FILE_S), f))
    return [item for f in files for item in by_file[f]]


class CostRecorder:
    """Adds up each test's phases and writes them when the test process ends."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = {}
        self.outcome: dict[str, str] = {}

    @pytest.hookimpl(trylast=True)  # after pytest-django's sort, whose order stays inside each file
    def pytest_collection_modifyitems(self, session, config, items) -> None:
        if config.getoption("--order-by-weight"):
            items[:] = order_by_weight(items, load_weights())

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item) -> None:
        item.stash[_CPU_AT_START] = _cpu_now()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        if call.when == "teardown" and _CPU_AT_START in item.stash:
            outcome.get_result().user_properties.append(("cpu_s", round(_cpu_now() - item.stash[_CPU_AT_START], 3)))

    def pytest_runtest_logreport(self, report) -> None:
        self.seconds[report.nodeid] += report.duration
        for key, value in report.user_properties:
            if key == "cpu_s":
                self.cpu[report.nodeid] = float(value)
        if report.failed or report.when == "call" or report.skipped:
            if report.failed or report.nodeid not in self.outcome or self.outcome[report.nodeid] == "passed":
                self.outcome[report.nodeid] = report.outcome

    def pytest_sessionfinish(self, session) -> None:
        # the pytest-xdist controller receives every worker's reports: it writes the one file (a
        # worker writes none); a run without xdist writes its own
        if hasattr(session.config, "workerinput") or not self.seconds:
            return
        run = os.environ.get("MRTRWEB_TEST_RUN", "pytest")
        TIMES_DIR.mkdir(parents=True, exist_ok=True)
        (TIMES_DIR / f"{run}.json").write_text(json.dumps(
            {"tests": {k: round(v, 3) for k, v in self.seconds.items()}, "cpu": self.cpu, "outcomes": self.outcome},
            indent=0, sort_keys=True))


def pytest_addoption(parser) -> None:
    parser.addoption("--order-by-weight", action="store_true", default=False,
                     help="run test files longest first, by tests/durations.json (./dev test sets it)")


def pytest_configure(config) -> None:
    config.pluginmanager.register(CostRecorder(), "mrtrweb-cost-recorder")
