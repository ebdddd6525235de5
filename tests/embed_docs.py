"""Reading and following docs/embedding.md (tests/embedding/test_embed_docs.py), as tests/deploy_recipe.py
follows the production recipe (docs/deploy/).

Each block a portal's developer writes or runs is marked with an HTML comment
``<!-- embed-step: KIND [PATH] -->`` right before its fence. KIND is ``shell`` (bash in the
directory of ``manage.py``, run as written after the substitutions), ``append`` (the block is
added at the end of the portal's file PATH), ``write`` (the block is the whole file PATH) or
``daemon`` (one long-running command, started once every other step has run).
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "embedding.md"
KINDS = {"shell", "append", "write", "daemon"}
_MARKER = re.compile(r"<!-- embed-step: ([a-z]+)(?: (\S+))? -->")
_STEP = re.compile(r"<!-- embed-step: ([a-z]+)(?: (\S+))? -->\n```([a-z]*)\n(.*?)\n```", re.S)


@dataclasses.dataclass(frozen=True)
class Step:
    """One marked block: ``kind``, the portal's file ``path`` (``append``/``write``), its text."""

    kind: str
    path: str | None
    text: str


def steps(doc: str) -> list[Step]:
    """The marked blocks of ``doc``, in order.

    Raises:
        AssertionError: a marker not directly followed by a fenced block, an unknown kind, a file
            step without a path (or a path leaving the project), a command step with one."""
    found = [Step(kind, path or None, text) for kind, path, _lang, text in _STEP.findall(doc)]
    assert len(_MARKER.findall(doc)) == len(found), "an embed-step marker is not directly followed by a fenced block"
    for step in found:
        assert step.kind in KINDS, f"unknown embed-step kind {step.kind!r}"
        if step.kind in ("append", "write"):
            assert step.path and not step.path.startswith("/") and ".." not in step.path, step
        else:
            assert step.path is None, step
    return found


def substitute(text: str, subs: list[tuple[str, str]]) -> str:
    """``text`` with each ``(literal, value)`` replaced, in order."""
    for literal, value in subs:
        text = text.replace(literal, value)
    return text


def follow(recipe: list[Step], project: Path, env: dict[str, str], subs: list[tuple[str, str]],
           timeout_s: float = 120.0) -> list[str]:
    """Every step but the daemons, in order, in ``project`` (the directory of ``manage.py``);
    returns the daemons' commands (substituted).

    Raises:
        AssertionError: a shell step exited non-zero (the message quotes it and its output's end)."""
    daemons = []
    for step in recipe:
        text = substitute(step.text, subs)
        if step.kind == "shell":
            out = subprocess.run(["bash", "-euo", "pipefail", "-c", text], cwd=project, env=env,
                                 capture_output=True, text=True, timeout=timeout_s)
            assert out.returncode == 0, f"embedding step failed ({out.returncode}):\n{text}\n---\n" \
                                        f"{(out.stdout + out.stderr)[-4000:]}"
        elif step.kind == "append":
            with (project / step.path).open("a") as fh:
                fh.write("\n\n" + text + "\n")
        elif step.kind == "write":
            (project / step.path).write_text(text + "\n")
        else:
            daemons.append(text)
    return daemons
