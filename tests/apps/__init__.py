"""mrtrweb.apps: MCP Apps hosted safely (issue 31)."""
