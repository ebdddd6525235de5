"""In Chromium: links of odd names lead to their own call page and call exactly that name (the
browser resolves ``..``, ``#`` and ``?`` in paths: here they travel in the query); a result's
download is a file, never a page that renders."""

from __future__ import annotations

import re

import pytest

from mrtrweb.models import McpServer
from tests.browser import OP_URL, TIMEOUT_MS, expect

from .. import hostile_names as hn

pytestmark = [pytest.mark.browser]


@pytest.fixture(scope="module")
def names_mcp():
    handle = hn.serve()
    yield handle
    handle.stop()


@pytest.fixture
def odd(app, names_mcp):
    server = McpServer.objects.create(tenant=app.seeded["servers"]["acme"].tenant, name="Odd names",
                                      url=names_mcp.url)
    names_mcp.log.clear()
    return server, names_mcp


@pytest.mark.parametrize("name", ["a/b", "..", "../../admin", "a#frag", "100%", "a?b=1&c=2", "with space"])
def test_an_odd_name_is_opened_and_called_as_listed(app, odd, name):
    server, mcp = odd
    page = app.sign_in("alice")
    page.goto(f"/mcp/servers/{server.pk}/")
    page.locator("ul.tools a").filter(has_text=re.compile(f"^{re.escape(name)}$")).click()
    expect(page.get_by_role("heading", name=f"Call {name}")).to_be_visible()
    assert page.url.startswith(f"{app.live.url}/mcp/servers/{server.pk}/tools/?name=")
    page.get_by_role("button", name="Call tool").click()
    expect(page).to_have_url(OP_URL)
    expect(page.locator(".result pre.block")).to_have_text(f"called:{name}")
    assert [r.tool for r in mcp.log.tool_calls()] == [name]


def test_the_result_downloads_as_a_file_and_never_renders(app, odd):
    server, mcp = odd
    page = app.sign_in("alice")
    page.goto(f"/mcp/servers/{server.pk}/")
    page.locator("ul.tools a").filter(has_text=re.compile("^big_result$")).click()
    page.get_by_role("button", name="Call tool").click()
    expect(page).to_have_url(OP_URL)
    op_id = OP_URL.search(page.url).group(1)
    expect(page.locator(".result-truncated")).to_be_visible()
    with page.expect_download() as info:
        page.get_by_role("link", name="Download the result").click()
    download = info.value
    assert download.suggested_filename == f"result-{op_id}-truncated.txt"
    assert OP_URL.search(page.url).group(1) == op_id  # still on the operation page
    with open(download.path(), encoding="utf-8") as fh:
        assert fh.read(10) == '{"content"'
    # opened directly, the URL is a download too: the browser renders nothing of it
    other = page.context.new_page()
    with other.expect_download() as info:
        try:
            other.goto(f"/mcp/operations/{op_id}/result/")
        except Exception as exc:  # Playwright: "Download is starting"
            assert "Download is starting" in str(exc)
    assert info.value.suggested_filename == f"result-{op_id}-truncated.txt"
