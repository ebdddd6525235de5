"""The site's own error pages (issue 17): 400, 403, the CSRF failure, 404 extend the app's base
(navigation, favicon) with a plain message and a link home; 500 renders with no request context
and no database. They are the site's (templates/, its DIRS), never forced on a portal by the
reusable app. ``/favicon.ico`` is never a 404. Rendered as in production (DEBUG off)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connections
from django.template import engines
from django.test import Client

pytestmark = [pytest.mark.django_db]

FAVICON = '<link rel="icon" href="/static/mrtrweb/favicon.svg" type="image/svg+xml">'
HOME = '<a class="home-link" href="/mcp/">Back to your MCP servers</a>'
SECRET = "internal detail that is never shown"


@pytest.fixture
def site(settings):
    settings.DEBUG = False
    settings.ROOT_URLCONF = "tests.error_urls"


@pytest.fixture
def alice(site, django_user_model):
    client = Client(raise_request_exception=False)
    client.force_login(django_user_model.objects.create_user("alice-e", password="x"))
    return client


@pytest.mark.parametrize("url, status, heading", [
    ("/mcp/nothing-here/", 404, "This page does not exist"),
    ("/boom/403/", 403, "You may not open this page"),
    ("/boom/400/", 400, "This request could not be understood"),
])
def test_error_pages_extend_the_apps_base(alice, url, status, heading):
    resp = alice.get(url)
    assert resp.status_code == status
    body = resp.content.decode()
    assert f'<h1 id="error-title">{heading}</h1>' in body
    assert f"Error {status}" in body and FAVICON in body and HOME in body
    assert '<header class="top">' in body and "Signed in as <strong>alice-e</strong>" in body  # the app's navigation
    assert SECRET not in body and "Django" not in body


def test_the_404_signed_out(site):
    resp = Client().get("/mcp/operations/00000000-0000-0000-0000-000000000000/nothing/")
    assert resp.status_code == 404
    body = resp.content.decode()
    assert "This page does not exist" in body and HOME in body and "Signed in as" not in body


def test_the_500_page_needs_no_request_and_no_database(alice, monkeypatch):
    resp = alice.get("/boom/500/")
    assert resp.status_code == 500
    body = resp.content.decode()
    assert "Something went wrong on our side" in body and FAVICON in body
    assert '<a class="home-link" href="/">' in body and SECRET not in body
    # as Django renders it: an empty context; any database access fails the render
    def no_database(*args, **kwargs):
        raise AssertionError("the 500 page touched the database")

    monkeypatch.setattr(connections["default"], "cursor", no_database)
    assert "Something went wrong on our side" in engines["django"].get_template("500.html").render()


def test_the_csrf_failure_page(site, django_user_model):
    client = Client(enforce_csrf_checks=True)
    client.force_login(django_user_model.objects.create_user("carol-e", password="x"))
    resp = client.post("/accounts/logout/")
    assert resp.status_code == 403
    body = resp.content.decode()
    assert "This form could not be accepted" in body and "Nothing was sent to any MCP server." in body
    assert FAVICON in body and HOME in body and "CSRF verification failed" not in body


def test_favicon_ico_is_never_a_404(site):
    resp = Client().get("/favicon.ico")
    assert resp.status_code == 301 and resp["Location"] == "/static/mrtrweb/favicon.svg"
    svg = Path(__file__).resolve().parents[2] / "mrtrweb" / "static" / "mrtrweb" / "favicon.svg"
    assert svg.read_text().startswith("<svg")


def test_the_reusable_app_ships_no_site_error_pages():
    """A portal embedding the app keeps its own error pages: they live in the site's templates/."""
    app_templates = Path(__file__).resolve().parents[2] / "mrtrweb" / "templates"
    site_templates = Path(__file__).resolve().parents[2] / "templates"
    for name in ("400.html", "403.html", "403_csrf.html", "404.html", "500.html"):
        assert not list(app_templates.rglob(name)), name
        assert (site_templates / name).is_file(), name
