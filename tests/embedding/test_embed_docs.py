"""docs/embedding.md followed as written, from the built wheel, to a consent card answered in
Chromium (issue 26, item 5: a portal team followed that page alone).

Real parts: mrtrweb's wheel built from this tree (``pip wheel --no-deps`` of a copy) and installed with
``--no-deps`` into a fresh virtual environment whose other packages (Django, Channels, uvicorn...)
are this test environment's (a ``.pth`` line: its plain directory, so the editable mrtrweb of the
test environment is not importable there: the portal imports the wheel's); a project made by
``django-admin startproject yourportal``; every block docs/embedding.md marks (tests/embed_docs.py),
in order, with substitutions only for the wheel's path, the Redis address and the port; a private
``redis-server``; the page's own uvicorn command; the demo MCP server; Debian's Chromium, with a
session of a user of the portal's own organisation (made by ``force_login``: the portal's login
view is the portal's business, the page does not write one).

A doc edit that breaks the recipe breaks this test; so does an edit of a literal the test
substitutes (each must occur in the page).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import site
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mrtrweb.bench.common import free_port, wait_port

from ..embed_docs import DOC, ROOT, follow, steps
from ..faults import RedisServer

pytestmark = [pytest.mark.browser]

playwright_sync = pytest.importorskip("playwright.sync_api")
expect = playwright_sync.expect

WHEEL_LITERAL = "python -m pip install mrtrweb-0.1.0-py3-none-any.whl"
DEPLOY_RESULT = ("Deployed 3 replica(s) to production (ticket CHG-1042; region us-east-1; window 3h; "
                 "contact ops@example.test; notify email, slack).")

SEED = r"""
import json
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
import mrtrweb
from mrtrweb.models import McpServer, Tenant
from orgs.models import Organization, OrgMember
user = get_user_model().objects.create_user("pat", password="not-used-here-1")
org = Organization.objects.create(title="ACME Operations")
OrgMember.objects.create(org=org, user=user)
client = Client()
client.force_login(user)  # user_logged_in: the portal's resolver makes the tenant and the membership
tenant = Tenant.objects.get(external_key=str(org.uid))
McpServer.objects.create(tenant=tenant, name="Demo server", url=MCP_URL)
print(json.dumps({"session": client.cookies[settings.SESSION_COOKIE_NAME].value, "tenant": tenant.name,
                  "mrtrweb": mrtrweb.__file__}))
"""


def _venv(tmp_path: Path) -> Path:
    """A fresh virtual environment with this environment's packages behind its own, but not the
    editable mrtrweb (its finder is a .pth file, which a plain path line does not run)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    (purelib,) = (venv / "lib").glob("python3*/site-packages")
    (purelib / "test-env-packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return venv


def _env(venv: Path) -> dict[str, str]:
    leaks = ("DJANGO_", "MRTRWEB_", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTEST_", "REDIS_", "DATABASE_URL")
    env = {k: v for k, v in os.environ.items() if not k.startswith(leaks)}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and Path(p).resolve() != Path(sys.prefix, "bin")]
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *path])
    env["VIRTUAL_ENV"] = str(venv)
    return env


def test_the_embedding_page_from_the_wheel_to_an_answered_card(tmp_path, demo_mcp):
    from tests.browser import CHROMIUM, CHROMIUM_ARGS

    started = time.monotonic()
    doc = DOC.read_text()
    recipe = steps(doc)
    kinds = [s.kind for s in recipe]
    for kind in ("shell", "append", "write", "daemon"):
        assert kind in kinds, f"docs/embedding.md has no {kind!r} step"

    # built from a copy: setuptools writes build/ and *.egg-info/ into the source tree, which another
    # test process may be building from at the same moment
    source = tmp_path / "source"
    shutil.copytree(ROOT / "mrtrweb", source / "mrtrweb", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"),
                          str(source)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    (wheel,) = (tmp_path / "dist").glob("mrtrweb-*.whl")
    venv = _venv(tmp_path)
    python = venv / "bin" / "python"
    env = _env(venv)
    project = tmp_path / "portal"
    project.mkdir()
    subprocess.run([str(python), "-m", "django", "startproject", "yourportal", str(project)], check=True, env=env,
                   timeout=60)

    redis = RedisServer()
    port = free_port()
    subs = [(WHEEL_LITERAL, f"{sys.executable} -m pip --python {python} install -q --no-deps --no-index {wheel}"),
            ("redis://127.0.0.1:6379", f"redis://127.0.0.1:{redis.port}"),
            ("uvicorn yourportal.asgi:application", "python -m uvicorn yourportal.asgi:application"),
            ("--port 8000", f"--port {port}")]
    for literal, _ in subs:
        assert literal in doc, f"the test substitutes {literal!r}, which docs/embedding.md no longer has"
    server = None
    log = tmp_path / "uvicorn.log"
    try:
        (daemon,) = follow(recipe, project, env, subs)
        assert (project / "staticfiles" / "mrtrweb" / "operations.js").is_file()  # collectstatic ran
        seed = subprocess.run([str(python), "manage.py", "shell", "-c", f"MCP_URL = {demo_mcp.url!r}\n{SEED}"],
                              cwd=project, env=env, capture_output=True, text=True, timeout=60)
        assert seed.returncode == 0, seed.stderr
        seeded = json.loads(seed.stdout.strip().splitlines()[-1])
        assert seeded["tenant"] == "ACME Operations"
        assert Path(seeded["mrtrweb"]).is_relative_to(venv), seeded  # the wheel's mrtrweb, not this tree's

        with log.open("w") as fh:
            server = subprocess.Popen(["bash", "-euo", "pipefail", "-c", f"exec {daemon}"], cwd=project, env=env,
                                      stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        wait_port(port, timeout_s=60, proc=server, log=log)
        base = f"http://127.0.0.1:{port}"
        with playwright_sync.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                _answer_a_round(browser, base, seeded["session"])
            finally:
                browser.close()
    finally:
        if server is not None and server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait(timeout=10)
        redis.close()
    uvicorn_log = log.read_text()
    assert "Traceback" not in uvicorn_log and "Application startup complete." in uvicorn_log, uvicorn_log[-3000:]
    print(f"docs/embedding.md from the wheel: {time.monotonic() - started:.1f} s")


def _answer_a_round(browser, base: str, session: str) -> None:
    context = browser.new_context(base_url=base, viewport={"width": 1100, "height": 1400})
    context.set_default_timeout(15_000)
    context.add_cookies([{"name": "sessionid", "value": session, "url": base}])
    page = context.new_page()
    violations: list[str] = []
    page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    statics: dict[str, int] = {}
    page.on("response", lambda r: statics.__setitem__(r.url, r.status) if "/static/" in r.url else None)

    response = page.goto("/apps/mcp/")
    assert response.status == 200 and "script-src 'self'" in response.headers.get("content-security-policy", "")
    page.get_by_role("link", name="Demo server").click()
    page.locator("a[data-tool='deploy']").click()
    page.locator("[name='arg-replicas']").fill("3")
    page.locator("[name='arg-env']").select_option("production")
    page.get_by_role("button", name="Call tool").click()
    page.wait_for_url("**/apps/mcp/operations/*/")
    expect(page.locator("#operation")).to_have_attribute("data-ws-state", "open")  # /ws/mrtrweb/ under uvicorn
    expect(page.locator("#live-script-missing")).to_have_count(0)  # operations.js was served and ran
    card = page.locator("#operation form.card")
    expect(card).to_be_visible()
    card.get_by_label("Confirm deployment").check()
    card.get_by_label("Change ticket").fill("CHG-1042")
    card.get_by_label("Contact email").fill("ops@example.test")
    card.get_by_label("Maintenance window (hours)").fill("3")
    card.get_by_label("Region").select_option(label="US East (N. Virginia)")
    card.get_by_label("email", exact=True).check()
    card.get_by_label("slack", exact=True).check()
    with page.expect_navigation():
        card.get_by_role("button", name="Accept", exact=True).click()
    review = page.locator("#operation form.review")
    expect(review).to_be_visible()
    with page.expect_navigation():
        review.get_by_role("button", name="Send", exact=True).click()
    expect(page.locator(".result pre.block")).to_have_text(DEPLOY_RESULT)
    assert statics and all(status in (200, 304) for status in statics.values()), statics  # 304: cached
    assert any(url.endswith("/static/mrtrweb/operations.js") for url in statics), statics
    assert violations == [], violations
    context.close()
