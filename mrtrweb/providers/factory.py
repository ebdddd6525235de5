"""The provider a tenant's choice names (:func:`provider_for`)."""

from __future__ import annotations

import os

from .base import Provider, ProviderError
from .config import DEMO, configured
from .openai_compat import OpenAICompatible
from .scripted import ScriptedDemoModel


def provider_for(provider: str, model: str, api_key: str = "") -> Provider:
    """The provider a tenant's choice names, ready to answer.

    Raises:
        ProviderError: ``provider_not_configured`` (no such provider now, or a model it does not offer).
    """
    config = configured().get(provider)
    if config is None or model not in config.models:
        raise ProviderError("provider_not_configured", "the tenant's model is not one this deployment offers")
    if config.kind == DEMO:
        return ScriptedDemoModel()
    key = api_key or (os.environ.get(config.api_key_env, "") if config.api_key_env else "")
    return OpenAICompatible(name=config.name, base_url=config.base_url, model=model, api_key=key)
