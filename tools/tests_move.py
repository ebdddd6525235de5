#!/usr/bin/env python3
"""Issue 27, "tests/ mirrors the packages": the flat ``tests/test_*.py`` into a folder per package.

Mechanical and re-runnable on a fresh checkout of main (not on its own output): run it from the
repository's root on a clean work tree, then look at ``git status`` and commit::

    python3 tools/tests_move.py            # git mv + rewrites + the folders' __init__ files
    python3 tools/tests_move.py --dry-run  # print the plan only

A test file a landed branch added flat is not moved: the script names it and stops; add it to
:data:`FOLDERS`.

The commits after its result on ``i27-tests`` are made by hand (cherry-pick them after a re-run):
the fixtures and helpers test files imported from each other moved into ``conftest.py`` files,
``tests/browser.py`` (a plugin of ``tests/conftest.py``) and support modules with public names.
Check afterwards that ``python -m pytest --collect-only -q tests`` counts what it counted before.

What it does, in order:

1. Renames the two support modules whose names a folder takes (:data:`SUPPORT_RENAMES`:
   ``tests/consent.py`` and ``tests/live.py``; a package ``tests/consent/`` would shadow them).
2. ``git mv`` every test file of :data:`FOLDERS` to ``tests/<folder>/``, writing each folder's
   ``__init__.py`` (a one-line docstring: what it tests). Support modules and data (``faults.py``,
   ``oauth_as/``, ``embed_project/``, ``durations.json``...) stay at ``tests/``: many folders share them.
3. Rewrites every reference in the tracked text files (``tools/house_move.py`` excepted: it names
   the layout it ran on): ``tests.test_x`` -> ``tests.<folder>.test_x`` (imports, dotted strings,
   ``:mod:`` references), ``tests/test_x.py`` -> ``tests/<folder>/test_x.py`` (lists, durations
   keys, docs), the renamed support modules, and ``tests/test_*.py`` globs (``dev``).
4. In the moved files: relative imports one level up (``from .faults import`` -> ``from ..faults
   import``; ``from .test_y import`` -> ``from tests.<folder>.test_y import``), and
   ``Path(__file__)`` one level deeper (``parents[N]`` -> ``parents[N+1]``, ``.parent`` ->
   ``.parents[1]``). Every ``__file__`` line of a moved file is printed: check them by hand.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"

# folder -> (what it tests, the test files' names without ``test_``)
FOLDERS: dict[str, tuple[str, list[str]]] = {
    "gate": ("The consent gate: its rules, cases, schema bounds and the state it reuses.",
             "gate_cases gate_fuzz gate_rules gate_schema bounded_schema_text state_reuse lone_surrogates"),
    "mcp": ("The MCP client side: transport, protocol, sessions, legacy servers, tasks, URL elicitation, OAuth to a server.",
            "mcp_client outbound tls param_headers protocol no_fetch large_responses session_requests "
            "session_release legacy legacy_restart legacy_stop tasks task_required url_required auth_flow "
            "oauth_as_flow same_origin_as oauth_as"),
    "interop": ("Third-party MCP servers and the conformance suite (Python, stdio, TypeScript).",
                "conformance thirdparty thirdparty_browser thirdparty_stdio ts_server ts_server_browser ts_headless"),
    "authz": ("Authorization to MCP servers: the authz service and views, token binding, issuer pin, secrets at rest.",
              "authz_service authz_views auth_binding attack_auth attack_auth2 attack_auth3 issuer_pin "
              "secrets_at_rest browser_oauth"),
    "operations": ("An operation's round path: start, hold, answer, expire, stop, its limits and outcomes.",
                   "flow expiry holding outcomes progress_stop stop_durable prompts_resources limits answer_binding "
                   "fail_closed hostile deprecated round_cost attack_resilience outage_hold"),
    "consent": ("The consent card: argument schemas, fields, forms, review, gate text and URL answers.",
                "argschema card_fields call_forms review hidden_defaults gate_text browser_card_finish "
                "browser_fields browser_deprecated url_ascii browser_url browser_url_required"),
    "audit": ("The audit trail: events, their chain under concurrency, statements, and the history pages.",
              "audit audit_concurrency audit_statements audit_topology history history_browser"),
    "live": ("The per-user WebSocket: consumers, origin checks, sessions, pushes and the channel layer.",
             "consumers origin origin_browser sessions nav_pending browser_live_unavailable outages_browser "
             "push_receipt channel_layer_redis"),
    "runtime": ("The worker process and its services: drain, health, leases, metrics, outages, restarts.",
                "drain health gcpolicy onehop metrics metrics_live metrics_workers leases_unit worker_leases "
                "outages outage_pages pg_restart redis_restart proxy_pages serving_checks log_secrets topology "
                "session_outage_browser"),
    "bindings": ("The storage bindings: database, Redis and cache stores, database blips and clocks.",
                 "db_store redis_store cache_store_atomic db_blip db_clock"),
    "tenancy": ("Tenancy: who belongs to which tenant and who may act on what.",
                "tenancy access"),
    "text": ("Text a server or the product shows: hostile text, names, bounded results, translations.",
             "hostile_text names names_browser results_bounded browser_hostile_text i18n i18n_catalog browser_i18n"),
    "views": ("The person's pages: the browser end to end, listings, error pages, static files, attacks on the pages.",
              "browser browser_calls browser_nav browser_outcomes browser_listing browser_legacy "
              "browser_session_requests browser_tasks error_pages server_listings web_path_counts "
              "a11y_xss_browser static_css attack_pass attack_pass2 attack15 attack15_browser"),
    "headless": ("The headless client: the browser's code path driven by a machine.",
                 "headless headless_auth headless_defaults headless_errors"),
    "site": ("The standalone site and the demo command: checks, login throttle, secret keys.",
             "checks login_throttle login_throttle_browser secret_keys demo_command demo_oauth"),
    "embedding": ("Embedding the app into a portal: the documented recipe, portal teams, template blocks.",
                  "embedding embed_orgs embed_docs template_blocks template_blocks_browser"),
    "docs": ("The documentation: the site builds, the deploy README works as written.",
             "docs_site deploy_readme"),
    "bench": ("The benchmark and its goals.",
              "bench bench_goals"),
    "architecture": ("The package's layers, import graph and the old paths the house move kept.",
                     "layers import_graph moved move_kept_keys"),
}

# support modules a folder's name would shadow (tests/consent/ hides tests/consent.py)
SUPPORT_RENAMES = {"consent": "answering", "live": "live_server"}

# files left as they are: they name the layout they ran on
UNTOUCHED = {"tools/house_move.py", "tools/tests_move.py"}


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def folder_of() -> dict[str, str]:
    """``{"test_flow": "operations", ...}``."""
    return {f"test_{name}": folder for folder, (_, names) in FOLDERS.items() for name in names.split()}


def rewrite_references(text: str, where: dict[str, str]) -> str:
    """Dotted and path references of the flat layout, anywhere (code, strings, docs, JSON)."""
    for old, new in SUPPORT_RENAMES.items():
        text = re.sub(rf"\btests\.{old}\b", f"tests.{new}", text)
        text = re.sub(rf"\btests/{old}\.py\b", f"tests/{new}.py", text)
    names = "|".join(sorted(where, key=len, reverse=True))
    text = re.sub(rf"\btests\.({names})\b", lambda m: f"tests.{where[m[1]]}.{m[1]}", text)
    text = re.sub(rf"\btests/({names})\b", lambda m: f"tests/{where[m[1]]}/{m[1]}", text)
    return text.replace("tests/test_*.py", "tests/*/test_*.py")


def rewrite_relative(text: str, where: dict[str, str], moved: bool) -> str:
    """Relative imports of a Python file under tests/: a moved file's go one level up; a test
    module becomes absolute (``tests.<folder>.test_y``)."""
    def from_dot(m: re.Match) -> str:
        indent, dots, mod = m[1], m[2], m[3]
        head = mod.split(".")[0]
        if len(dots) != 1:
            return m[0]
        if head in where:
            return f"{indent}from tests.{where[head]}.{mod} import"
        if head in SUPPORT_RENAMES:
            mod = SUPPORT_RENAMES[head] + mod[len(head):]
        return f"{indent}from {'..' if moved else '.'}{mod} import"

    text = re.sub(r"^(\s*)from (\.+)([A-Za-z_][\w.]*) import", from_dot, text, flags=re.M)

    def from_pkg(m: re.Match) -> str:
        names = [n.strip() for n in m[2].split(",")]
        for n in names:
            if n.split(" as ")[0].strip() in where or n.split(" as ")[0].strip() in SUPPORT_RENAMES:
                sys.exit(f"from . import {n}: not handled, rewrite by hand")
        return f"{m[1]}from {'..' if moved else '.'} import {m[2]}"

    return re.sub(r"^(\s*)from \. import ([^\n(]+)$", from_pkg, text, flags=re.M)


def deeper_file_paths(text: str) -> str:
    """``Path(__file__)`` of a file one folder deeper."""
    text = re.sub(r"(Path\(__file__\)(?:\.resolve\(\))?\.parents)\[(\d+)\]", lambda m: f"{m[1]}[{int(m[2]) + 1}]", text)
    return re.sub(r"(Path\(__file__\)(?:\.resolve\(\))?)\.parent\b(?!s)", r"\1.parents[1]", text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    where = folder_of()
    flat = {p.stem for p in TESTS.glob("test_*.py")}
    if not flat:
        sys.exit("no tests/test_*.py: already moved?")
    unplaced = sorted(flat - set(where))
    if unplaced:
        sys.exit(f"test files with no folder (add them to FOLDERS): {unplaced}")
    absent = sorted(set(where) - flat)
    for stem in sorted(flat):
        print(f"tests/{stem}.py -> tests/{where[stem]}/{stem}.py")
    if absent:
        print(f"  (in FOLDERS, not in tests/: {absent})")
    if args.dry_run:
        return

    # 1.-2. renames and moves
    for old, new in SUPPORT_RENAMES.items():
        git("mv", f"tests/{old}.py", f"tests/{new}.py")
    for folder, (doc, _) in FOLDERS.items():
        (TESTS / folder).mkdir(exist_ok=True)
        init = TESTS / folder / "__init__.py"
        init.write_text(f'"""{doc}"""\n')
        git("add", str(init.relative_to(ROOT)))
    moved: set[str] = set()
    for stem in sorted(flat):
        dst = f"tests/{where[stem]}/{stem}.py"
        git("mv", f"tests/{stem}.py", dst)
        moved.add(dst)

    # 3.-4. references
    for rel in git("ls-files").splitlines():
        path = ROOT / rel
        if rel in UNTOUCHED or not path.is_file() or path.suffix in {".png", ".svg", ".ico", ".whl", ".mo"}:
            continue
        try:
            src = path.read_text()
        except UnicodeDecodeError:
            continue
        out = rewrite_references(src, where)
        if rel.startswith("tests/") and rel.endswith(".py") and rel.count("/") <= 2:
            is_moved = rel in moved
            if is_moved or rel.count("/") == 1:
                out = rewrite_relative(out, where, moved=is_moved)
            if is_moved:
                out = deeper_file_paths(out)
        if out != src:
            path.write_text(out)
    for rel in sorted(moved):
        for n, line in enumerate((ROOT / rel).read_text().splitlines(), 1):
            if "__file__" in line:
                print(f"  check {rel}:{n}: {line.strip()}")
    git("add", "-A", ".")


if __name__ == "__main__":
    main()
