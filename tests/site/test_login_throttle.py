"""Sign-in throttling of the standalone site (django-axes): after ``AXES_FAILURE_LIMIT`` (5) wrong
passwords for one user name from one address, that pair cannot sign in, even with the right
password, until the cool-off has passed; the person sees why (HTTP 429); the lockout is logged
without the password; only failures count. Through Django's ASGI handler here, through the real
demo under uvicorn at the end (with the secret key kept across a restart)."""

from __future__ import annotations

import asyncio
import http.cookiejar
import logging
import os
import re
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.hashers import MD5PasswordHasher
from django.core.cache.backends.locmem import LocMemCache
from django.test import AsyncClient

ROOT = Path(__file__).resolve().parents[2]
RIGHT = "right-pw-4711"
LOCKED_TEXT = "Too many failed sign-ins"


@pytest.fixture
def users(transactional_db, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    from django.contrib.auth import get_user_model

    User = get_user_model()
    User.objects.create_user("alice", password=RIGHT)
    User.objects.create_user("carol", password=RIGHT)
    User.objects.create_superuser("root", password=RIGHT)


class _ClientAt(AsyncClient):
    """An ASGI test client whose peer address (``scope["client"]``, Django's REMOTE_ADDR) is ``address``."""

    def __init__(self, address: str) -> None:
        super().__init__()
        self.address = address

    def _base_scope(self, **request):
        return dict(super()._base_scope(**request), client=[self.address, 40000])


async def _signin(client: AsyncClient, username: str, password: str, path: str = "/accounts/login/", **headers):
    return await client.post(path, {"username": username, "password": password, "next": "/mcp/"}, headers=headers)


async def _signed_in(client: AsyncClient) -> bool:
    resp = await client.get("/mcp/")
    return resp.status_code == 200


async def test_thirty_wrong_passwords_then_the_right_one_is_refused(users, caplog):
    caplog.set_level(logging.INFO)
    attacker = AsyncClient()  # through the ASGI handler, as uvicorn serves the site
    statuses = []
    for i in range(30):
        # neither a forged client address nor another browser makes a fresh start
        resp = await _signin(attacker, "alice", f"guess-{i:02d}", **{"X-Forwarded-For": f"198.51.100.{i}",
                                                                       "X-Real-IP": f"203.0.113.{i}",
                                                                       "User-Agent": f"bot/{i}"})
        statuses.append(resp.status_code)
    assert statuses[:4] == [200] * 4 and set(statuses[4:]) == {429}, statuses
    resp = await _signin(attacker, "alice", RIGHT)
    body = resp.content.decode()
    assert resp.status_code == 429 and LOCKED_TEXT in body and "15 minutes" in body
    assert resp["Retry-After"] == "900" and 'role="alert"' in body
    assert not await _signed_in(attacker)

    # logged, never the password (nor the guesses); the axes tables hold none either
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "AXES: Locking out" in logged
    from axes.models import AccessAttempt, AccessFailureLog

    rows = await sync_to_async(lambda: [(a.username, a.ip_address, a.failures_since_start, a.post_data)
                                        for a in AccessAttempt.objects.all()])()
    assert rows and {(u, ip) for u, ip, _, _ in rows} == {("alice", "127.0.0.1")}
    assert sum(n for _, _, n, _ in rows) == 31  # every attempt counted, the right one during lockout too
    stored = logged + repr(rows) + repr(await sync_to_async(lambda: list(AccessFailureLog.objects.values()))())
    for secret in (RIGHT, "guess-00", "guess-29"):
        assert secret not in stored


async def test_the_lock_is_per_user_name_and_address(users):
    attacker = AsyncClient()
    for i in range(5):
        await _signin(attacker, "alice", f"guess-{i}")
    assert (await _signin(attacker, "alice", RIGHT)).status_code == 429
    # another user from the same address, and alice from another address, sign in
    same_address = AsyncClient()
    assert (await _signin(same_address, "carol", RIGHT)).status_code == 302 and await _signed_in(same_address)
    elsewhere = _ClientAt("192.0.2.7")
    assert (await _signin(elsewhere, "alice", RIGHT)).status_code == 302 and await _signed_in(elsewhere)


async def test_only_failures_count_and_a_success_clears_them(users):
    client = AsyncClient()
    for _round in range(3):  # 4 wrong, 1 right: never locked, 12 wrong in all
        for i in range(4):
            assert (await _signin(client, "alice", f"typo-{i}")).status_code == 200
        assert (await _signin(client, "alice", RIGHT)).status_code == 302
        await client.post("/accounts/logout/")
    # the many sign-ins of a test suite (right passwords) are never locked out
    for _ in range(40):
        assert (await _signin(AsyncClient(), "carol", RIGHT)).status_code == 302


async def test_the_admin_sign_in_is_throttled_too(users):
    client = AsyncClient()
    for i in range(5):
        await _signin(client, "root", f"guess-{i}", path="/admin/login/?next=/admin/")
    resp = await _signin(client, "root", RIGHT, path="/admin/login/?next=/admin/")
    assert resp.status_code == 429 and LOCKED_TEXT in resp.content.decode()
    assert (await client.get("/admin/")).status_code == 302


async def test_after_the_cool_off_the_right_password_works(users, settings):
    settings.AXES_COOLOFF_TIME = timedelta(seconds=1.5)
    client = AsyncClient()
    for i in range(5):
        await _signin(client, "alice", f"guess-{i}")
    resp = await _signin(client, "alice", RIGHT)
    assert resp.status_code == 429 and resp["Retry-After"] == "2" and "1 minute." in resp.content.decode()
    await asyncio.sleep(1.7)
    assert (await _signin(client, "alice", RIGHT)).status_code == 302 and await _signed_in(client)


# ------------------------------------------------------------------------------- the demo under uvicorn
def _free_port() -> int:
    from mrtrweb.bench.machine import free_port

    return free_port()  # a port of this test process's own range


class _Browser:
    """A cookie jar and urllib: GET the sign-in page, POST it with the CSRF token."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar),
                                                  _NoRedirect())

    def get(self, path: str) -> tuple[int, str]:
        try:
            with self.opener.open(self.base + path, timeout=10) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def signin(self, username: str, password: str, **headers: str) -> tuple[int, str]:
        status, page = self.get("/accounts/login/")
        assert status == 200, status
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        data = urllib.parse.urlencode({"username": username, "password": password, "csrfmiddlewaretoken": token,
                                       "next": "/mcp/"}).encode()
        req = urllib.request.Request(self.base + "/accounts/login/", data=data,
                                     headers={"Referer": self.base + "/accounts/login/", **headers})
        try:
            with self.opener.open(req, timeout=10) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def _start_demo(var: Path, port: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DJANGO_SECRET_KEY")}
    env.update(MRTRWEB_VAR_DIR=str(var), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "manage.py", "mrtrweb_demo", "--port", str(port)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if "open http://127.0.0.1" in line:
            break
    assert any("open http://127.0.0.1" in line for line in lines), "".join(lines)
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=2).read()
            return proc
        except OSError:
            time.sleep(0.1)
    raise AssertionError("the demo does not answer")


def _stop(proc: subprocess.Popen) -> str:
    proc.terminate()
    try:
        out, _ = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out or ""


def test_the_demo_locks_out_a_guesser_and_keeps_its_own_key_across_a_restart(tmp_path):
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    proc = _start_demo(tmp_path, port)
    try:
        key_file = tmp_path / "secret_key"
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        key = key_file.read_text()
        attacker = _Browser(base)
        statuses = [attacker.signin("alice", f"guess-{i:02d}", **{"X-Forwarded-For": f"198.51.100.{i}",
                                                                 "User-Agent": f"bot/{i}"})[0]
                    for i in range(30)]
        assert statuses[:4] == [200] * 4 and set(statuses[4:]) == {429}, statuses
        status, body = attacker.signin("alice", "alice-demo-pw")
        assert status == 429 and LOCKED_TEXT in body
        assert attacker.get("/mcp/")[0] == 302
        carol = _Browser(base)
        assert carol.signin("carol", "carol-demo-pw")[0] == 302 and carol.get("/mcp/")[0] == 200
    finally:
        out = _stop(proc)
    assert "AXES: Locking out" in out  # the server's log after start-up: the lockout, no password
    assert "alice-demo-pw" not in out and "guess-" not in out

    proc = _start_demo(tmp_path, port)  # restarted: the same key (the demo re-seeds its users'
    try:                                 # passwords, which ends their sessions: not the key's doing)
        assert key_file.read_text() == key and [p.name for p in tmp_path.glob("*secret_key*")] == ["secret_key"]
        assert _Browser(base).signin("alice", "alice-demo-pw")[0] == 429  # the lock is kept too
    finally:
        _stop(proc)


# ------------------------------------------------------------------------------- guesses sent at once
class CountingSlowHasher(MD5PasswordHasher):
    """MD5 (fast to set up) whose every password check is counted and takes 0.3 s, so that
    parallel attempts overlap."""

    algorithm = "md5-counted"
    checks = 0
    lock = threading.Lock()

    def verify(self, password, encoded):
        with CountingSlowHasher.lock:
            CountingSlowHasher.checks += 1
        time.sleep(0.3)
        return super().verify(password, encoded)


class UnreachableCache(LocMemCache):
    """A cache whose counters cannot be reached (like Redis down)."""

    def incr(self, key, delta=1, version=None):
        raise ConnectionError("cache down")


def _burst(passwords: list[str]) -> list[int]:
    """One thread per password, all posting the sign-in form for alice at the same moment."""
    from django.db import connections
    from django.test import Client

    barrier = threading.Barrier(len(passwords))
    statuses: list[int] = []

    def attempt(password: str) -> None:
        client = Client()
        barrier.wait()
        try:
            statuses.append(client.post("/accounts/login/", {"username": "alice", "password": password}).status_code)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=attempt, args=(p,)) for p in passwords]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return statuses


def test_guesses_sent_at_once_check_no_more_passwords_than_the_limit(transactional_db, settings):
    settings.PASSWORD_HASHERS = ["tests.site.test_login_throttle.CountingSlowHasher"]
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_user("alice", password=RIGHT)
    CountingSlowHasher.checks = 0
    statuses = _burst([f"guess-{i}" for i in range(20)])
    # each guess is answered: the form again (200) or locked (429); never a sign-in, never a 503
    # (SQLite's writers wait for each other: WAL + IMMEDIATE transactions)
    assert len(statuses) == 20 and set(statuses) <= {200, 429}, statuses
    assert CountingSlowHasher.checks <= 5, (CountingSlowHasher.checks, statuses)
    # and the pair is locked: the right password alone is refused now
    from django.test import Client

    resp = Client().post("/accounts/login/", {"username": "alice", "password": RIGHT})
    assert resp.status_code == 429 and CountingSlowHasher.checks <= 5


async def test_an_unreachable_attempt_counter_refuses_the_sign_in(transactional_db, settings, caplog):
    settings.PASSWORD_HASHERS = ["tests.site.test_login_throttle.CountingSlowHasher"]
    from django.contrib.auth import get_user_model

    await sync_to_async(get_user_model().objects.create_user)("alice", password=RIGHT)
    settings.CACHES = dict(settings.CACHES, default={"BACKEND": "tests.site.test_login_throttle.UnreachableCache"})
    CountingSlowHasher.checks = 0
    client = AsyncClient()
    resp = await _signin(client, "alice", RIGHT)
    # refused with a clear 503 (not the "wrong password" form), no password checked
    assert resp.status_code == 503 and CountingSlowHasher.checks == 0
    assert "Signing in is not possible right now" in resp.content.decode() and resp["Retry-After"] == "5"
    assert "attempt counter is unavailable" in caplog.text and RIGHT not in caplog.text
    assert "Traceback" not in caplog.text
    # and nothing was counted against the person: no failure recorded, not signed in
    from axes.models import AccessAttempt

    assert await AccessAttempt.objects.acount() == 0
    assert not await _signed_in(client)


async def test_with_axes_switched_off_nothing_is_throttled(users, settings):
    """``AXES_ENABLED = False`` (a portal's own choice) switches the in-flight count off too."""
    settings.AXES_ENABLED = False
    client = AsyncClient()
    for i in range(8):
        assert (await _signin(client, "alice", f"guess-{i}")).status_code == 200
    assert (await _signin(client, "alice", RIGHT)).status_code == 302


async def test_sessions_name_the_password_backend_never_the_throttle(users):
    """``force_login`` (tests, the bench) and the sign-in form store the backend that restores the
    user: the throttling backends have no ``get_user`` and are never that backend."""
    from django.contrib.auth import BACKEND_SESSION_KEY, get_user_model

    user = await sync_to_async(get_user_model().objects.get)(username="carol")
    forced = AsyncClient()
    await forced.aforce_login(user)
    assert await _signed_in(forced)
    signed = AsyncClient()
    assert (await _signin(signed, "alice", RIGHT)).status_code == 302 and await _signed_in(signed)
    for client in (forced, signed):
        session = await client.asession()
        assert await session.aget(BACKEND_SESSION_KEY) == "django.contrib.auth.backends.ModelBackend"
