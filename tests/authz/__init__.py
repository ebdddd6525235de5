"""Authorization to MCP servers: the authz service and views, token binding, issuer pin, secrets at rest."""
