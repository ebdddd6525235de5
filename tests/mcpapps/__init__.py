"""mrtrweb.mcpapps: MCP Apps hosted safely (issue 31). ``test_attack_*``: session 18's attack lane
(CSP address forms and the sandbox's cookie domain, apps isolated from each other and from their
proxy, approval bound to what an app declares, offers within the app's rate and held bytes)."""
