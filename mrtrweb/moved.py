"""Where the modules of the flat layout went (issue 27), for code and settings written before.

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
    "mrtrweb.access": "mrtrweb.tenancy.access",
    "mrtrweb.argschema": "mrtrweb.consent.argschema",
    "mrtrweb.audit_chain": "mrtrweb.audit.chain",
    "mrtrweb.conformance": "mrtrweb.headless.conformance",
    "mrtrweb.connections": "mrtrweb.servers.connections",
    "mrtrweb.consumers": "mrtrweb.live.consumers",
    "mrtrweb.display": "mrtrweb.text.display",
    "mrtrweb.drain": "mrtrweb.runtime.drain",
    "mrtrweb.expiry": "mrtrweb.operations.expiry",
    "mrtrweb.fieldhints": "mrtrweb.consent.fieldhints",
    "mrtrweb.forms": "mrtrweb.consent.forms",
    "mrtrweb.gate_text": "mrtrweb.consent.gate_text",
    "mrtrweb.gates": "mrtrweb.runtime.gates",
    "mrtrweb.gcpolicy": "mrtrweb.runtime.gcpolicy",
    "mrtrweb.handover": "mrtrweb.runtime.handover",
    "mrtrweb.headless_auth": "mrtrweb.headless.auth",
    "mrtrweb.health": "mrtrweb.runtime.health",
    "mrtrweb.history": "mrtrweb.audit.history",
    "mrtrweb.history.export": "mrtrweb.audit.history.export",
    "mrtrweb.history.forms": "mrtrweb.audit.history.forms",
    "mrtrweb.history.rows": "mrtrweb.audit.history.rows",
    "mrtrweb.history.saved": "mrtrweb.audit.history.saved",
    "mrtrweb.history.views": "mrtrweb.audit.history.views",
    "mrtrweb.jsonfields": "mrtrweb.consent.jsonfields",
    "mrtrweb.languages": "mrtrweb.live.languages",
    "mrtrweb.layerwatch": "mrtrweb.live.layerwatch",
    "mrtrweb.leases": "mrtrweb.runtime.leases",
    "mrtrweb.logsafe": "mrtrweb.runtime.logsafe",
    "mrtrweb.metrics": "mrtrweb.runtime.metrics",
    "mrtrweb.metrics_view": "mrtrweb.runtime.metrics_view",
    "mrtrweb.names": "mrtrweb.text.names",
    "mrtrweb.onehop": "mrtrweb.runtime.onehop",
    "mrtrweb.origin": "mrtrweb.live.origin",
    "mrtrweb.outage": "mrtrweb.runtime.outage",
    "mrtrweb.outcomes": "mrtrweb.consent.outcomes",
    "mrtrweb.panels": "mrtrweb.consent.panels",
    "mrtrweb.pending": "mrtrweb.consent.pending",
    "mrtrweb.pending_watch": "mrtrweb.live.pending_watch",
    "mrtrweb.proxy_pages": "mrtrweb.runtime.proxy_pages",
    "mrtrweb.push": "mrtrweb.runtime.push",
    "mrtrweb.reconcile": "mrtrweb.audit.reconcile",
    "mrtrweb.rerun": "mrtrweb.consent.rerun",
    "mrtrweb.results": "mrtrweb.text.results",
    "mrtrweb.sampling": "mrtrweb.consent.sampling",
    "mrtrweb.secretkeys": "mrtrweb.runtime.secretkeys",
    "mrtrweb.serving_checks": "mrtrweb.runtime.serving_checks",
    "mrtrweb.session_roots": "mrtrweb.servers.session_roots",
    "mrtrweb.sessions": "mrtrweb.live.sessions",
    "mrtrweb.settings_page": "mrtrweb.views.settings_page",
    "mrtrweb.stored_text": "mrtrweb.text.stored_text",
    "mrtrweb.syncbridge": "mrtrweb.runtime.syncbridge",
    "mrtrweb.workers": "mrtrweb.runtime.workers",
}

#: the old paths that keep working (documented in README.md or docs/embedding.md)
ALIASED: frozenset[str] = frozenset({
    "mrtrweb.drain",
    "mrtrweb.gcpolicy",
    "mrtrweb.health",
    "mrtrweb.onehop",
    "mrtrweb.origin",
    "mrtrweb.sampling",
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
