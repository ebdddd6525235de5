"""Every ``MRTRWEB`` key with its default (:data:`DEFAULTS`), and the keys by the type of their
value (how :func:`mrtrweb.conf.get` checks a number, how :func:`mrtrweb.conf.from_environ` parses
``MRTRWEB_<KEY>``). The meaning of each key is in :mod:`mrtrweb.conf`'s docstring.

Imports nothing of mrtrweb (the settings module of a project may read it)."""

from __future__ import annotations

from typing import Any

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
    "ROUND_THREADS": 0,
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
    "SERVER_URL_POLICY": {},
    "SERVER_TESTS_PER_MINUTE": 10,
    "GC_FREEZE": True,
    "PREPARED_STATEMENTS": True,
    "GC_THRESHOLDS": (5_000, 4, 1000),
    "GC_EVERY_S": 0.25,
    "TENANT_RESOLVER": None,
    "TENANT_SYNC_S": 60,
    "OUTCOME_HOLD_S": 60,
    "MAX_HELD_OUTCOMES": 1000,
    "MAX_TENANT_SERVERS": 50, "MAX_PERSONAL_SERVERS": 5, "APPS_SANDBOX_ORIGIN": None,
    # MCP Apps' own calls (issue 31 item 4, mrtrweb.appcalls)
    "APPS_CALLS_PER_SECOND": 5, "APPS_CALL_TIMEOUT_S": 120, "APPS_MAX_TOOLS": 50, "APPS_MAX_DOWNLOAD_BYTES": 1_000_000,
    # a model in the loop (issue 32, mrtrweb.providers / mrtrweb.chat, docs/chat.md)
    "MODEL_PROVIDERS": {}, "MODEL_URL_POLICY": {}, "MODEL_DEMO": True,
    "MODEL_STEPS_PER_TURN": 8, "MODEL_PROPOSALS_AT_ONCE": 5, "MODEL_CONTEXT_CHARS": 60000,
    "MODEL_REPLY_CHARS": 20000, "MODEL_REPLY_TIMEOUT_S": 120, "MODEL_RESPONSE_MAX_BYTES": 4194304,
    "MODEL_RESULT_CHARS": 8000,
}

#: keys whose value is a positive, finite number
NUMERIC_KEYS = {"TTL_S", "MAX_TTL_S", "MAX_STATE_BYTES", "MAX_ROUNDS", "STATE_ONLY_BACKOFF_S",
            "STATE_ONLY_BACKOFF_CAP_S", "CALL_TIMEOUT_S", "CONNECTION_IDLE_S", "MAX_PENDING_ROUNDS",
            "MAX_STARTS_PER_MINUTE", "HEARTBEAT_S", "DRAIN_GRACE_S", "MAX_TENANT_PENDING_ROUNDS", "MAX_TENANT_STARTS_PER_MINUTE",
            "LEGACY_HOLD_S", "TASK_POLL_MIN_S", "TASK_POLL_MAX_S", "MAX_STORED_RESULT_BYTES", "MAX_SHOWN_CHARS", "MAX_PUSH_BYTES", "AUDIT_WAIT_S",
            "OAUTH_PENDING_TTL_S", "OAUTH_REFRESH_MARGIN_S", "OUTBOUND_TIMEOUT_S", "OUTBOUND_MAX_BYTES", "TENANT_SYNC_S",
            "OUTCOME_HOLD_S", "MAX_HELD_OUTCOMES", "GC_EVERY_S", "SERVER_TESTS_PER_MINUTE", "MAX_TENANT_SERVERS", "MAX_PERSONAL_SERVERS",
            "APPS_CALLS_PER_SECOND", "APPS_CALL_TIMEOUT_S", "APPS_MAX_TOOLS", "APPS_MAX_DOWNLOAD_BYTES",
            "MODEL_STEPS_PER_TURN", "MODEL_PROPOSALS_AT_ONCE", "MODEL_CONTEXT_CHARS", "MODEL_REPLY_CHARS",
            "MODEL_REPLY_TIMEOUT_S", "MODEL_RESPONSE_MAX_BYTES", "MODEL_RESULT_CHARS"}

#: keys whose value is a whole number, 0 or more (``MRTRWEB_<KEY>``: a number)
COUNT_KEYS = {"ROUND_THREADS"}

#: keys whose value is a list (``MRTRWEB_<KEY>``: a JSON list, or words separated by white space)
LIST_KEYS = {"SECRET_KEYS", "OUTBOUND_ALLOW_HOSTS"}
#: keys whose value is a boolean (``MRTRWEB_<KEY>``: ``1``/``0``, ``true``/``false``, ``yes``/``no``)
BOOL_KEYS = {"OUTBOUND_ALLOW_HTTP_LOOPBACK", "GC_FREEZE", "MODEL_DEMO", "PREPARED_STATEMENTS"}
#: keys whose value is a dict (``MRTRWEB_<KEY>``: a JSON object)
DICT_KEYS = {"SERVER_URL_POLICY", "MODEL_PROVIDERS", "MODEL_URL_POLICY"}
#: keys whose value is a tuple of ints (``MRTRWEB_<KEY>``: numbers separated by white space)
INT_TUPLE_KEYS = {"GC_THRESHOLDS"}
