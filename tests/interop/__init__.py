"""Third-party MCP servers and the conformance suite (Python, stdio, TypeScript)."""
