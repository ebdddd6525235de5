"""A portal with organisations of its own that embeds mrtrweb: its resolver maps them to tenants
(docs/embedding.md), and its base template extends mrtrweb's and overrides the documented blocks."""

import os
import secrets
from pathlib import Path

HERE = Path(__file__).resolve().parent
SECRET_KEY = secrets.token_urlsafe(50)
DEBUG = False
ALLOWED_HOSTS = ["testserver", "127.0.0.1"]
INSTALLED_APPS = [
    "django.contrib.auth", "django.contrib.contenttypes", "django.contrib.sessions", "django.contrib.messages",
    "django.contrib.staticfiles", "channels", "mrtrweb", "tests.embed_orgs.orgs.apps.OrgsConfig",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "mrtrweb.tenancy.TenantSyncMiddleware",  # after authentication: memberships follow the portal
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.embed_orgs.urls"
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "DIRS": [HERE / "templates"],
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": ["django.template.context_processors.request",
                                       "django.contrib.auth.context_processors.auth",
                                       "django.contrib.messages.context_processors.messages"]},
}]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["EMBED_DB"]}}
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
STATIC_URL = "/assets/"
USE_TZ = True
LOGIN_URL = "/login/"
MRTRWEB = {
    "TENANT_RESOLVER": "tests.embed_orgs.orgs.tenancy.resolve",
    "TENANT_SYNC_S": 60,
    "BINDING_KEY_PREFIX": "orgs-portal",
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGGING = {
    "version": 1, "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"mrtrweb.tenancy": {"handlers": ["stderr"], "level": "INFO"}},
}
