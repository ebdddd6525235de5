"""A portal with organisations of its own (tests/embed_orgs: an ``Organization`` and an ``OrgMember``
model) embeds mrtrweb: its tenant resolver maps the organisations to tenants, so nobody keeps two
lists. Run in a subprocess as tests/embedding/test_embedding.py does (its own INSTALLED_APPS and migrations).
Its base template extends mrtrweb's and overrides the documented blocks (docs/embedding.md); the
card page under those blocks is tested in tests/embedding/test_template_blocks.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import django
django.setup()
from unittest import mock
from django.core.management import call_command
call_command("check", fail_level="WARNING")  # no W030: the sync middleware is in place
call_command("migrate", verbosity=0)
from django.contrib.auth import get_user_model
from django.db import OperationalError
from django.test import Client
from mrtrweb.models import McpServer, Membership, Tenant
from tests.embed_orgs.orgs import tenancy as portal_tenancy
from tests.embed_orgs.orgs.models import Organization, OrgMember

User = get_user_model()
pat, max_, owen, nobody, newbie = (User.objects.create_user(n, password="pw-portal-1")
                                   for n in ("pat", "max", "owen", "nobody", "newbie"))
x, y = Organization.objects.create(title="Org X"), Organization.objects.create(title="Org Y")
OrgMember.objects.create(org=x, user=pat)
OrgMember.objects.create(org=x, user=max_)
OrgMember.objects.create(org=y, user=owen, is_owner=True)

def client(user):
    c = Client()
    c.force_login(user)  # user_logged_in: the resolver is asked
    return c

def held(user):
    return dict(Membership.objects.filter(user=user).values_list("tenant__name", "role"))

cp, cm, co, cn = client(pat), client(max_), client(owen), client(nobody)
tx, ty = Tenant.objects.get(external_key=str(x.uid)), Tenant.objects.get(external_key=str(y.uid))
assert (tx.name, ty.name) == ("Org X", "Org Y") and held(pat) == held(max_) == {"Org X": "member"}, held(pat)
assert held(owen) == {"Org Y": "admin"} and held(nobody) == {}, (held(owen), held(nobody))
sx = McpServer.objects.create(tenant=tx, name="X MCP", url="https://mcp.x.example/mcp")
sy = McpServer.objects.create(tenant=ty, name="Y MCP", url="https://mcp.y.example/mcp")

# a member of org X sees X's servers, not Y's; the portal's blocks are on the page, mrtrweb's nav too
r = cp.get("/apps/mcp/")
body = r.content.decode()
assert r.status_code == 200 and "X MCP" in body and "Y MCP" not in body, (r.status_code, body)
for needle in ('id="portal-bar"', 'id="portal-nav-home"', 'id="portal-footer"', 'id="portal-css"', 'id="portal-js"',
               'id="portal-messages"', '<header class="top">', 'class="nav-connections"',
               'id="live"'):
    assert body.count(needle) == 1, needle
assert body.index('id="portal-css"') > body.index("mrtrweb/app.css")  # the portal's styles come after the app's
assert cp.get(f"/apps/mcp/servers/{sx.pk}/").status_code == 200
assert cp.get(f"/apps/mcp/servers/{sy.pk}/").status_code == 404
assert "Y MCP" in co.get("/apps/mcp/").content.decode()

# a member of no organisation sees nothing
body = cn.get("/apps/mcp/").content.decode()
assert "X MCP" not in body and "Y MCP" not in body
assert cn.get(f"/apps/mcp/servers/{sx.pk}/").status_code == 404

# removed from X in the portal: the next request no longer reaches X's servers
OrgMember.objects.filter(org=x, user=pat).delete()
assert cp.get(f"/apps/mcp/servers/{sx.pk}/").status_code == 404
assert "X MCP" not in cp.get("/apps/mcp/").content.decode() and held(pat) == {}

# X renamed in the portal: the tenant is renamed at a member's next request (its slug stays)
slug = tx.slug
x.title = "Org X (renamed)"
x.save()
assert "X MCP" in cm.get("/apps/mcp/").content.decode()
tx.refresh_from_db()
assert (tx.name, tx.slug) == ("Org X (renamed)", slug), (tx.name, tx.slug)

# the portal's database is down: fail closed (nothing granted, no role raised), logged, no 500
OrgMember.objects.create(org=x, user=newbie)
OrgMember.objects.filter(org=x, user=max_).update(is_owner=True)
portal_tenancy.forget(max_.pk)
down = mock.patch.object(portal_tenancy, "OrgMember", mock.Mock(**{"objects.filter.side_effect": OperationalError("portal db down")}))
with down:
    cw = client(newbie)
    assert held(newbie) == {}
    r = cw.get("/apps/mcp/")
    assert r.status_code == 200 and "X MCP" not in r.content.decode()
    r = cm.get("/apps/mcp/")
    assert r.status_code == 200 and held(max_) == {"Org X (renamed)": "member"}, held(max_)
# back up: the next request (nothing was marked fresh) syncs
assert "X MCP" in cw.get("/apps/mcp/").content.decode() and held(newbie) == {"Org X (renamed)": "member"}
assert cm.get("/apps/mcp/").status_code == 200 and held(max_) == {"Org X (renamed)": "admin"}
print("EMBED-ORGS-OK")
"""


def test_portal_organisations_become_tenants(tmp_path):
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="tests.embed_orgs.settings",
               EMBED_DB=str(tmp_path / "orgs.sqlite3"), PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and "EMBED-ORGS-OK" in out.stdout, out.stdout + out.stderr
    failures = [line for line in out.stderr.splitlines() if "tenant_resolver_failed" in line]
    # newbie's sign-in and request, max's request: each logged once, with the stable reason and no detail
    assert len(failures) == 3, out.stderr
    assert all(line.endswith("left as they were (OperationalError)") for line in failures), failures
    assert "portal db down" not in out.stderr
