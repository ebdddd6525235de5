"""The ``MRTRWEB`` settings namespace, read in this one place.

Every key is optional; the defaults below are what an embedding project gets.

==========================  ==========  =========================================================
key                         default     meaning
==========================  ==========  =========================================================
``BINDING_STORE``           "database"  where live bindings are kept: "database" (durable: a round
                                        survives a restart of the cache, see mrtrweb.bindings) or
                                        "cache" (``BINDING_CACHE`` only: a cache restart without
                                        persistence loses every live round; system check W017)
``BINDING_CACHE``           "default"   cache alias of what is short-lived and shared between
                                        workers (stop requests, legacy hold notices; bindings too
                                        with ``BINDING_STORE = "cache"``; use Redis in production)
``BINDING_KEY_PREFIX``      "mrtrweb"   prefix of every binding key (a tenant digest follows it)
``TTL_S``                   600         lifetime of a binding / round, seconds
``MAX_TTL_S``               3600        the highest TTL the system check lets through
``MAX_STATE_BYTES``         65536       cap on ``requestState`` (UTF-8 bytes, inclusive)
``MAX_ROUNDS``              10          rounds one operation may take
``STATE_ONLY_BACKOFF_S``    0.05        first pause before a ``requestState``-only retry
``STATE_ONLY_BACKOFF_CAP_S``1.0         cap of that pause (doubles per consecutive round)
``POLICY_VERSION``          "mrtr-gate/1"  recorded in every audit row
``CALL_TIMEOUT_S``          60          seconds to wait for one MCP response
``CONNECTION_IDLE_S``       300         idle MCP client sessions are closed after this
``AUDIT_SECRET``            None        HMAC key for audit digests (None: derived from SECRET_KEY)
``AUDIT_WAIT_S``            15          the longest one audit append waits for its tenant's chain
                                        while others append (then it fails: ``audit_unavailable``)
``METRICS_TOKEN``           None        bearer token of the Prometheus endpoint ``metrics/``
                                        (mrtrweb.runtime.metrics_view); None: the endpoint answers 404
``MAX_PENDING_ROUNDS``      20          per user: operations waiting for an answer at once
``MAX_STARTS_PER_MINUTE``   30          per user: operations started per minute
``HEARTBEAT_S``             5           worker lease renewal period, seconds (in the database); a
                                        worker whose lease was not renewed for 3 periods is dead.
                                        Also the period of every worker's expiry sweep
``DRAIN_GRACE_S``           60          on SIGTERM (ASGI lifespan shutdown) a worker takes no new
                                        operation and waits this long for its calls in flight and
                                        legacy holds to finish before it marks what is left
                                        interrupted (``worker_stopped``) and exits (mrtrweb.runtime.drain)
``MAX_TENANT_PENDING_ROUNDS``   200     per tenant: operations waiting for an answer at once
``MAX_TENANT_STARTS_PER_MINUTE`` 300    per tenant: operations started per minute
``SAMPLING_PROVIDER``       "mrtrweb.consent.sampling.PersonWritesReply"  dotted path of the object or
                                        callable answering an approved ``sampling/createMessage``
                                        (see :mod:`mrtrweb.consent.sampling`)
``LEGACY_HOLD_S``           120         the longest a 2025-11-25 server's call is held open while the
                                        person decides on a request it sent during the call
                                        (``elicitation/create``...); the hold also ends with the
                                        round's TTL. Then the server is told ``cancel`` and the
                                        operation ends denied (reason ``timeout``). Must stay below
                                        the SSE read timeout of the held call (max(CALL_TIMEOUT_S,
                                        300) s, less a 10 s margin): system check mrtrweb.E006
``OUTCOME_HOLD_S``          60          a call that ends while the database is unreachable: its
                                        outcome is held by the worker until the database answers
                                        again, however long that takes, then written once; past
                                        this many seconds the hold is logged as an error (once)
``MAX_HELD_OUTCOMES``       1000        per worker: outcomes held at once that way; one more is not
                                        kept (its operation ends failed ``outcome_not_kept`` once
                                        the database is back; metric ``mrtrweb_outcomes_held``)
``TASK_POLL_MIN_S``         0.5         the shortest pause between two ``tasks/get`` of a task-augmented
                                        call (seconds; a server's ``pollInterval`` below it is raised)
``TASK_POLL_MAX_S``         5           the longest pause between two ``tasks/get`` (seconds; a longer
                                        or absent ``pollInterval`` is lowered to it, so status and Stop
                                        stay live)
``MAX_STORED_RESULT_BYTES`` 1048576     the most of one result an operation keeps (compact JSON,
                                        UTF-8 bytes); a larger one is kept as a marked, truncated
                                        copy (see :mod:`mrtrweb.text.results`)
``MAX_SHOWN_CHARS``         20000       the most characters of a result (all blocks), of one
                                        elicitation message or sampling text a page or push shows;
                                        the rest of a result is behind its download
``MAX_PUSH_BYTES``          262144      a pushed panel larger than this (UTF-8 bytes of its HTML)
                                        is not pushed: the page fetches it instead
``SECRET_KEYS``             None        Fernet keys sealing secrets at rest (tokens, client
                                        secrets, tenant credentials); the first seals, all open
                                        (None: one key derived from SECRET_KEY; mrtrweb.authz.crypto)
``OAUTH_REDIRECT_URI``      None        the exact OAuth redirect URI (None: this site's callback URL
                                        as the request that starts a flow sees it)
``OAUTH_CLIENT_METADATA_URL`` None      the HTTPS URL at which this deployment serves its Client ID
                                        Metadata Document (the view ``mrtrweb:oauth-client-metadata``);
                                        None: no CIMD (pre-registered client, else DCR)
``OAUTH_CLIENT_NAME``       "mrtrweb"   ``client_name`` in the CIMD and in DCR requests
``OAUTH_PENDING_TTL_S``     600         a started authorization waits this long for its callback
``OAUTH_REFRESH_MARGIN_S``  60          an access token is refreshed this long before it expires
``OUTBOUND_ALLOW_HTTP_LOOPBACK`` False  allow plain http to loopback for discovery, registration and
                                        tokens (development and tests only)
``OUTBOUND_ALLOW_HOSTS``    []          host names (or IP literals) an admin allows even though they
                                        resolve to private, link-local or loopback addresses
``OUTBOUND_TIMEOUT_S``      10          the longest one outbound authorization request takes
``OUTBOUND_MAX_BYTES``      1048576     the most bytes of one outbound authorization response
``GC_FREEZE``               True        at worker start-up, move every object start-up made to the
                                        collector's permanent generation (``gc.freeze()``), so no
                                        collection walks them again (mrtrweb.runtime.gcpolicy)
``GC_THRESHOLDS``           (20000,     ``gc.set_threshold`` at start-up: three positive ints
                            4, 100)     (generation 0 allocations, then collections of the younger
                                        generation); None keeps the interpreter's (700, 10, 10).
                                        ``MRTRWEB_GC_THRESHOLDS``: three numbers separated by spaces
                                        (measured: docs/benchmarks NOTES, mrtrweb.runtime.gcpolicy)
``TENANT_RESOLVER``         None        dotted path of a callable ``(user) -> iterable of
                                        mrtrweb.tenancy.TenantGrant(key, name, role)``: the
                                        embedding portal's organisations of that user, which the
                                        tenants (``Tenant.external_key``) and the user's
                                        memberships of them follow (at sign-in, then at a request
                                        once ``TENANT_SYNC_S`` passed; mrtrweb.tenancy,
                                        docs/embedding.md). None: tenants are managed by hand
``TENANT_SYNC_S``           60          how long a user's memberships read from the resolver are
                                        trusted before a request (``TenantSyncMiddleware``) asks
                                        again
==========================  ==========  =========================================================
"""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

DEFAULTS: dict[str, Any] = {
    "BINDING_STORE": "database",
    "BINDING_CACHE": "default",
    "BINDING_KEY_PREFIX": "mrtrweb",
    "TTL_S": 600,
    "MAX_TTL_S": 3600,
    "MAX_STATE_BYTES": 65536,
    "MAX_ROUNDS": 10,
    "STATE_ONLY_BACKOFF_S": 0.05,
    "STATE_ONLY_BACKOFF_CAP_S": 1.0,
    "POLICY_VERSION": "mrtr-gate/1",
    "CALL_TIMEOUT_S": 60,
    "CONNECTION_IDLE_S": 300,
    "AUDIT_SECRET": None,
    "AUDIT_WAIT_S": 15,
    "METRICS_TOKEN": None,
    "MAX_PENDING_ROUNDS": 20,
    "MAX_STARTS_PER_MINUTE": 30,
    "HEARTBEAT_S": 5,
    "DRAIN_GRACE_S": 60,
    "MAX_TENANT_PENDING_ROUNDS": 200,
    "MAX_TENANT_STARTS_PER_MINUTE": 300,
    "SAMPLING_PROVIDER": "mrtrweb.consent.sampling.PersonWritesReply",
    "LEGACY_HOLD_S": 120,
    "TASK_POLL_MIN_S": 0.5,
    "TASK_POLL_MAX_S": 5,
    "MAX_STORED_RESULT_BYTES": 1048576,
    "MAX_SHOWN_CHARS": 20000,
    "MAX_PUSH_BYTES": 262144,
    "SECRET_KEYS": None,
    "OAUTH_REDIRECT_URI": None,
    "OAUTH_CLIENT_METADATA_URL": None,
    "OAUTH_CLIENT_NAME": "mrtrweb",
    "OAUTH_PENDING_TTL_S": 600,
    "OAUTH_REFRESH_MARGIN_S": 60,
    "OUTBOUND_ALLOW_HTTP_LOOPBACK": False,
    "OUTBOUND_ALLOW_HOSTS": [],
    "OUTBOUND_TIMEOUT_S": 10,
    "OUTBOUND_MAX_BYTES": 1048576,
    "GC_FREEZE": True,
    "GC_THRESHOLDS": (20_000, 4, 100),
    "TENANT_RESOLVER": None,
    "TENANT_SYNC_S": 60,
    "OUTCOME_HOLD_S": 60,
    "MAX_HELD_OUTCOMES": 1000,
}

_NUMERIC = {"TTL_S", "MAX_TTL_S", "MAX_STATE_BYTES", "MAX_ROUNDS", "STATE_ONLY_BACKOFF_S",
            "STATE_ONLY_BACKOFF_CAP_S", "CALL_TIMEOUT_S", "CONNECTION_IDLE_S", "MAX_PENDING_ROUNDS",
            "MAX_STARTS_PER_MINUTE", "HEARTBEAT_S", "DRAIN_GRACE_S", "MAX_TENANT_PENDING_ROUNDS", "MAX_TENANT_STARTS_PER_MINUTE",
            "LEGACY_HOLD_S", "TASK_POLL_MIN_S", "TASK_POLL_MAX_S", "MAX_STORED_RESULT_BYTES", "MAX_SHOWN_CHARS", "MAX_PUSH_BYTES", "AUDIT_WAIT_S",
            "OAUTH_PENDING_TTL_S", "OAUTH_REFRESH_MARGIN_S", "OUTBOUND_TIMEOUT_S", "OUTBOUND_MAX_BYTES", "TENANT_SYNC_S",
            "OUTCOME_HOLD_S", "MAX_HELD_OUTCOMES"}


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
    if key in _NUMERIC and (isinstance(value, bool) or not isinstance(value, (int, float))
                            or (isinstance(value, float) and not math.isfinite(value)) or value <= 0):
        raise ImproperlyConfigured(f"MRTRWEB[{key!r}] must be a positive (finite) number")
    if key == "GC_FREEZE" and not isinstance(value, bool):
        raise ImproperlyConfigured("MRTRWEB['GC_FREEZE'] must be True or False")
    if key == "GC_THRESHOLDS" and value is not None:
        value = _gc_thresholds(value)
    if key == "TENANT_RESOLVER" and value is not None and (not isinstance(value, str) or not value.strip()):
        raise ImproperlyConfigured("MRTRWEB['TENANT_RESOLVER'] must be None or the dotted path of a callable")
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


#: the values of ``BINDING_STORE``
BINDING_STORES = frozenset({"database", "cache"})


#: keys whose value is a list (``MRTRWEB_<KEY>``: a JSON list, or words separated by white space)
_LISTS = {"SECRET_KEYS", "OUTBOUND_ALLOW_HOSTS"}
#: keys whose value is a boolean (``MRTRWEB_<KEY>``: ``1``/``0``, ``true``/``false``, ``yes``/``no``)
_BOOLS = {"OUTBOUND_ALLOW_HTTP_LOOPBACK", "GC_FREEZE"}
#: keys whose value is a tuple of ints (``MRTRWEB_<KEY>``: numbers separated by white space)
_INT_TUPLES = {"GC_THRESHOLDS"}


def from_environ(environ: Any) -> dict[str, Any]:
    """The ``MRTRWEB`` values given as ``MRTRWEB_<KEY>`` environment variables (the standalone and
    production settings modules use it; every key of :data:`DEFAULTS` may be given so).

    Numbers parse as ``int`` when whole, else ``float``; list keys (:data:`_LISTS`) take a JSON list
    or white-space separated words; :data:`_INT_TUPLES` white-space separated whole numbers; boolean keys (:data:`_BOOLS`) ``1/0/true/false/yes/no``; the
    rest are strings. An empty variable counts as unset.

    Raises:
        ImproperlyConfigured: a value that does not parse (named, never echoed: it may be a key).
    """
    import json

    out: dict[str, Any] = {}
    for key in DEFAULTS:
        raw = environ.get(f"MRTRWEB_{key}")
        if raw is None or not raw.strip():
            continue
        raw = raw.strip()
        if key in _NUMERIC:
            try:
                number = float(raw)
            except ValueError:
                raise ImproperlyConfigured(f"MRTRWEB_{key} must be a number") from None
            if not math.isfinite(number):  # nan, inf, 1e400: no bound at all, or a crash at first use
                raise ImproperlyConfigured(f"MRTRWEB_{key} must be a finite number")
            out[key] = int(number) if number.is_integer() else number
        elif key in _LISTS:
            if raw.startswith("["):
                try:
                    value = json.loads(raw)
                except ValueError:
                    raise ImproperlyConfigured(f"MRTRWEB_{key} must be a JSON list or words separated by spaces") from None
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise ImproperlyConfigured(f"MRTRWEB_{key} must be a list of strings")
                out[key] = value
            else:
                out[key] = raw.split()
        elif key in _INT_TUPLES:
            try:
                out[key] = tuple(int(word) for word in raw.split())
            except ValueError:
                raise ImproperlyConfigured(f"MRTRWEB_{key} must be whole numbers separated by spaces") from None
        elif key in _BOOLS:
            lowered = raw.lower()
            if lowered not in ("1", "0", "true", "false", "yes", "no"):
                raise ImproperlyConfigured(f"MRTRWEB_{key} must be 1 or 0 (true/false, yes/no)")
            out[key] = lowered in ("1", "true", "yes")
        else:
            out[key] = raw
    return out


def unknown_keys() -> list[str]:
    """Keys of the project's ``MRTRWEB`` that this version does not know (for the system check)."""
    user = getattr(settings, "MRTRWEB", {}) or {}
    return sorted(k for k in user if k not in DEFAULTS) if isinstance(user, dict) else []


def policy():
    """The deployed default gate :class:`~mrtrweb.gate.Policy` (no deprecated method allowed)."""
    from .gate import Policy

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
