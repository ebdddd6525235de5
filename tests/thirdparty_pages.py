"""A person's steps on the pages of a server added to alice's tenant, for the real-browser interop
tests (the TypeScript server, the third-party servers) and the session-requests one; their fixture
``signed_in`` is in :mod:`tests.browser`.
"""

from __future__ import annotations

import re

from tests.browser import expect

OP_URL = re.compile(r"/mcp/operations/([0-9a-f-]{36})/$")
#: the roots a tenant admin gives the third-party servers that ask for them
ROOTS = [{"uri": "file:///srv/project", "name": "project"}]


def call_from_list(page, tool: str, args: dict[str, str], server_name: str) -> str:
    """From the server list: open the server, the tool, fill
    its arguments, call it; returns the operation id."""
    page.goto("/mcp/")
    page.get_by_role("link", name=server_name).click()
    expect(page.get_by_role("heading", name=server_name)).to_be_visible()
    page.locator(f"a[data-tool='{tool}']").click()
    expect(page.get_by_role("heading", name=f"Call {tool}")).to_be_visible()
    for name, value in args.items():
        page.locator(f"[name='arg-{name}']").fill(value)
    page.get_by_role("button", name="Call tool").click()
    expect(page).to_have_url(OP_URL)
    return OP_URL.search(page.url).group(1)


def call_tool(page, server_name: str, tool: str, args: dict[str, str]) -> str:
    return call_from_list(page, tool, args, server_name)


def card(page):
    return page.locator("#operation form.card")


def accept(page) -> None:
    """Accept the card as a person does: Accept shows the review (nothing sent yet), Send sends it;
    the browser lands on the operation page."""
    with page.expect_navigation():
        card(page).get_by_role("button", name="Accept", exact=True).click()
    review = page.locator("#operation form.review")
    expect(review).to_be_visible()
    with page.expect_navigation():
        review.get_by_role("button", name="Send", exact=True).click()


def results(page):
    return page.locator(".result pre.block-text")
