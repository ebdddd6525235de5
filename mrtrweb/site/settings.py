"""Settings of the standalone mrtrweb site on embedded defaults: SQLite, in-process cache and
channel layer. Environment variables override (see docs/settings.md).
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from mrtrweb.runtime.secretkeys import load_or_create

BASE_DIR = Path(__file__).resolve().parents[2]
VAR_DIR = Path(os.environ.get("MRTRWEB_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)  # SQLite, logs: a fresh MRTRWEB_VAR_DIR just works

# DJANGO_SECRET_KEY, or this installation's own random key: made on first run and kept in
# VAR_DIR/secret_key (mode 0600; back it up with the database: a new key signs everyone out and
# changes the audit digests). No key ships with the code (check mrtrweb.E020 refuses known ones).
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or load_or_create(VAR_DIR / "secret_key")
DEBUG = os.environ.get("DJANGO_DEBUG", "0") == "1"
ALLOWED_HOSTS = [h for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",") if h]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "mrtrweb",
    "axes",
]

MIDDLEWARE = [
    # first: /healthz and /readyz answered before host validation and the TLS redirect (load
    # balancers probe by IP over plain http; mrtrweb.runtime.health)
    "mrtrweb.runtime.health.HealthMiddleware",
    # on the MCP Apps sandbox origin, only the sandbox's pages and static files (docs/apps.md)
    "mrtrweb.middleware.SandboxOriginMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # the page's language from the browser's Accept-Language (English or German, LANGUAGES)
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "mrtrweb.middleware.FailClosedMiddleware",
    "axes.middleware.AxesMiddleware",  # last (django-axes): turns a lockout into the locked-out page
]

ROOT_URLCONF = "mrtrweb.site.urls"
ASGI_APPLICATION = "mrtrweb.site.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("MRTRWEB_SQLITE_PATH", str(VAR_DIR / "db.sqlite3")),
        # Concurrent users write at once (audit appends, consent receipts): WAL lets readers and the
        # one writer go on together; IMMEDIATE transactions take the write lock at BEGIN and wait
        # for it up to the busy timeout (seconds) instead of failing with "database is locked" on
        # a read-to-write lock upgrade. synchronous stays FULL: a committed audit row is on disk.
        "OPTIONS": {"timeout": 20, "transaction_mode": "IMMEDIATE",
                    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"},
        # A file, not :memory:, so that the ASGI server's threads in live tests share it.
        # One per test process, so concurrent test runs never share it.
        "TEST": {"NAME": os.environ.get("MRTRWEB_TEST_SQLITE_PATH", str(VAR_DIR / f"test-db-{os.getpid()}.sqlite3"))},
    }
}

CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "mrtrweb"}}
CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "mrtrweb:index"
LOGOUT_REDIRECT_URL = "login"

# Sign-in throttling (django-axes): after MRTRWEB_LOGIN_FAILURE_LIMIT wrong passwords for one user
# name from one address, that pair cannot sign in (even with the right password) for
# MRTRWEB_LOGIN_COOLOFF_S seconds: HTTP 429 with the locked-out page, the lockout logged (user
# name and address masked, never the password) and kept in the axes tables (admin). Only failures
# count; a successful sign-in clears them. The address is the ASGI server's peer address
# (REMOTE_ADDR), never a header the client sets. SignInsInFlight: guesses sent at the same moment
# count too (at most AXES_FAILURE_LIMIT passwords are checked per pair and cool-off).
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "mrtrweb.site.throttle.SignInsInFlight",
                           "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = int(os.environ.get("MRTRWEB_LOGIN_FAILURE_LIMIT", "5"))
AXES_COOLOFF_TIME = timedelta(seconds=float(os.environ.get("MRTRWEB_LOGIN_COOLOFF_S", "900")))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "mrtrweb.site.lockout.locked_out"
AXES_IPWARE_META_PRECEDENCE_ORDER = ("REMOTE_ADDR",)

LANGUAGE_CODE = "en-us"
# the languages mrtrweb ships a translation for (mrtrweb/locale/); LocaleMiddleware picks one
LANGUAGES = [("en", "English"), ("de", "Deutsch")]
# the one catalog (the package's; Django finds it as the app's own): named here so that
# `./dev messages` (makemessages from the repository root) also puts the strings of this site's
# templates/registration/ pages into it
LOCALE_PATHS = [BASE_DIR / "mrtrweb" / "locale"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
# MRTRWEB_SERVE_STATIC=1 (the default): the workers serve /static/ from the apps' own directories
# (asgi.py), never from collectstatic's copy, so a missing or old copy is no problem (mrtrweb.W042)
SILENCED_SYSTEM_CHECKS = ["mrtrweb.W042"] if os.environ.get("MRTRWEB_SERVE_STATIC", "1") == "1" else []
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Framing: only this site by default. MRTRWEB_FRAME_ANCESTORS="https://portal.example ..." lets the
# listed portals embed the app (CSP frame-ancestors; X-Frame-Options is then left out).
FRAME_ANCESTORS = [o for o in os.environ.get("MRTRWEB_FRAME_ANCESTORS", "").split() if o]
X_FRAME_OPTIONS = "SAMEORIGIN"
if FRAME_ANCESTORS:
    MIDDLEWARE.remove("django.middleware.clickjacking.XFrameOptionsMiddleware")

# Content-Security-Policy (django-csp): no inline script or style, nothing from elsewhere.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "media-src": ["'self'", "data:"],  # audio in results, checked (mrtrweb.rendering)
        "connect-src": ["'self'"],
        "form-action": ["'self'"],
        "base-uri": ["'none'"],
        "object-src": ["'none'"],
        "frame-ancestors": ["'self'", *FRAME_ANCESTORS],
    }
}

# MRTRWEB settings (reference: mrtrweb/conf/__init__.py): every key may come from MRTRWEB_<KEY>
# (numbers, lists as JSON or words, booleans as 1/0; conf.from_environ).
from mrtrweb.conf import from_environ as _mrtrweb_from_environ  # noqa: E402

MRTRWEB = _mrtrweb_from_environ(os.environ)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {"mrtrweb": {"handlers": ["console"], "level": os.environ.get("MRTRWEB_LOG_LEVEL", "INFO")},
                # failures and lockouts (warnings), not axes' start-up banner
                "axes": {"handlers": ["console"], "level": "WARNING"}},
}
