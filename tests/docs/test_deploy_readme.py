"""The production recipe (docs/deploy/production.md, then the rolling restart of
docs/deploy/upgrading.md), followed from a fresh clone to two workers behind nginx.

Only the pages' marked blocks are run (tests/deploy_recipe.py), with substitutions for the host
name, ports, paths, the repository URL, role/database names, passwords, the PostgreSQL and Redis
addresses and the TLS certificate. An edit of those pages that breaks the recipe breaks this test;
so does an edit of a literal the test substitutes (each must occur in the recipe).

Real parts: ``git clone`` of the committed HEAD, ``python3 -m venv`` and ``pip install .`` (no test
extra; about 40 s here from the machine's package index), Debian's nginx (``-p``/``-c``: pid, logs
and temporary files in a temporary directory, high ports), the unit's ``ExecStart`` per worker
with only its ``EnvironmentFile`` (as systemd runs it), a private PostgreSQL role and database
created by the recipe's SQL, a private ``redis-server``, the demo MCP server started by the
recipe's command. About 2.5 minutes in all (the rolling restart under load and the stopped workers
about 35 s of it).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from ..admin_forms import TlsSession, option_value, read_form
from ..deploy_recipe import (RECIPE_PAGES, ROOT, Deployment, Terminal, clean_env, exec_start, nginx_conf,
                            parse_env_file, parse_unit, recipe_text, steps, substitute)
from ..topology import PG_ADMIN, WebSession, free_port, status_in

pytestmark = [pytest.mark.services]

def _head_recipe() -> str:
    """The recipe's pages as committed (the clone the recipe makes is of HEAD)."""
    return recipe_text({page: subprocess.run(["git", "show", f"HEAD:{page}"], cwd=ROOT, capture_output=True,
                                             text=True, check=True).stdout for page in RECIPE_PAGES})


def _follow(d: Deployment) -> None:
    section = _head_recipe()
    recipe = steps(section)
    kinds = [s.kind for s in recipe]
    for kind in ("root", "shell", "sql", "daemon", "systemd", "nginx", "rolling"):
        assert kind in kinds, f"the production recipe has no {kind!r} step"
    # The packages the root steps install must be here (the test does not run apt-get).
    for step in (s for s in recipe if s.kind == "root"):
        for m in re.finditer(r"apt-get install -y (.+)", step.text):
            for package in m.group(1).split():
                status = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True,
                                        text=True).stdout
                assert status.endswith("installed"), f"package {package} (the recipe's step 1) is not installed"
    instances = [m for s in recipe if s.kind == "root" for m in re.findall(r"mrtrweb@(\d+)", s.text)]
    assert len(instances) == 2, instances
    d.workers = {name: free_port() for name in instances}
    subs = d.substitutions(section, d.workers)
    env = clean_env()
    terminal = Terminal(d.base / "terminal.state", d.base, env)
    for n, step in enumerate(recipe):
        text = substitute(step.text, subs)
        if step.kind == "shell":
            d.output[f"shell{n}"] = terminal.run(text, timeout_s=400)
        elif step.kind == "sql":
            # as typed into psql (one statement at a time, not one transaction)
            out = subprocess.run(["psql", PG_ADMIN, "-v", "ON_ERROR_STOP=1", "-q"], input=text, capture_output=True,
                                 text=True, timeout=60)
            assert out.returncode == 0, out.stderr
        elif step.kind == "daemon":  # in a terminal of its own, from the clone
            port = int(re.findall(r"--port (\d+)", text)[-1])
            name = {d.mcp_port: "mcp", d.loopback_port: "loopback"}[port]
            d.start(name, ["bash", "-euo", "pipefail", "-c", text], cwd=d.srv, env=env, port=port)
        elif step.kind == "systemd":
            d.unit = parse_unit(text)
        elif step.kind == "nginx":
            site = d.nginx_dir / "site.conf"
            site.write_text(text)
            conf = d.nginx_dir / "nginx.conf"
            conf.write_text(nginx_conf(d.nginx_dir, site, as_root=os.geteuid() == 0))
            nginx = shutil.which("nginx") or "/usr/sbin/nginx"  # Debian's (./dev test installs nginx-light)
            test = subprocess.run([nginx, "-t", "-p", str(d.nginx_dir), "-c", str(conf), "-e",
                                   str(d.nginx_dir / "error.log")], capture_output=True, text=True)
            assert test.returncode == 0, test.stderr
            d.nginx_args = [nginx, "-p", str(d.nginx_dir), "-c", str(conf), "-e", str(d.nginx_dir / "error.log")]
        elif step.kind == "rolling":  # "Upgrading": run by test_rolling_restart_under_load
            for name, port in d.workers.items():
                text = re.sub(rf"\b{name}\b", str(port), text)
            d.rolling = text
    assert subprocess.run(["git", "rev-parse", "HEAD"], cwd=d.srv, capture_output=True, text=True).stdout == \
        subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    service = d.unit["Service"]
    d.env_file = Path(service["EnvironmentFile"])
    d.env = parse_env_file(d.env_file)
    grace = float(d.env.get("MRTRWEB_DRAIN_GRACE_S", "60"))
    args = exec_start(d.unit, "0")
    graceful = float(args[args.index("--timeout-graceful-shutdown") + 1]) if "--timeout-graceful-shutdown" in args else 0
    assert float(service["TimeoutStopSec"]) >= grace + graceful + 15, "TimeoutStopSec must exceed the drain"
    for name in d.workers:
        start_worker(d, name)
    d.start("nginx", d.nginx_args, cwd=d.nginx_dir, env=clean_env(), port=d.https_port)


def start_worker(d: Deployment, name: str, wait: bool = True) -> None:
    """The unit's instance ``name`` as systemd starts it: its ExecStart, in its WorkingDirectory,
    with its EnvironmentFile and a minimal environment of its own (``wait``: until it listens;
    systemd does not wait for that)."""
    service = d.unit["Service"]
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
           "HOME": str(d.var), **d.env}
    d.start(f"worker{name}", exec_start(d.unit, str(d.workers[name])), cwd=Path(service["WorkingDirectory"]),
            env=env, port=d.workers[name], wait=wait)


@pytest.fixture(scope="module")
def deployment():
    d = Deployment()
    try:
        started = time.monotonic()
        _follow(d)
        d.setup_s = time.monotonic() - started
        yield d
    finally:
        d.close()


def _through_proxy(d: Deployment) -> TlsSession:
    """A session for the proxy once it answers (nginx may need a moment to find a worker again)."""
    session = TlsSession(d.cert)
    deadline = time.monotonic() + 30
    while True:
        status, _, _ = session.request(d.origin + "/accounts/login/")
        if status == 200:
            return session
        assert time.monotonic() < deadline, f"the proxy answers {status}"
        time.sleep(0.3)


def _admin_steps(d: Deployment) -> tuple[str, str]:
    """The recipe's admin steps (step 5) as ``admin``: a user, a tenant with that user as its admin, the
    demo MCP server. Returns the user's name and password."""
    admin = _through_proxy(d)
    admin.login(d.origin, "admin", d.admin_password)
    name, password = "dana", secrets.token_urlsafe(12)
    status, _, body = admin.submit(d.origin + "/admin/auth/user/add/",
                                   {"username": name, "password1": password, "password2": password})
    assert status == 302, re.findall(r'<ul class="errorlist.*?</ul>', body, re.S)[:3]
    page = admin.request(d.origin + "/admin/mrtrweb/tenant/add/")[2]
    form = read_form(page)
    prefix = next(n for n, _ in form.fields if n.endswith("-TOTAL_FORMS"))[: -len("-TOTAL_FORMS")]
    # "Add another Membership" (the inline's template row, as the admin's script copies it)
    status, _, body = admin.submit(d.origin + "/admin/mrtrweb/tenant/add/", {
        "name": "Initech", "slug": "initech", f"{prefix}-TOTAL_FORMS": "1",
        f"{prefix}-0-user": option_value(form, f"{prefix}-__prefix__-user", name),
        f"{prefix}-0-role": option_value(form, f"{prefix}-__prefix__-role", "Tenant admin")})
    assert status == 302, re.findall(r'<ul class="errorlist.*?</ul>', body, re.S)[:3]
    form = read_form(admin.request(d.origin + "/admin/mrtrweb/mcpserver/add/")[2])
    status, _, body = admin.submit(d.origin + "/admin/mrtrweb/mcpserver/add/", {
        "tenant": option_value(form, "tenant", "Initech"), "name": "Demo server",
        "url": f"http://127.0.0.1:{d.mcp_port}/mcp"})
    assert status == 302, re.findall(r'<ul class="errorlist.*?</ul>', body, re.S)[:3]
    d.person = (name, password)
    return name, password


@pytest.fixture(scope="module")
def person(deployment):
    name, password = _admin_steps(deployment)
    session = _through_proxy(deployment)
    session.login(deployment.origin, name, password)
    server_id = deployment.query("SELECT s.id FROM mrtrweb_mcpserver s JOIN mrtrweb_tenant t ON t.id = s.tenant_id "
                                 "WHERE t.slug = 'initech'")[0][0]
    return session, server_id


def _round(d: Deployment, session: WebSession, server_id: int, base: str | None = None) -> str:
    """Start ``wait_then_ask`` at ``base`` (default: through the proxy), answer its round (review,
    then Send), wait for the result. Returns the operation id."""
    base = base or d.origin
    op_id = session.start(base, server_id, "wait_then_ask", {"seconds": "0"})
    deadline = time.monotonic() + 30
    while status_in(session.page(base, op_id)) != "awaiting_input":
        assert time.monotonic() < deadline, "the round never arrived"
        time.sleep(0.2)
    status, body = session.answer(base, op_id, 1, **{"in-go_on-go": "on"})
    assert status == 302, (status, body[:500])
    while "Went on." not in (page := session.page(base, op_id)):
        assert time.monotonic() < deadline + 30, status_in(page)
        time.sleep(0.2)
    assert status_in(page) == "completed"
    # the row says completed a moment before the terminal audit event is written (operations'
    # _finish: row, binding, then the event): wait for it, never for more than a few seconds
    while True:
        events = [e for (e,) in d.query("SELECT event FROM mrtrweb_auditevent WHERE operation_id = %s ORDER BY id",
                                        op_id)]
        if len(events) >= 4 or time.monotonic() > deadline + 40:
            break
        time.sleep(0.2)
    assert events == ["received", "shown", "submitted", "completed"]
    return op_id


def _served(d: Deployment, name: str, op_id: str) -> bool:
    return f'"POST /mcp/operations/{op_id}/answer/ HTTP/1.1" 302' in d.logs[f"worker{name}"].read_text()


def test_check_deploy_clean_and_static_files_from_nginx(deployment):
    d = deployment
    out = "\n".join(d.output.values())
    assert "System check identified no issues" in out
    assert "static files copied to" in out
    session = _through_proxy(d)
    for path, source in (("/static/mrtrweb/app.css", d.srv / "mrtrweb/static/mrtrweb/app.css"),
                         ("/static/mrtrweb/operations.js", d.srv / "mrtrweb/static/mrtrweb/operations.js")):
        req = urllib.request.Request(d.origin + path)
        with session.opener.open(req, timeout=10) as resp:
            assert resp.status == 200 and resp.read() == source.read_bytes()
    with session.opener.open(d.origin + "/static/admin/css/base.css", timeout=10) as resp:
        assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/css")
    # nginx answered those: the workers never saw them, and do not serve /static/ themselves
    # (MRTRWEB_SERVE_STATIC=0).
    for name, port in d.workers.items():
        assert "/static/" not in d.logs[f"worker{name}"].read_text()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/static/mrtrweb/app.css",
                                     headers={"Host": "localhost", "X-Forwarded-Proto": "https"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        assert err.value.code == 404, f"worker {name} answered {err.value.code} for /static/"
    # The proxy replaces a client's X-Forwarded-For (sign-in throttling counts per address).
    req = urllib.request.Request(d.origin + "/accounts/login/?xff-probe", headers={"X-Forwarded-For": "198.51.100.7"})
    with session.opener.open(req, timeout=10) as resp:
        assert resp.status == 200
    logs = "".join(d.logs[f"worker{name}"].read_text() for name in d.workers)
    assert '127.0.0.1:0 - "GET /accounts/login/?xff-probe HTTP/1.1" 200' in logs and "198.51.100.7" not in logs
    # Plain http on the proxy redirects to https.
    status, location, _ = session.request(f"http://localhost:{d.http_port}/mcp/")
    assert status == 301 and location.startswith("https://localhost"), (status, location)


def _get(url: str, **headers: str) -> tuple[int, Any, str]:
    req = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.headers, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read().decode()


def test_health_endpoints_on_each_worker_and_through_the_proxy(deployment):
    d = deployment
    for port in d.workers.values():
        # by IP over plain http, as a load balancer probes: before host validation and the TLS
        # redirect (127.0.0.1 is not in DJANGO_ALLOWED_HOSTS)
        assert _get(f"http://127.0.0.1:{port}/healthz")[0::2] == (200, '{"status": "live"}')
        status, headers, body = _get(f"http://127.0.0.1:{port}/readyz")
        assert (status, json.loads(body)) == (200, {"status": "ready"}), d.tails()
        assert "no-store" in headers.get("Cache-Control", "")
    session = _through_proxy(d)
    status, _, body = session.request(d.origin + "/readyz")
    assert (status, json.loads(body)) == (200, {"status": "ready"}), d.tails()


def test_pushed_round_through_the_proxy(deployment, person):
    from websockets.sync.client import connect

    d = deployment
    session, server_id = person
    cookie = "; ".join(f"{c.name}={c.value}" for c in session.jar)
    with connect(f"wss://localhost:{d.https_port}/ws/mrtrweb/", ssl=session.ssl, open_timeout=10,
                 additional_headers={"Cookie": cookie, "Origin": d.origin}) as ws:
        op_id = session.start(d.origin, server_id, "wait_then_ask", {"seconds": "1"})
        deadline = time.monotonic() + 30
        while True:
            msg = json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if msg.get("type") == "operation" and msg.get("id") == op_id and msg.get("status") == "awaiting_input":
                assert "Go on?" in msg["html"]
                break
    status, body = session.answer(d.origin, op_id, 1, **{"in-go_on-go": "on"})
    assert status == 302, (status, body[:300])


def test_a_round_through_each_worker(deployment, person):
    d = deployment
    session, server_id = person
    first, second = list(d.workers)
    d.stop(f"worker{second}")  # systemctl stop: SIGTERM, drained
    assert _get(f"http://127.0.0.1:{d.workers[first]}/readyz")[0] == 200
    _through_proxy(d)
    op_first = _round(d, session, server_id)
    start_worker(d, second)
    d.stop(f"worker{first}")
    _through_proxy(d)
    op_second = _round(d, session, server_id)
    assert _served(d, first, op_first) and not _served(d, second, op_first)
    assert _served(d, second, op_second) and not _served(d, first, op_second)
    start_worker(d, first)


def test_plain_http_on_loopback(deployment, person):
    """The recipe's first look without TLS: a worker on loopback with the secure defaults off
    serves plain http (no redirect), its cookies work without https, a round is answered."""
    d = deployment
    _, server_id = person
    base = f"http://127.0.0.1:{d.loopback_port}"
    session = WebSession()
    status, _, _ = session.request(base + "/accounts/login/")
    assert status == 200
    assert all(not c.secure for c in session.jar)
    session.login(base, *d.person)
    op_id = _round(d, session, server_id, base)
    assert f'"POST /mcp/operations/{op_id}/answer/ HTTP/1.1" 302' in d.logs["loopback"].read_text()


class _Systemctl:
    """A stand-in ``systemctl`` on the rolling restart's ``PATH``: ``systemctl restart
    mrtrweb@PORT`` does what systemd does for the unit, here: SIGTERM to that worker, wait for its
    clean exit (the drain), start its ExecStart again and return without waiting for it to listen
    (``Type=simple``); ``systemctl reload nginx`` sends nginx's master a SIGHUP, as Debian's unit
    does. The script talks to this test process over a Unix socket."""

    def __init__(self, d: Deployment) -> None:
        self.d = d
        self.bin = d.base / "bin"
        self.bin.mkdir(exist_ok=True)
        self.path = d.base / "systemctl.sock"
        self.calls: list[tuple[str, float, float]] = []  # (instance, stop began, start done), monotonic
        self.reloads = 0
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(str(self.path))
        self.sock.listen(4)
        stub = self.bin / "systemctl"
        stub.write_text("#!/bin/sh\nexec /usr/bin/python3 -c 'import socket, sys\n"
                        "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
                        "s.sendall(\" \".join(sys.argv[2:]).encode() + b\"\\n\")\n"
                        "reply = s.makefile().readline()\n"
                        f"sys.exit(0 if reply == \"ok\\n\" else reply)' {self.path} \"$@\"\n")
        stub.chmod(0o755)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        by_port = {str(port): name for name, port in self.d.workers.items()}
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                words = conn.makefile().readline().split()
                try:
                    if words == ["reload", "nginx"]:  # Debian's unit: nginx -s reload, a SIGHUP to the master
                        self.d.procs["nginx"].send_signal(signal.SIGHUP)
                        self.reloads += 1
                        conn.sendall(b"ok\n")
                        continue
                    assert len(words) == 2 and words[0] == "restart" and words[1].startswith("mrtrweb@"), words
                    name = by_port[words[1].removeprefix("mrtrweb@")]
                    began = time.monotonic()
                    self.d.stop(f"worker{name}")
                    start_worker(self.d, name, wait=False)
                    self.calls.append((name, began, time.monotonic()))
                    conn.sendall(b"ok\n")
                except Exception as exc:  # noqa: BLE001 -- reported to the script, and by the test
                    self.calls.append((f"failed: {exc!r}", 0.0, 0.0))
                    conn.sendall(f"systemctl stand-in: {exc!r}\n".encode())

    def close(self) -> None:
        self.sock.close()


class _Load:
    """Steady traffic through nginx while the workers restart: page GETs on one thread; on another,
    POSTs as a person answering rounds (Accept: the review, a POST that sends nothing; every third
    one a Send, which sends the answer). Every response is recorded: ``(kind, status, t)``; an
    exception counts as status 0."""

    def __init__(self, d: Deployment, session: TlsSession, ops: list[str]) -> None:
        self.d, self.session, self.ops, self.pages = d, session, list(ops), list(ops)
        self.sent: dict[str, int] = {}  # op id -> status of its Send
        self.results: list[tuple[str, int, float]] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._gets, daemon=True),
                        threading.Thread(target=self._posts, daemon=True)]

    def _record(self, kind: str, call) -> int:
        try:
            status = call()
        except Exception:  # noqa: BLE001 -- a reset or refused connection through the proxy
            status = 0
        self.results.append((kind, status, time.monotonic()))
        return status

    def _gets(self) -> None:
        n = 0
        while not self.stop.is_set():
            path = ("/mcp/", f"/mcp/operations/{self.pages[n % len(self.pages)]}/", "/accounts/login/")[n % 3]
            self._record("GET", lambda: self.session.request(self.d.origin + path, timeout=30)[0])
            n += 1
            time.sleep(0.05)

    def _posts(self) -> None:
        n = 0
        while not self.stop.is_set() and self.ops:
            op_id, got = self.ops[0], {}

            def review() -> int:
                status, got["token"], _ = self.session.review(self.d.origin, op_id, 1, **{"in-go_on-go": "on"})
                return status

            self._record("POST", review)
            if n % 5 == 4 and got.get("token") is not None:
                self.sent[op_id] = self._record("POST", lambda: self.session.send(
                    self.d.origin, op_id, 1, got["token"], **{"in-go_on-go": "on"})[0])
                self.ops.pop(0)
            n += 1
            time.sleep(0.15)

    def __enter__(self) -> "_Load":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)


def _both_ready(d: Deployment) -> None:
    deadline = time.monotonic() + 60
    for port in d.workers.values():
        while _get(f"http://127.0.0.1:{port}/readyz")[0] != 200:
            assert time.monotonic() < deadline, d.tails()
            time.sleep(0.3)


def test_rolling_restart_under_load(deployment, person):
    """The recipe's "Upgrading" (docs/deploy/upgrading.md): its rolling restart (deploy/rolling-restart, run as written, with a
    stand-in systemctl and the site file where the test wrote it) under steady GETs and POSTs
    through the recipe's nginx block: no 5xx, no failed request, every Send sent exactly once."""
    d = deployment
    _, server_id = person
    assert d.rolling.startswith("deploy/rolling-restart "), d.rolling
    _both_ready(d)
    session = _through_proxy(d)
    session.login(d.origin, *d.person)
    ops = [session.start(d.origin, server_id, "wait_then_ask", {"seconds": "0"}) for _ in range(12)]
    deadline = time.monotonic() + 30
    for op_id in ops:
        while status_in(session.page(d.origin, op_id)) != "awaiting_input":
            assert time.monotonic() < deadline, "a round never arrived"
            time.sleep(0.2)
    systemctl = _Systemctl(d)
    try:
        with _Load(d, session, ops) as load:
            time.sleep(1.0)  # steady load before the first restart
            began = time.monotonic()
            out = subprocess.run(["bash", "-euo", "pipefail", "-c", d.rolling], cwd=d.srv, capture_output=True,
                                 text=True, timeout=300,
                                 env=clean_env(PATH=f"{systemctl.bin}:/usr/sbin:/usr/bin:/sbin:/bin",
                                               NGINX_SITE=str(d.nginx_dir / "site.conf")))
            took = time.monotonic() - began
            time.sleep(1.0)
    finally:
        systemctl.close()
    assert out.returncode == 0, out.stdout + out.stderr + d.tails()
    assert [name for name, _, _ in systemctl.calls] == list(d.workers), systemctl.calls
    statuses = [s for _, s, _ in load.results]
    failed = [(kind, s, round(t - began, 2)) for kind, s, t in load.results if s not in (200, 302)]
    posts = sum(1 for kind, _, _ in load.results if kind == "POST")
    report = (f"{len(load.results)} requests, {posts} POSTs, {len(load.sent)} Sends "
              f"({sum(s >= 500 for s in statuses)} 5xx, {statuses.count(0)} "
              f"not answered) over {took:.1f} s of "
              f"rolling restart, {len(failed)} failed: {failed[:20]}; restarts at "
              f"{[(n, round(a - began, 2), round(b - began, 2)) for n, a, b in systemctl.calls]}")
    print(report)
    assert len(load.results) > 100 and posts > 30, report
    assert not failed, report + "\n" + (d.nginx_dir / "error.log").read_text()[-3000:]
    # each worker out of nginx's rotation while it restarted, and back in: the site file as the recipe wrote it
    assert systemctl.reloads == 2 * len(d.workers), out.stdout
    assert " down;" not in (d.nginx_dir / "site.conf").read_text() and "out of nginx's rotation" in out.stdout
    # Each Send answered 302 and was sent once: the round's events, in order, once each.
    assert load.sent and set(load.sent.values()) == {302}, load.sent
    for op_id in load.sent:
        deadline = time.monotonic() + 30
        while (events := [e for (e,) in d.query("SELECT event FROM mrtrweb_auditevent WHERE operation_id = %s "
                                                 "ORDER BY id", op_id)]) != ["received", "shown", "submitted",
                                                                             "completed"]:
            assert time.monotonic() < deadline, (op_id, events)
            time.sleep(0.2)


def test_no_worker_left_gets_the_sites_own_page(deployment, person):
    """With every worker stopped, a Send through nginx gets the site's own page saying nothing was
    sent (503, from collectstatic's copy; German when the browser prefers it), never nginx's bare
    502; the workers then come back and the same round is answered once."""
    d = deployment
    session, server_id = person
    op_id = session.start(d.origin, server_id, "wait_then_ask", {"seconds": "0"})
    deadline = time.monotonic() + 30
    while status_in(session.page(d.origin, op_id)) != "awaiting_input":
        assert time.monotonic() < deadline, "the round never arrived"
        time.sleep(0.2)
    status, token, _ = session.review(d.origin, op_id, 1, **{"in-go_on-go": "on"})
    assert status == 200 and token
    for name in d.workers:
        d.stop(f"worker{name}")
    try:
        status, body = session.send(d.origin, op_id, 1, token, **{"in-go_on-go": "on"})
        assert status == 503, (status, body[:500])
        assert 'data-proxy-page="unsent"' in body and "nothing was sent to any MCP server" in body, body[:1000]
        assert "nginx" not in body and '<link rel="stylesheet" href="/static/mrtrweb/app.css">' in body
        req = urllib.request.Request(d.origin + f"/mcp/operations/{op_id}/",
                                     headers={"Accept-Language": "de-DE,de;q=0.9,en;q=0.8"})
        with pytest.raises(urllib.error.HTTPError) as err:
            session.opener.open(req, timeout=10)
        german = err.value.read().decode()
        assert err.value.code == 503 and "An keinen MCP-Server wurde etwas gesendet" in german, german[:1000]
    finally:
        for name in d.workers:
            start_worker(d, name)
    _both_ready(d)
    _through_proxy(d)
    status, body = session.send(d.origin, op_id, 1, token, **{"in-go_on-go": "on"})
    assert status == 302, (status, body[:500])
    deadline = time.monotonic() + 30
    while (events := [e for (e,) in d.query("SELECT event FROM mrtrweb_auditevent WHERE operation_id = %s "
                                             "ORDER BY id", op_id)]) != ["received", "shown", "submitted",
                                                                         "completed"]:
        assert time.monotonic() < deadline, events
        time.sleep(0.2)
