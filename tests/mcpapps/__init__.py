"""mrtrweb.mcpapps: MCP Apps hosted safely (issue 31); test_attack_*: session 18's attack lane (CSP address forms, apps isolated from each other and their proxy)."""
