"""The deployer's providers: ``MRTRWEB["MODEL_PROVIDERS"]``, read and checked (start-up check
``mrtrweb.E060``, :func:`problems`), and the provider a tenant's choice names (:func:`provider_for`).

Shape (``docs/settings.md``)::

    "MODEL_PROVIDERS": {
        "<name>": {                       # the deployer's name, [a-z0-9_-], at most 40 characters
            "kind": "openai",             # an OpenAI-compatible chat-completions endpoint
            "base_url": "https://models.example/v1",
            "models": ["model-a", ...],   # the models a tenant admin may choose (at least one)
            "label": "Shown to tenant admins",           # optional
            "api_key_env": "ENV_VAR_WITH_A_DEFAULT_KEY",  # optional: used when the tenant set no key
        },
    }

The name ``demo`` is reserved for the scripted demo model (``MRTRWEB["MODEL_DEMO"]``, default on).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from .. import conf

#: the reserved name of the scripted demo model
DEMO = "demo"
KINDS = ("openai",)
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")
_KEYS = {"kind", "base_url", "models", "label", "api_key_env"}


@dataclasses.dataclass(frozen=True)
class ProviderConfig:
    """One provider the deployer set (or the demo model: ``kind`` ``demo``)."""

    name: str
    kind: str
    base_url: str = ""
    models: tuple[str, ...] = ()
    label: str = ""
    api_key_env: str = ""


def _read(name: Any, value: Any) -> tuple[ProviderConfig | None, str]:
    """``(config, "")`` or ``(None, why)``."""
    if not isinstance(name, str) or not _NAME.match(name):
        return None, f"provider name {str(name)[:50]!r} must match [a-z0-9][a-z0-9_-]{{0,39}}"
    if name == DEMO:
        return None, f"provider name {DEMO!r} is reserved for the scripted demo model"
    if not isinstance(value, dict):
        return None, f"provider {name!r} must be a dict"
    unknown = sorted(set(value) - _KEYS)
    if unknown:
        return None, f"provider {name!r} has unknown keys {unknown}"
    if value.get("kind") not in KINDS:
        return None, f"provider {name!r}: kind must be one of {list(KINDS)}"
    url = value.get("base_url")
    if not isinstance(url, str) or not url.startswith(("https://", "http://")) or len(url) > 500:
        return None, f"provider {name!r}: base_url must be an http(s) URL of at most 500 characters"
    models = value.get("models")
    if not isinstance(models, (list, tuple)) or not models or not all(
            isinstance(m, str) and 0 < len(m) <= 200 for m in models):
        return None, f"provider {name!r}: models must be a non-empty list of model names"
    label, env = value.get("label", ""), value.get("api_key_env", "")
    if not isinstance(label, str) or not isinstance(env, str):
        return None, f"provider {name!r}: label and api_key_env must be strings"
    return ProviderConfig(name=name, kind=value["kind"], base_url=url.rstrip("/"), models=tuple(models),
                          label=label[:100], api_key_env=env), ""


def problems() -> list[str]:
    """What is wrong with ``MODEL_PROVIDERS`` and ``MODEL_URL_POLICY`` (empty: nothing)."""
    out = []
    raw = conf.get("MODEL_PROVIDERS")
    if not isinstance(raw, dict):
        return ["MODEL_PROVIDERS must be a dict of provider name to settings"]
    for name, value in raw.items():
        _config, why = _read(name, value)
        if why:
            out.append(why)
    from .policy import model_url_policy

    try:
        model_url_policy(strict=True)
    except ValueError as exc:
        out.append(f"MODEL_URL_POLICY {exc}")
    return out


def configured() -> dict[str, ProviderConfig]:
    """The usable providers by name (a wrong entry is left out: the start-up check names it),
    the demo model first when ``MODEL_DEMO`` is on."""
    out: dict[str, ProviderConfig] = {}
    if conf.get("MODEL_DEMO"):
        out[DEMO] = ProviderConfig(name=DEMO, kind="demo", models=("scripted",), label="Scripted demo model")
    raw = conf.get("MODEL_PROVIDERS")
    for name, value in (raw.items() if isinstance(raw, dict) else ()):
        config, _why = _read(name, value)
        if config is not None:
            out[name] = config
    return out
