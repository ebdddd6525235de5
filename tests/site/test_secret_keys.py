"""No known secret: the standalone site makes its own random key on first run (kept in
``MRTRWEB_VAR_DIR/secret_key``, 0600, the same for processes starting at once and after a restart)
unless ``DJANGO_SECRET_KEY`` is set; the production settings refuse a known or weak key; system
checks ``mrtrweb.E020`` / ``E021`` refuse one with ``DEBUG`` off (and say nothing with it on)."""

from __future__ import annotations

import base64
import errno
import hashlib
import os
import random
import re
import secrets
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured

from mrtrweb.runtime import secretkeys
from mrtrweb.runtime.secretkeys import key_problem, load_or_create

ROOT = Path(__file__).resolve().parents[2]
OLD_DEMO_KEY = "dev-only-insecure-key-change-me-0123456789abcdefghijklmnop"
OLD_EMBED_KEY = "embed-test-key-0123456789-abcdefghijklmnopqrstuvwxyz"
# Parameters are made once from a fixed seed: random-looking keys of the right alphabet and length,
# and the same test ids in every test process (pytest-xdist compares its workers' collections).
_RNG = random.Random(20261203)


def _token(nbytes: int) -> str:
    """A URL-safe token like ``secrets.token_urlsafe(nbytes)``, from the fixed seed above."""
    return base64.urlsafe_b64encode(_RNG.randbytes(nbytes)).rstrip(b"=").decode()


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DJANGO_SECRET_KEY", "DJANGO_SETTINGS_MODULE", "DJANGO_DEBUG", "MRTRWEB_VAR_DIR")}
    return dict(env, PYTHONPATH=str(ROOT), **extra)


# ------------------------------------------------------------------------------------------ judging a key
@pytest.mark.parametrize("key, reason", [
    (OLD_DEMO_KEY, "published"),
    (OLD_EMBED_KEY, "published"),
    (OLD_DEMO_KEY + "\n", "published"),
    ("django-insecure-" + _token(50), "django-insecure-"),
    (_token(36)[:49], "fewer than 50"),
    ("", "fewer than 50"),
    ("abcd" * 20, "different characters"),
    ("x" * 60, "different characters"),
    (b"y" * 64, "different characters"),
    (12345, "not a string"),
    (None, "not a string"),
])
def test_known_and_weak_keys_are_refused(key, reason):
    problem = key_problem(key)
    assert problem and reason in problem
    if isinstance(key, str) and len(key) > 8:
        assert key.strip() not in problem  # the message never repeats the key


def test_random_keys_are_accepted():
    assert key_problem(secrets.token_urlsafe(50)) is None
    assert key_problem("bench-" + secrets.token_urlsafe(60)) is None
    assert key_problem(secrets.token_bytes(64).hex().encode()) is None


_LITERAL_KEY = re.compile(r"""(?:SECRET_KEY|AUDIT_SECRET)["']?\s*[:=,]\s*["']([^"'\n]{6,})["']""")


def test_every_key_ever_written_into_the_repository_is_refused():
    """The kind, not the instance: any literal key assigned in the tracked files or the history."""
    texts = []
    for rel in subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.split():
        path = ROOT / rel
        if path.suffix in (".py", ".md", ".toml", ".txt", ".cfg", ".ini", ".sh", ".yml", ".yaml") or rel == "dev":
            texts.append(path.read_text(errors="replace"))
    texts.append(subprocess.run(["git", "log", "-p", "-G", "SECRET", "HEAD", "--"], cwd=ROOT, capture_output=True,
                                text=True, errors="replace", check=True).stdout)
    found = {m.group(1) for text in texts for m in _LITERAL_KEY.finditer(text)}
    assert OLD_DEMO_KEY in found and OLD_EMBED_KEY in found  # the scan sees the history
    assert {k for k in found if key_problem(k) is None} == set()


# ------------------------------------------------------------------------------------------ the key file
def test_the_key_is_made_once_0600_and_reused(tmp_path):
    path = tmp_path / "var" / "secret_key"
    key = load_or_create(path)
    assert key_problem(key) is None and len(key) >= 60
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create(path) == key
    assert [p.name for p in path.parent.iterdir()] == ["secret_key"]  # no temporary file left
    path.chmod(0o644)
    assert load_or_create(path) == key and stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize("content", ["", "short\n", OLD_DEMO_KEY + "\n"])
def test_a_damaged_key_file_is_an_error_not_replaced(tmp_path, content):
    path = tmp_path / "secret_key"
    path.write_text(content)
    original_wait = secretkeys._WAIT_FOR_WRITER_S
    secretkeys._WAIT_FOR_WRITER_S = 0.1
    try:
        with pytest.raises(ImproperlyConfigured, match="holds no usable key"):
            load_or_create(path)
    finally:
        secretkeys._WAIT_FOR_WRITER_S = original_wait
    assert path.read_text() == content


def test_a_key_path_that_is_a_directory_is_an_error(tmp_path):
    (tmp_path / "secret_key").mkdir()
    with pytest.raises(ImproperlyConfigured, match="secret key file"):
        load_or_create(tmp_path / "secret_key")


RACE_SCRIPT = r"""
import hashlib, os, sys, time
go = float(sys.argv[1])
while time.time() < go:
    time.sleep(0.001)
import django
django.setup()
from django.conf import settings
print(hashlib.sha256(settings.SECRET_KEY.encode()).hexdigest())
"""


def _start_sites(var: Path, n: int, **env: str) -> list[str]:
    """``n`` processes importing the standalone settings at the same moment; each one's key digest."""
    go = time.time() + 3.0
    procs = [subprocess.Popen([sys.executable, "-c", RACE_SCRIPT, str(go)], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=_env(DJANGO_SETTINGS_MODULE="mrtrweb.site.settings", MRTRWEB_VAR_DIR=str(var),
                                       **env))
             for _ in range(n)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    return [out.strip() for out, _ in outs]


def test_processes_starting_at_once_agree_and_a_restart_keeps_the_key(tmp_path):
    var = tmp_path / "var"
    first = _start_sites(var, 4)
    assert len(set(first)) == 1
    key = (var / "secret_key").read_text().strip()
    assert hashlib.sha256(key.encode()).hexdigest() == first[0]
    assert stat.S_IMODE((var / "secret_key").stat().st_mode) == 0o600
    assert _start_sites(var, 1) == first[:1]  # restarted: the same key


def test_django_secret_key_is_honoured_and_no_file_is_made(tmp_path):
    key = secrets.token_urlsafe(50)
    (digest,) = _start_sites(tmp_path, 1, DJANGO_SECRET_KEY=key)
    assert digest == hashlib.sha256(key.encode()).hexdigest()
    assert not (tmp_path / "secret_key").exists()


def test_without_hard_links_writers_still_agree(tmp_path, monkeypatch):
    """A file system without ``link``: the exclusive create, and readers wait for the writer."""
    def no_link(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_link)
    path = tmp_path / "secret_key"
    keys: list[str] = []
    barrier = threading.Barrier(8)

    def start():
        barrier.wait()
        keys.append(load_or_create(path))

    threads = [threading.Thread(target=start) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(keys) == 8 and len(set(keys)) == 1 and key_problem(keys[0]) is None
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and [p.name for p in tmp_path.iterdir()] == ["secret_key"]


# ------------------------------------------------------------------------------------------ checks
def _ids() -> list[str]:
    return [m.id for m in run_checks() if m.id in ("mrtrweb.E020", "mrtrweb.E021")]


@pytest.mark.parametrize("bad", [OLD_DEMO_KEY, OLD_EMBED_KEY, "django-insecure-" + "k" * 50 + "0123456789",
                                 _token(30), "ab" * 40])
def test_check_refuses_known_or_weak_keys_in_production_and_is_quiet_in_debug(settings, bad):
    settings.DEBUG = False
    settings.SECRET_KEY = secrets.token_urlsafe(50)
    assert _ids() == []
    settings.SECRET_KEY = bad
    messages = [m for m in run_checks() if m.id == "mrtrweb.E020"]
    assert len(messages) == 1 and messages[0].is_serious() and "SECRET_KEY" in messages[0].msg
    assert bad not in messages[0].msg and bad not in (messages[0].hint or "")
    settings.DEBUG = True
    assert _ids() == []


def test_check_covers_the_fallbacks_and_the_audit_secret(settings):
    settings.DEBUG = False
    settings.SECRET_KEY = secrets.token_urlsafe(50)
    settings.SECRET_KEY_FALLBACKS = [secrets.token_urlsafe(50), OLD_DEMO_KEY]
    assert _ids() == ["mrtrweb.E020"]
    settings.SECRET_KEY_FALLBACKS = []
    settings.MRTRWEB = {"AUDIT_SECRET": "audit"}
    assert _ids() == ["mrtrweb.E021"]
    settings.MRTRWEB = {"AUDIT_SECRET": OLD_EMBED_KEY}
    assert _ids() == ["mrtrweb.E021"]
    settings.MRTRWEB = {"AUDIT_SECRET": secrets.token_urlsafe(50)}
    assert _ids() == []
    settings.MRTRWEB = {"AUDIT_SECRET": None}
    assert _ids() == []
    settings.DEBUG = True
    settings.MRTRWEB = {"AUDIT_SECRET": "audit"}
    assert _ids() == []


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=_env(**env))


def test_the_standalone_site_refuses_the_old_key_unless_debug(tmp_path):
    out = _manage("check", MRTRWEB_VAR_DIR=str(tmp_path), DJANGO_SECRET_KEY=OLD_DEMO_KEY)
    assert out.returncode != 0 and "mrtrweb.E020" in out.stderr and OLD_DEMO_KEY not in out.stderr
    out = _manage("migrate", "--plan", MRTRWEB_VAR_DIR=str(tmp_path), DJANGO_SECRET_KEY=OLD_DEMO_KEY)
    assert out.returncode != 0 and "mrtrweb.E020" in out.stderr  # migrate does not run on it either
    out = _manage("check", MRTRWEB_VAR_DIR=str(tmp_path), DJANGO_SECRET_KEY=OLD_DEMO_KEY, DJANGO_DEBUG="1")
    assert out.returncode == 0, out.stderr
    out = _manage("check", MRTRWEB_VAR_DIR=str(tmp_path))  # its own key, made on first run
    assert out.returncode == 0 and (tmp_path / "secret_key").exists(), out.stderr


@pytest.mark.parametrize("bad", [OLD_DEMO_KEY, "django-insecure-" + _token(50), "x" * 60, _token(20)])
def test_production_settings_refuse_a_known_or_weak_key(tmp_path, bad):
    out = _manage("check", DJANGO_SETTINGS_MODULE="mrtrweb.site.settings_prod", DJANGO_SECRET_KEY=bad,
                  DJANGO_ALLOWED_HOSTS="mrtr.example", DATABASE_URL="postgres://postgres@127.0.0.1:5432/test",
                  REDIS_URL="redis://127.0.0.1:6379/5", MRTRWEB_VAR_DIR=str(tmp_path))
    assert out.returncode != 0 and "DJANGO_SECRET_KEY cannot sign anything in production" in out.stderr
    assert bad not in out.stderr
    out = _manage("check", DJANGO_SETTINGS_MODULE="mrtrweb.site.settings_prod", DJANGO_ALLOWED_HOSTS="mrtr.example",
                  DATABASE_URL="postgres://postgres@127.0.0.1:5432/test", REDIS_URL="redis://127.0.0.1:6379/5",
                  MRTRWEB_VAR_DIR=str(tmp_path))
    assert out.returncode != 0 and "DJANGO_SECRET_KEY is required" in out.stderr
