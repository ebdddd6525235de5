"""mrtrweb.mcpapps: MCP Apps hosted safely (issue 31)."""
