"""Where a provider's endpoint may be: ``MRTRWEB["MODEL_URL_POLICY"]`` (the shape of
``SERVER_URL_POLICY``, :mod:`mrtrweb.mcp.url_policy`)."""

from __future__ import annotations

from .. import conf


def model_url_policy(*, strict: bool = False):
    """``MODEL_URL_POLICY`` as a :class:`mrtrweb.mcp.url_policy.UrlPolicy` (the shape of
    ``SERVER_URL_POLICY``). A wrong one refuses every URL (``strict``: raises ValueError)."""
    from ..mcp.url_policy import parse_policy, unusable

    try:
        return parse_policy(conf.get("MODEL_URL_POLICY"), timeout_s=float(conf.get("OUTBOUND_TIMEOUT_S")))
    except ValueError as exc:
        if strict:
            raise
        return unusable(f"MRTRWEB['MODEL_URL_POLICY'] {exc}")
