"""Consent history: the audit trail as people read it.

* ``/history/`` (``mrtrweb:history``) -- a signed-in user's own rounds: the audit events carrying
  their keyed digest, grouped by operation, newest first, 10 operations per page (the tenant
  history's page control, ``history_pages.html``).
* ``/tenants/<slug>/history/`` (``mrtrweb:tenant-history``) -- a tenant admin's view of the
  tenant's events, filtered by a form (user, server, tool, outcome, code, date range; GET
  parameters), 50 per page unless the admin chooses another size; ``?format=csv`` / ``?format=json``
  export the same selection. The applied filters are kept per tenant in the session.
* ``/history/operations/<uuid>/`` (``mrtrweb:history-operation``) -- one operation's rounds in chain
  order, for its owner and the admins of its tenant.

Every query is scoped to a tenant the requester administers, or to the requester's own digest;
anyone else gets 404. Audit rows hold digests, keys and actions only (never an answer value or a
``requestState``), so the pages and exports show audit fields and nothing else.

The package: :mod:`.views` (the three pages), :mod:`.rows` (rows and access), :mod:`.forms` (the
tenant filters), :mod:`.saved` (the filters kept in the session), :mod:`.export` (CSV and JSON).
"""

from __future__ import annotations

from .export import EXPORT_FIELDS
from .forms import OWN_OPERATIONS_PER_PAGE, PER_PAGE
from .views import operation_timeline, own_history, tenant_history

__all__ = ["EXPORT_FIELDS", "OWN_OPERATIONS_PER_PAGE", "PER_PAGE", "operation_timeline", "own_history", "tenant_history"]
