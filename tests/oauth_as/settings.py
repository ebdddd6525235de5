"""Settings of the test authorization server (a second Django project; see ``tests/oauth_as``).

Everything that varies per run comes from the environment, set by
:func:`tests.oauth_as.start_auth_server` for the subprocess:

``OAUTH_AS_DB``              the SQLite file (under the test's tmp dir)
``OAUTH_AS_ISSUER``          the issuer identifier, exactly ``http://127.0.0.1:PORT`` (RFC 8414 / 9207)
``OAUTH_AS_CONTROL_SECRET``  the secret the test sends in ``X-Control-Secret`` to the ``/_test/`` views
``OAUTH_AS_ACCESS_TTL_S``    the lifetime of new access tokens in seconds (changeable at run time
                             through ``POST /_test/settings``)
"""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent

SECRET_KEY = os.environ.get("OAUTH_AS_SECRET_KEY", "test-authorization-server-not-a-secret")
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]
ROOT_URLCONF = "tests.oauth_as.urls"
USE_TZ = True
TIME_ZONE = "UTC"

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oauth2_provider",
]
MIDDLEWARE = [
    "tests.oauth_as.control.EventMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [HERE / "templates"],  # before DOT's own: the login page and a plain base.html
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("OAUTH_AS_DB", str(HERE / "as.sqlite3")),
        "OPTIONS": {"timeout": 10},
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # test users, fast
LOGIN_URL = "/accounts/login/"
STATIC_URL = "/static/"

# The product's site runs on 127.0.0.1 too, on another port: cookies do not separate ports, so
# this server's cookies must not carry the product's names (they would overwrite each other).
SESSION_COOKIE_NAME = "oauth_as_sessionid"
CSRF_COOKIE_NAME = "oauth_as_csrftoken"

LOGGING = {"version": 1, "disable_existing_loggers": False,
           "root": {"handlers": [], "level": "WARNING"}}

ISSUER = os.environ.get("OAUTH_AS_ISSUER", "http://127.0.0.1:8100")

OAUTH2_PROVIDER = {
    "OIDC_ISS_ENDPOINT": ISSUER,  # the metadata's `issuer` and the RFC 9207 `iss`, exactly
    "SCOPES": {"mcp": "Use the MCP demo server", "mcp:admin": "Read the demo server's admin report",
               "offline_access": "Stay connected (refresh tokens)"},
    "DEFAULT_SCOPES": ["mcp"],
    "ACCESS_TOKEN_EXPIRE_SECONDS": int(os.environ.get("OAUTH_AS_ACCESS_TTL_S", "3600")),
    "REFRESH_TOKEN_EXPIRE_SECONDS": 86400,
    "ROTATE_REFRESH_TOKEN": True,
    "REFRESH_TOKEN_REUSE_PROTECTION": True,
    "AUTHORIZATION_CODE_EXPIRE_SECONDS": 60,
    "PKCE_REQUIRED": True,
    "REQUEST_APPROVAL_PROMPT": "force",  # the consent page every time: a person's step is visible
    "ALLOWED_REDIRECT_URI_SCHEMES": ["http", "https"],
    "ALLOWED_SCHEMES": ["http", "https"],
    "COMPLIANT_BCP_RFC9700_IMPLICIT_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PASSWORD_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,  # S256 only
    "COMPLIANT_BCP_RFC9700_ACCESS_TOKEN_TRANSPORT": True,
    "COMPLIANT_BCP_RFC9700_AUTHZ_RESPONSE_ISS": True,  # RFC 9207 `iss` on the redirect
    "COMPLIANT_BCP_RFC9700_TOKEN_STORAGE": True,
    # oauthlib's server takes the token lifetime when it is built: rebuilt per request, so
    # ``POST /_test/settings`` changes the lifetime of the next token (test only)
    "ALWAYS_RELOAD_OAUTHLIB_CORE": True,
}
