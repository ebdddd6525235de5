"""System checks and the production settings module."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

from django.core.checks import run_checks

ROOT = Path(__file__).resolve().parents[2]


def _ids(**kw):
    return {m.id for m in run_checks(include_deployment_checks=True, **kw)}


def test_in_process_backends_warn_on_deploy(settings):
    ids = _ids()
    assert {"mrtrweb.W010", "mrtrweb.W011"} <= ids


def test_binding_store_in_the_cache_warns_on_deploy(settings):
    """W017: bindings in the cache are lost when it restarts without persistence; the database
    store (the default) does not warn, and an unknown store is a configuration error."""
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://127.0.0.1:6379/9"}}
    assert "mrtrweb.W017" not in _ids()
    settings.MRTRWEB = {"BINDING_STORE": "database"}
    assert "mrtrweb.W017" not in _ids()
    settings.MRTRWEB = {"BINDING_STORE": "cache"}
    messages = [m for m in run_checks(include_deployment_checks=True) if m.id == "mrtrweb.W017"]
    assert len(messages) == 1 and messages[0].level == 30  # a warning
    assert "restart of the binding cache without persistence loses every live round" in messages[0].msg
    assert "use the database store" in messages[0].msg
    assert "mrtrweb.W017" not in {m.id for m in run_checks()}  # a deployment check
    settings.MRTRWEB = {"BINDING_STORE": "redis"}
    assert "mrtrweb.E001" in _ids()


def test_ttl_above_maximum_and_bad_values(settings):
    settings.MRTRWEB = {"TTL_S": 7200, "MAX_TTL_S": 3600}
    assert "mrtrweb.E002" in _ids()
    settings.MRTRWEB = {"TTL_S": "ten minutes"}
    assert "mrtrweb.E001" in _ids()
    settings.MRTRWEB = {"NOT_A_KEY": 1}
    assert "mrtrweb.W001" in _ids()


def test_unprefixed_and_ignored_errors(settings):
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://127.0.0.1:6379/9",
                                   "OPTIONS": {"IGNORE_EXCEPTIONS": True}}}
    settings.MRTRWEB = {"BINDING_KEY_PREFIX": " "}
    ids = _ids()
    assert {"mrtrweb.W012", "mrtrweb.E004"} <= ids and "mrtrweb.W010" not in ids
    settings.MRTRWEB = {"BINDING_CACHE": "nope"}
    assert "mrtrweb.E003" in _ids()


def test_production_settings_pass_check_deploy():
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="mrtrweb.site.settings_prod",
               DJANGO_SECRET_KEY=secrets.token_urlsafe(60), DJANGO_ALLOWED_HOSTS="mrtr.example",
               DATABASE_URL="postgres://postgres@127.0.0.1:5432/test", REDIS_URL="redis://127.0.0.1:6379/5")
    out = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "no issues" in out.stdout, out.stdout + out.stderr
    env.pop("DATABASE_URL")
    out = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode != 0 and "DATABASE_URL is required" in out.stderr


HEADERS_SCRIPT = r"""
import django
django.setup()
from django.test import Client
r = Client().get("/accounts/login/", secure=True, HTTP_HOST="mrtr.example")
assert r.status_code == 200, r.status_code
print("CSP=" + r["Content-Security-Policy"])
print("XFO=" + r.headers.get("X-Frame-Options", "-"))
print("HSTS=" + r.headers.get("Strict-Transport-Security", "-"))
print("COOKIE=" + str(r.cookies["csrftoken"]["secure"]))
r = Client().get("/accounts/login/", HTTP_HOST="mrtr.example")
print("HTTP=" + str(r.status_code))
"""


def _prod_headers(**extra: str) -> dict[str, str]:
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="mrtrweb.site.settings_prod",
               DJANGO_SECRET_KEY=secrets.token_urlsafe(60), DJANGO_ALLOWED_HOSTS="mrtr.example",
               DATABASE_URL="postgres://postgres@127.0.0.1:5432/test", REDIS_URL="redis://127.0.0.1:6379/5", **extra)
    out = subprocess.run([sys.executable, "-c", HEADERS_SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)


def test_production_headers_default_and_portal_embedding():
    h = _prod_headers()
    assert "frame-ancestors 'none'" in h["CSP"] and "script-src 'self'" in h["CSP"]
    assert "unsafe-inline" not in h["CSP"]
    assert h["XFO"] == "DENY" and h["HSTS"].startswith("max-age=31536000") and h["COOKIE"] == "True"
    assert h["HTTP"] == "301"  # http is redirected to https
    h = _prod_headers(MRTRWEB_FRAME_ANCESTORS="https://portal.example")
    assert "frame-ancestors https://portal.example" in h["CSP"] and h["XFO"] == "-"


def test_unusable_sampling_provider_is_an_error(settings):
    settings.MRTRWEB = {"SAMPLING_PROVIDER": "mrtrweb.no_such_module.Provider"}
    assert "mrtrweb.E005" in _ids()
    settings.MRTRWEB = {"SAMPLING_PROVIDER": "mrtrweb.conf.DEFAULTS"}  # neither provide() nor callable
    assert "mrtrweb.E005" in _ids()
    settings.MRTRWEB = {}
    assert "mrtrweb.E005" not in _ids()


def test_authorization_settings_are_checked(settings):
    """The authorization settings (docs/deploy/authorization.md) are checked at start-up:
    a redirect URI that is not https (but for loopback) or has a fragment, an http or path-less CIMD
    URL, an allow-list given as a string (its letters would be the hosts), a non-boolean loopback
    switch, an empty client name."""
    settings.MRTRWEB = {"OAUTH_REDIRECT_URI": "https://app.example/mcp/oauth/callback/",
                        "OAUTH_CLIENT_METADATA_URL": "https://app.example/mcp/oauth/client-metadata.json",
                        "OUTBOUND_ALLOW_HOSTS": ["auth.internal"], "OUTBOUND_ALLOW_HTTP_LOOPBACK": True}
    assert not {"mrtrweb.E023", "mrtrweb.E024", "mrtrweb.E025", "mrtrweb.E026"} & _ids()
    settings.MRTRWEB = {"OAUTH_REDIRECT_URI": "http://127.0.0.1:8000/mcp/oauth/callback/"}
    assert "mrtrweb.E023" not in _ids()
    for bad in ("http://evil.example/cb", "not a url", "https://app.example/cb#x", "https://u:p@app.example/cb",
                "javascript:alert(1)", 42):
        settings.MRTRWEB = {"OAUTH_REDIRECT_URI": bad}
        assert "mrtrweb.E023" in _ids(), bad
    for bad in ("http://app.example/cimd.json", "https://app.example", "https://app.example/", 7):
        settings.MRTRWEB = {"OAUTH_CLIENT_METADATA_URL": bad}
        assert "mrtrweb.E024" in _ids(), bad
    for bad in ({"OUTBOUND_ALLOW_HOSTS": "auth.internal"}, {"OUTBOUND_ALLOW_HOSTS": [""]},
                {"OUTBOUND_ALLOW_HTTP_LOOPBACK": "yes"}):
        settings.MRTRWEB = bad
        assert "mrtrweb.E025" in _ids(), bad
    settings.MRTRWEB = {"OAUTH_CLIENT_NAME": " "}
    assert "mrtrweb.E026" in _ids()
    settings.MRTRWEB = {"OAUTH_CLIENT_METADATA_URL": "https://app.example/mcp/oauth/client-metadata.json"}
    assert "mrtrweb.W016" in _ids()  # the document's redirect_uris would follow the Host header
    settings.MRTRWEB["OAUTH_REDIRECT_URI"] = "https://app.example/mcp/oauth/callback/"
    assert "mrtrweb.W016" not in _ids()


def test_every_mrtrweb_setting_can_come_from_the_environment():
    """``MRTRWEB_<KEY>`` works for every key (numbers, lists, booleans, dicts, strings); a bad number is
    refused by name, without its value."""
    import pytest
    from django.core.exceptions import ImproperlyConfigured

    from mrtrweb.conf import DEFAULTS, DICT_KEYS, from_environ

    got = from_environ({"MRTRWEB_CONNECTION_IDLE_S": "42", "MRTRWEB_STATE_ONLY_BACKOFF_S": "0.5",
                        "MRTRWEB_OUTBOUND_ALLOW_HOSTS": "a.internal b.internal",
                        "MRTRWEB_SECRET_KEYS": '["k1", "k2"]', "MRTRWEB_OUTBOUND_ALLOW_HTTP_LOOPBACK": "0",
                        "MRTRWEB_OAUTH_REDIRECT_URI": "https://app.example/mcp/oauth/callback/",
                        "MRTRWEB_TTL_S": ""})
    assert got == {"CONNECTION_IDLE_S": 42, "STATE_ONLY_BACKOFF_S": 0.5,
                   "OUTBOUND_ALLOW_HOSTS": ["a.internal", "b.internal"], "SECRET_KEYS": ["k1", "k2"],
                   "OUTBOUND_ALLOW_HTTP_LOOPBACK": False,
                   "OAUTH_REDIRECT_URI": "https://app.example/mcp/oauth/callback/"}
    # a dict key takes a JSON object (SERVER_URL_POLICY, MODEL_PROVIDERS, MODEL_URL_POLICY); every other key parses "1"
    assert DICT_KEYS == {"SERVER_URL_POLICY", "MODEL_PROVIDERS", "MODEL_URL_POLICY"}
    assert set(from_environ({f"MRTRWEB_{k}": "{}" if k in DICT_KEYS else "1" for k in DEFAULTS})) == set(DEFAULTS)
    with pytest.raises(ImproperlyConfigured, match="MRTRWEB_TTL_S must be a number") as err:
        from_environ({"MRTRWEB_TTL_S": "s3cr3t"})
    assert "s3cr3t" not in str(err.value)
