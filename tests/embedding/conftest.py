"""The embedding tests' shared fixtures."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

#: the example portal's templates (tests/embed_orgs/), whose blocks override mrtrweb's
PORTAL_TEMPLATES = Path(__file__).resolve().parents[1] / "embed_orgs" / "templates"


@pytest.fixture
def portal_templates(settings):
    """The site's templates with the portal's directory first (as the portal's TEMPLATES DIRS)."""
    templates = copy.deepcopy(settings.TEMPLATES)
    templates[0]["DIRS"] = [PORTAL_TEMPLATES, *templates[0]["DIRS"]]
    settings.TEMPLATES = templates
