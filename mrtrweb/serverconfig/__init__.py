"""Servers people bring (issue 29): tenant admins and, where their tenant allows it, members add,
test, edit, disable and remove MCP servers from the product's pages, under the deployer's URL
policy, every change an event in the tenant's audit chain.

* :mod:`.policy` -- ``MRTRWEB["SERVER_URL_POLICY"]``: which Streamable HTTP URLs tenant admins and
  people may add (default: ``https`` to public addresses only, by the outbound guard's rules;
  allowed hosts / networks for on-premises servers; plain ``http`` only to allowed hosts), checked
  on save and again at every connection of a server added under it (``McpServer.url_policy``),
  the connection pinned to the address that was checked.
* :mod:`.probe` -- "Test": connect, find the protocol version, count what the server offers, say
  whether it asks for authorization and which authorization server it names; bounded in time and
  size; the result kept on the server (``McpServer.last_test``). :mod:`.testing`: who may test,
  the per-person rate limit, ``run_test`` / ``record_test``; :mod:`.probe_view`: the ``POST``
  endpoint (``test_urlpatterns``) and ``mrtrweb/serverconfig/_test_report.html``.
* :mod:`.registry` -- a ``server.json`` of the official MCP registry's schema filling in the form
  (remote Streamable HTTP entries only; nothing fetched).
* :mod:`.forms`, :mod:`.views`, :mod:`.urls` -- the pages (a tenant admin's servers, a person's
  own servers, the tenant's personal servers seen by its admins).
* :mod:`.events` -- the configuration events of the tenant's audit chain (``server_added`` ...,
  digests only).
* :mod:`.limits` -- servers per tenant and per person (``MRTRWEB["MAX_TENANT_SERVERS"]``,
  ``MRTRWEB["MAX_PERSONAL_SERVERS"]``), tests per person.

May import: mcp, models, conf, tenancy, authz, audit, servers, runtime, text, catalog.
"""
