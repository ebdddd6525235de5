"""Filling Django admin forms as a person does, over https (tests/docs/test_deploy_readme.py follows
the production recipe's admin steps with it, docs/deploy/production.md step 5): read the page's
form, keep what it pre-fills, change only the named fields, post it back with its CSRF token.
"""

from __future__ import annotations

import html.parser
import ssl
import urllib.request
from pathlib import Path

from .topology import WebSession, _NoRedirect


class _Form:
    """One ``<form method="post">``: ``fields`` as a browser would submit them untouched,
    ``options`` per select (value, label, selected)."""

    def __init__(self, form_id: str) -> None:
        self.id = form_id
        self.fields: list[tuple[str, str]] = []
        self.options: dict[str, list[tuple[str, str, bool]]] = {}


class _FormReader(html.parser.HTMLParser):
    """Every POST form of a page (a page may have several: the admin's sign-out is one)."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[_Form] = []
        self._form: _Form | None = None
        self._select: str | None = None
        self._option: list | None = None
        self._textarea: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = {k: (v if v is not None else "") for k, v in attrs}
        if tag == "form" and a.get("method", "").lower() == "post":
            self._form = _Form(a.get("id", ""))
            self.forms.append(self._form)
        form = self._form
        if form is None:
            return
        name = a.get("name", "")
        if tag == "input" and name and "__prefix__" not in name:
            kind = a.get("type", "text").lower()
            if kind in ("checkbox", "radio"):
                if "checked" in a:
                    form.fields.append((name, a.get("value", "on")))
            elif kind not in ("submit", "button", "reset", "file", "image"):
                form.fields.append((name, a.get("value", "")))
        elif tag == "select" and name:  # a "__prefix__" one is the template "Add another" copies
            self._select = name
            form.options[name] = []
        elif tag == "option" and self._select is not None:
            self._option = [a.get("value"), "", "selected" in a]
        elif tag == "textarea" and name and "__prefix__" not in name:
            self._textarea, self._text = name, []

    def handle_data(self, data):
        if self._option is not None:
            self._option[1] += data
        if self._textarea is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        form = self._form
        if form is None:
            return
        if tag == "option" and self._option is not None and self._select is not None:
            value, label, selected = self._option
            label = label.strip()
            form.options[self._select].append((label if value is None else value, label, selected))
            self._option = None
        elif tag == "select" and self._select is not None:
            opts = form.options[self._select]
            chosen = [v for v, _, s in opts if s] or [v for v, _, _ in opts[:1]]
            if "__prefix__" not in self._select:
                form.fields.extend((self._select, v) for v in chosen)
            self._select = None
        elif tag == "textarea" and self._textarea is not None:
            form.fields.append((self._textarea, "".join(self._text).lstrip("\n")))
            self._textarea = None
        elif tag == "form":
            self._form = None


def read_form(page: str) -> _Form:
    """The page's main POST form: the one with the most fields (the admin's add form, not its
    sign-out button).

    Raises:
        AssertionError: the page has no POST form."""
    reader = _FormReader()
    reader.feed(page)
    assert reader.forms, "no POST form on the page"
    return max(reader.forms, key=lambda f: len(f.fields) + len(f.options))


def option_value(form: _Form, select: str, label: str) -> str:
    """The value of the option labelled ``label`` in ``select``.

    Raises:
        AssertionError: no such option."""
    for value, text, _ in form.options.get(select, []):
        if text == label:
            return value
    raise AssertionError(f"no option {label!r} in {select!r}: {form.options.get(select)}")


class TlsSession(WebSession):
    """A :class:`tests.topology.WebSession` over https, trusting ``cafile`` only."""

    def __init__(self, cafile: Path) -> None:
        super().__init__()
        self.ssl = ssl.create_default_context(cafile=str(cafile))
        self.opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=self.ssl),
                                                  urllib.request.HTTPCookieProcessor(self.jar), _NoRedirect)

    def submit(self, url: str, changes: dict[str, str]) -> tuple[int, str, str]:
        """GET the form at ``url``, keep what it pre-fills, change ``changes``, POST it back.
        Returns ``(status, Location, body)``."""
        status, _, page = self.request(url)
        assert status == 200, (url, status, page[:300])
        form = read_form(page)
        data: dict[str, list[str]] = {}
        for name, value in form.fields:
            data.setdefault(name, []).append(value)
        for name, value in changes.items():
            data[name] = [value]
        data.pop("csrfmiddlewaretoken", None)
        return self.request(url, data)
