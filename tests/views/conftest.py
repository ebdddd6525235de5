"""The views tests' shared fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.nodejs import NodeUnavailable, install_axe


@pytest.fixture(scope="session")
def axe_js() -> Path:
    """axe.min.js: ``$AXE_CORE_JS``, or ``var/node`` (installed there with npm once if missing)."""
    env = os.environ.get("AXE_CORE_JS")
    if env:
        path = Path(env)
        if not path.is_file():
            pytest.fail(f"AXE_CORE_JS={env} does not exist")
        return path
    try:  # once, under npm_install's file lock (several test processes may ask at once)
        return install_axe()
    except NodeUnavailable as exc:
        pytest.fail(f"axe-core could not be installed (or set AXE_CORE_JS to axe.min.js): {exc}")
