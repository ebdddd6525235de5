"""The process's gate: one :class:`~mrtrweb.gate.Gate` per worker process, over the configured
binding store (``MRTRWEB["BINDING_STORE"]``, :func:`mrtrweb.bindings.configured_store`) and the
configured policy (:func:`mrtrweb.conf.policy`).

Operations (:mod:`mrtrweb.operations`), the round panels, the expiry sweep and the legacy
hand-over all use this one gate, so they see the same bindings.
"""

from __future__ import annotations

from ..bindings import configured_store
from ..gate import Gate, OperationHandle

__all__ = ["get_gate", "handle_of", "reset_gate"]

_gate: Gate | None = None


def get_gate() -> Gate:
    """The process's gate over the configured binding store and policy (made on first use)."""
    global _gate
    if _gate is None:
        from .. import conf

        _gate = Gate(configured_store(), conf.policy())
    return _gate


def reset_gate() -> None:
    """Forget the cached gate (tests that change settings)."""
    global _gate
    _gate = None


def handle_of(op: object) -> OperationHandle:
    """The gate's handle of an :class:`~mrtrweb.models.Operation`: ``(tenant id, operation id)``."""
    return OperationHandle(str(op.tenant_id), str(op.id))  # type: ignore[attr-defined]
