"""``manage.py mrtrweb_demo`` from scratch: migrates a fresh SQLite, seeds, serves HTTP and the demo
MCP servers, and a signed-in user sees the demo tools; on the protected demo server (OAuth per
user, its own authorization server) Connect goes through the AS's sign-in page and back, in the
command's own process (so ``OUTBOUND_ALLOW_HTTP_LOOPBACK`` is on there), and the tools appear; the
Demo server is seeded with MCP Apps on and ``service_status`` listed with its app. A second demo on a
taken port stops before it changes anything, saying which port and suggesting another."""

from __future__ import annotations

import html
import http.cookiejar
import os
import re
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from mrtrweb.bench.machine import free_port as bench_free_port

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    return bench_free_port()  # a port of this test process's own range (mrtrweb.bench.machine.free_port)


def test_demo_command_serves_the_demo(tmp_path):
    port = _free_port()
    env = dict(os.environ, MRTRWEB_VAR_DIR=str(tmp_path), PYTHONUNBUFFERED="1")
    env.pop("DJANGO_SETTINGS_MODULE", None)
    proc = subprocess.Popen([sys.executable, "manage.py", "mrtrweb_demo", "--port", str(port)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "open http://127.0.0.1" in line:
                break
        out = "".join(lines)
        assert f"open http://127.0.0.1:{port}/" in out, out
        assert re.search(r"user alice\s+password alice-demo-pw", out)
        protected_mcp = re.search(r"Protected demo MCP server .*: (http://127\.0\.0\.1:\d+/mcp)", out).group(1)
        as_url = re.search(r"its demo OAuth authorization server .*: (http://127\.0\.0\.1:\d+)\n", out).group(1)
        assert "OUTBOUND_ALLOW_HTTP_LOOPBACK is on for this demo run" in out and "development only" in out
        assert (tmp_path / "db.sqlite3").exists()
        base = f"http://127.0.0.1:{port}"
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        for _ in range(100):
            try:
                page = opener.open(base + "/accounts/login/", timeout=5).read().decode()
                break
            except OSError:
                time.sleep(0.1)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        data = urllib.parse.urlencode({"username": "alice", "password": "alice-demo-pw",
                                       "csrfmiddlewaretoken": token, "next": "/mcp/"}).encode()
        req = urllib.request.Request(base + "/accounts/login/", data=data, headers={"Referer": base + "/accounts/login/"})
        index = opener.open(req, timeout=10).read().decode()
        server_url = re.search(r'href="(/mcp/servers/\d+/)">Demo server</a>', index).group(1)
        server_page = opener.open(base + server_url, timeout=20).read().decode()
        for tool in ("deploy", "book_trip", "connect_account", "busy_report", "endless", "echo", "service_status"):
            assert f'data-tool="{tool}"' in server_page
        # the demo's MCP App: service_status has one, apps are on for the Demo server (seeded so), and
        # the sandbox is the same port under the host name localhost; the app-only tool is no person's call
        item = next(li for li in server_page.split("<li") if 'data-tool="service_status"' in li)
        assert "has an app" in item
        assert 'data-tool="refresh_status"' not in server_page
        with sqlite3.connect(tmp_path / "db.sqlite3") as db:
            rows = db.execute("SELECT t.slug, s.name, s.apps_enabled FROM mrtrweb_mcpserver s "
                              "JOIN mrtrweb_tenant t ON t.id = s.tenant_id ORDER BY t.slug, s.name").fetchall()
        assert [(slug, bool(on)) for slug, name, on in rows if on] == [("acme", True), ("globex", True)]
        assert {name for _slug, name, on in rows if on} == {"Demo server"}
        assert f"MCP Apps: service_status on Demo server shows the demo's app (sandbox http://localhost:{port};" in out
        # the legacy (2025-11-25) demo server is started and seeded too
        legacy_url = re.search(r'href="(/mcp/servers/\d+/)">Demo \(legacy 2025-11-25\)</a>', index).group(1)
        legacy_page = opener.open(base + legacy_url, timeout=20).read().decode()
        for tool in ("legacy_deploy", "legacy_connect", "legacy_trip"):
            assert f'data-tool="{tool}"' in legacy_page
        css = opener.open(base + "/static/mrtrweb/app.css", timeout=5)
        assert css.status == 200
        # the protected demo server: Connect -> the demo AS's sign-in page -> Approve -> back, connected
        protected_url = re.search(r'href="(/mcp/servers/\d+/)">Demo \(OAuth per user\)</a>', index).group(1)
        page = opener.open(base + protected_url, timeout=20).read().decode()
        assert "Connect to Demo (OAuth per user) (http://127.0.0.1:" in page and 'data-tool="whoami"' not in page
        connect = re.search(r'<form method="post" action="(/mcp/oauth/connect/\d+/)"', page).group(1)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        req = urllib.request.Request(base + connect, data=urllib.parse.urlencode({"csrfmiddlewaretoken": token}).encode(),
                                     headers={"Referer": base + protected_url})
        interstitial = opener.open(req, timeout=20).read().decode()
        assert as_url in interstitial
        go = html.unescape(re.search(r'href="(/mcp/oauth/go/\d+/)"', interstitial).group(1))
        consent = opener.open(base + go, timeout=20)  # 302 to the AS, 302 to its consent page
        assert consent.url.startswith(as_url + "/consent?")
        consent_page = consent.read().decode()
        assert "Sign in to the demo authorization server" in consent_page and html.escape(protected_mcp) in consent_page
        form = {name: html.unescape(re.search(rf'name="{name}" value="([^"]*)"', consent_page).group(1))
                for name in ("request", "csrf")}
        answer = urllib.request.Request(as_url + "/consent", data=urllib.parse.urlencode(
            {**form, "account": "alice", "decision": "approve"}).encode())
        back = opener.open(answer, timeout=20)  # 303 to the callback, which completes and returns to the server page
        assert back.url == base + protected_url
        connected = back.read().decode()
        assert "Connected to Demo (OAuth per user)." in connected
        for tool in ("whoami", "confirm_as_me", "deploy"):
            assert f'data-tool="{tool}"' in connected
        connections = opener.open(base + "/mcp/connections/", timeout=10).read().decode()
        assert "Demo (OAuth per user)</a>" in connections and as_url in connections
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_a_second_demo_on_a_taken_port_changes_nothing(seeded):
    """The port (and any demo port asked for) is checked before anything changes: a second
    ``./dev demo`` while the first one runs leaves its database and servers alone, and says why."""
    import threading

    import pytest
    from django.contrib.auth import get_user_model
    from django.core.management import CommandError, call_command

    from mrtrweb.models import McpServer, Membership

    def state():
        return (sorted(McpServer.objects.values_list("pk", "name", "url", "enabled", "apps_enabled", "updated_at")),
                sorted(get_user_model().objects.values_list("username", "password")),
                sorted(Membership.objects.values_list("user__username", "tenant__slug", "role")))

    before = state()
    threads = {t.name for t in threading.enumerate()}
    with socket.socket() as web, socket.socket() as oauth:
        web.bind(("127.0.0.1", 0))
        web.listen()
        oauth.bind(("127.0.0.1", 0))
        oauth.listen()
        port, oauth_port = web.getsockname()[1], oauth.getsockname()[1]
        with pytest.raises(CommandError) as caught:
            call_command("mrtrweb_demo", "--port", str(port), "--mcp-port", "0", "--oauth-port", str(oauth_port))
    message = str(caught.value)
    assert f"{port} (--port: in use)" in message and f"{oauth_port} (--oauth-port: in use)" in message, message
    assert "Nothing was changed" in message and "./dev demo --port N --oauth-port N" in message, message
    assert state() == before
    # no demo server was started either
    assert {t.name for t in threading.enumerate()} - threads == set()
