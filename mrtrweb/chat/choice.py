"""The tenant's provider and model (a tenant admin's choice among ``MODEL_PROVIDERS``), its API
key sealed at rest (:func:`mrtrweb.authz.crypto.seal`, write-only: never shown again), and the
provider a conversation of the tenant talks to."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from ..authz.crypto import SecretUnreadable, seal, unseal
from ..models import TenantModel
from ..providers import DEMO, Provider, ProviderError, configured, provider_for

logger = logging.getLogger("mrtrweb.chat")


def current(tenant_id: Any) -> TenantModel | None:
    """Sync: the tenant's choice, or None. Without a row and with the demo model offered, the demo
    model is the tenant's (a newcomer sees proposals without a model server)."""
    row = TenantModel.objects.filter(tenant_id=tenant_id).first()
    if row is not None and row.provider:
        return row
    if DEMO in configured():
        return TenantModel(tenant_id=tenant_id, provider=DEMO, model="scripted")
    return None


def provider_of(tenant_id: Any) -> Provider:
    """Sync: the provider the tenant's conversations talk to.

    Raises:
        ProviderError: ``provider_not_configured`` (no choice, or one this deployment no longer offers).
    """
    row = current(tenant_id)
    if row is None:
        raise ProviderError("provider_not_configured", "no model chosen for the tenant")
    key = ""
    if row.api_key_sealed:
        try:
            key = str(unseal(row.api_key_sealed))
        except SecretUnreadable:
            logger.warning("tenant %s: its model key cannot be opened (SECRET_KEYS rotated?); sent without one",
                           tenant_id)
    return provider_for(row.provider, row.model, key)


def choose(tenant: Any, user_id: Any, provider: str, model: str, api_key: str | None) -> TenantModel:
    """Sync: save a tenant admin's choice (``api_key`` None keeps the sealed key, ``""`` removes it)
    and its ``model_changed`` audit event, in one transaction.

    Raises:
        ValueError: the provider or model is not offered.
    """
    from ..authz.service import keyed_digest
    from .events import model_changed

    config = configured().get(provider)
    if config is None or model not in config.models:
        raise ValueError("not an offered provider and model")
    with transaction.atomic():
        row, _ = TenantModel.objects.select_for_update().get_or_create(tenant=tenant)
        row.provider, row.model, row.updated_at = provider, model, timezone.now()
        secret = "kept"
        if api_key is not None:
            row.api_key_sealed = seal(api_key) if api_key else ""
            row.api_key_digest = keyed_digest("model-key", api_key) if api_key else ""
            secret = "replaced" if api_key else "removed"
        row.save()
        model_changed(tenant.pk, user_id, provider, model, secret, row.api_key_digest)
    return row
