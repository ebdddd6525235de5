"""A person's use of a tenant's MCP servers: their connections and what the server may ask
outside any call.

* :mod:`.connections` -- one pooled :class:`~mrtrweb.mcp.McpConnection` per ``(user, server)`` and
  event loop, opened with the server's auth mode, protocol and allowed capabilities.
* :mod:`.session_roots` -- the roots answered to ``roots/list`` outside any call.

May import: gate, mcp, models, conf, authz, runtime (push, outage), consent.sampling (the roots a
card shows).
"""
