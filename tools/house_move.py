#!/usr/bin/env python3
"""The house move of issue 27: the flat modules of ``mrtrweb/`` into concern packages.

Mechanical and re-runnable on a fresh checkout of main (not on its own output): run it from the
repository's root on a clean work tree, then look at ``git status`` and commit::

    python3 tools/house_move.py            # git mv + rewrites + new package __init__ files
    python3 tools/house_move.py --dry-run  # print the plan only

On a newer main (after other branches landed)::

    git switch -c i27-house-2 main
    git show i27-house:tools/house_move.py > tools/house_move.py && git add tools/house_move.py
    git commit -m "tools/house_move.py"
    python3 tools/house_move.py && git commit -m "The house move, as tools/house_move.py wrote it"
    git cherry-pick <the hand-made commits after the script's result on i27-house>
    lint-imports && python -m pytest tests/test_layers.py tests/test_moved.py tests/test_import_graph.py

A module a landed branch added flat in ``mrtrweb/`` is not moved: add it to :data:`MOVES` (the
layers test and ``lint-imports`` say where it may go). Each rename of :data:`RENAMES` prints the
places outside its listed files that still name the old name.

What it does, in order:

1. ``git mv`` every module of :data:`MOVES` (and the ``history/`` package) to its package, writing
   the new packages' ``__init__.py`` (:data:`PACKAGES`: what each owns and may import).
2. Rewrites every import of a moved module in ``mrtrweb/``, ``tests/`` and ``manage.py``:
   ``from mrtrweb.X import a``, ``from mrtrweb import X``, ``import mrtrweb.X``, and the relative
   forms ``from .X import a`` / ``from . import X`` / ``from ..X import a`` (resolved from the file's
   old place, written again relative to its new place; a submodule keeps its local name:
   ``from . import audit`` becomes ``from .audit import events as audit``).
3. Rewrites dotted paths in code, strings and docs (``mock.patch("mrtrweb.X.f")``, settings
   strings, ``:mod:`` references, ``mrtrweb/X.py`` file paths) to the new module. A string that is
   exactly a moved module's old name (``"mrtrweb.health"``) is left alone: those are logger names,
   channel-layer group names and documented ``include()`` paths, which keep working.
4. Renames the private names other packages use to public ones (:data:`RENAMES`).
5. Writes ``mrtrweb/moved.py``: old module paths that README.md or docs/embedding.md document keep
   importing (an alias of the new module); any other old path fails with a message naming its new
   place.

Left untouched on purpose: ``mrtrweb/migrations/`` (migrations unchanged), ``docs/benchmarks/``
(measured output naming the files as they were), and the embedding and deploy-recipe tests
(:data:`KEEP_AS_DOCUMENTED`), which keep exercising the documented old paths.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "mrtrweb"

# old module (under mrtrweb.) -> new module (under mrtrweb.)
MOVES: dict[str, str] = {
    # tenancy: who belongs where
    "access": "tenancy.access",
    "tenancy": "tenancy.sync",
    # audit: events, chain, reconcile, history pages
    "audit": "audit.events",
    "audit_chain": "audit.chain",
    "reconcile": "audit.reconcile",
    "history": "audit.history",  # a package: every module under it moves with it
    # text: what a server or the product says, made safe and bounded to show
    "display": "text.display",
    "names": "text.names",
    "stored_text": "text.stored_text",
    "results": "text.results",
    # consent: the card, its forms and field hints, review, sampling, waiting rounds
    "argschema": "consent.argschema",
    "fieldhints": "consent.fieldhints",
    "forms": "consent.forms",
    "gate_text": "consent.gate_text",
    "jsonfields": "consent.jsonfields",
    "outcomes": "consent.outcomes",
    "panels": "consent.panels",
    "pending": "consent.pending",
    "rerun": "consent.rerun",
    "sampling": "consent.sampling",
    # live: the per-user WebSocket
    "consumers": "live.consumers",
    "languages": "live.languages",
    "layerwatch": "live.layerwatch",
    "origin": "live.origin",
    "pending_watch": "live.pending_watch",
    "sessions": "live.sessions",
    # runtime: the worker process and its services
    "drain": "runtime.drain",
    "gates": "runtime.gates",
    "gcpolicy": "runtime.gcpolicy",
    "handover": "runtime.handover",
    "health": "runtime.health",
    "leases": "runtime.leases",
    "logsafe": "runtime.logsafe",
    "metrics": "runtime.metrics",
    "metrics_view": "runtime.metrics_view",
    "onehop": "runtime.onehop",
    "outage": "runtime.outage",
    "push": "runtime.push",
    "secretkeys": "runtime.secretkeys",
    "serving_checks": "runtime.serving_checks",
    "syncbridge": "runtime.syncbridge",
    "proxy_pages": "runtime.proxy_pages",
    "workers": "runtime.workers",
    # servers: a person's connections to a tenant's MCP servers
    "connections": "servers.connections",
    "session_roots": "servers.session_roots",
    # operations: the round's path (+ the rounds that expire by themselves)
    "expiry": "operations.expiry",
    # headless: the browser's code path driven by a machine
    "headless": "headless.client",
    "headless_auth": "headless.auth",
    "conformance": "headless.conformance",
    # views
    "settings_page": "views.settings_page",
}

# Old paths README.md or docs/embedding.md document (import paths and settings strings): they keep
# importing, as an alias of the new module (mrtrweb/moved.py). tenancy and headless are packages
# that re-export their documented names instead (PACKAGES).
DOCUMENTED = ["drain", "gcpolicy", "health", "onehop", "origin", "routing", "sampling"]

# Names the new package __init__ re-exports lazily (documented as mrtrweb.<package>.<name>).
PUBLIC = {
    "tenancy": ("sync", ["TenantGrant", "TenantSyncMiddleware", "ResolverError", "sync_user", "sync_if_stale",
                         "forget", "grants_of", "configured", "load"]),
    "headless": ("client", ["ACCEPT_DEFAULTS", "ANSWERS", "CANCEL", "DECLINE", "TASK_REQUIRED", "TIMEOUT",
                            "ConsentPolicy", "HeadlessError", "HeadlessOutcome", "arun", "run", "close_connections",
                            "default_content", "server_for", "operation_name"]),
}

PACKAGES: dict[str, str] = {
    "tenancy": '''Tenancy: who belongs to which tenant, and who may act on what.

* :mod:`.access` -- the one access check on an operation or a server (active user, member of the
  tenant, server enabled), and what happens when access ends.
* :mod:`.sync` -- tenants and memberships that follow the embedding portal's organisations
  (``MRTRWEB["TENANT_RESOLVER"]``, :class:`TenantSyncMiddleware`).

The documented names (``mrtrweb.tenancy.TenantGrant``, ``TenantSyncMiddleware``, ``sync_user``,
``forget``...) are re-exported here, lazily (importing this package loads no model).

May import: :mod:`mrtrweb.models`, :mod:`mrtrweb.conf`; nothing above them.''',
    "audit": '''The audit trail: every round's events, their per-tenant hash chain, its reconciliation,
and the history pages that read it.

* :mod:`.events` -- recording events (digests only, mrtr-gate.md §4), verifying and purging the trail.
* :mod:`.chain` -- an event's canonical hash and the statements that append to a tenant's chain.
* :mod:`.reconcile` -- every received round paired with what ended it.
* :mod:`.history` -- a person's history of operations: pages, filters, exports.

May import: models, conf, :mod:`mrtrweb.runtime` (metrics), :mod:`mrtrweb.text`; ``history``
(pages) also operations, consent and tenancy.''',
    "text": '''What a server or the product says, made safe and bounded to show.

* :mod:`.display` -- invisible and reordering characters made visible.
* :mod:`.names` -- names a server chooses (tools, prompts), safe to link and to look up again.
* :mod:`.stored_text` -- the product's messages stored in English, translated when shown.
* :mod:`.results` -- bounded results: what is stored, shown and downloaded.

Low in the layers: models, operations and pages all use it. May import: conf, :mod:`mrtrweb.mcp`
(protocol constants); never models or anything above.''',
    "consent": '''The consent card and what is shown on it: where a round becomes something a person answers.

* :mod:`.panels` -- an operation's panel (status, the card of its open round, its result), for the
  page and the WebSocket alike.
* :mod:`.forms` -- Django forms from JSON schemas; :mod:`.argschema` the bounded check of tool
  arguments; :mod:`.fieldhints` and :mod:`.gate_text` what a field's bounds and the gate's messages
  say in the person's language; :mod:`.jsonfields` a JSON form field that never raises.
* :mod:`.sampling` -- sampling and roots, the deprecated exception (AID-H-028.008).
* :mod:`.outcomes` -- how an operation's outcome reads; :mod:`.rerun` running it again;
  :mod:`.pending` the rounds waiting for a person ("Waiting for you").

May import: gate, models, conf, text, tenancy, authz, audit, operations; not views, live or management.''',
    "live": '''The per-user WebSocket: operation updates pushed as server-rendered HTML.

* :mod:`.consumers` -- the consumer (``/ws/mrtrweb/``); :mod:`.pending_watch` its "Waiting for
  you" part; :mod:`.sessions` a socket lives only as long as its sign-in session;
  :mod:`.languages` the language of its pushes; :mod:`.layerwatch` a restarted channel layer
  closes it; :mod:`.origin` the full origin check in front of it.

Sending a push (never raising) is :mod:`mrtrweb.runtime.push`, used from below.

Top of the layers: may import anything of the product except views and management; nothing of the
product imports it but :mod:`mrtrweb.routing` and :mod:`mrtrweb.asgi`.''',
    "runtime": '''The worker process and its services: what keeps a worker alive and honest.

* :mod:`.workers`, :mod:`.leases` -- each worker's lease and the reaper that judges a worker dead.
* :mod:`.drain` -- the ASGI lifespan: lease and heartbeat at start-up, graceful drain on SIGTERM.
* :mod:`.health` -- liveness and readiness endpoints; :mod:`.metrics`, :mod:`.metrics_view` the
  Prometheus metrics and their endpoint.
* :mod:`.outage` -- which exceptions are an outage, refusing and logging them.
* :mod:`.push` -- pushes over the channel layer that never raise.
* :mod:`.gates` -- the process's one gate over the configured binding store.
* :mod:`.handover` -- the hand-over of a legacy round between workers.
* :mod:`.gcpolicy`, :mod:`.onehop` -- the collector policy and the one-hop ASGI handler.
* :mod:`.logsafe`, :mod:`.secretkeys`, :mod:`.serving_checks`, :mod:`.syncbridge` -- secrets kept
  out of logs, secret keys, checks of how a project serves mrtrweb, coroutines from sync code.
* :mod:`.proxy_pages` -- the static pages the proxy shows when no worker answers.

May import: gate, mcp, bindings, models, conf, authz (keys); :mod:`.drain` (and :mod:`.health`,
which asks it) also operations and servers.''',
    "servers": '''A person's use of a tenant's MCP servers: their connections and what the server may ask
outside any call.

* :mod:`.connections` -- one pooled :class:`~mrtrweb.mcp.McpConnection` per ``(user, server)`` and
  event loop, opened with the server's auth mode, protocol and allowed capabilities.
* :mod:`.session_roots` -- the roots answered to ``roots/list`` outside any call.

May import: gate, mcp, models, conf, authz, runtime (push, outage), consent.sampling (the roots a
card shows).''',
    "headless": '''Headless operations: the browser's code path driven by a machine (``mrtr_client``,
the conformance suite, another service).

* :mod:`.client` -- :func:`arun` / :func:`run` with a scripted :class:`ConsentPolicy`.
* :mod:`.auth` -- authorization without a person.
* :mod:`.conformance` -- the conformance run's setup.

The documented names (``mrtrweb.headless.arun``, ``run``, ``ConsentPolicy``...) are re-exported
here, lazily.

May import: operations, consent, servers, runtime, models, gate, mcp, authz; imported only by
management commands.''',
}

RENAMES = [
    # (module the name is defined in, old, new, files to rewrite it in: globs under the root)
    ("operations.runtime", "_finish", "finish_operation", ["mrtrweb/operations/*.py", "mrtrweb/runtime/drain.py"]),
    ("operations.runtime", "_load", "load_operation", ["mrtrweb/operations/*.py", "mrtrweb/runtime/drain.py"]),
    ("operations.runtime", "_tasks", "running_tasks",
     ["mrtrweb/operations/*.py", "mrtrweb/runtime/drain.py", "tests/test_drain.py", "tests/test_tasks.py"]),
    ("operations.retries", "_build_and_record", "build_and_record", ["mrtrweb/operations/*.py", "tests/test_access.py"]),
    ("operations.rounds", "_parse_final", "parse_final",
     ["mrtrweb/operations/*.py", "tests/test_large_responses.py", "tests/test_attack_pass.py"]),
    ("runtime.workers", "_fresh_leases", "fresh_leases",
     ["mrtrweb/runtime/workers.py", "mrtrweb/operations/reaping.py", "tests/test_leases_unit.py"]),
    ("consent.forms", "_option_key", "option_key", ["mrtrweb/consent/forms.py", "mrtrweb/views/review.py"]),
    ("operations.starting", "_check_limits_sync", "check_limits_sync",
     ["mrtrweb/operations/*.py", "mrtrweb/bench/pending.py"]),
    ("servers.connections", "_pools", "loop_pools", ["mrtrweb/servers/connections.py", "mrtrweb/bench/worker_app.py"]),
    ("gate.gate", "_valid_list_roots_result", "valid_list_roots_result",
     ["mrtrweb/gate/gate.py", "mrtrweb/views/answers.py", "mrtrweb/models.py"]),
    ("gate.gate", "_valid_create_message_result", "valid_create_message_result",
     ["mrtrweb/gate/gate.py", "mrtrweb/views/answers.py"]),
    ("gate.gate", "_within_depth", "within_depth", ["mrtrweb/gate/gate.py", "mrtrweb/views/answers.py"]),
]

# Literal fixes in moved files whose code finds something next to its own file (after the rewrites).
FIXES = [
    ("mrtrweb/runtime/serving_checks.py", 'Path(__file__).resolve().parent / "static" / LIVE_SCRIPT',
     'Path(__file__).resolve().parents[1] / "static" / LIVE_SCRIPT  # the package\'s static/'),
    ("mrtrweb/runtime/proxy_pages.py", 'Path(__file__).resolve().parent / "static" / "mrtrweb" / "proxy"',
     'Path(__file__).resolve().parents[1] / "static" / "mrtrweb" / "proxy"  # the package\'s static/'),
]

# Strings that are keys, salts, session keys, group names or signal uids derived from a module's old
# name: renaming them with the module would break what a deployment stored or what a worker of the
# previous version computes during a rolling restart (tests/test_move_kept_keys.py pins them).
FIXES += [
    ("mrtrweb/audit/events.py", '("mrtrweb.audit.events/" + settings.SECRET_KEY)',
     '("mrtrweb.audit/" + settings.SECRET_KEY)  # a key: never renamed with the module'),
    ("mrtrweb/audit/events.py", 'CHECKPOINT_SALT = "mrtrweb.audit.events.checkpoint"',
     'CHECKPOINT_SALT = "mrtrweb.audit.checkpoint"  # a salt: never renamed with the module'),
    ("mrtrweb/audit/history/saved.py", 'SESSION_KEY = "mrtrweb.audit.history.filters"',
     'SESSION_KEY = "mrtrweb.history.filters"  # as before the move: saved filters in sessions keep working'),
    ("mrtrweb/live/sessions.py", 'salted_hmac("mrtrweb.live.sessions.group"', 'salted_hmac("mrtrweb.sessions.group"'),
    ("mrtrweb/live/sessions.py", '    uid = "mrtrweb.live.sessions."', '    uid = "mrtrweb.sessions."  # as before the move'),
    ("mrtrweb/operations/revocation.py", 'uid = "mrtrweb.tenancy.access."  # unchanged', 'uid = "mrtrweb.access."  # unchanged'),
]

# Files that must keep the documented old paths (they test that those keep working).
KEEP_AS_DOCUMENTED = [
    "tests/embed_project/*", "tests/embed_orgs/*", "tests/embed_orgs/*/*", "tests/test_embedding.py",
    "tests/test_embed_orgs.py", "tests/test_embed_docs.py", "tests/embed_docs.py", "tests/test_deploy_readme.py",
    "tests/deploy_recipe.py",
]
DOCS = ["README.md", "docs/embedding.md"]


def full(name: str) -> str:
    return "mrtrweb." + name


class Plan:
    def __init__(self) -> None:
        self.old_modules = self._modules()
        self.map: dict[str, str] = {}  # old full module -> new full module
        for old, new in MOVES.items():
            if (PKG / old).is_dir():
                for mod in self.old_modules:
                    if mod == full(old) or mod.startswith(full(old) + "."):
                        self.map[mod] = full(new) + mod[len(full(old)):]
            else:
                self.map[full(old)] = full(new)
        self.new_modules = {self.new(m) for m in self.old_modules} | {full(p) for p in PACKAGES}
        self.old_packages = {old for old in MOVES if (PKG / old).is_dir()}

    @staticmethod
    def _modules() -> set[str]:
        mods = set()
        for path in PKG.rglob("*.py"):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            mods.add(".".join(parts))
        return mods

    def new(self, mod: str) -> str:
        return self.map.get(mod, mod)

    def old_file_module(self, path: Path) -> str | None:
        rel = path.relative_to(ROOT).with_suffix("")
        if rel.parts[0] != "mrtrweb":
            return None
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        return ".".join(parts)


# ---------------------------------------------------------------------------------------- imports

def resolve(level: int, module: str | None, package: str) -> str:
    if not level:
        return module or ""
    parts = package.split(".")
    base = ".".join(parts[:len(parts) - (level - 1)])
    return base + ("." + module if module else "")


def relative(target: str, package: str) -> str:
    """``target`` written relative to ``package`` (``.x``, ``..y.z``, ``..``)."""
    t, p = target.split("."), package.split(".")
    common = 0
    while common < min(len(t), len(p)) and t[common] == p[common]:
        common += 1
    level = len(p) - common + 1
    return "." * level + ".".join(t[common:])


def rewrite_imports(src: str, plan: Plan, old_mod: str | None, new_mod: str | None, is_pkg: bool,
                    path: Path) -> str:
    tree = ast.parse(src)
    old_pkg = (old_mod if is_pkg else old_mod.rsplit(".", 1)[0]) if old_mod else None
    new_pkg = (new_mod if is_pkg else new_mod.rsplit(".", 1)[0]) if new_mod else None
    lines = src.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def pos(lineno: int, col: int) -> int:
        # col_offset is in UTF-8 bytes
        line = lines[lineno - 1]
        return offsets[lineno - 1] + len(line.encode()[:col].decode())

    edits: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level and old_pkg is None:
                continue  # a relative import of the tests package
            target = resolve(node.level, node.module, old_pkg or "")
            if not (target == "mrtrweb" or target.startswith("mrtrweb.")):
                continue
            groups: dict[str, list[str]] = {}
            changed = False
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in plan.old_modules:
                    newsub = plan.new(sub)
                    frm, last = newsub.rsplit(".", 1)
                    local = alias.asname or alias.name
                    text = last if local == last else f"{last} as {local}"
                    changed |= newsub != sub
                else:
                    frm = plan.new(target)
                    text = alias.name if not alias.asname else f"{alias.name} as {alias.asname}"
                    changed |= frm != target
                groups.setdefault(frm, []).append(text)
            moved_file = old_mod is not None and new_mod != old_mod
            if not changed and not (node.level and moved_file):
                continue
            start, end = pos(node.lineno, node.col_offset), pos(node.end_lineno, node.end_col_offset)
            span = src[start:end]

            def frm_text(frm: str) -> str:
                return relative(frm, new_pkg) if node.level else frm

            original = [a.name if not a.asname else f"{a.name} as {a.asname}" for a in node.names]
            if len(groups) == 1 and next(iter(groups.values())) == original:
                # the same names from one (new) module: keep the statement's own formatting
                frm = next(iter(groups))
                new_span = re.sub(r"^from\s+[.\w]+\s+import", f"from {frm_text(frm)} import", span, count=1)
            else:
                if "#" in span:
                    print(f"  ! {path.relative_to(ROOT)}:{node.lineno}: comments inside a regrouped import dropped",
                          file=sys.stderr)
                indent = " " * node.col_offset
                new_span = ("\n" + indent).join(f"from {frm_text(frm)} import {', '.join(names)}"
                                                 for frm, names in groups.items())
            edits.append((start, end, new_span))
        elif isinstance(node, ast.Import):
            if any(a.name.startswith("mrtrweb.") and plan.new(a.name) != a.name for a in node.names):
                start, end = pos(node.lineno, node.col_offset), pos(node.end_lineno, node.end_col_offset)
                names = [(plan.new(a.name) + (f" as {a.asname}" if a.asname else "")) for a in node.names]
                edits.append((start, end, "import " + ", ".join(names)))
    for start, end, text in sorted(edits, reverse=True):
        src = src[:start] + text + src[end:]
    return src


# ------------------------------------------------------------------------------------ dotted paths

DOTTED = re.compile(r"(?<![\w/.])mrtrweb((?:\.[A-Za-z_]\w*)+)")
FILEPATH = re.compile(r"(?<![\w.])mrtrweb/([A-Za-z_]\w*)(\.py\b|/)")


def rewrite_dotted(src: str, plan: Plan, *, docs: bool) -> str:
    def one(m: re.Match[str]) -> str:
        parts = ("mrtrweb" + m.group(1)).split(".")
        for n in range(len(parts), 1, -1):
            mod = ".".join(parts[:n])
            if mod in plan.map:
                tail = parts[n:]
                if not tail:
                    before, after = src[m.start() - 1:m.start()], src[m.end():m.end() + 1]
                    if before in "\"'" and before and after == before:
                        return m.group(0)  # a logger / group name or a documented include() path
                    if docs and after == ":":
                        return m.group(0)  # a log line's logger name ("mrtrweb.health: not ready")
                short = mod.split(".", 1)[1]
                if short in PUBLIC and (not tail or tail[0] in PUBLIC[short][1]):
                    return m.group(0)  # documented, and re-exported by the package of that name
                return ".".join([plan.new(mod), *tail])
            if mod in plan.old_modules:
                return m.group(0)
        return m.group(0)

    def path(m: re.Match[str]) -> str:
        name, suffix = m.group(1), m.group(2)
        mod = full(name)
        if name in MOVES and (suffix == "/") == (name in plan.old_packages):
            return "mrtrweb/" + plan.new(mod)[len("mrtrweb."):].replace(".", "/") + suffix
        return m.group(0)

    return FILEPATH.sub(path, DOTTED.sub(one, src))


# ------------------------------------------------------------------------------------------ renames

def apply_renames() -> None:
    for module, old, new, globs in RENAMES:
        for pattern in globs:
            for path in sorted(ROOT.glob(pattern)):
                src = path.read_text()
                out = re.sub(rf"(?<![\w.]){re.escape(old)}\b", new, src)
                out = re.sub(rf"(?<=[\w)\]])\.{re.escape(old)}\b", "." + new, out)
                if out != src:
                    path.write_text(out)
        # what still names it outside the listed files
        hits = subprocess.run(["git", "grep", "-n", "-w", old, "--", "mrtrweb", "tests"], cwd=ROOT,
                              capture_output=True, text=True).stdout
        for line in hits.splitlines():
            print(f"  ? {old} still named: {line}", file=sys.stderr)


# ---------------------------------------------------------------------------------------- moved.py

MOVED_PY = '''"""Where the modules of the flat layout went (issue 27), for code and settings written before.

The old dotted paths README.md and docs/embedding.md documented keep importing: ``mrtrweb.drain``
is the module :mod:`mrtrweb.runtime.drain` itself (the same object, so settings strings such as
``"mrtrweb.health.HealthMiddleware"`` resolve as before). Any other old path fails with an
:class:`ImportError` that names its new place. Written by tools/house_move.py.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys

#: old module -> new module
MOVED: dict[str, str] = {
%(moved)s
}

#: the old paths that keep working (documented in README.md or docs/embedding.md)
ALIASED: frozenset[str] = frozenset({
%(aliased)s
})


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec):  # the new module itself, under its old name too
        module = importlib.import_module(self.new)
        self.own_spec = module.__spec__
        return module

    def exec_module(self, module) -> None:
        module.__spec__ = self.own_spec  # the import system set the alias's: the module keeps its own


class MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths of :data:`MOVED`: an alias for :data:`ALIASED`, else a clear error."""

    def find_spec(self, fullname, path=None, target=None):
        new = MOVED.get(fullname)
        if new is None:
            return None
        if fullname not in ALIASED:
            raise ImportError(f"{fullname} moved to {new} (issue 27: mrtrweb's concern packages); "
                              f"import it from there", name=fullname)
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(new))


def install() -> None:
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedFinder())
'''


def moved_py(plan: Plan) -> str:
    # only the old paths that no longer exist as modules (tenancy, audit, headless are packages now)
    rows = []
    for old, new in sorted(plan.map.items()):
        if old in plan.new_modules:
            continue
        rows.append(f'    "{old}": "{new}",')
    aliased = [f'    "{full(n)}",' for n in DOCUMENTED if full(n) in plan.map]
    return MOVED_PY % {"moved": "\n".join(rows), "aliased": "\n".join(aliased)}


def package_init(name: str, doc: str) -> str:
    text = f'"""{doc}\n"""\n'
    if name in PUBLIC:
        sub, names = PUBLIC[name]
        listed = "".join(f'    "{n}",\n' for n in names)
        text += f'''
from __future__ import annotations

import importlib
from typing import Any

#: re-exported from :mod:`.{sub}` (the documented ``mrtrweb.{name}.<name>`` paths)
__all__ = [
{listed}]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module(".{sub}", __name__), name)
    raise AttributeError(f"module {{__name__!r}} has no attribute {{name!r}}")
'''
    return text


# -------------------------------------------------------------------------------------------- main

def git(*args: str) -> None:
    subprocess.run(["git", *args], cwd=ROOT, check=True)


def keep(path: Path) -> bool:
    rel = path.relative_to(ROOT)
    return any(rel.match(p) for p in KEEP_AS_DOCUMENTED) or "migrations" in rel.parts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    plan = Plan()
    missing = [m for m in MOVES if not (PKG / m).is_dir() and not (PKG / f"{m}.py").is_file()]
    if missing:
        sys.exit(f"not found (already moved?): {missing}")
    for old, new in sorted(plan.map.items()):
        print(f"{old:40} -> {new}")
    if args.dry_run:
        return

    # old module of every Python file, before anything moves
    files: dict[Path, str | None] = {}
    for path in [*PKG.rglob("*.py"), *(ROOT / "tests").rglob("*.py"), ROOT / "manage.py"]:
        if ".venv" in path.parts or "node_modules" in path.parts:
            continue
        files[path] = plan.old_file_module(path)

    # 1. the packages, then git mv
    for name in PACKAGES:
        (PKG / name).mkdir(exist_ok=True)
    relocated: dict[Path, Path] = {}
    for old, new in MOVES.items():
        src = PKG / f"{old}.py"
        if old in plan.old_packages:
            dst = PKG / new.replace(".", "/")
            dst.parent.mkdir(parents=True, exist_ok=True)
            git("mv", f"mrtrweb/{old}", str(dst.relative_to(ROOT)))
            for path in list(files):
                if (PKG / old) in path.parents:
                    relocated[path] = dst / path.relative_to(PKG / old)
            continue
        dst = PKG / (new.replace(".", "/") + ".py")
        dst.parent.mkdir(parents=True, exist_ok=True)
        git("mv", str(src.relative_to(ROOT)), str(dst.relative_to(ROOT)))
        relocated[PKG / f"{old}.py"] = dst
    for name, doc in PACKAGES.items():
        init = PKG / name / "__init__.py"
        init.write_text(package_init(name, doc))
        git("add", str(init.relative_to(ROOT)))
        files[init] = None  # new: written as it should be

    # 2.-3. imports and dotted paths
    for path, old_mod in files.items():
        new_path = relocated.get(path, path)
        if old_mod is None and path.name == "__init__.py" and path.parent.name in PACKAGES \
                and path.parent.parent == PKG:
            continue
        if keep(new_path):
            continue
        src = new_path.read_text()
        is_pkg = path.name == "__init__.py"
        new_mod = plan.new(old_mod) if old_mod else None
        # dotted paths first (absolute imports included), then what is left: relative imports and
        # ``from mrtrweb import X`` (a path rewritten once is never matched again)
        out = rewrite_dotted(src, plan, docs=False)
        out = rewrite_imports(out, plan, old_mod, new_mod, is_pkg, new_path)
        if old_mod and new_mod != old_mod:
            out = out.replace("logging.getLogger(__name__)", f'logging.getLogger("{old_mod}")')
        if out != src:
            new_path.write_text(out)
    for doc in DOCS:
        p = ROOT / doc
        p.write_text(rewrite_dotted(p.read_text(), plan, docs=True))

    # 4. private names other packages use; paths found next to a moved file
    apply_renames()
    for rel, before, after in FIXES:
        path = ROOT / rel
        text = path.read_text()
        if before not in text:
            print(f"  ! {rel}: fix not applied (the line changed?)", file=sys.stderr)
        path.write_text(text.replace(before, after))

    # 5. the old paths
    (PKG / "moved.py").write_text(moved_py(plan))
    init = PKG / "__init__.py"
    src = init.read_text()
    if "moved.install()" not in src:
        init.write_text(src.rstrip("\n") + "\n\n# the old flat paths: documented ones keep importing, others name "
                        "their new place\nfrom . import moved as _moved  # noqa: E402\n\n_moved.install()\n")
    git("add", "-A", "mrtrweb", "tests", "README.md", "docs/embedding.md")


if __name__ == "__main__":
    main()
