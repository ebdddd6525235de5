"""MCP Apps (the extension ``io.modelcontextprotocol/ui``, SEP-1865; issue 31): what the product
reads of a tool's and a resource's ``_meta.ui`` and how it hosts an app safely.

Owns:

* :mod:`.meta` -- the extension's identifier and mime type, the client capability the product
  declares, a tool's ``resourceUri`` and ``visibility`` (app-only tools are not a person's calls);
* :mod:`.csp` -- the inner document's Content-Security-Policy built from ``_meta.ui.csp`` (refusing
  ``*``, schemes other than https/wss, private addresses) and the permissions granted;
* :mod:`.sandbox` -- the sandbox origin (``MRTRWEB["APPS_SANDBOX_ORIGIN"]``): its check and
  whether a request is addressed to it (the sandbox proxy page itself is a view,
  :mod:`mrtrweb.views.apps`).

Named ``mcpapps`` because ``mrtrweb.apps`` is the Django app configuration.

May import: the standard library, :mod:`mrtrweb.conf` and :mod:`mrtrweb.mcp` (the extension's names). Never imports models, views, operations or
the gate; the catalog, the servers' connections and the views import it.
"""
