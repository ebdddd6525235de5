"""The MCP client side: transport, protocol, sessions, legacy servers, tasks, URL elicitation, OAuth to a server."""
