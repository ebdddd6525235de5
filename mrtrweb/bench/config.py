"""Where the benchmark suite reads and writes, and what it connects to: the checkout's paths (the
standard round, ``var/bench`` results, ``docs/benchmarks``), the PostgreSQL admin URL and the
Redis database (``MRTRWEB_BENCH_PG_ADMIN_URL``, ``MRTRWEB_BENCH_REDIS_URL``), the bench users'
password. Constants only.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DEFAULT_OUT", "DOCS_DIR", "PASSWORD", "PG_ADMIN", "REDIS_URL", "ROOT", "ROUND_PATHS"]

ROOT = Path(__file__).resolve().parents[2]
#: the standard round: the workplace's ``shared/bench/round.json`` beside the checkout when there is
#: one, else the copy shipped with this package (``tests/bench/test_bench.py`` checks they are the same)
ROUND_PATHS = [ROOT.parent / "shared" / "bench" / "round.json", Path(__file__).resolve().parent / "round.json"]
DEFAULT_OUT = ROOT / "var" / "bench"
DOCS_DIR = ROOT / "docs" / "benchmarks"
PG_ADMIN = os.environ.get("MRTRWEB_BENCH_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
#: a dedicated Redis database; every key of a run is under the run's own prefixes
REDIS_URL = os.environ.get("MRTRWEB_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")

#: the bench users' password (their sessions are minted directly; the password is only for login tests)
PASSWORD = "bench-pw-0123"
