"""The proxy's own error pages: what nginx shows when no worker answers (docs/deploy/production.md,
step 7).

nginx cannot ask a worker for a page when none answers, so these pages are static files shipped
with the app (``mrtrweb/static/mrtrweb/proxy/``, copied by ``collectstatic``, served by nginx's
``error_page``), rendered from ``mrtrweb/proxy_unreachable.html`` in every language of the
catalog. Two cases, told apart by nginx's ``$upstream_bytes_sent``:

* ``unsent`` -- no worker took the request (each refused the connection, or none was left to
  try): nothing of it was sent, so nothing was sent to any MCP server;
* ``maybe-sent`` -- a worker received it and did not answer (a timeout, a worker stopped while
  answering): it may have been carried out; the page says how to find out.

The files are committed; ``tests/runtime/test_proxy_pages.py`` checks they are what this module renders.
After changing the template or a translation::

    .venv/bin/python -m mrtrweb.runtime.proxy_pages
"""

from __future__ import annotations

from pathlib import Path

#: (case, language) -> file name under ``mrtrweb/static/mrtrweb/proxy/``; English has no suffix
PAGES = {
    ("unsent", "en"): "unsent.html",
    ("unsent", "de"): "unsent.de.html",
    ("maybe-sent", "en"): "maybe-sent.html",
    ("maybe-sent", "de"): "maybe-sent.de.html",
}
DIRECTORY = Path(__file__).resolve().parents[1] / "static" / "mrtrweb" / "proxy"  # the package's static/


def render(case: str, language: str) -> str:
    """The page for ``case`` (``unsent`` or ``maybe-sent``) in ``language``."""
    from django.template.loader import render_to_string
    from django.utils import translation

    with translation.override(language):
        return render_to_string("mrtrweb/proxy_unreachable.html", {"unsent": case == "unsent"})


def write(directory: Path = DIRECTORY) -> list[Path]:
    """Render every page into ``directory``; returns the files written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for (case, language), name in PAGES.items():
        path = directory / name
        path.write_text(render(case, language), encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":  # pragma: no cover -- a maintainer's command
    import os

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mrtrweb.site.settings")
    django.setup()
    for path in write():
        print(path)
