"""The client-side MRTR gate: bind, accept, retry (mrtr-gate.md §1 and §2; SEP-2322).

Usage::

    gate = Gate(InMemoryBindingStore(), Policy())
    handle = gate.register(request_id="r-1", server_id="7", origin="https://mcp.example",
                           user="alice", tenant="acme", method="tools/call",
                           params={"name": "deploy", "arguments": {}})
    # ... send the request under id "r-1", get the raw JSON result ...
    round_ = gate.receive(tenant="acme", user="alice", request_id="r-1",
                          origin="https://mcp.example", result=raw_result)
    # ... ask the person ...
    retry = gate.respond(handle, retry_id="r-2", responses={...}, user="alice", tenant="acme")
    # ... send retry.params under retry.id; its result goes to gate.receive(request_id="r-2") ...

Every refusal raises :class:`GateRejection` with the contract's code; a refused call changes
nothing. Store failures raise :class:`StoreUnavailable` (fail closed: send nothing).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import re
import urllib.parse
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from . import codes, formats
from .clock import Clock, SystemClock
from .codes import BindingConflict, GateRejection
from .ids import digest, id_key, is_request_id, is_strict_json, text_digest
from .jsoncopy import json_copy
from .policy import DEPRECATED_METHODS, INPUT_REQUIRED_METHODS, Policy
from .schema import CheckedSchema, ContentMismatch, SchemaRefused
from .schema_cache import check_requested_schema_cached
from .store import BindingStore
from .urls import UnsafeUrl, UrlView, check_url

_KEY_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")
#: the most input requests one round may hold (row 7: a larger ``inputRequests`` is refused as
#: ``invalid_named_input_request``): one card shows them all, and a person answers them at once
MAX_INPUT_REQUESTS = 64
#: the most form fields all the form requests of one round may hold together (row 8: refused as
#: ``invalid_form_requestedSchema``): the card is answered by one form post, which web frameworks
#: cap (Django: 1,000 fields, ``DATA_UPLOAD_MAX_NUMBER_FIELDS``)
MAX_ROUND_FIELDS = 512
ELICITATION = "elicitation/create"
SAMPLING = "sampling/createMessage"
ROOTS = "roots/list"
_ACTIONS = ("accept", "decline", "cancel")
#: extra seconds a store keeps a record after its logical expiry (for late-answer diagnostics)
_STORE_SLACK_S = 60.0
#: nesting an input request or an answer may have: far beyond any legal one, and well within the
#: interpreter's recursion limit (copying, digesting and storing them recurse)
_MAX_DEPTH = 200


@dataclasses.dataclass(frozen=True)
class OperationHandle:
    """Identifies a registered operation: its tenant and its operation id (a UUID string)."""

    tenant: str
    operation_id: str


@dataclasses.dataclass(frozen=True)
class InputRequestView:
    """One accepted input request of a round.

    ``kind`` is ``form``, ``url``, ``sampling`` or ``roots``. ``message`` is server text (escape
    it). ``schema`` is set for forms, ``url`` for URL mode; ``params`` is the request's params as
    received (for sampling/roots display).
    """

    key: str
    method: str
    kind: str
    message: str
    schema: CheckedSchema | None
    url: UrlView | None
    params: Mapping[str, Any]
    schema_digest: str | None


@dataclasses.dataclass(frozen=True)
class Round:
    """An accepted ``input_required`` round.

    Attributes:
        handle: the operation.
        number: 1 for the first round of the operation, 2 for the next...
        request_id: the JSON-RPC id of the request this round answered.
        requests: key -> :class:`InputRequestView`, in key order (empty for a state-only round).
        has_state: whether a ``requestState`` came (its value stays in the store).
        state_digest: ``sha256:`` digest of the ``requestState``, or ``None``.
        expires_at: epoch seconds after which the round can no longer be answered.
        backoff_s: for a state-only round, the pause before retrying it (0 otherwise).
    """

    handle: OperationHandle
    number: int
    request_id: Any
    requests: Mapping[str, InputRequestView]
    has_state: bool
    state_digest: str | None
    expires_at: float
    backoff_s: float

    @property
    def state_only(self) -> bool:
        return not self.requests


@dataclasses.dataclass(frozen=True)
class Retry:
    """The retry the gate built: send ``params`` as ``method`` under JSON-RPC id ``id``.

    ``actions`` maps each answered key to its action (``accept``/``decline``/``cancel``, or
    ``result`` for a deprecated request); values are never exposed here for logging.
    """

    handle: OperationHandle
    id: Any
    method: str
    params: dict[str, Any]
    round_number: int
    actions: Mapping[str, str]


@dataclasses.dataclass(frozen=True)
class OperationState:
    """A read-only view of a live binding (for views and diagnostics)."""

    handle: OperationHandle
    user: str
    server_id: str
    origin: str
    method: str
    params: Mapping[str, Any]
    latest_id: Any
    status: str
    rounds: int
    round: Round | None
    policy: Policy


class Gate:
    """The MRTR gate over a :class:`BindingStore`.

    Args:
        store: where bindings live (shared by every worker that may answer a round).
        policy: the default policy; ``register`` may pass an operation-specific one.
        clock: time source (``ManualClock`` in verification runs).
    """

    def __init__(self, store: BindingStore, policy: Policy | None = None, clock: Clock | None = None) -> None:
        self.store = store
        self.policy = policy or Policy()
        self.clock = clock or SystemClock()

    # ------------------------------------------------------------------ binding (§1)
    def register(
        self,
        *,
        request_id: Any,
        server_id: str,
        origin: str,
        user: str,
        tenant: str,
        method: str,
        params: Mapping[str, Any],
        policy: Policy | None = None,
        operation_id: str | None = None,
    ) -> OperationHandle:
        """Bind an operation before its first request leaves.

        Args:
            request_id: the JSON-RPC id the request will carry (string or number).
            server_id / origin: the verified server (configured id, ``scheme://host:port``).
            user / tenant: the subject and the tenant (strings).
            method: the MCP method (any; whether it may carry ``input_required`` is judged later).
            params: the exact request params.
            policy: this operation's policy (default: the gate's).

        Returns:
            the :class:`OperationHandle`.

        Raises:
            ValueError: an argument is not of the documented shape.
            BindingConflict: that id is already live for that user and tenant.
            StoreUnavailable: the store failed.
        """
        if not is_request_id(request_id):
            raise ValueError("request_id must be a string or a number")
        for name, value in (("server_id", server_id), ("origin", origin), ("user", user), ("tenant", tenant),
                            ("method", method)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name} must be a non-empty string")
        if not isinstance(params, Mapping):
            raise ValueError("params must be an object")
        # deepcopy, not json_copy: params nested too deeply for it keep raising RecursionError here
        params = copy.deepcopy(dict(params))
        params_digest = digest(params)  # raises ValueError on non-JSON params
        policy = policy or self.policy
        op_id = operation_id or str(uuid.uuid4())
        now = self.clock.now()
        key = id_key(request_id)
        record = {
            "v": 1,
            "operation_id": op_id,
            "tenant": tenant,
            "user": user,
            "server_id": server_id,
            "origin": origin,
            "method": method,
            "params": params,
            "params_digest": params_digest,
            "latest_id": request_id,
            "latest_key": key,
            "ids_used": [key],
            "expires_at": now + policy.ttl_s,
            "status": "awaiting_result",
            "rounds": 0,
            "state_only_streak": 0,
            "round": None,
            "policy": policy.as_dict(),
        }
        ttl = policy.ttl_s + _STORE_SLACK_S
        if not self.store.index_add(tenant, user, key, op_id, ttl):
            raise BindingConflict("that request id is already bound for this user and tenant")
        self.store.save(tenant, op_id, record, ttl)
        return OperationHandle(tenant, op_id)

    def _policy(self, record: Mapping[str, Any]) -> Policy:
        return Policy.from_dict(record["policy"])

    # ------------------------------------------------------------------ accept (§1)
    def receive(self, *, tenant: str, user: str, request_id: Any, origin: str, result: Any) -> Round:
        """Judge an ``input_required`` result as it came on the wire (the raw JSON object).

        Args:
            tenant / user: whose operation this connection serves.
            request_id: the JSON-RPC id the result answered.
            origin: the origin the result came from.
            result: the raw ``result`` member of the JSON-RPC response (any JSON value).

        Returns:
            the accepted :class:`Round` (the binding is now used; the round is open).

        Raises:
            GateRejection: the first failing check of §1, in contract order.
            StoreUnavailable: the store failed.
        """
        now = self.clock.now()
        # Row 1: a live, unexpired, unused binding for this request.
        record = None
        if is_request_id(request_id) and isinstance(tenant, str) and isinstance(user, str):
            key = id_key(request_id)
            op_id = self.store.index_get(tenant, user, key)
            if op_id is not None:
                record = self.store.load(tenant, op_id)
        if (
            record is None
            or record.get("user") != user
            or record.get("latest_key") != id_key(request_id)
            or record.get("status") != "awaiting_result"
            or now >= record["expires_at"]
        ):
            raise GateRejection(codes.NO_LIVE_REQUEST, "no live, unexpired, unused binding for this request id")
        # Row 2: the bound origin.
        if not _same_origin(origin, record["origin"]):
            raise GateRejection(codes.SERVER_ORIGIN_MISMATCH, "the result came from another origin than the bound server")
        # Row 3: the method may carry input_required.
        if record["method"] not in INPUT_REQUIRED_METHODS:
            raise GateRejection(codes.INPUT_REQUIRED_NOT_ALLOWED_FOR_METHOD,
                                f"{record['method']} may not answer input_required")
        policy = self._policy(record)
        # Row 4: resultType exactly "input_required".
        if not isinstance(result, dict) or result.get("resultType") != "input_required" or \
                not isinstance(result.get("resultType"), str):
            raise GateRejection(codes.INVALID_RESULT_TYPE, 'the result is not an object with resultType "input_required"')
        has_requests_key = "inputRequests" in result
        has_state_key = "requestState" in result
        requests = result.get("inputRequests")
        state = result.get("requestState")
        # Row 5: a non-empty inputRequests object or a non-empty requestState string.
        if not ((isinstance(requests, dict) and requests) or (isinstance(state, str) and state)):
            raise GateRejection(codes.INPUT_REQUIRED_PAYLOAD_EMPTY, "neither inputRequests nor requestState is present")
        # Row 6: requestState, when present, a non-empty string within the cap.
        if has_state_key:
            if not isinstance(state, str) or not state:
                raise GateRejection(codes.INVALID_REQUEST_STATE, "requestState must be a non-empty string")
            try:
                size = len(state.encode("utf-8"))
            except UnicodeEncodeError:
                raise GateRejection(codes.INVALID_REQUEST_STATE, "requestState is not valid Unicode text") from None
            if size > policy.max_state_bytes:
                raise GateRejection(codes.INVALID_REQUEST_STATE,
                                    f"requestState is {size} bytes, over the cap of {policy.max_state_bytes}")
        # Rows 7-11, for each entry in key order.
        views: dict[str, InputRequestView] = {}
        if has_requests_key:
            if not isinstance(requests, dict):
                raise GateRejection(codes.INVALID_NAMED_INPUT_REQUEST, "inputRequests must be an object")
            if len(requests) > MAX_INPUT_REQUESTS:
                raise GateRejection(codes.INVALID_NAMED_INPUT_REQUEST,
                                    f"{len(requests)} input requests, over the cap of {MAX_INPUT_REQUESTS}")
            fields = 0
            for key in sorted(requests):
                views[key] = self._check_request(key, requests[key], policy, record["server_id"])
                fields += len(views[key].schema.fields) if views[key].schema is not None else 0
                if fields > MAX_ROUND_FIELDS:
                    raise GateRejection(codes.INVALID_FORM_REQUESTED_SCHEMA,
                                        f"the round's forms hold more than {MAX_ROUND_FIELDS} fields together", key=key)
        # Row 12: the round limit.
        if record["rounds"] >= policy.max_rounds:
            raise GateRejection(codes.MRTR_ROUND_LIMIT_EXCEEDED,
                                f"the operation has had {record['rounds']} rounds, the limit is {policy.max_rounds}")
        # Accepted: mark the binding used (once), open the round.
        handle = OperationHandle(record["tenant"], record["operation_id"])
        if not self.store.claim(record["tenant"], f"recv:{handle.operation_id}:{record['latest_key']}",
                                policy.ttl_s + _STORE_SLACK_S):
            raise GateRejection(codes.NO_LIVE_REQUEST, "the binding was used by a concurrent result")
        streak = record["state_only_streak"]
        state_only = not views
        backoff = 0.0
        if state_only:
            backoff = min(policy.state_only_backoff_s * (2 ** min(streak, 30)), policy.state_only_backoff_cap_s)
        number = record["rounds"] + 1
        record["rounds"] = number
        record["state_only_streak"] = streak + 1 if state_only else 0
        record["status"] = "round_open"
        record["round"] = {
            "number": number,
            "request_id": record["latest_id"],
            "requests": {k: json_copy(requests[k]) for k in views},
            "has_state": has_state_key,
            "state": state if has_state_key else None,
            "expires_at": record["expires_at"],
            "backoff_s": backoff,
        }
        self.store.save(record["tenant"], handle.operation_id, record, policy.ttl_s + _STORE_SLACK_S)
        # the views judged above, over the stored copies of the requests (as a re-check would give)
        stored = record["round"]["requests"]
        return self._round_view(record, {k: dataclasses.replace(v, params=stored[k]["params"])
                                         for k, v in views.items()})

    def _check_request(self, key: Any, entry: Any, policy: Policy, server_id: str,
                       internal: bool = False) -> InputRequestView:
        """Rows 7-11 for one entry. ``internal``: the view is only used inside the gate, never
        returned (its checked schema may then be the cached one, see ``check_requested_schema_cached``)."""
        # Row 7: name and shape.
        if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
            raise GateRejection(codes.INVALID_NAMED_INPUT_REQUEST, "an input request key is not [A-Za-z0-9._-]{1,64}")
        if not isinstance(entry, dict) or not isinstance(entry.get("method"), str) or \
                not isinstance(entry.get("params"), dict):
            raise GateRejection(codes.INVALID_NAMED_INPUT_REQUEST,
                                "an input request must be an object with a string method and object params", key=key)
        try:
            view = self._judge_request(key, entry, policy, internal)
        except RecursionError:
            raise GateRejection(codes.INVALID_NAMED_INPUT_REQUEST, "an input request is nested too deeply",
                                key=key) from None
        # Checked last, so that every contract row gives its own code first: an otherwise valid
        # request nested beyond any legal shape is refused before it is copied or stored.
        if not within_depth(entry):
            raise GateRejection(codes.INVALID_NAMED_INPUT_REQUEST, "an input request is nested too deeply", key=key)
        return view

    def _judge_request(self, key: str, entry: dict[str, Any], policy: Policy, internal: bool) -> InputRequestView:
        method = entry["method"]
        params = entry["params"]
        message = params.get("message") if isinstance(params.get("message"), str) else ""
        if method == ELICITATION:
            mode = params.get("mode", "form") if "mode" in params else "form"
            if "mode" in params and params["mode"] is None:
                mode = None
            if mode == "form":
                # Row 8.
                schema = params.get("requestedSchema")
                try:
                    checked, schema_digest = check_requested_schema_cached(schema, shared=internal)
                except SchemaRefused as exc:
                    raise GateRejection(codes.INVALID_FORM_REQUESTED_SCHEMA, str(exc), key=key) from None
                except (RecursionError, ValueError, TypeError, OverflowError) as exc:
                    raise GateRejection(codes.INVALID_FORM_REQUESTED_SCHEMA, "requestedSchema could not be read",
                                        key=key) from exc
                if schema_digest is None:
                    schema_digest = digest(schema)
                return InputRequestView(key, method, "form", message, checked, None, params, schema_digest)
            if mode == "url":
                # Row 9.
                try:
                    view = check_url(params.get("url"))
                except UnsafeUrl as exc:
                    raise GateRejection(codes.UNSAFE_URL_ELICITATION, str(exc), key=key) from None
                return InputRequestView(key, method, "url", message, None, view, params, None)
            # Row 10.
            raise GateRejection(codes.UNKNOWN_ELICITATION_MODE, "the elicitation mode is neither form nor url", key=key)
        # Row 11.
        if method in DEPRECATED_METHODS and method in policy.allow_deprecated:
            kind = "sampling" if method == SAMPLING else "roots"
            return InputRequestView(key, method, kind, message, None, None, params, None)
        raise GateRejection(codes.UNAPPROVED_DEPRECATED_CLIENT_REQUEST,
                            f"{method if method in DEPRECATED_METHODS else 'this method'} is not allowed for this server",
                            key=key)

    def _round_view(self, record: Mapping[str, Any],
                    views: dict[str, InputRequestView] | None = None) -> Round | None:
        r = record.get("round")
        if not r:
            return None
        if views is None:
            policy = self._policy(record)
            views = {
                key: self._check_request(key, entry, policy, record["server_id"])
                for key, entry in sorted(r["requests"].items())
            }
        return Round(
            handle=OperationHandle(record["tenant"], record["operation_id"]),
            number=r["number"],
            request_id=r["request_id"],
            requests=views,
            has_state=r["has_state"],
            state_digest=text_digest(r["state"]) if r["has_state"] else None,
            expires_at=r["expires_at"],
            backoff_s=r["backoff_s"],
        )

    # ------------------------------------------------------------------ retry (§2)
    def respond(
        self,
        handle: OperationHandle,
        *,
        retry_id: Any,
        responses: Any = None,
        user: str,
        tenant: str,
        params: Mapping[str, Any] | None = None,
        round_number: int | None = None,
    ) -> Retry:
        """Build the retry of the open round, consuming it (once, across processes).

        Args:
            handle: the operation.
            retry_id: the new JSON-RPC id (string or number, never used by this operation).
            responses: key -> answer (``{"action", "content"?}`` for elicitation; a
                ``CreateMessageResult`` / ``ListRootsResult`` for an allowed deprecated request).
                ``None`` for a state-only round.
            user / tenant: who answers.
            params: the params the caller holds for the operation (default: the bound ones).
            round_number: the round the person answered (the card they saw); when given, an open
                round with another number is ``inactive_mrtr_round`` (an answer to round N is
                never sent as round N+1's retry).

        Returns:
            the :class:`Retry` to send.

        Raises:
            GateRejection: the first failing check of §2, in contract order (nothing changes).
            StoreUnavailable: the store failed (nothing is sent).
        """
        now = self.clock.now()
        record = self.store.load(handle.tenant, handle.operation_id)
        # Row 1: the round is live, unexpired and unanswered.
        if record is None or record.get("status") != "round_open" or not record.get("round") \
                or now >= record["round"]["expires_at"]:
            raise GateRejection(codes.INACTIVE_MRTR_ROUND, "no open, unexpired, unanswered round for this operation")
        policy = self._policy(record)
        rnd = record["round"]
        if round_number is not None and rnd.get("number") != round_number:
            raise GateRejection(codes.INACTIVE_MRTR_ROUND, "the open round is not the round that was answered")
        # Row 2: a new id.
        if not is_request_id(retry_id):
            raise GateRejection(codes.RETRY_REQUIRES_NEW_JSONRPC_ID, "the retry id must be a string or a number")
        new_key = id_key(retry_id)
        if new_key in record["ids_used"]:
            raise GateRejection(codes.RETRY_REQUIRES_NEW_JSONRPC_ID, "the retry id was already used by this operation")
        bound_to = self.store.index_get(record["tenant"], record["user"], new_key)
        if bound_to == handle.operation_id:
            # our record is stale: a concurrent submission already built this round's retry under this id
            raise GateRejection(codes.INACTIVE_MRTR_ROUND, "the round was answered by a concurrent submission")
        if bound_to is not None:
            raise GateRejection(codes.RETRY_REQUIRES_NEW_JSONRPC_ID, "the retry id is bound to another live operation")
        # Row 3: identity and params.
        held = record["params"] if params is None else params
        try:
            held_digest = digest(held) if isinstance(held, Mapping) else None
        except (TypeError, ValueError, RecursionError):
            held_digest = None
        if user != record["user"] or tenant != record["tenant"] or held_digest != record["params_digest"]:
            raise GateRejection(codes.MRTR_IDENTITY_OR_ARGUMENT_MISMATCH,
                                "the answering user, tenant or the operation's params differ from the binding")
        views = {key: self._check_request(key, entry, policy, record["server_id"], internal=True)
                 for key, entry in sorted(rnd["requests"].items())}
        # Row 4: population.
        if responses is None:
            responses = {}
        if not isinstance(responses, dict) or set(responses) != set(views):
            raise GateRejection(codes.INPUT_RESPONSE_POPULATION_MISMATCH,
                                "the answer keys are not exactly the request keys")
        keys = sorted(views)
        elicit = [k for k in keys if views[k].kind in ("form", "url")]
        # Row 5: action.
        for k in elicit:
            answer = responses[k]
            if not isinstance(answer, dict) or not isinstance(answer.get("action"), str) or \
                    answer["action"] not in _ACTIONS:
                raise GateRejection(codes.INVALID_INPUT_RESPONSE,
                                    "an elicitation answer must be an object with action accept, decline or cancel",
                                    key=k)
        # Row 6: decline/cancel carry no content.
        for k in elicit:
            if responses[k]["action"] != "accept" and "content" in responses[k]:
                raise GateRejection(codes.NON_ACCEPT_RESPONSE_MUST_NOT_HAVE_CONTENT,
                                    "a decline or cancel must not carry content", key=k)
        # Row 7: form accept content valid after defaults.
        built: dict[str, Any] = {}
        for k in elicit:
            answer = responses[k]
            out: dict[str, Any] = {"action": answer["action"]}
            if "_meta" in answer and isinstance(answer["_meta"], dict) and within_depth(answer["_meta"]) and \
                    is_strict_json(answer["_meta"]):
                out["_meta"] = json_copy(answer["_meta"])
            if views[k].kind == "form" and answer["action"] == "accept":
                try:
                    if answer.get("content", {}) is None:  # null is present, and not an object
                        raise ContentMismatch({"": ["The answer must be an object of fields."]})
                    # validated before it is copied: valid content is flat, any other may be arbitrarily deep
                    content = views[k].schema.validate(answer.get("content", {}))  # type: ignore[union-attr]
                    if not is_strict_json(content):  # 1e400 reads as infinity: not sendable as JSON
                        raise ContentMismatch({"": ["A number in the answer is too large."]})
                    out["content"] = json_copy(content)
                except ContentMismatch as exc:
                    raise GateRejection(codes.INPUT_RESPONSE_SCHEMA_MISMATCH, str(exc), key=k) from exc
            built[k] = out
        # Row 8: url accept carries no content.
        for k in elicit:
            if views[k].kind == "url" and responses[k]["action"] == "accept" and "content" in responses[k]:
                raise GateRejection(codes.URL_ELICITATION_RESPONSE_MUST_NOT_HAVE_CONTENT,
                                    "a URL-mode accept must not carry content", key=k)
        # Row 9: deprecated answers.
        for k in keys:
            if views[k].kind == "sampling":
                if not valid_create_message_result(responses[k]) or not within_depth(responses[k]) or \
                        not is_strict_json(responses[k]):
                    raise GateRejection(codes.INVALID_DEPRECATED_RESPONSE, "not a valid CreateMessageResult", key=k)
                built[k] = json_copy(responses[k])
            elif views[k].kind == "roots":
                if not valid_list_roots_result(responses[k]) or not within_depth(responses[k]) or \
                        not is_strict_json(responses[k]):
                    raise GateRejection(codes.INVALID_DEPRECATED_RESPONSE,
                                        "not a valid ListRootsResult with file:// URIs", key=k)
                built[k] = json_copy(responses[k])
        # Build and consume.
        retry_params = {k: json_copy(v) for k, v in record["params"].items()
                        if k not in ("inputResponses", "requestState")}
        if views:
            retry_params["inputResponses"] = {k: built[k] for k in keys}
        if rnd["has_state"]:
            retry_params["requestState"] = rnd["state"]
        ttl = policy.ttl_s + _STORE_SLACK_S
        token = f"round:{handle.operation_id}:{rnd['number']}"
        with _consuming(self.store, record["tenant"], token):
            if not self.store.claim(record["tenant"], token, ttl):
                raise GateRejection(codes.INACTIVE_MRTR_ROUND, "the round was answered by a concurrent submission")
            old_key = record["latest_key"]
            record["latest_id"] = retry_id
            record["latest_key"] = new_key
            record["ids_used"].append(new_key)
            record["expires_at"] = now + policy.ttl_s
            record["status"] = "awaiting_result"
            record["round"] = None
            self.store.index_add(record["tenant"], record["user"], new_key, handle.operation_id, ttl)
            self.store.save(record["tenant"], handle.operation_id, record, ttl)
            self.store.index_delete(record["tenant"], record["user"], old_key)
        actions = {k: (built[k].get("action", "result") if views[k].kind in ("form", "url") else "result")
                   for k in keys}
        return Retry(handle=handle, id=retry_id, method=record["method"], params=retry_params,
                     round_number=rnd["number"], actions=actions)

    # ------------------------------------------------------------------ lifecycle
    def state(self, handle: OperationHandle) -> OperationState | None:
        """The live binding of an operation, or ``None`` if it is gone (expired or closed)."""
        record = self.store.load(handle.tenant, handle.operation_id)
        if record is None or record.get("status") == "closed":
            return None
        rnd = self._round_view(record) if record.get("status") == "round_open" else None
        return OperationState(
            handle=handle, user=record["user"], server_id=record["server_id"], origin=record["origin"],
            method=record["method"], params=record["params"], latest_id=record["latest_id"],
            status=record["status"], rounds=record["rounds"], round=rnd, policy=self._policy(record),
        )

    def retire_round(self, handle: OperationHandle, round_number: int) -> bool:
        """Take round ``round_number``'s single-use claim (the one an answer takes before its
        retry is built), so that no answer can be consumed for it any more. Returns False when
        an answer (or another caller) already holds it: the round was answered, leave it.

        Raises:
            StoreUnavailable: the store failed.
        """
        record = self.store.load(handle.tenant, handle.operation_id)
        ttl = (self._policy(record).ttl_s if record is not None else 3600.0) + _STORE_SLACK_S
        return self.store.claim(handle.tenant, f"round:{handle.operation_id}:{round_number}", ttl)

    def close(self, handle: OperationHandle) -> None:
        """End an operation: its binding and any open round are gone (nothing can be sent for it)."""
        record = self.store.load(handle.tenant, handle.operation_id)
        if record is None:
            return
        if record.get("round"):
            self.store.claim(handle.tenant, f"round:{handle.operation_id}:{record['round']['number']}",
                             self._policy(record).ttl_s + _STORE_SLACK_S)
        self.store.index_delete(handle.tenant, record["user"], record["latest_key"])
        self.store.delete(handle.tenant, handle.operation_id)


@contextlib.contextmanager
def _consuming(store: BindingStore, tenant: str, token: str) -> Iterator[None]:
    """Consume a round: its claim and the record's writes succeed or fail together. A store with
    ``atomic()`` (the database store) runs them in one transaction, so a failure after the claim
    rolls the claim back with the writes; another store with ``release`` gets the claim given
    back (best effort). Either way a round whose consumption failed ("nothing was sent, try
    again") stays answerable, and the expiry sweep can still retire it at its time.

    Raises:
        whatever the body raises (:class:`GateRejection`, :class:`StoreUnavailable`).
    """
    atomic = getattr(store, "atomic", None)
    if atomic is not None:
        with atomic():
            yield
        return
    try:
        yield
    except GateRejection:
        raise  # the claim was not taken by this caller
    except BaseException:
        release = getattr(store, "release", None)
        if release is not None:
            try:
                release(tenant, token)
            except Exception:  # noqa: BLE001 -- the store is down: the claim runs out with its TTL
                pass
        raise


def within_depth(value: Any, limit: int = _MAX_DEPTH) -> bool:
    """Whether ``value`` nests objects/arrays at most ``limit`` deep (checked without recursion)."""
    level = [value] if isinstance(value, _CONTAINERS) else []
    depth = 0
    while level:  # breadth first, one nesting level at a time; only objects and arrays nest
        depth += 1
        if depth > limit:
            return False
        below: list[Any] = []
        for node in level:
            below.extend([c for c in (node.values() if isinstance(node, dict) else node)
                          if isinstance(c, _CONTAINERS)])
        level = below
    return True


_CONTAINERS = (dict, list)


_DEFAULT_PORTS = {"https": 443, "wss": 443, "http": 80, "ws": 80}


def _origin_triple(origin: Any) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` of an origin ``scheme://host[:port]`` (RFC 6454: scheme and host
    compared case-insensitively, the default port made explicit); ``None`` if it is not one."""
    if not isinstance(origin, str) or any(c <= " " or c in "?#@\\" for c in origin):
        return None
    try:
        parts = urllib.parse.urlsplit(origin)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if not parts.hostname or parts.path or not origin[len(parts.scheme):].startswith("://"):
        return None
    port = _DEFAULT_PORTS.get(scheme) if port is None else port
    host = parts.hostname.lower()
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")  # an IDN and its punycode are one origin
        except UnicodeError:
            return None
    return None if port is None else (scheme, host, port)


def _same_origin(received: Any, bound: str) -> bool:
    """Whether a result came from the bound origin: the same string, or the same origin triple."""
    if isinstance(received, str) and received == bound:
        return True
    triple = _origin_triple(received)
    return triple is not None and triple == _origin_triple(bound)


def valid_create_message_result(value: Any) -> bool:
    """``CreateMessageResult``: ``role``, ``content`` (text/image/audio/tool_use/tool_result block, or a list),
    ``model`` string, optional ``stopReason`` string."""
    if not isinstance(value, dict):
        return False
    if value.get("role") not in ("assistant", "user") or not isinstance(value.get("model"), str):
        return False
    if "stopReason" in value and not isinstance(value["stopReason"], str):
        return False
    content = value.get("content")
    blocks = content if isinstance(content, list) else [content]
    if not blocks:
        return False
    for block in blocks:
        if not isinstance(block, dict):
            return False
        kind = block.get("type")
        if kind == "text":
            if not isinstance(block.get("text"), str):
                return False
        elif kind in ("image", "audio"):
            if not isinstance(block.get("data"), str) or not isinstance(block.get("mimeType"), str):
                return False
        elif kind == "tool_use":  # SamplingMessageContentBlock of 2026-07-28 (sampling with tools)
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str) or \
                    not isinstance(block.get("input"), dict):
                return False
        elif kind == "tool_result":
            inner = block.get("content")
            if not isinstance(block.get("toolUseId"), str) or not isinstance(inner, list) or \
                    not all(isinstance(b, dict) and isinstance(b.get("type"), str) for b in inner) or \
                    ("isError" in block and not isinstance(block["isError"], bool)):
                return False
        else:
            return False
    return True


def _is_file_uri(uri: Any) -> bool:
    """A valid RFC 3986 ``file:`` URI (scheme case-insensitive) that names a path."""
    if not isinstance(uri, str) or not uri[:7].lower() == "file://" or not formats.is_uri(uri):
        return False
    return urllib.parse.urlsplit(uri).path not in ("", "/") or uri[7:].startswith("/")


def valid_list_roots_result(value: Any) -> bool:
    """``ListRootsResult``: ``roots`` a list of ``{uri: "file://...", name?: str}``."""
    if not isinstance(value, dict) or not isinstance(value.get("roots"), list):
        return False
    for root in value["roots"]:
        if not isinstance(root, dict) or not _is_file_uri(root.get("uri")):
            return False
        if "name" in root and not isinstance(root["name"], str):
            return False
    return True
