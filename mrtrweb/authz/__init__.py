"""Authorization to MCP servers, the Django side (issue 13).

The framework-free part (OAuth discovery, PKCE, the two-phase authorization-code flow split across
requests and workers, token refresh, client credentials, the outbound guard) is
:mod:`mrtrweb.mcp.auth` and :mod:`mrtrweb.mcp.outbound`. This package is its Django edge:

``crypto``
    secrets at rest: :class:`cryptography.fernet.MultiFernet` over ``MRTRWEB["SECRET_KEYS"]``.
``models``
    :class:`OAuthClientRegistration` (a client identity at one authorization server, per MCP server),
    :class:`OAuthConnection` (one person's tokens for one server in one tenant),
    :class:`PendingAuthorization` (one started flow, single use, bound to person, tenant, server and
    browser session). The server's auth mode and tenant credentials live on ``McpServer``.
``storage``
    :class:`DjangoTokenStorage`: the SDK's ``TokenStorage`` over those rows.
``service``
    the operations both the browser and ``mrtr_client`` use: :func:`service.start_connect`,
    :func:`service.finish_connect`, :func:`service.disconnect`, :func:`service.auth_for`,
    :func:`service.identity_for`.
``views`` / ``urls``
    Connect, the callback, Connections, Disconnect, the Client ID Metadata Document.
"""
