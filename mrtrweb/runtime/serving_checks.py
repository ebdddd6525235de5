"""System checks of how a project serves mrtrweb's pages: its static files (the operation page's
live script, ``mrtrweb/operations.js``) and its WebSocket (``/ws/mrtrweb/``, ASGI only).

A portal that gets either wrong sees no error at all: the operation page waits at "Running" and
no consent card ever arrives (docs/embedding.md, "Static files" and "Run it"). These checks say
so at ``check``, ``migrate`` and ``runserver`` (or ``check --deploy``) instead.
"""

from __future__ import annotations

import filecmp
import sys
from pathlib import Path

from django.core.checks import Error, Tags, Warning, register

#: the file whose absence or staleness in ``STATIC_ROOT`` means collectstatic was not run (since
#: this mrtrweb was installed): the operation page's live script
LIVE_SCRIPT = "mrtrweb/operations.js"
_STATICFILES = "django.contrib.staticfiles"
_DOC = "docs/embedding.md, section 2 (static files)"


def _packaged_script() -> Path:
    return Path(__file__).resolve().parents[1] / "static" / LIVE_SCRIPT  # the package's static/


@register(Tags.compatibility)
def check_static_files(app_configs=None, **kwargs) -> list:
    """E040: ``STATIC_URL`` is unset (mrtrweb's pages cannot name their script and stylesheet:
    with ``django.contrib.staticfiles`` every page fails, without it the URLs are relative and
    404). W040: ``django.contrib.staticfiles`` is not installed (nothing finds or collects the
    app's ``static/`` files, so nothing serves them unless the project copies them itself)."""
    from django.conf import settings

    messages = []
    if not getattr(settings, "STATIC_URL", None):
        messages.append(Error(
            "STATIC_URL is not set: mrtrweb's pages cannot link their stylesheet and live script "
            f"({LIVE_SCRIPT}), so the operation page never receives its consent cards.",
            hint=f'Set STATIC_URL = "static/" (and STATIC_ROOT; see {_DOC}).', id="mrtrweb.E040"))
    if _STATICFILES not in getattr(settings, "INSTALLED_APPS", []):
        messages.append(Warning(
            f"{_STATICFILES} is not installed: mrtrweb's static files ({LIVE_SCRIPT}, app.css) are neither found "
            "nor collected, so unless you copy them to STATIC_ROOT yourself they answer 404 and the operation "
            "page never receives its consent cards.",
            hint=f"Add {_STATICFILES!r} to INSTALLED_APPS, run manage.py collectstatic and serve STATIC_ROOT at "
                 f"STATIC_URL ({_DOC}).", id="mrtrweb.W040"))
    return messages


@register(Tags.staticfiles, deploy=True)
def check_collected(app_configs=None, **kwargs) -> list:
    """``check --deploy`` with ``DEBUG`` off (Django serves no static file then; a web server
    serves ``STATIC_ROOT``). W041: ``STATIC_ROOT`` is unset, so collectstatic has nowhere to copy
    mrtrweb's files. W042: ``STATIC_ROOT`` lacks this mrtrweb's live script, or holds another
    version of it: collectstatic has not been run since this mrtrweb was installed. Only for the
    file-system storages (a remote storage is not read at check time). A project whose ASGI
    application serves static files itself (``ASGIStaticFilesHandler`` reads the apps' own
    directories) silences W042."""
    from django.conf import settings

    if settings.DEBUG or _STATICFILES not in getattr(settings, "INSTALLED_APPS", []):
        return []
    root = getattr(settings, "STATIC_ROOT", None)
    if not root:
        return [Warning(
            "STATIC_ROOT is not set: collectstatic has nowhere to copy mrtrweb's static files, and with DEBUG off "
            f"nothing serves them ({LIVE_SCRIPT} answers 404: no consent card reaches the operation page).",
            hint=f"Set STATIC_ROOT, run manage.py collectstatic and serve it at STATIC_URL ({_DOC}).",
            id="mrtrweb.W041")]
    from django.core.files.storage import FileSystemStorage, storages

    try:
        local = isinstance(storages["staticfiles"], FileSystemStorage)
    except Exception:  # noqa: BLE001 -- a storage that cannot be set up is reported by Django's own checks
        return []
    if not local:
        return []
    collected = Path(root) / LIVE_SCRIPT
    if not collected.is_file() or not filecmp.cmp(collected, _packaged_script(), shallow=False):
        what = "lacks" if not collected.is_file() else "holds another version of"
        return [Warning(
            f"STATIC_ROOT {what} mrtrweb's live script ({LIVE_SCRIPT}): collectstatic has not been run since this "
            "mrtrweb was installed, so the operation page loads no script (or an old one).",
            hint="Run manage.py collectstatic --noinput after every install or upgrade of mrtrweb (silence "
                 "mrtrweb.W042 if your ASGI application serves the apps' static files itself).",
            id="mrtrweb.W042")]
    return []


def _running_runserver() -> bool:
    """This process is ``manage.py runserver`` (or ``django-admin runserver``)."""
    return len(sys.argv) > 1 and sys.argv[1] == "runserver"


@register(Tags.compatibility)
def check_runserver_serves_websockets(app_configs=None, **kwargs) -> list:
    """W043, under ``runserver`` only: Django's own runserver (and staticfiles') is WSGI, so
    ``/ws/mrtrweb/`` answers 404 and no consent card reaches the operation page; daphne's
    runserver (``"daphne"`` first in ``INSTALLED_APPS``) serves the project's ASGI application,
    which ``ASGI_APPLICATION`` must name."""
    if not _running_runserver():
        return []
    from django.conf import settings
    from django.core.management import get_commands

    if get_commands().get("runserver") != "daphne":
        return [Warning(
            "runserver here is Django's WSGI server: the WebSocket /ws/mrtrweb/ answers 404, so operations stay at "
            "\"Running\" and no consent card reaches the page.",
            hint='pip install daphne and put "daphne" first in INSTALLED_APPS (with ASGI_APPLICATION set), or run '
                 "an ASGI server: uvicorn yourportal.asgi:application --lifespan on.", id="mrtrweb.W043")]
    if not getattr(settings, "ASGI_APPLICATION", None):
        return [Warning(
            "runserver is daphne's but ASGI_APPLICATION is not set: it cannot serve mrtrweb's WebSocket.",
            hint='Set ASGI_APPLICATION = "yourportal.asgi.application".', id="mrtrweb.W043")]
    return []
