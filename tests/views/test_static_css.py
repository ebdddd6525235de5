"""The stylesheet parses as its authors meant: every block closed where it was opened (a rule
left inside an unclosed ``@media`` applies only on narrow screens, silently: how a merge broke the
history's wide layout once)."""

from __future__ import annotations

import re
from pathlib import Path

CSS = sorted((Path(__file__).resolve().parents[2] / "mrtrweb" / "static").rglob("*.css"))


def _depths(text: str) -> list[tuple[int, int, str]]:
    """``(line number, nesting depth after the line, line)`` with comments and strings blanked."""
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group()), text, flags=re.S)
    text = re.sub(r'"[^"\n]*"', '""', text)
    depth, out = 0, []
    for number, line in enumerate(text.split("\n"), 1):
        depth += line.count("{") - line.count("}")
        out.append((number, depth, line))
    return out


def test_every_block_of_every_stylesheet_is_closed_and_top_level_rules_are_top_level():
    assert CSS, "no stylesheet found"
    for path in CSS:
        depths = _depths(path.read_text())
        assert all(d >= 0 for _, d, _ in depths), f"{path.name}: a '}}' closes nothing"
        assert depths[-1][1] == 0, f"{path.name}: {depths[-1][1]} block(s) never closed"
        previous = 0
        for number, depth, line in depths:
            # a rule starting at column 0 is meant top-level: it must not sit inside an open block
            if previous and line[:1] not in ("", " ", "}") and not line.startswith("\t"):
                raise AssertionError(f"{path.name}:{number}: rule at column 0 inside an open block: {line[:80]!r}")
            previous = depth


def test_the_check_sees_an_unclosed_media_block():
    broken = "@media (max-width: 40rem) {\n  a { b: c; }\n.short-id { display: inline-flex; }\n"
    depths = _depths(broken)
    assert depths[-1][1] == 1
