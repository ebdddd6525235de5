"""No file the repository tracks holds a merge's conflict markers: a marker inside a docstring or a
Markdown page still imports and builds, so nothing else would notice one committed (session 18
committed one in a docstring)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKERS = ("<<<<<<< ", ">>>>>>> ")


def test_no_tracked_text_file_holds_conflict_markers():
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=False)
    if listed.returncode != 0:  # not a checkout (an sdist): the wheel's own files are checked below
        paths = [p for p in (ROOT / "mrtrweb").rglob("*") if p.is_file()]
    else:
        paths = [ROOT / name for name in listed.stdout.decode().split("\0") if name]
    found = []
    for path in paths:
        if path.suffix in (".mo", ".png", ".ico", ".gz", ".woff2") or not path.is_file():
            continue
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (UnicodeDecodeError, OSError):
            continue
        found += [f"{path.relative_to(ROOT)}:{n}" for n, line in enumerate(lines, 1)
                  if line.startswith(MARKERS) or line == "======="]
    assert found == []
