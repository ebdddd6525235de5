"""The gate's retry side (mrtr-gate.md §2): the person's answers checked against the open round,
the retry built once, the round consumed with its single-use claim (:func:`_consuming`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from . import codes
from .codes import GateRejection
from .ids import digest, id_key, is_request_id, is_strict_json
from .jsoncopy import json_copy
from .schema import ContentMismatch
from .store import BindingStore
from .values import _ACTIONS, _STORE_SLACK_S, OperationHandle, Retry
from .shapes import valid_create_message_result, valid_list_roots_result, within_depth


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


class _IdTaken(Exception):
    """A ``fresh_id`` retry id was found bound when it was bound (inside :func:`_consuming`)."""


class Responding:
    """Mixed into :class:`mrtrweb.gate.gate.Gate` (``store``, ``policy``, ``clock``, ``_policy``)."""

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
        fresh_id: bool = False,
        before_write: Callable[[Retry], None] | None = None,
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
            fresh_id: the caller made ``retry_id`` just now from enough randomness that no other
                live binding can hold it (a UUID4): the index is not asked first; binding it is
                still checked (a taken id refuses with ``retry_requires_new_jsonrpc_id``, the
                round stays open).
            before_write: called with the retry right before the store's writes that consume the
                round; never when a check refuses it. What it raises propagates (nothing consumed).

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
        # a fresh id is not looked up when a taken one can still be refused after the claim (a store
        # that rolls the claim back or gives it back)
        fresh_id = fresh_id and any(hasattr(self.store, name) for name in ("consume", "atomic", "release"))
        bound_to = None if fresh_id else self.store.index_get(record["tenant"], record["user"], new_key)
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
        actions = {k: (built[k].get("action", "result") if views[k].kind in ("form", "url") else "result")
                   for k in keys}
        retry = Retry(handle=handle, id=retry_id, method=record["method"], params=retry_params,
                      round_number=rnd["number"], actions=actions)
        if before_write is not None:
            before_write(retry)
        consume = getattr(self.store, "consume", None)  # the consume's writes as one (see store.py)
        if consume is not None:
            old_key = _advance(record, retry_id, new_key, now, policy)
            claimed, bound = consume(record["tenant"], token, record["user"], new_key, old_key, handle.operation_id,
                                     record, ttl)
            if not claimed:
                raise GateRejection(codes.INACTIVE_MRTR_ROUND, "the round was answered by a concurrent submission")
            if not bound:  # nothing written, the claim not kept: the round stays open
                raise GateRejection(codes.RETRY_REQUIRES_NEW_JSONRPC_ID, "the retry id is bound to another live operation")
        else:
            self._consume_stepwise(handle, record, token, retry_id, new_key, now, policy, ttl, fresh_id)
        return retry

    def _consume_stepwise(self, handle: OperationHandle, record: dict[str, Any], token: str, retry_id: Any,
                          new_key: str, now: float, policy: Any, ttl: float, fresh_id: bool) -> None:
        """The consume as separate store calls inside :func:`_consuming` (stores without ``consume``)."""
        try:
            with _consuming(self.store, record["tenant"], token):
                if not self.store.claim(record["tenant"], token, ttl):
                    raise GateRejection(codes.INACTIVE_MRTR_ROUND, "the round was answered by a concurrent submission")
                old_key = _advance(record, retry_id, new_key, now, policy)
                if not self.store.index_add(record["tenant"], record["user"], new_key, handle.operation_id, ttl) \
                        and fresh_id:
                    raise _IdTaken  # the claim is rolled back or given back (_consuming): the round stays open
                self.store.save(record["tenant"], handle.operation_id, record, ttl)
                self.store.index_delete(record["tenant"], record["user"], old_key)
        except _IdTaken:
            raise GateRejection(codes.RETRY_REQUIRES_NEW_JSONRPC_ID,
                                "the retry id is bound to another live operation") from None


def _advance(record: dict[str, Any], retry_id: Any, new_key: str, now: float, policy: Any) -> str:
    """``record`` moved to awaiting the retry ``retry_id`` (index key ``new_key``): its latest id
    and key, the ids used, a new expiry (``now`` + the policy's ``ttl_s``, seconds), no open round.
    Returns the index key it had (the caller's store removes it)."""
    old_key = record["latest_key"]
    record["latest_id"] = retry_id
    record["latest_key"] = new_key
    record["ids_used"].append(new_key)
    record["expires_at"] = now + policy.ttl_s
    record["status"] = "awaiting_result"
    record["round"] = None
    return old_key
