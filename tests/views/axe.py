"""axe-core in the real-browser tests: a signed-in page it can be injected into, and the serious
violations it finds. The fixture ``axe_js`` (axe.min.js) is in ``tests/views/conftest.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.browser import PASSWORDS, TIMEOUT_MS, expect


def sign_in_page(app, username: str, *, bypass_csp: bool = False):
    """A new browser context of ``app`` with ``username`` signed in (``bypass_csp``: axe can be injected)."""
    context = app.browser.new_context(base_url=app.live.url, viewport={"width": 1100, "height": 1400},
                                      bypass_csp=bypass_csp)
    context.set_default_timeout(TIMEOUT_MS)
    app.contexts.append(context)
    page = context.new_page()
    page.goto("/accounts/login/?next=/mcp/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORDS[username])
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("header .who")).to_have_text(f"Signed in as {username}")
    return page


def serious_violations(page, axe_js: Path) -> list[dict]:
    """axe-core's violations of impact serious/critical on the page as it is now."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.add_script_tag(path=str(axe_js))
    result = page.evaluate("""async () => {
        const r = await window.axe.run(document, {resultTypes: ['violations']});
        return r.violations.map((v) => ({id: v.id, impact: v.impact, help: v.help,
            nodes: v.nodes.map((n) => ({target: n.target, summary: n.failureSummary}))}));
    }""")
    if os.environ.get("AXE_REPORT"):
        print(f"\naxe {page.url}: " + ", ".join(f"{v['id']}[{v['impact']}]" for v in result))
    return [v for v in result if v["impact"] in ("serious", "critical")]
