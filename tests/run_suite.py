"""``./dev test`` without arguments: the whole suite, every test, in about 20 minutes on two cores
(issue 25). ``./dev test ARGS`` still runs plain pytest with ARGS (one file, a marker, ...).

    python -m tests.run_suite [--workers N] [--pg-workers M] [--budget-s S] [--update-durations]

What runs, all at once:

* **peers** -- ``python -m tests.peers`` installs every third-party peer under ``var/`` in the
  background (a test needing one still being installed waits for its file lock);
* **run A** -- every test on the embedded defaults (SQLite, locmem, in-memory channel layer),
  with the browser and multi-process (``services``) tests: pytest-xdist, ``--workers`` processes
  (default 4: most tests wait on sockets, subprocesses and Chromium more than on the CPU), whole
  files longest first (``tests/scheduling.py``);
* **run B** -- the in-process web suite again on PostgreSQL, django-redis and channels-redis
  (:data:`PG_REDIS_FILES`), ``--pg-workers`` processes (default 1: it ends before run A on one, and
  two of them lost keys of their cache database under load -- not understood yet, so not used;
  each has its own database and Redis databases, ``tests/services_settings.py``). No test of either run restarts the machine's
  PostgreSQL or Redis: the fault tests cut a proxy or kill a private ``redis-server`` of their own.

Run A prints its progress; run B's output goes to ``var/test-logs/pg-redis.txt`` and its failures
and summary are printed after run A's. Then: each run's summary line and wall time, the ten
slowest tests and files (from ``var/test-times/``), the budget, and one closing line with the
totals. The exit status is non-zero if either run failed, ran no test, or the suite took longer
than the hard limit (1.5 x the budget; over the budget alone is a warning naming the slowest files).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

if not __package__:  # run as a file (python tests/run_suite.py): the checkout's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.cpu_by_program import CpuByProgram  # noqa: E402
from tests.scheduling import TIMES_DIR, WEIGHTS_FILE, file_of  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "var" / "test-logs"
#: the suite's budget on a two-core machine (seconds): past it, a warning with the slowest files;
#: past 1.5 x, a failure (CI stops at 90 minutes; the suite must stay far below)
BUDGET_S = 1200.0
#: the in-process files run again on PostgreSQL + Redis (their non-browser, non-services tests)
PG_REDIS_FILES = (
    "tests/operations/test_flow.py", "tests/live/test_consumers.py", "tests/operations/test_hostile.py",
    "tests/operations/test_limits.py", "tests/operations/test_fail_closed.py", "tests/audit/test_audit.py",
    "tests/audit/test_history.py", "tests/consent/test_review.py", "tests/mcp/test_legacy.py",
    "tests/headless/test_headless.py", "tests/headless/test_quickstart.py", "tests/audit/test_audit_concurrency.py",
    "tests/tenancy/test_access.py", "tests/text/test_names.py", "tests/text/test_results_bounded.py",
    "tests/gate/test_state_reuse.py", "tests/text/test_hostile_text.py", "tests/site/test_login_throttle.py",
    "tests/headless/test_headless_defaults.py", "tests/authz/test_authz_service.py",
    "tests/authz/test_authz_views.py", "tests/authz/test_auth_binding.py",
    "tests/authz/test_secrets_at_rest.py", "tests/bindings/test_db_store.py",
    "tests/operations/test_attack_resilience.py", "tests/operations/test_round_cost.py", "tests/prepared/test_prepared.py",
    "tests/live/test_nav_pending.py", "tests/operations/test_outcomes.py", "tests/tenancy/test_tenancy.py",
    "tests/text/test_i18n.py", "tests/audit/test_audit_once.py", "tests/audit/test_audit_once_purge.py",
    "tests/audit/test_audit_joined.py", "tests/bindings/test_db_store_joined.py", "tests/audit/test_audit_statements.py",
    "tests/operations/test_answer_binding.py", "tests/operations/test_answer_joined.py",
    "tests/views/test_web_path_counts.py", "tests/live/test_session_read.py", "tests/tenancy/test_reads.py",
)
#: pytest's closing line, with -q bare ("3 failed, 2104 passed, 3 skipped in 1280.00s (0:21:20)"), else in ====
_SUMMARY = re.compile(r"^=* ?(?P<body>(?:\d+ \w+|no tests ran)(?:, \d+ \w+)*) in [\d.]+s\b")
_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)")


def _pytest(workers: int, extra: list[str]) -> list[str]:
    argv = [sys.executable, "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider", "--durations=10",
            "--order-by-weight"]
    if workers > 1:
        argv += ["-n", str(workers), "--dist", "loadfile", "--no-loadscope-reorder"]
    return argv + extra


def _counts(summary: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for n, what in _COUNT.findall(summary):
        what = "errors" if what.startswith("error") else what
        counts[what] = counts.get(what, 0) + int(n)
    return counts


def _summary_line(text: str) -> str:
    for line in reversed(text.splitlines()):
        m = _SUMMARY.match(line.strip())
        if m:
            return line.strip().strip("=").strip()
    return ""


def _slowest(n: int = 10) -> tuple[list[tuple[float, str]], list[tuple[float, str]], list[tuple[float, str]]]:
    """The ``n`` slowest tests and files of both runs (run B's marked ``(pg-redis)``), and the ``n``
    files that used the most CPU seconds (their processes and the children they reaped)."""
    tests: dict[str, float] = {}
    files: dict[str, float] = {}
    cpu: dict[str, float] = {}
    for run, mark in (("suite-a", ""), ("suite-b", " (pg-redis)")):
        try:
            data = json.loads((TIMES_DIR / f"{run}.json").read_text())
        except (OSError, ValueError):
            continue
        for nodeid, seconds in data.get("tests", {}).items():
            tests[nodeid + mark] = seconds
            files[file_of(nodeid) + mark] = files.get(file_of(nodeid) + mark, 0.0) + seconds
        for nodeid, seconds in data.get("cpu", {}).items():
            cpu[file_of(nodeid) + mark] = cpu.get(file_of(nodeid) + mark, 0.0) + seconds
    top = lambda d: sorted(((s, k) for k, s in d.items()), reverse=True)[:n]  # noqa: E731
    return top(tests), top(files), top(cpu)


def update_durations() -> None:
    """Write ``tests/durations.json`` (seconds per file of run A) from the last ``var/test-times``."""
    data = json.loads((TIMES_DIR / "suite-a.json").read_text())
    files: dict[str, float] = {}
    for nodeid, seconds in data["tests"].items():
        files[file_of(nodeid)] = files.get(file_of(nodeid), 0.0) + seconds
    WEIGHTS_FILE.write_text(json.dumps(
        {"about": "seconds per test file in a measured ./dev test run (tests/scheduling.py orders by them); "
                  "refresh with ./dev test --update-durations after a full run",
         "files": {k: round(v, 1) for k, v in sorted(files.items())}}, indent=1) + "\n")
    print(f"wrote {WEIGHTS_FILE.relative_to(ROOT)} ({len(files)} files)")


def stuck_summary(text: str, lines_each: int = 6, most: int = 160) -> str:
    """``stuck-tasks.txt`` shortened for the end of the output: each report's heading and, of each
    task or thread in it, its name and its ``lines_each`` innermost lines; at most ``most`` lines."""
    out: list[str] = []
    block: list[str] = []

    def flush() -> None:
        if block:
            out.append(block[0])
            out.extend(block[1:][-lines_each:])
            block.clear()

    for line in text.splitlines():
        if line.startswith(("===", "--- ", "the threads of")):
            flush()
            if line.startswith(("===", "the threads of")):
                out.append(line)
                continue
        block.append(line)
    flush()
    return "\n".join(out[:most])


def _cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of every core since boot, from ``/proc/stat`` ((0, 0) where there is none)."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev test", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=int(os.environ.get("MRTRWEB_TEST_WORKERS", "4")))
    parser.add_argument("--pg-workers", type=int, default=int(os.environ.get("MRTRWEB_TEST_PG_WORKERS", "1")))
    parser.add_argument("--budget-s", type=float, default=float(os.environ.get("MRTRWEB_TEST_BUDGET_S", BUDGET_S)))
    parser.add_argument("--update-durations", action="store_true",
                        help="only rewrite tests/durations.json from the last run's var/test-times/suite-a.json")
    args = parser.parse_args(argv)
    if args.update_durations:
        update_durations()
        return 0
    if not 1 <= args.pg_workers <= 4:
        parser.error("--pg-workers: 1 to 4 (tests/services_settings.py has Redis databases for 4)")
    LOGS.mkdir(parents=True, exist_ok=True)
    for old in TIMES_DIR.glob("suite-*.json"):
        old.unlink()
    (LOGS / "stuck-tasks.txt").unlink(missing_ok=True)  # tests/loop_teardown.py: written anew by this run
    t0 = time.monotonic()
    busy0, total0 = _cpu_ticks()
    sampler = CpuByProgram().start()
    print(f"./dev test: run A (embedded defaults, browser, services; {args.workers} processes) and run B "
          f"(PostgreSQL + Redis; {args.pg_workers} processes, output in {LOGS.relative_to(ROOT)}/pg-redis.txt) "
          f"at once; the peers install beside them ({LOGS.relative_to(ROOT)}/peers.txt)", flush=True)
    peers_log = (LOGS / "peers.txt").open("w")
    peers = subprocess.Popen([sys.executable, "-m", "tests.peers"], cwd=ROOT, stdout=peers_log,
                             stderr=subprocess.STDOUT)
    b_log_path = LOGS / "pg-redis.txt"
    b_log = b_log_path.open("w")
    b_env = dict(os.environ, DJANGO_SETTINGS_MODULE="tests.services_settings", MRTRWEB_TEST_RUN="suite-b")
    b_started = time.monotonic()
    run_b = subprocess.Popen(_pytest(args.pg_workers, ["-m", "not browser and not services",
                                                                    *PG_REDIS_FILES]),
                             cwd=ROOT, env=b_env, stdout=b_log, stderr=subprocess.STDOUT)
    a_env = dict(os.environ, MRTRWEB_TEST_RUN="suite-a", PYTHONUNBUFFERED="1")  # its progress as it comes
    a_log_path = LOGS / "run-a.txt"
    a_started = time.monotonic()
    with a_log_path.open("w") as a_log:
        proc = subprocess.Popen(_pytest(args.workers, []), cwd=ROOT, env=a_env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            a_log.write(line)
        a_code = proc.wait()
    a_s = time.monotonic() - a_started
    b_code = run_b.wait()
    b_s = time.monotonic() - b_started
    b_log.close()
    peers.wait()
    peers_log.close()
    total_s = time.monotonic() - t0
    busy1, total1 = _cpu_ticks()
    by_program = sampler.stop()

    b_text = b_log_path.read_text(errors="replace")
    print("\n" + "=" * 30 + " run B: PostgreSQL + Redis " + "=" * 30)
    if b_code not in (0,):
        start = b_text.find("= FAILURES =")
        start = b_text.rfind("\n", 0, start) if start >= 0 else b_text.find("short test summary")
        print(b_text[max(start, 0):] if start >= 0 else b_text[-20000:])
    else:
        tail = b_text[b_text.find("slowest 10 durations") - 40:] if "slowest 10 durations" in b_text else b_text[-3000:]
        print(tail.rstrip())
    print("\n" + "=" * 30 + " the suite " + "=" * 30)
    print((LOGS / "peers.txt").read_text().rstrip())
    a_summary = _summary_line(a_log_path.read_text(errors="replace"))
    b_summary = _summary_line(b_text)
    print(f"run A (embedded defaults, browser, services): {a_summary or 'no summary (exit %d)' % a_code}; "
          f"{a_s:.0f} s wall")
    print(f"run B (PostgreSQL + Redis): {b_summary or 'no summary (exit %d)' % b_code}; {b_s:.0f} s wall")
    tests, files, cpu = _slowest()
    print("the ten slowest tests (setup + call + teardown):")
    for seconds, nodeid in tests:
        print(f"  {seconds:7.1f} s  {nodeid}")
    print("the ten slowest files (their tests' seconds added up; they run beside others):")
    for seconds, name in files:
        print(f"  {seconds:7.1f} s  {name}")
    if cpu:
        print("the ten files using the most CPU (their test process and the children it reaped; of "
              f"{sum(c for c, _ in cpu):.0f} s for these ten):")
        for seconds, name in cpu:
            print(f"  {seconds:7.1f} s  {name}")
    if total1 > total0:  # how much of the machine the suite kept busy: near 100 % means CPU-bound
        print(f"CPU busy over the suite: {100 * (busy1 - busy0) / (total1 - total0):.0f} % of "
              f"{os.cpu_count()} cores (the whole machine, not only the suite's processes)")
    if by_program:
        sampled = sum(by_program.values())
        busy_s = (busy1 - busy0) / (os.sysconf("SC_CLK_TCK") or 100)
        print(f"CPU by program ({sampled:.0f} s sampled of {busy_s:.0f} s busy; the rest: processes under a "
              "second, the last second of each, the kernel):")
        for kind, seconds in sorted(by_program.items(), key=lambda kv: -kv[1])[:12]:
            print(f"  {seconds:7.1f} s  {kind}")
    stuck = LOGS / "stuck-tasks.txt"
    if stuck.exists():  # tasks a test's loop left behind (tests/loop_teardown.py), a database left held (lock_watch)
        print(f"held by a test: tasks left running or a database left locked ({stuck.relative_to(ROOT)}; "
              f"each thread's innermost lines):\n{stuck_summary(stuck.read_text(errors='replace'))}")
    over = total_s > args.budget_s
    hard = total_s > 1.5 * args.budget_s
    print(f"suite wall time: {total_s:.0f} s of the {args.budget_s:.0f} s budget"
          + (" -- OVER BUDGET: make the slowest files above cheaper, or split them" if over else ""))
    if hard:
        print(f"the suite took more than 1.5 x its budget ({1.5 * args.budget_s:.0f} s): failing", file=sys.stderr)
    totals: dict[str, int] = {}
    for summary in (a_summary, b_summary):
        for what, n in _counts(summary).items():
            totals[what] = totals.get(what, 0) + n
    failed = totals.get("failed", 0) + totals.get("errors", 0)
    closing = f"{totals.get('passed', 0)} passed, {failed} failed"
    if totals.get("skipped"):
        closing += f", {totals['skipped']} skipped"
    print(f"total: {closing}")
    ran_nothing = not totals.get("passed")
    return 1 if (a_code != 0 or b_code != 0 or hard or ran_nothing) else 0


if __name__ == "__main__":
    sys.exit(main())
