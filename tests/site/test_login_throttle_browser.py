"""What a person sees when sign-in is locked (Chromium, the site under uvicorn): after five wrong
passwords the sign-in page says so, and the right password does not get in until the cool-off."""

from __future__ import annotations

import pytest

from tests.browser import CHROMIUM

pytestmark = [pytest.mark.browser]

playwright_sync = pytest.importorskip("playwright.sync_api")
expect = playwright_sync.expect


@pytest.fixture
def alice(transactional_db, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_user("alice", password="alice-right-pw")


def _submit(page, password: str) -> None:
    page.goto("/accounts/login/?next=/mcp/")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()


def test_a_locked_sign_in_says_why_and_lets_nobody_in(browser, live, alice):  # noqa: F811
    context = browser.new_context(base_url=live.url)
    try:
        page = context.new_page()
        page.set_default_timeout(10_000)
        for i in range(4):
            _submit(page, f"wrong-{i}")
            expect(page.get_by_role("alert")).to_contain_text("did not match")
        _submit(page, "wrong-4")
        alert = page.get_by_role("alert")
        expect(alert).to_contain_text("Too many failed sign-ins")
        expect(alert).to_contain_text("Try again in 15 minutes.")
        _submit(page, "alice-right-pw")
        expect(page.get_by_role("alert")).to_contain_text("Too many failed sign-ins")
        expect(page.locator("header .who")).to_have_count(0)
        expect(page.get_by_role("link", name="Back to sign in")).to_have_attribute("href", "/accounts/login/")
        page.goto("/mcp/")
        expect(page).to_have_url(live.url + "/accounts/login/?next=/mcp/")
    finally:
        context.close()
