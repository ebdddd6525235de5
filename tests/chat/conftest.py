"""Fixtures of the chat tests: the scripted OpenAI-compatible endpoint (a real HTTP server on
loopback) and the settings that make it the ``scripted`` provider."""

from __future__ import annotations

import pytest

from mrtrweb.models import Conversation, TenantModel

from tests.chat.model_server import ModelServer


@pytest.fixture
def model_server():
    server = ModelServer().start()
    yield server
    server.stop()


@pytest.fixture
def model_settings(settings, model_server):
    """``MODEL_PROVIDERS`` naming the scripted endpoint (``local`` / ``scripted-1``), loopback http
    allowed for it alone by ``MODEL_URL_POLICY``; short reply bounds."""
    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}),
                        "MODEL_PROVIDERS": {"local": {"kind": "openai", "base_url": model_server.url,
                                                      "models": ["scripted-1"], "label": "Test endpoint"}},
                        "MODEL_URL_POLICY": {"allow_hosts": ["127.0.0.1"], "allow_http_hosts": ["127.0.0.1"]},
                        "MODEL_REPLY_TIMEOUT_S": 3, "MODEL_REPLY_CHARS": 2000}
    return settings


@pytest.fixture
def chat(seeded, model_settings, model_server):
    """alice signed in, acme using the scripted endpoint, a fresh conversation."""
    alice = seeded["users"]["alice"]
    acme = seeded["servers"]["acme"].tenant
    TenantModel.objects.create(tenant=acme, provider="local", model="scripted-1")
    conv = Conversation.objects.create(tenant=acme, user=alice)
    return {"alice": alice, "conv": conv, "server": seeded["servers"]["acme"], "model": model_server}
