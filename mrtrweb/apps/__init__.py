"""MCP Apps (the extension ``io.modelcontextprotocol/ui``, SEP-1865; issue 31): what the product
reads of a tool's and a resource's ``_meta.ui`` and how it hosts an app safely.

Owns:

* :mod:`.meta` -- the extension's identifier and mime type, the client capability the product
  declares, a tool's ``resourceUri`` and ``visibility`` (app-only tools are not a person's calls);
* :mod:`.csp` -- the inner document's Content-Security-Policy built from ``_meta.ui.csp`` (refusing
  ``*``, schemes other than https/wss, private addresses) and the permissions granted;
* :mod:`.sandbox` -- the sandbox origin (``MRTRWEB["APPS_SANDBOX_ORIGIN"]``) and the sandbox proxy
  page served on it (Django views).

May import: the standard library, Django, :mod:`mrtrweb.conf`, :mod:`mrtrweb.mcp` (framework-free
parts). Never imports views, operations or the gate's internals; the catalog and views import it.
"""
