"""The ``MRTRWEB`` settings namespace, read in this one package (:func:`get`).

Every key is optional: :data:`DEFAULTS` (:mod:`.defaults`, with the keys by the type of their
value) holds what an embedding project gets; :func:`from_environ` (:mod:`.environ`) reads
``MRTRWEB_<KEY>`` variables, and each key's meaning
is below, one entry per key, in the order the settings reference shows them. That reference
(docs/settings.md) is generated from the two at build time (docs/_ext/mrtrweb_settings.py): a key of
:data:`DEFAULTS` without an entry here, or an entry naming no key, fails the documentation build.
Meanings are reStructuredText-lite: ``literal`` is the only markup.

``BINDING_STORE``
    where live bindings (rounds, their single-use claims, legacy answers handed between workers) are kept:
    ``"database"`` (durable: a restart of the cache loses nothing; see mrtrweb.bindings) or ``"cache"``
    (``BINDING_CACHE`` only: a cache restarted without persistence loses every live round; ``check --deploy``
    warns, ``mrtrweb.W017``)
``BINDING_CACHE``
    cache alias of what is short-lived and shared by every worker (stop requests, legacy hold
    notices; the bindings too with ``BINDING_STORE = "cache"``); Redis in production
``BINDING_KEY_PREFIX``
    prefix of binding keys; a tenant digest follows it
``TTL_S``
    lifetime of a binding and of a round, seconds
``TENANT_RESOLVER``
    dotted path of a portal's ``(user) -> iterable of mrtrweb.tenancy.TenantGrant(key, name, role)``: the
    embedding portal's organisations of that user, which the tenants (``Tenant.external_key``) and the user's
    memberships of them follow (at sign-in, then at a request once ``TENANT_SYNC_S`` passed; mrtrweb.tenancy,
    docs/embedding.md); a failing resolver grants nothing (logged reason). ``None``: tenants are managed by hand
``TENANT_SYNC_S``
    seconds a user's memberships read from ``TENANT_RESOLVER`` are trusted before
    ``TenantSyncMiddleware`` reads them again
``MAX_TTL_S``
    the system check refuses a ``TTL_S`` above this (``mrtrweb.E002``)
``MAX_STATE_BYTES``
    cap on ``requestState``, UTF-8 bytes, inclusive
``MAX_ROUNDS``
    rounds one operation may take
``STATE_ONLY_BACKOFF_S``
    first pause before a ``requestState``-only retry (the pacing of such retries), seconds
``STATE_ONLY_BACKOFF_CAP_S``
    cap of that pause (it doubles per consecutive round), seconds
``POLICY_VERSION``
    recorded in each audit row
``CALL_TIMEOUT_S``
    seconds to wait for one MCP response
``CONNECTION_IDLE_S``
    idle MCP client sessions are closed after this many seconds
``AUDIT_SECRET``
    HMAC key of the user/tenant digests in audit rows; ``None``: derived from ``SECRET_KEY``. With
    ``DEBUG`` off, ``mrtrweb.E021`` refuses a known or weak one
``AUDIT_WAIT_S``
    the longest one audit append waits while others append to the same tenant's chain (PostgreSQL:
    a row lock on the chain head, ``lock_timeout``; SQLite: the write lock, busy timeout); past it
    the append fails and the retry it guards is not sent (``audit_unavailable``)
``ROUND_THREADS``
    ``0`` (the default): the rounds' phases (their database, gate and audit work) run on
    asgiref's one sync thread, as the rest of the process's ``sync_to_async`` work. On PostgreSQL,
    ``N`` >= 1: on N threads of their own (mrtrweb.operations.hops), a phase on the least busy one,
    so concurrent rounds do not queue behind each other. Each of those threads keeps a database
    connection for good: with a pool (``OPTIONS["pool"]``, the production settings' default of
    10) its ``max_size`` must exceed N + 1 + the requests a worker serves at once, or a request
    holding a connection while it awaits a phase whose thread waits for one fails after the
    pool's timeout (503). Ignored on SQLite
``METRICS_TOKEN``
    bearer token of the Prometheus endpoint ``/mcp/metrics/`` (mrtrweb.runtime.metrics_view; a scrape sends
    ``Authorization: Bearer <token>``); ``None``: the endpoint answers 404 ``metrics_disabled``
``MAX_PENDING_ROUNDS``
    per user, operations waiting for an answer at once
``MAX_STARTS_PER_MINUTE``
    per user, operations started per minute
``MAX_TENANT_PENDING_ROUNDS``
    per tenant, operations waiting for an answer at once
``MAX_TENANT_STARTS_PER_MINUTE``
    per tenant, operations started per minute
``HEARTBEAT_S``
    period of each worker's lease renewal (in the database, by the database's clock) and of its
    expiry sweep, seconds; a worker whose lease was not renewed for three periods counts as dead
``DRAIN_GRACE_S``
    on SIGTERM (the ASGI lifespan's shutdown) a worker takes no new operation and lets its calls in
    flight and legacy holds finish for up to this long, then marks what is left interrupted
    (``worker_stopped``) and exits (mrtrweb.runtime.drain)
``LEGACY_HOLD_S``
    the longest a 2025-11-25 server's call is held open while the person decides on a request it
    sent during the call (``elicitation/create``...; the hold also ends with the round's TTL); then
    the server is told ``cancel`` and the operation ends denied (``timeout``). Checks:
    ``mrtrweb.E006`` if the hold would outlive the SSE read timeout of the held call (the greater
    of ``CALL_TIMEOUT_S`` and 300 s, less a 10 s margin), ``mrtrweb.W013`` if it exceeds ``TTL_S``
``OUTCOME_HOLD_S``
    a call that ends while PostgreSQL is unreachable: its outcome is held by the worker until the
    database answers again, however long the outage, then written once; past this many seconds the
    hold is logged as an error (once) and goes on
``MAX_HELD_OUTCOMES``
    per worker, outcomes held that way at once (gauge ``mrtrweb_outcomes_held``); one more is not kept: its
    operation ends failed (``outcome_not_kept``) once the database is back (counter
    ``mrtrweb_outcomes_not_kept_total``)
``TASK_POLL_MIN_S``
    the shortest pause between two ``tasks/get`` of a call that runs as a task (seconds; a server's
    shorter ``pollInterval`` is raised to it)
``TASK_POLL_MAX_S``
    the longest pause between two ``tasks/get`` (seconds; a longer or absent ``pollInterval`` is
    lowered to it, so the task's status and Stop stay live)
``MAX_STORED_RESULT_BYTES``
    the most of one final result an operation keeps (compact JSON, UTF-8 bytes); a larger result is
    kept as an explicitly marked, truncated copy (``{"mrtrweb_truncated": {"original_bytes",
    "stored_bytes"}, "text": ...}``, within the cap; mrtrweb.text.results) and its page says so; it
    also bounds an MCP App's document (its ``resources/read`` result; docs/apps.md, ``too_large``)
``MAX_SHOWN_CHARS``
    the most characters of server text a page or push shows of one result (all its blocks; at most
    100 blocks), of one elicitation message or sampling text, and of a tool's or prompt's
    description on its call page (2,000 per item on the server page); the page says what was left
    out, and the whole stored result is behind Download the result
    (``/mcp/operations/<id>/result/``: the owner only, an attachment, ``nosniff``, never rendered)
``MAX_PUSH_BYTES``
    a pushed panel larger than this (UTF-8 bytes of its HTML) is not pushed; the page fetches it instead
``SECRET_KEYS``
    list of Fernet keys sealing secrets at rest (tokens, client secrets, tenant credentials;
    mrtrweb.authz.crypto); the first seals, every one opens. ``None``: one key derived from
    ``SECRET_KEY`` (HKDF-SHA256) -- then rotating ``SECRET_KEY`` makes stored secrets unreadable
    (people connect again, admins re-enter credentials); ``"derived"`` in the list stands for that
    key. ``mrtrweb.E022`` refuses keys that are not Fernet keys, ``mrtrweb.W015`` a key listed twice
``OAUTH_REDIRECT_URI``
    the exact redirect URI registered at authorization servers:
    ``https://YOUR.HOST/mcp/oauth/callback/`` (the view ``mrtrweb:oauth-callback``). ``None``: this
    site's callback URL as the request starting a flow sees it (set it behind a proxy)
``OAUTH_CLIENT_METADATA_URL``
    the HTTPS URL of this deployment's Client ID Metadata Document (it is also the client id). Route
    it to the view ``mrtrweb:oauth-client-metadata`` -- with ``path("mcp/", include("mrtrweb.urls"))``
    that is ``https://YOUR.HOST/mcp/oauth/client-metadata.json``. ``None``: no CIMD (a pre-registered
    client, else Dynamic Client Registration) and that URL answers 404; set without
    ``OAUTH_REDIRECT_URI``, ``check --deploy`` warns (``mrtrweb.W016``)
``OAUTH_CLIENT_NAME``
    ``client_name`` in the CIMD and in registrations
``OAUTH_PENDING_TTL_S``
    how long a started sign-in waits for its callback, seconds
``OAUTH_REFRESH_MARGIN_S``
    access tokens are refreshed this long before they expire, seconds
``OUTBOUND_ALLOW_HTTP_LOOPBACK``
    allow plain ``http`` to loopback for discovery, registration and tokens (development and tests
    only; ``./dev demo`` turns it on in its own process and says so)
``OUTBOUND_ALLOW_HOSTS``
    host names (or IP literals) allowed although they resolve to private, loopback or link-local
    addresses (an on-premises authorization server)
``OUTBOUND_TIMEOUT_S``
    the longest one outbound authorization request takes, seconds
``OUTBOUND_MAX_BYTES``
    the most bytes of one outbound authorization response
``SERVER_URL_POLICY``
    which Streamable HTTP URLs tenant admins and people may give the servers they add from the
    product's pages (servers the superuser adds in ``/admin/`` are not restricted), checked when a
    server is saved or tested and again at every connection, which then goes to the address that
    was checked (mrtrweb.serverconfig.policy, mrtrweb.mcp.url_policy). A dict, every key optional:
    ``allow_hosts`` (host names or IP literals whose addresses are not judged; ``".corp.example"``:
    every name under that domain), ``allow_networks`` (networks such as ``"10.0.0.0/8"`` whose
    addresses are allowed), ``allow_http_hosts`` (hosts plain ``http`` is allowed to; their addresses
    are still judged), ``max_url_chars`` (the longest URL, 20 to 4096, default 500). The default
    ``{}``: ``https`` to public addresses only, by the outbound guard's rules (private, loopback,
    link-local, shared and reserved addresses refused, IPv4-mapped, NAT64 and 6to4 forms judged by
    the IPv4 address they carry). ``MRTRWEB_SERVER_URL_POLICY``: a JSON object. A wrong shape
    stops start-up (``mrtrweb.E050``)
``SERVER_TESTS_PER_MINUTE``
    per person, "Test" connections to a server (before saving it, or of a saved one) per minute;
    one more is refused (``test_rate_limited``) without connecting
``PREPARED_STATEMENTS``
    on PostgreSQL with psycopg 3, the round's hand-compiled statements (access, the operation's row, the
    binding store, the audit chain: :mod:`mrtrweb.prepared`) are prepared the second time a connection
    runs them and then run with their generic plan -- PostgreSQL's planning was 0.1-1.2 ms of each
    (True); the project's own queries are left as Django sends them. ``False`` behind a connection
    pooler in transaction mode that does not keep prepared statements (PgBouncer before 1.22, or
    without ``max_prepared_statements``); ``MRTRWEB_PREPARED_STATEMENTS=0``
``GC_FREEZE``
    at worker start-up (``mrtrweb.runtime.gcpolicy.configure()``, called last by ``mrtrweb/site/asgi.py`` and by
    a portal's ``asgi.py``), collect once and ``gc.freeze()`` what start-up built: no later collection walks it
``GC_THRESHOLDS``
    ``gc.set_threshold`` at start-up, three positive ints (generation 0 allocations, then
    collections of the younger generation): fewer, cheaper young collections and rare full ones
    (measured in mrtrweb.runtime.gcpolicy and docs/benchmarks NOTES); ``None`` keeps Python's
    ``(700, 10, 10)``; default ``(5000, 4, 1000)``; ``MRTRWEB_GC_THRESHOLDS="5000 4 1000"``
``GC_EVERY_S``
    the longest a worker goes without a collection, seconds (0.25): a thread of the worker collects
    whenever the interpreter's allocation count did not in that time -- the young generation,
    generation 1 when its count is due (``GC_THRESHOLDS``), never a full one -- so the objects a collection walks,
    those made since the last one, stay few whatever old objects die meanwhile
    (mrtrweb.runtime.gcpolicy); 0.01 to 3600; ``None`` (``MRTRWEB_GC_EVERY_S=none``): the
    interpreter's counts alone, no thread
``APPS_SANDBOX_ORIGIN``
    the origin MCP Apps run on (docs/apps.md; e.g. ``"https://apps.example.com"``), not the site's host name (``mrtrweb.E060``)
``APPS_CALLS_PER_SECOND``
    the most ``tools/call`` / ``resources/read`` / ``sampling/createMessage`` requests and ``ui/message`` /
    ``ui/update-model-context`` hand-overs one rendered app (its host operation) may make in one second, all
    counted together (5); one more is refused with a JSON-RPC error (``rate_limited``), nothing sent (docs/apps.md)
``APPS_CALL_TIMEOUT_S``
    seconds one call of an app may take, from the app's request to its final result, the person's confirmation and
    rounds included (120); then it is stopped and the app told so. Also how long an app's
    ``sampling/createMessage`` card waits for the person, before and after a draft (the app's one waiting
    sampling: this + 1 s, this + ``MODEL_REPLY_TIMEOUT_S`` + 1 s while the model drafts)
``APPS_MAX_TOOLS``
    an app may call at most this many tools (50): the first ones, in the server's listing order, whose
    ``_meta.ui.visibility`` includes ``"app"``; any further one is refused
``APPS_MAX_DOWNLOAD_BYTES``
    the most bytes (decoded, all files together) an app may offer for download with ``ui/download-file``
    (1,000,000); the request carries them base64-encoded, so keep it under Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE``
``SAMPLING_PROVIDER``
    dotted path of the object or callable ``provide(request_params, *, user, operation, form_data)
    -> dict`` that answers an approved ``sampling/createMessage`` (a ``CreateMessageResult``;
    mrtrweb.consent.sampling); the default lets the person write the reply
``MAX_TENANT_SERVERS``
    the most servers of a tenant (not counting personal ones) its admins may add (50; not the Django admin)
``MAX_PERSONAL_SERVERS``
    the most personal servers one person may have in one tenant (5); one more is refused, saying why
``MODEL_PROVIDERS``
    the model providers a tenant admin may choose from (issue 32, docs/chat.md): ``{name: {"kind":
    "openai", "base_url", "models": [...], "label", "api_key_env"}}`` (``mrtrweb.E070`` when wrong)
``MODEL_URL_POLICY``
    where a provider's endpoint may be: the shape of ``SERVER_URL_POLICY`` (https to public addresses
    by default; allow an on-premises model's host or network here)
``MODEL_DEMO``
    offer the scripted demo model (not a language model; True)
``MODEL_STEPS_PER_TURN``
    the most model replies in one turn (8); then the turn ends, saying why
``MODEL_PROPOSALS_AT_ONCE``
    the most calls one reply may propose (5); the rest are refused and the model is told
``MODEL_CONTEXT_CHARS``
    the most characters of the conversation sent to the model (60000; the oldest turns are left out)
``MODEL_REPLY_CHARS``
    the most characters of one reply (20000; a longer reply is cut and its calls dropped)
``MODEL_REPLY_TIMEOUT_S``
    seconds one reply may take, stream included (120; a stream that never ends is cut)
``MODEL_RESPONSE_MAX_BYTES``
    the most bytes of one HTTP answer of a provider (4 MiB)
``MODEL_RESULT_CHARS``
    the most characters of one call's result given to the model (8000)
"""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from .defaults import BOOL_KEYS, COUNT_KEYS, DEFAULTS, DICT_KEYS, INT_TUPLE_KEYS, LIST_KEYS, NUMERIC_KEYS
from .environ import from_environ

#: the seconds ``GC_EVERY_S`` may be (below, the thread would collect without pause; above, longer than any use)
GC_EVERY_RANGE_S = (0.01, 3600.0)

__all__ = ["BINDING_STORES", "BOOL_KEYS", "COUNT_KEYS", "DEFAULTS", "DICT_KEYS", "INT_TUPLE_KEYS", "LIST_KEYS", "NUMERIC_KEYS", "from_environ", "get", "policy", "server_policy", "server_url_policy",
           "server_url_policy_of", "unknown_keys"]

def get(key: str) -> Any:
    """One ``MRTRWEB`` value (the project's, else the default).

    Raises:
        ImproperlyConfigured: unknown key, or a value of the wrong type.
    """
    if key not in DEFAULTS:
        raise ImproperlyConfigured(f"unknown MRTRWEB setting {key!r}")
    user = getattr(settings, "MRTRWEB", {}) or {}
    if not isinstance(user, dict):
        raise ImproperlyConfigured("MRTRWEB must be a dict")
    value = user.get(key, DEFAULTS[key])
    if key == "GC_EVERY_S" and value is None:  # the interpreter's counts alone
        return None
    if key in NUMERIC_KEYS and (isinstance(value, bool) or not isinstance(value, (int, float))
                            or (isinstance(value, float) and not math.isfinite(value)) or value <= 0):
        raise ImproperlyConfigured(f"MRTRWEB[{key!r}] must be a positive (finite) number")
    if key in COUNT_KEYS and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ImproperlyConfigured(f"MRTRWEB[{key!r}] must be a whole number, 0 or more")
    if key == "GC_EVERY_S" and not GC_EVERY_RANGE_S[0] <= value <= GC_EVERY_RANGE_S[1]:
        raise ImproperlyConfigured(f"MRTRWEB['GC_EVERY_S'] must be None or {GC_EVERY_RANGE_S[0]} to "
                                   f"{GC_EVERY_RANGE_S[1]} seconds")
    if key in ("GC_FREEZE", "PREPARED_STATEMENTS") and not isinstance(value, bool):
        raise ImproperlyConfigured(f"MRTRWEB[{key!r}] must be True or False")
    if key == "GC_THRESHOLDS" and value is not None:
        value = _gc_thresholds(value)
    if key == "TENANT_RESOLVER" and value is not None and (not isinstance(value, str) or not value.strip()):
        raise ImproperlyConfigured("MRTRWEB['TENANT_RESOLVER'] must be None or the dotted path of a callable")
    if key == "SERVER_URL_POLICY":
        server_url_policy_of(value)
    if key == "BINDING_STORE" and value not in BINDING_STORES:
        raise ImproperlyConfigured(f"MRTRWEB['BINDING_STORE'] must be one of {sorted(BINDING_STORES)}")
    return value


def _gc_thresholds(value: Any) -> tuple[int, int, int]:
    """``GC_THRESHOLDS`` as ``gc.set_threshold`` takes it: three positive ints (a 0 would turn
    collection off and let cyclic garbage grow without bound).

    Raises:
        ImproperlyConfigured: anything else.
    """
    if (not isinstance(value, (list, tuple)) or len(value) != 3
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)):
        raise ImproperlyConfigured("MRTRWEB['GC_THRESHOLDS'] must be None or three positive integers "
                                   "(generation 0 allocations, generation 1 and 2 collections)")
    return (int(value[0]), int(value[1]), int(value[2]))


def server_url_policy_of(value: Any):
    """``SERVER_URL_POLICY``'s dict as a :class:`mrtrweb.mcp.url_policy.UrlPolicy` (names resolve
    within ``OUTBOUND_TIMEOUT_S``).

    Raises:
        ImproperlyConfigured: a wrong shape, said plainly (``mrtrweb.E050`` at start-up).
    """
    from ..mcp.url_policy import parse_policy

    try:
        return parse_policy(value, timeout_s=float(get("OUTBOUND_TIMEOUT_S")))
    except ValueError as exc:
        raise ImproperlyConfigured(f"MRTRWEB['SERVER_URL_POLICY'] {exc}") from None


def server_url_policy():
    """The deployed URL policy of servers added from the pages (:class:`mrtrweb.mcp.url_policy.UrlPolicy`). Never
    raises: a wrong setting (``mrtrweb.E050``; ASGI runs no checks) refuses all (:func:`mrtrweb.mcp.url_policy.unusable`)."""
    from ..mcp.url_policy import unusable
    try:
        return server_url_policy_of(get("SERVER_URL_POLICY"))
    except ImproperlyConfigured as exc:
        return unusable(str(exc))


#: the values of ``BINDING_STORE``
BINDING_STORES = frozenset({"database", "cache"})


def unknown_keys() -> list[str]:
    """Keys of the project's ``MRTRWEB`` that this version does not know (for the system check)."""
    user = getattr(settings, "MRTRWEB", {}) or {}
    return sorted(k for k in user if k not in DEFAULTS) if isinstance(user, dict) else []


def policy():
    """The deployed default gate :class:`~mrtrweb.gate.Policy` (no deprecated method allowed)."""
    from ..gate import Policy

    return Policy(
        ttl_s=float(get("TTL_S")),
        max_state_bytes=int(get("MAX_STATE_BYTES")),
        max_rounds=int(get("MAX_ROUNDS")),
        state_only_backoff_s=float(get("STATE_ONLY_BACKOFF_S")),
        state_only_backoff_cap_s=float(get("STATE_ONLY_BACKOFF_CAP_S")),
        version=str(get("POLICY_VERSION")),
    )


def server_policy(server: Any):
    """The gate policy of one server's operations: the deployed default, with the deprecated
    requests (``sampling/createMessage``, ``roots/list``) a tenant admin allowed for that server."""
    import dataclasses

    return dataclasses.replace(policy(), allow_deprecated=server.allowed_deprecated())
