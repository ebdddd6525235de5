"""Demo MCP servers for local development and tests (not part of the product's request path)."""
