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

import copy
import uuid
from collections.abc import Mapping
from typing import Any

from .clock import Clock, SystemClock
from .codes import BindingConflict, GateRejection
from .ids import digest, id_key, is_request_id
from .policy import Policy
from .store import BindingStore
from .values import (_STORE_SLACK_S, ELICITATION, MAX_INPUT_REQUESTS, MAX_ROUND_FIELDS, ROOTS, SAMPLING,
                     InputRequestView, OperationHandle, OperationState, Retry, Round)
from .receiving import Receiving
from .responding import Responding

#: what this module offered before its split (issue 27): the frozen values and the shared limits
__all__ = ["ELICITATION", "MAX_INPUT_REQUESTS", "MAX_ROUND_FIELDS", "ROOTS", "SAMPLING", "Gate", "InputRequestView",
           "OperationHandle", "OperationState", "Retry", "Round"]


class Gate(Receiving, Responding):
    """The MRTR gate over a :class:`BindingStore`: binding (:meth:`register`, here), accepting
    (:meth:`receive`, :mod:`.receiving`), the retry (:meth:`respond`, :mod:`.responding`) and the
    operation's lifecycle (here). Its frozen results are in :mod:`.values`.

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
        bind = getattr(self.store, "bind", None)  # the index entry, then the record, as one (see store.py)
        if bind is not None:
            if not bind(tenant, user, key, op_id, record, ttl):
                raise BindingConflict("that request id is already bound for this user and tenant")
            return OperationHandle(tenant, op_id)
        if not self.store.index_add(tenant, user, key, op_id, ttl):
            raise BindingConflict("that request id is already bound for this user and tenant")
        self.store.save(tenant, op_id, record, ttl)
        return OperationHandle(tenant, op_id)

    def _policy(self, record: Mapping[str, Any]) -> Policy:
        return Policy.from_dict(record["policy"])

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

    def close(self, handle: OperationHandle, *, latest: tuple[str, Any] | None = None) -> None:
        """End an operation: its binding and any open round are gone (nothing can be sent for it).

        A store with ``discard(tenant, operation_id)`` (delete the record, returning what it held:
        the database store, one statement) has the record taken and deleted at once; then the
        open round's claim and the index entry follow. Else the record is loaded, and deleted last.

        ``latest``: (user, request id) the caller believes is the operation's latest bound id (its
        row says so): a store whose ``discard`` takes ``index=(user, id key)`` removes that index
        entry in the same statement; when the record names another latest id, that one is removed
        after (nothing is left bound either way)."""
        discard = getattr(self.store, "discard", None)
        if discard is not None:
            hint = None
            if latest is not None and getattr(self.store, "discards_index", False) and is_request_id(latest[1]):
                hint = (str(latest[0]), id_key(latest[1]))
            record = discard(handle.tenant, handle.operation_id, index=hint) if hint else \
                discard(handle.tenant, handle.operation_id)
            if record is not None:
                gone = hint is not None and (record.get("user"), record.get("latest_key")) == hint
                self._close_round_and_index(handle, record, index=not gone)
            return
        record = self.store.load(handle.tenant, handle.operation_id)
        if record is None:
            return
        self._close_round_and_index(handle, record)
        self.store.delete(handle.tenant, handle.operation_id)

    def _close_round_and_index(self, handle: OperationHandle, record: dict[str, Any], *, index: bool = True) -> None:
        """A closed operation's open round claimed (no answer to it can be consumed later) and
        its latest index entry removed (unless ``index`` is False: removed already)."""
        if record.get("round"):
            self.store.claim(handle.tenant, f"round:{handle.operation_id}:{record['round']['number']}",
                             self._policy(record).ttl_s + _STORE_SLACK_S)
        if index:
            self.store.index_delete(handle.tenant, record["user"], record["latest_key"])


