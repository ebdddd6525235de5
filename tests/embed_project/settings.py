"""A host project that embeds mrtrweb the way docs/embedding.md says (its own URL prefix, its own base
template, no 'logout' URL of mrtrweb's making)."""

import os
import secrets
from pathlib import Path

HERE = Path(__file__).resolve().parent
SECRET_KEY = secrets.token_urlsafe(50)  # a portal's own key; a fixed one here would be published (mrtrweb.E020)
DEBUG = False
ALLOWED_HOSTS = ["testserver", "127.0.0.1"]
INSTALLED_APPS = [
    "django.contrib.auth", "django.contrib.contenttypes", "django.contrib.sessions", "channels", "mrtrweb",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "tests.embed_project.urls"
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "DIRS": [HERE / "templates"],
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": ["django.template.context_processors.request",
                                       "django.contrib.auth.context_processors.auth"]},
}]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["EMBED_DB"]}}
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
STATIC_URL = "/assets/"
USE_TZ = True
LOGIN_URL = "/portal/login/"
MRTRWEB = {"TTL_S": 300, "BINDING_KEY_PREFIX": "portal-mrtr"}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
