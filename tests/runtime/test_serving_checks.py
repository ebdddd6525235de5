"""System checks of how a project serves mrtrweb (mrtrweb/runtime/serving_checks.py): static files that
nobody serves (E040, W040, W041, W042), a runserver without WebSockets (W043); and E020's hint,
which speaks to a portal of its own settings, not of the standalone site's var/."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

from django.core.checks import run_checks
from django.core.management import call_command

from mrtrweb.bench.common import free_port

ROOT = Path(__file__).resolve().parents[2]


def _by_id(**kw) -> dict[str, object]:
    return {m.id: m for m in run_checks(include_deployment_checks=True, **kw) if m.id.startswith("mrtrweb.")}


def test_static_url_and_the_staticfiles_app(settings):
    assert not {"mrtrweb.E040", "mrtrweb.W040"} & set(_by_id())
    settings.INSTALLED_APPS = [a for a in settings.INSTALLED_APPS if a != "django.contrib.staticfiles"]
    found = _by_id()
    assert "mrtrweb.W040" in found and "mrtrweb.E040" not in found
    assert "collectstatic" in found["mrtrweb.W040"].hint and "mrtrweb/operations.js" in found["mrtrweb.W040"].msg
    settings.STATIC_URL = None
    found = _by_id()
    assert found["mrtrweb.E040"].is_serious() and "mrtrweb.W040" in found


def test_collectstatic_not_run_warns_on_deploy_with_debug_off(settings, tmp_path):
    settings.DEBUG = False
    settings.STATIC_ROOT = None
    assert "mrtrweb.W041" in _by_id() and "mrtrweb.W041" not in {m.id for m in run_checks()}  # a deploy check
    settings.STATIC_ROOT = str(tmp_path / "static")
    found = _by_id()
    assert "mrtrweb.W041" not in found and "lacks" in found["mrtrweb.W042"].msg
    call_command("collectstatic", interactive=False, verbosity=0)
    collected = tmp_path / "static" / "mrtrweb" / "operations.js"
    assert collected.is_file() and "mrtrweb.W042" not in _by_id()
    collected.write_text(collected.read_text() + "\n// an older mrtrweb's copy\n")
    assert "another version" in _by_id()["mrtrweb.W042"].msg
    settings.DEBUG = True  # runserver / ASGIStaticFilesHandler serve the apps' own files
    assert not {"mrtrweb.W041", "mrtrweb.W042"} & set(_by_id())
    settings.DEBUG = False
    settings.INSTALLED_APPS = [a for a in settings.INSTALLED_APPS if a != "django.contrib.staticfiles"]
    assert "mrtrweb.W042" not in _by_id() and "mrtrweb.W040" in _by_id()


def test_the_standalone_site_silences_w042_while_it_serves_static_itself():
    script = "import django; django.setup(); from django.conf import settings; print(settings.SILENCED_SYSTEM_CHECKS)"
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="mrtrweb.site.settings")
    for value, expected in (("1", "['mrtrweb.W042']"), ("0", "[]")):
        out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
                             env=dict(env, MRTRWEB_SERVE_STATIC=value))
        assert out.stdout.strip() == expected, out.stdout + out.stderr


def test_e020_hint_speaks_to_the_project_it_runs_in(settings):
    settings.DEBUG = False
    settings.SECRET_KEY = "too-short"
    (site,) = [m for m in run_checks() if m.id == "mrtrweb.E020"]
    assert "var/" in site.hint and "DJANGO_SECRET_KEY" in site.hint
    settings.ROOT_URLCONF = "tests.embed_project.urls"  # a portal's
    (portal,) = [m for m in run_checks() if m.id == "mrtrweb.E020"]
    assert "var/" not in portal.hint and "standalone" not in portal.hint
    assert "your project's SECRET_KEY" in portal.hint and "secrets.token_urlsafe(50)" in portal.hint


def _runserver(tmp_path: Path, settings_module: str) -> str:
    """``django-admin runserver`` in a portal (tests/embed_project) until it serves; its output."""
    port = free_port()
    log = tmp_path / f"{settings_module}.log"
    env = dict(os.environ, DJANGO_SETTINGS_MODULE=settings_module, EMBED_DB=str(tmp_path / "embed.sqlite3"),
               PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "django", "runserver", "--noreload", f"127.0.0.1:{port}"],
                                cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while "Quit the server" not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        text = log.read_text()
        assert "Quit the server" in text, text
        return text
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_runserver_without_websockets_says_what_to_run(tmp_path):
    """Django's own runserver is WSGI: W043 at its start names daphne and uvicorn. daphne's
    runserver (first in INSTALLED_APPS, ASGI_APPLICATION set) serves the WebSocket: no W043.
    Plain ``check`` (not runserver) says nothing."""
    text = _runserver(tmp_path, "tests.embed_project.settings")
    assert "mrtrweb.W043" in text and "uvicorn yourportal.asgi:application" in text, text
    (tmp_path / "daphne_portal.py").write_text(
        "from tests.embed_project.settings import *  # noqa: F403\n"
        "INSTALLED_APPS = ['daphne', *INSTALLED_APPS]  # noqa: F405\n"
        "ASGI_APPLICATION = 'tests.embed_project.asgi.application'\n"
        f"SECRET_KEY = {secrets.token_urlsafe(50)!r}\n")
    text = _runserver(tmp_path, "daphne_portal")
    assert "mrtrweb.W043" not in text and "ASGI/Daphne" in text, text
    out = subprocess.run([sys.executable, "-m", "django", "check"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=60, env=dict(os.environ, DJANGO_SETTINGS_MODULE="tests.embed_project.settings",
                                              EMBED_DB=str(tmp_path / "e.sqlite3"), PYTHONPATH=str(ROOT)))
    assert out.returncode == 0 and "mrtrweb.W043" not in out.stdout + out.stderr, out.stdout + out.stderr
