"""mrtrweb installs into someone else's Django project: its own prefix, base template and settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import django
django.setup()
from django.core.management import call_command
call_command("check", fail_level="ERROR")
call_command("migrate", verbosity=0)
from django.contrib.auth import get_user_model
from django.test import Client
from mrtrweb.models import Tenant, Membership, McpServer
from mrtrweb import conf
u = get_user_model().objects.create_user("portal-user", password="pw-portal-1")
t = Tenant.objects.create(name="Portal tenant", slug="portal")
Membership.objects.create(tenant=t, user=u)
McpServer.objects.create(tenant=t, name="Portal MCP", url="https://mcp.portal.example/mcp")
c = Client()
r = c.get("/portal/mcp/")
assert r.status_code == 302 and r["Location"].startswith("/portal/login/"), (r.status_code, r.get("Location"))
c.force_login(u)
r = c.get("/portal/mcp/")
body = r.content.decode()
assert r.status_code == 200, r.status_code
assert "ACME PORTAL" in body and "Portal MCP" in body and 'href="/portal/mcp/servers/' in body, body
assert conf.get("TTL_S") == 300 and conf.policy().ttl_s == 300
for probe, state in (("/portal/mcp/healthz", "live"), ("/portal/mcp/readyz", "ready")):  # mrtrweb.health's patterns
    r = Client().get(probe)
    assert r.status_code == 200 and r.json() == {"status": state} and r["Cache-Control"] == "no-store", r.content
assert Client().get("/readyz").status_code == 404  # no middleware in this project: nothing at the root
from tests.embed_project.asgi import application  # a portal's asgi.py: the full-origin WebSocket check
from mrtrweb.origin import SameOriginValidator
assert isinstance(application.application_mapping["websocket"], SameOriginValidator)
print("EMBED-OK")
"""


def test_app_embeds_into_another_project(tmp_path):
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="tests.embed_project.settings",
               EMBED_DB=str(tmp_path / "embed.sqlite3"), PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and "EMBED-OK" in out.stdout, out.stdout + out.stderr


def test_wheel_ships_templates_static_and_migrations(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                          str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    import zipfile

    (wheel,) = tmp_path.glob("mrtrweb-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("mrtrweb/templates/mrtrweb/_card.html", "mrtrweb/static/mrtrweb/operations.js",
                   "mrtrweb/migrations/0001_initial.py", "mrtrweb/gate/gate.py", "mrtrweb/demo/server.py",
                   "mrtrweb/locale/de/LC_MESSAGES/django.mo", "mrtrweb/locale/de/LC_MESSAGES/django.po"):
        assert needed in names
