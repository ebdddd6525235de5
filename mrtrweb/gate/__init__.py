"""mrtrweb.gate -- the framework-free core of the MRTR gate (no Django import).

Implements ``shared/docs/mrtr-gate.md`` sections 1 (binding, accepting ``input_required``) and
2 (building the retry once) for MCP 2026-07-28 Multi Round-Trip Requests (SEP-2322).
"""

from .clock import ManualClock, SystemClock
from .codes import ACCEPT_CODES, ALL_CODES, RETRY_CODES, BindingConflict, GateError, GateRejection, StoreUnavailable
from .gate import Gate, InputRequestView, OperationHandle, OperationState, Retry, Round
from .ids import canonical_json, digest, id_key, is_request_id, text_digest
from .policy import DEPRECATED_METHODS, INPUT_REQUIRED_METHODS, Policy
from .schema import CheckedSchema, ContentMismatch, Field, Option, SchemaRefused, check_requested_schema
from .store import BindingStore, InMemoryBindingStore
from .urls import UnsafeUrl, UrlView, check_url

__all__ = [
    "ACCEPT_CODES", "ALL_CODES", "RETRY_CODES", "BindingConflict", "BindingStore", "CheckedSchema",
    "ContentMismatch", "DEPRECATED_METHODS", "Field", "Gate", "GateError", "GateRejection",
    "INPUT_REQUIRED_METHODS", "InMemoryBindingStore", "InputRequestView", "ManualClock", "OperationHandle",
    "OperationState", "Option", "Policy", "Retry", "Round", "SchemaRefused", "StoreUnavailable", "SystemClock",
    "UnsafeUrl", "UrlView", "canonical_json", "check_requested_schema", "check_url", "digest", "id_key",
    "is_request_id", "text_digest",
]
