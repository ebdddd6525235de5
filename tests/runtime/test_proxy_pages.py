"""The proxy's own error pages (mrtrweb.runtime.proxy_pages): the committed static files are the template
rendered in each language, so a changed text or translation cannot leave nginx showing a stale
page. tests/docs/test_deploy_readme.py shows nginx serving them when no worker answers."""

from __future__ import annotations

import pytest

from mrtrweb.runtime import proxy_pages


@pytest.mark.parametrize(("case", "language"), sorted(proxy_pages.PAGES))
def test_committed_page_is_the_template_rendered(case, language):
    path = proxy_pages.DIRECTORY / proxy_pages.PAGES[case, language]
    assert path.read_text(encoding="utf-8") == proxy_pages.render(case, language), (
        f"{path} is stale: run .venv/bin/python -m mrtrweb.runtime.proxy_pages")


def test_pages_say_what_happened_in_each_language():
    unsent = proxy_pages.render("unsent", "en")
    assert "nothing was sent to any MCP server" in unsent and '<html lang="en">' in unsent
    assert "may have been carried out" in proxy_pages.render("maybe-sent", "en")
    german = proxy_pages.render("unsent", "de")
    assert "An keinen MCP-Server wurde etwas gesendet" in german and '<html lang="de">' in german
    assert "Antwort wird nie zweimal gesendet" in proxy_pages.render("maybe-sent", "de")
    for page in map(lambda key: proxy_pages.render(*key), proxy_pages.PAGES):
        assert "<script" not in page and "/static/mrtrweb/app.css" in page
