"""System checks of the MRTRWEB settings."""

from __future__ import annotations

from django.core.checks import Error, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured

from . import conf


@register(Tags.compatibility)
def check_settings(app_configs=None, **kwargs):
    messages = []
    for key in conf.unknown_keys():
        messages.append(Warning(f"MRTRWEB has an unknown key {key!r}", id="mrtrweb.W001"))
    try:
        conf.get("SERVER_URL_POLICY")
    except ImproperlyConfigured as exc:
        messages.append(Error(str(exc), hint="See SERVER_URL_POLICY in docs/settings.md: e.g. {\"allow_networks\": "
                              "[\"10.0.0.0/8\"], \"allow_http_hosts\": [\"mcp.corp.example\"]}.", id="mrtrweb.E050"))
    try:
        ttl = conf.get("TTL_S")
        max_ttl = conf.get("MAX_TTL_S")
        for key in conf.DEFAULTS:
            if key not in ("SERVER_URL_POLICY", "MODEL_PROVIDERS", "MODEL_URL_POLICY"):
                conf.get(key)
    except ImproperlyConfigured as exc:
        return messages + [Error(str(exc), id="mrtrweb.E001")]
    if ttl > max_ttl:
        messages.append(Error(f"MRTRWEB TTL_S ({ttl}) is above MAX_TTL_S ({max_ttl})", id="mrtrweb.E002"))
    messages.extend(_check_legacy_hold(ttl))
    return messages


#: the SDK's read timeout of an SSE response (``mcp.shared._httpx_utils.MCP_DEFAULT_SSE_READ_TIMEOUT``)
SSE_READ_TIMEOUT_S = 300.0
#: what a held call needs beyond the hold: the answer's hand-over and the reply to the server
LEGACY_HOLD_MARGIN_S = 10.0


def _check_legacy_hold(ttl: float) -> list:
    """``LEGACY_HOLD_S`` must end before the held call's SSE stream times out (the call would fail
    instead of the server hearing ``cancel``); above ``TTL_S`` it is cut to the round's TTL."""
    hold = conf.get("LEGACY_HOLD_S")
    read_timeout = max(float(conf.get("CALL_TIMEOUT_S")), SSE_READ_TIMEOUT_S)
    if hold + LEGACY_HOLD_MARGIN_S > read_timeout:
        return [Error(f"MRTRWEB LEGACY_HOLD_S ({hold}) is too long: a call held open that long would hit the SSE "
                      f"read timeout of {read_timeout:g}s before the server is told cancel",
                      hint=f"Use at most {read_timeout - LEGACY_HOLD_MARGIN_S:g} seconds (or raise CALL_TIMEOUT_S).",
                      id="mrtrweb.E006")]
    if hold > ttl:
        return [Warning(f"MRTRWEB LEGACY_HOLD_S ({hold}) is above TTL_S ({ttl}): a held call ends with its round's "
                        "TTL anyway", id="mrtrweb.W013")]
    return []


_IN_PROCESS_CACHES = ("django.core.cache.backends.locmem.LocMemCache", "django.core.cache.backends.dummy.DummyCache",
                      "django.core.cache.backends.filebased.FileBasedCache")


@register(Tags.security, deploy=True)
def check_production_topology(app_configs=None, **kwargs):
    """``check --deploy``: several workers need a shared binding cache and channel layer; a binding
    store in the cache loses live rounds when the cache restarts (W017)."""
    from django.conf import settings

    messages = []
    try:
        alias = conf.get("BINDING_CACHE")
        prefix = conf.get("BINDING_KEY_PREFIX")
        store = conf.get("BINDING_STORE")
    except ImproperlyConfigured:
        return messages  # reported by check_settings
    backend = (getattr(settings, "CACHES", {}).get(alias) or {}).get("BACKEND", "")
    if not backend:
        messages.append(Error(f"MRTRWEB BINDING_CACHE names the cache alias {alias!r}, which is not configured",
                              id="mrtrweb.E003"))
    elif backend in _IN_PROCESS_CACHES:
        what = ("a round received by one worker cannot be answered through another, and a double submit split "
                "across workers is not caught" if store == "cache" else
                "a Stop posted to one worker never reaches a call driven by another")
        messages.append(Warning(
            f"The binding cache {alias!r} is in-process ({backend.rsplit('.', 1)[-1]}): {what}.",
            hint="Use django_redis.cache.RedisCache for MRTRWEB['BINDING_CACHE'].", id="mrtrweb.W010"))
    if store == "cache":
        messages.append(Warning(
            "MRTRWEB BINDING_STORE is \"cache\": a restart of the binding cache without persistence loses every "
            "live round (answers to them are refused, calls in flight fail with no_live_request); use the database "
            "store.", hint="Set MRTRWEB['BINDING_STORE'] = \"database\" (the default): rounds then survive a restart "
            "of Redis, with or without persistence.", id="mrtrweb.W017"))
    layer = (getattr(settings, "CHANNEL_LAYERS", {}) or {}).get("default", {}).get("BACKEND", "")
    if not layer or layer.endswith("InMemoryChannelLayer"):
        messages.append(Warning(
            "The channel layer is in-process: a round received on one worker never reaches a browser connected "
            "to another.", hint="Use channels_redis.core.RedisChannelLayer.", id="mrtrweb.W011"))
    if not isinstance(prefix, str) or not prefix.strip():
        messages.append(Warning("MRTRWEB BINDING_KEY_PREFIX is empty: binding keys are unprefixed and may collide "
                                "with other data in the cache.", id="mrtrweb.W012"))
    options = (getattr(settings, "CACHES", {}).get(alias) or {}).get("OPTIONS", {})
    if options.get("IGNORE_EXCEPTIONS"):
        messages.append(Error("The binding cache ignores exceptions (IGNORE_EXCEPTIONS): an unreachable cache "
                              "would look like an empty one instead of failing closed.", id="mrtrweb.E004"))
    return messages


#: channels_redis's blocking receive, seconds (``RedisChannelLayer.brpop_timeout``)
_LAYER_RECEIVE_S = 5.0


@register(Tags.compatibility)
def check_redis_channel_hosts(app_configs=None, **kwargs) -> list:
    """W014: a channels_redis host whose socket timeout is not above the layer's 5 s blocking
    receive (a plain URL gets redis-py's 5 s default): an idle consumer's receive then fails with
    a TimeoutError after 5 s and its WebSocket is closed."""
    from urllib.parse import parse_qs, urlsplit

    from django.conf import settings

    layer = (getattr(settings, "CHANNEL_LAYERS", {}) or {}).get("default", {})
    if "channels_redis" not in layer.get("BACKEND", ""):
        return []
    messages = []
    for host in (layer.get("CONFIG") or {}).get("hosts") or []:
        address = host.get("address", "") if isinstance(host, dict) else host if isinstance(host, str) else ""
        timeout = host.get("socket_timeout") if isinstance(host, dict) else None
        query = parse_qs(urlsplit(address).query) if isinstance(address, str) else {}
        if query.get("socket_timeout"):
            timeout = query["socket_timeout"][0]  # redis-py: the URL's options win
        try:
            ok = timeout is not None and float(timeout) > _LAYER_RECEIVE_S
        except (TypeError, ValueError):
            ok = False
        if not ok:
            messages.append(Warning(
                "A channels_redis host has no socket timeout above the layer's 5 s blocking receive: idle "
                "WebSocket consumers fail with a Redis TimeoutError after 5 s and their pushes are lost.",
                hint='Give the host as {"address": URL, "socket_timeout": 30} (settings_prod.py does).',
                id="mrtrweb.W014"))
    return messages


@register(Tags.compatibility)
def check_sampling_provider(app_configs=None, **kwargs):
    """``MRTRWEB["SAMPLING_PROVIDER"]`` must import and be usable, or sampling cards cannot render."""
    try:
        from .consent.sampling import get_provider

        get_provider()
    except ImproperlyConfigured:
        return []  # reported by check_settings
    except Exception as exc:  # noqa: BLE001 -- import errors of any kind
        return [Error(f"MRTRWEB SAMPLING_PROVIDER cannot be used: {exc.__class__.__name__}: {exc}",
                      hint="Give the dotted path of an object with provide(), or of a callable.",
                      id="mrtrweb.E005")]
    return []


#: the middleware that syncs a user's memberships when stale, and the one it must follow
_TENANT_SYNC_MIDDLEWARE = "mrtrweb.tenancy.TenantSyncMiddleware"
_AUTH_MIDDLEWARE = "django.contrib.auth.middleware.AuthenticationMiddleware"


@register(Tags.compatibility)
def check_tenant_resolver(app_configs=None, **kwargs) -> list:
    """E030: ``MRTRWEB["TENANT_RESOLVER"]`` does not import or is not callable (no sign-in could
    sync the portal's organisations). W030: it is set but :class:`~mrtrweb.tenancy.TenantSyncMiddleware`
    is not in ``MIDDLEWARE`` after ``AuthenticationMiddleware``: memberships then follow the
    portal only at sign-in (a person removed from an organisation keeps access until then)."""
    from django.conf import settings

    try:
        path = conf.get("TENANT_RESOLVER")
    except ImproperlyConfigured:
        return []  # reported by check_settings
    if path is None:
        return []
    from .tenancy.sync import load

    try:
        load(path)
    except Exception as exc:  # noqa: BLE001 -- import errors of any kind
        return [Error(f"MRTRWEB TENANT_RESOLVER cannot be used: {exc.__class__.__name__}: {exc}",
                      hint="Give the dotted path of a callable (user) -> iterable of "
                           "mrtrweb.tenancy.TenantGrant(key, name, role); see docs/embedding.md.",
                      id="mrtrweb.E030")]
    middleware = list(getattr(settings, "MIDDLEWARE", None) or [])
    if _TENANT_SYNC_MIDDLEWARE not in middleware or _AUTH_MIDDLEWARE not in middleware or \
            middleware.index(_TENANT_SYNC_MIDDLEWARE) < middleware.index(_AUTH_MIDDLEWARE):
        return [Warning("MRTRWEB TENANT_RESOLVER is set but memberships follow the portal only at sign-in: a "
                        "person removed from an organisation keeps its servers until they sign in again.",
                        hint=f"Add {_TENANT_SYNC_MIDDLEWARE!r} to MIDDLEWARE after {_AUTH_MIDDLEWARE!r}.",
                        id="mrtrweb.W030")]
    return []


@register(Tags.security)
def check_secret_keys(app_configs=None, **kwargs) -> list:
    """E020 / E021, with ``DEBUG`` off: ``SECRET_KEY`` (or one of ``SECRET_KEY_FALLBACKS``,
    which still verify signatures) or ``MRTRWEB["AUDIT_SECRET"]`` is known or weak
    (:func:`mrtrweb.runtime.secretkeys.key_problem`: published in this repository, Django's
    ``django-insecure-`` prefix, under 50 characters or under 5 different ones). Whoever knows the
    key can sign review tokens and sessions, and map the audit rows' user digests back to users.
    Not only under ``--deploy``: ``migrate`` refuses to run with such a key."""
    from django.conf import settings

    from .runtime.secretkeys import key_problem

    if settings.DEBUG:
        return []
    messages = []
    keys = [("SECRET_KEY", getattr(settings, "SECRET_KEY", None))]
    keys += [(f"SECRET_KEY_FALLBACKS[{i}]", key)
             for i, key in enumerate(getattr(settings, "SECRET_KEY_FALLBACKS", None) or [])]
    make = "python -c 'import secrets; print(secrets.token_urlsafe(50))'"
    if str(getattr(settings, "ROOT_URLCONF", "") or "").startswith("mrtrweb.site."):  # the standalone site
        hint = (f"Set DJANGO_SECRET_KEY to at least 50 random characters ({make}), or leave it unset for the "
                "standalone site's own key in var/.")
    else:  # a portal's own settings: its key is its own business, var/ is not there
        hint = (f"Give your project's SECRET_KEY at least 50 random characters ({make}), read from the "
                "environment or a secrets file, never committed with your settings.")
    for name, key in keys:
        problem = key_problem(key)
        if problem:
            messages.append(Error(f"{name} cannot protect anything: {problem}.", hint=hint, id="mrtrweb.E020"))
    try:
        audit_secret = conf.get("AUDIT_SECRET")
    except ImproperlyConfigured:
        return messages  # reported by check_settings
    if audit_secret not in (None, ""):  # empty: derived from SECRET_KEY, as unset (audit.keyed_digest)
        problem = key_problem(audit_secret)
        if problem:
            messages.append(Error(f"MRTRWEB AUDIT_SECRET cannot protect the audit digests: {problem}.",
                                  hint="Use at least 50 random characters, or leave it unset (derived from "
                                       "SECRET_KEY).", id="mrtrweb.E021"))
    return messages


@register(Tags.security)
def check_secret_keys_at_rest(app_configs=None, **kwargs) -> list:
    """E022: ``MRTRWEB["SECRET_KEYS"]``, when set, must be a non-empty list of valid Fernet keys
    (urlsafe base64 of 32 bytes, ``cryptography.fernet.Fernet.generate_key()``); else no secret
    can be sealed or opened (tokens, client secrets, tenant credentials). W015: a key listed twice
    (a rotation that forgot to put the new key first leaves the old one sealing)."""
    from .authz.crypto import keys

    try:
        configured = conf.get("SECRET_KEYS")
    except ImproperlyConfigured:
        return []  # reported by check_settings
    if configured is None:
        return []
    hint = ("Give a list of keys made with python -c 'from cryptography.fernet import Fernet; "
            "print(Fernet.generate_key().decode())'; the first seals, every one opens.")
    try:
        found = keys()
    except ImproperlyConfigured as exc:
        return [Error(f"{exc}.", hint=hint, id="mrtrweb.E022")]
    if len(set(found)) != len(found):
        return [Warning('MRTRWEB["SECRET_KEYS"] lists a key twice.', hint="List each key once, the newest first.",
                        id="mrtrweb.W015")]
    return []


from .authz import checks as _authz_checks  # noqa: E402,F401 - registers the authorization settings' checks
from .runtime import serving_checks as _serving_checks  # noqa: E402,F401 - registers the static-file and WebSocket checks


@register(Tags.security)
def check_apps_sandbox_origin(app_configs=None, **kwargs) -> list:
    """E060: ``MRTRWEB["APPS_SANDBOX_ORIGIN"]``, when set, must be a bare http(s) origin whose host
    is not one of the site's (``CSRF_TRUSTED_ORIGINS``) nor inside the domain of the site's cookies
    (``SESSION_COOKIE_DOMAIN``, ``CSRF_COOKIE_DOMAIN``, ``LANGUAGE_COOKIE_DOMAIN``): the sandbox
    would get the site's cookies (docs/apps.md)."""
    from django.conf import settings as django_settings

    from .mcpapps.sandbox import origin_problem

    try:
        value = conf.get("APPS_SANDBOX_ORIGIN")
    except ImproperlyConfigured:
        return []  # reported by the settings check
    problem = origin_problem(value, getattr(django_settings, "CSRF_TRUSTED_ORIGINS", ()) or ())
    if problem is None and value:
        from urllib.parse import urlsplit

        host = (urlsplit(value.strip()).hostname or "").lower()
        for name in ("SESSION_COOKIE_DOMAIN", "CSRF_COOKIE_DOMAIN", "LANGUAGE_COOKIE_DOMAIN"):
            domain = str(getattr(django_settings, name, None) or "").strip().lstrip(".").lower()
            if domain and (host == domain or host.endswith("." + domain)):
                problem = (f"has its host {host} inside {name} ({domain}): the site's cookies would be sent to "
                           "the sandbox - use a host name outside that domain")
                break
    if problem is None:
        return []
    return [Error(f"MRTRWEB['APPS_SANDBOX_ORIGIN'] {problem}.",
                  hint="See docs/apps.md: the sandbox needs its own host name.", id="mrtrweb.E060")]


@register(Tags.compatibility)
def check_model_providers(app_configs=None, **kwargs) -> list:
    """``MODEL_PROVIDERS`` and ``MODEL_URL_POLICY`` (issue 32, :mod:`mrtrweb.providers.config`):
    each problem one ``mrtrweb.E070``."""
    from .providers import problems

    return [Error(why, hint="See MODEL_PROVIDERS in docs/chat.md.", id="mrtrweb.E070") for why in problems()]
