"""The gate's accepting side (mrtr-gate.md §1): an ``input_required`` result judged row by row,
its input requests checked (rows 7-11), the accepted round stored and shown as a :class:`Round`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from . import codes
from .codes import GateRejection
from .ids import digest, id_key, is_request_id, text_digest
from .jsoncopy import json_copy
from .policy import DEPRECATED_METHODS, INPUT_REQUIRED_METHODS, Policy
from .schema import SchemaRefused
from .schema_cache import check_requested_schema_cached
from .urls import UnsafeUrl, check_url
from .values import (_KEY_RE, _STORE_SLACK_S, ELICITATION, MAX_INPUT_REQUESTS, MAX_ROUND_FIELDS, SAMPLING,
                     InputRequestView, OperationHandle, Round)
from .shapes import _same_origin, within_depth


class Receiving:
    """Mixed into :class:`mrtrweb.gate.gate.Gate` (``store``, ``policy``, ``clock``, ``_policy``)."""

    # ------------------------------------------------------------------ accept (§1)
    def receive(self, *, tenant: str, user: str, request_id: Any, origin: str, result: Any,
                before_write: Callable[[Round], None] | None = None) -> Round:
        """Judge an ``input_required`` result as it came on the wire (the raw JSON object).

        Args:
            tenant / user: whose operation this connection serves.
            request_id: the JSON-RPC id the result answered.
            origin: the origin the result came from.
            result: the raw ``result`` member of the JSON-RPC response (any JSON value).
            before_write: called with the accepted round right before the store writes it (the
                record saved with the binding's single-use claim); never when a check refuses it.
                What it raises propagates (nothing written by a store that claims with the save).

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
            load_bound = getattr(self.store, "load_bound", None)
            if load_bound is not None:  # the index entry and its record in one look-up (the database store)
                record = load_bound(tenant, user, key)
            else:
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
        token = f"recv:{handle.operation_id}:{record['latest_key']}"
        claim_and_save = getattr(self.store, "claim_and_save", None)  # the claim and the save as one (store.py)
        if claim_and_save is None and not self.store.claim(record["tenant"], token, policy.ttl_s + _STORE_SLACK_S):
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
        # the views judged above, over the stored copies of the requests (as a re-check would give)
        stored = record["round"]["requests"]
        accepted = self._round_view(record, {k: dataclasses.replace(v, params=stored[k]["params"])
                                             for k, v in views.items()})
        if before_write is not None:
            before_write(accepted)
        if claim_and_save is None:
            self.store.save(record["tenant"], handle.operation_id, record, policy.ttl_s + _STORE_SLACK_S)
        elif not claim_and_save(record["tenant"], token, handle.operation_id, record, policy.ttl_s + _STORE_SLACK_S):
            raise GateRejection(codes.NO_LIVE_REQUEST, "the binding was used by a concurrent result")
        return accepted

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
