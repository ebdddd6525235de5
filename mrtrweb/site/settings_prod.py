"""Production settings: PostgreSQL (everything that lasts, live rounds included), Redis (a cache
and the channel layer; no persistence needed), TLS behind a reverse proxy.

Everything comes from the environment (see docs/deploy/production.md, step 4):

=============================  ===========================================================
``DJANGO_SECRET_KEY``          required; at least 50 random characters (a key published in
                               this repository, ``django-insecure-...`` or a weak key is refused)
``DJANGO_ALLOWED_HOSTS``       required; comma-separated host names
``DATABASE_URL``               required; ``postgres://user:password@host:5432/dbname``
``REDIS_URL``                  required; ``redis://host:6379/0`` (the cache: stop requests,
                               legacy hold notices, sign-in throttling; live bindings only with
                               ``MRTRWEB_BINDING_STORE=cache``; channel layer:
                               ``REDIS_CHANNELS_URL`` or the same server)
``REDIS_CHANNELS_URL``         optional; channel layer Redis (default ``REDIS_URL``)
``CSRF_TRUSTED_ORIGINS``       optional; comma-separated ``https://host`` origins
``MRTRWEB_BEHIND_PROXY``       ``1`` (default): trust ``X-Forwarded-Proto`` from the proxy
``MRTRWEB_SSL_REDIRECT``       ``1`` (default): redirect http to https
``MRTRWEB_HSTS_SECONDS``       default 31536000
``MRTRWEB_FRAME_ANCESTORS``    optional; portals allowed to embed the app (CSP frame-ancestors)
``MRTRWEB_REDIS_TIMEOUT_S``    socket timeout to Redis, default 2 (fail closed quickly)
``MRTRWEB_SECURE_COOKIES``     ``1`` (default); ``0`` only for local tests without TLS
``MRTRWEB_DB_POOL_SIZE``       PostgreSQL connections per worker process (pool), default 10
``MRTRWEB_CACHE_PREFIX``       key prefix of the Redis cache (default ``mrtrweb``)
``MRTRWEB_CHANNELS_PREFIX``    prefix of the channel layer's keys (default ``mrtrweb-asgi``)
``MRTRWEB_CHANNELS_SOCKET_TIMEOUT_S``  channel layer socket timeout, default 30: it must exceed
                               the layer's 5 s blocking receive (redis-py's own default, 5 s,
                               makes an idle WebSocket consumer fail after 5 s)
``MRTRWEB_CHANNELS_MAX_CONNECTIONS``   channel layer connections per worker, default 1000
                               (redis-py's pool refuses at once beyond its cap, e.g. when many
                               WebSockets disconnect together)
=============================  ===========================================================
"""

from __future__ import annotations

import os

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from .settings import *  # noqa: F401,F403
from .settings import MRTRWEB as _BASE_MRTRWEB
from ..runtime.secretkeys import key_problem


def _required(name: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        raise ImproperlyConfigured(f"the environment variable {name} is required in production")
    return value


def _flag(name: str, default: str) -> bool:
    return os.environ.get(name, default).strip().lower() in ("1", "true", "yes", "on")


DEBUG = False
SECRET_KEY = _required("DJANGO_SECRET_KEY")
if key_problem(SECRET_KEY):
    raise ImproperlyConfigured(f"DJANGO_SECRET_KEY cannot sign anything in production: {key_problem(SECRET_KEY)}; "
                               "use at least 50 random characters, e.g. python -c 'import secrets; "
                               "print(secrets.token_urlsafe(50))'")
ALLOWED_HOSTS = [h.strip() for h in _required("DJANGO_ALLOWED_HOSTS").split(",") if h.strip()]
CSRF_TRUSTED_ORIGINS = [o.strip() for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()]

# Under ASGI every request may run its ORM calls in its own thread: persistent per-thread
# connections would pile up, so connections come from a psycopg pool instead (Django >= 5.1).
# Health checks: the pool checks a connection before handing it out (one empty round trip), so
# after a PostgreSQL restart no request -- and no background task sending an accepted answer's
# retry -- gets a connection the restart killed (tests/runtime/test_pg_restart.py).
DATABASES = {"default": dj_database_url.parse(_required("DATABASE_URL"), conn_max_age=0,
                                              conn_health_checks=True)}
DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
    "min_size": 1,
    "max_size": int(os.environ.get("MRTRWEB_DB_POOL_SIZE", "10")),
    "timeout": float(os.environ.get("MRTRWEB_DB_POOL_TIMEOUT_S", "10")),
}

_REDIS_URL = _required("REDIS_URL")
_REDIS_TIMEOUT = float(os.environ.get("MRTRWEB_REDIS_TIMEOUT_S", "2"))
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": _REDIS_URL,
        "KEY_PREFIX": os.environ.get("MRTRWEB_CACHE_PREFIX", "mrtrweb"),
        "OPTIONS": {
            "SOCKET_CONNECT_TIMEOUT": _REDIS_TIMEOUT,
            "SOCKET_TIMEOUT": _REDIS_TIMEOUT,
            # Never swallow Redis errors: a stop request (or, with BINDING_STORE=cache, a binding)
            # that cannot be read must fail closed, not look absent.
            "IGNORE_EXCEPTIONS": False,
        },
    }
}
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            "hosts": [{
                "address": os.environ.get("REDIS_CHANNELS_URL", _REDIS_URL),
                "socket_timeout": float(os.environ.get("MRTRWEB_CHANNELS_SOCKET_TIMEOUT_S", "30")),
                "max_connections": int(os.environ.get("MRTRWEB_CHANNELS_MAX_CONNECTIONS", "1000")),
            }],
            "prefix": os.environ.get("MRTRWEB_CHANNELS_PREFIX", "mrtrweb-asgi"),
        },
    }
}
SESSION_ENGINE = "django.contrib.sessions.backends.db"

if _flag("MRTRWEB_BEHIND_PROXY", "1"):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    USE_X_FORWARDED_HOST = False
SECURE_SSL_REDIRECT = _flag("MRTRWEB_SSL_REDIRECT", "1")
SECURE_HSTS_SECONDS = int(os.environ.get("MRTRWEB_HSTS_SECONDS", "31536000"))
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
# Secure cookies need https; MRTRWEB_SECURE_COOKIES=0 only for a local test without TLS.
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = _flag("MRTRWEB_SECURE_COOKIES", "1")
SESSION_COOKIE_HTTPONLY = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"

MRTRWEB = dict(_BASE_MRTRWEB)

# Framing: nobody by default; the portals in MRTRWEB_FRAME_ANCESTORS when configured (the base
# settings then drop X-Frame-Options and rely on CSP frame-ancestors).
X_FRAME_OPTIONS = "DENY"
CONTENT_SECURITY_POLICY = {  # noqa: F405
    "DIRECTIVES": dict(
        CONTENT_SECURITY_POLICY["DIRECTIVES"],  # noqa: F405
        **{"frame-ancestors": FRAME_ANCESTORS or ["'none'"]},  # noqa: F405
    )
}
