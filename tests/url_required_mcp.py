"""A 2025-11-25 MCP server whose tools answer URL-required errors (-32042) until their page was
"done", for the URL-required tests (in process and in a real browser).
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from mcp_types import ElicitRequestURLParams

LINK_URL = "https://auth.example.test/link?provider="
#: malformed ``error.data`` of a -32042, and the reason the operation's failure gives
MALFORMED = {
    "no_data": (None, "error.data is not an object"),
    "no_list": ({"elicitations": "https://auth.example.test/"}, "error.data.elicitations is not a non-empty list"),
    "empty": ({"elicitations": []}, "error.data.elicitations is not a non-empty list"),
    "not_object": ({"elicitations": ["https://auth.example.test/"]}, "elicitation 1 is not an object"),
    "form_mode": ({"elicitations": [{"mode": "form", "elicitationId": "e", "message": "m", "url": "https://a.test/",
                                     "requestedSchema": {"type": "object", "properties": {}}}]},
                  'elicitation 1 is not URL mode (mode must be "url")'),
    "no_id": ({"elicitations": [{"mode": "url", "message": "m", "url": "https://a.test/"}]},
              "elicitation 1 has no elicitationId string"),
    "url_not_string": ({"elicitations": [{"mode": "url", "elicitationId": "e", "message": "m", "url": 7}]},
                       "elicitation 1 has no url string"),
    "too_many": ({"elicitations": [{"mode": "url", "elicitationId": f"e{i}", "message": "m",
                                    "url": "https://a.test/"} for i in range(17)]},
                 "17 elicitations, over the cap of 16"),
}


def url_required_server(page_url: str = "https://auth.example.test/sign-in"):
    """A 2025-11-25 server whose tools answer -32042 until their page was "done" (asked once);
    ``sign_in_first`` (no arguments) asks for ``page_url``."""
    from mrtrweb.demo.legacy import LegacyOnly, WireLog, WireRecorder
    from mrtrweb.demo.server import MCP_PATH, serve_asgi_in_thread

    mcp = MCPServer(name="url-required", log_level="WARNING")
    asked: dict[str, int] = {}

    @mcp.tool(structured_output=False)
    async def link_account(provider: str) -> str:
        """Needs the person's account linked at the provider first (a URL-required error, once)."""
        asked[provider] = asked.get(provider, 0) + 1
        if asked[provider] == 1:
            raise UrlElicitationRequiredError([ElicitRequestURLParams(
                message=f"Link your {provider} account first.", url=LINK_URL + provider,
                elicitation_id=f"link-{provider}")])
        return f"Linked {provider} (asked {asked[provider]} times)."

    @mcp.tool(structured_output=False)
    async def sign_in_first() -> str:
        """Needs the person signed in at ``page_url`` first (a URL-required error, once)."""
        asked["sign_in"] = asked.get("sign_in", 0) + 1
        if asked["sign_in"] == 1:
            raise UrlElicitationRequiredError([ElicitRequestURLParams(
                message="Sign in at the local page first.", url=page_url, elicitation_id="sign-in")])
        return "Signed in; here is your report."

    @mcp.tool(structured_output=False)
    async def two_pages() -> str:
        """Needs two pages done first."""
        asked["two"] = asked.get("two", 0) + 1
        if asked["two"] == 1:
            raise UrlElicitationRequiredError([
                ElicitRequestURLParams(message="Sign in.", url="https://auth.example.test/sign-in", elicitation_id="a"),
                ElicitRequestURLParams(message="Pay.", url="https://pay.example.test/checkout", elicitation_id="b")])
        return "Both done."

    @mcp.tool(structured_output=False)
    async def plain_http_page() -> str:
        raise UrlElicitationRequiredError([ElicitRequestURLParams(
            message="Open this.", url="http://auth.example.test/link", elicitation_id="h")])

    @mcp.tool(structured_output=False)
    async def malformed(kind: str) -> str:
        raise MCPError(code=-32042, message="URL elicitation required", data=MALFORMED[kind][0])

    log = WireLog()
    handle = serve_asgi_in_thread(WireRecorder(LegacyOnly(mcp.streamable_http_app(streamable_http_path=MCP_PATH)), log))
    handle.log = log
    handle.asked = asked
    return handle
