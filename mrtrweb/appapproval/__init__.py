"""Approving an MCP App's HTML by its digest (issue 31, item 1; docs/apps.md).

A tenant admin may require it per server (``McpServer.apps_require_approval``). Then an app renders
for anyone only when the SHA-256 digest of exactly the HTML the server sent has been approved for
that server and ``ui://`` URI (``AppApproval``); otherwise the person sees "waiting for approval"
and the HTML is never handed to the sandbox. A changed HTML (a new digest) waits for a new
approval; a revoked approval stops it rendering from the next load on.

* :mod:`.records` -- :func:`~.records.status_for`: the decision for one document (a first sight
  records it as pending, at most :data:`~.records.MAX_PENDING` pending per server);
  :func:`~.records.decide`: a tenant admin approves or revokes one, with its audit event
  (``app_approved`` / ``app_revoked``, a configuration event of the tenant's chain) in the same
  transaction; :func:`~.records.manageable_server`: whom the page is for.

May import: models, audit, tenancy, mcpapps, conf. The pages (:mod:`mrtrweb.views.app_approvals`,
:mod:`mrtrweb.views.apps`) import it.
"""
