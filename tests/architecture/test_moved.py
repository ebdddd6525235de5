"""Issue 27's house move, for code and settings written before it: every dotted path README.md, the
documentation's pages (docs/, embedding.md among them) and the settings reference (generated from
mrtrweb/conf/__init__.py's docstring) name resolves, the old paths they documented keep importing (the same module),
any other old flat path fails with a message naming its new place, and ``mrtrweb.asgi`` -- the
portal's one import -- loads without setting Django up."""

from __future__ import annotations

import importlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.utils.module_loading import import_string

from mrtrweb import moved

ROOT = Path(__file__).resolve().parents[2]

#: dotted names in the docs that are not import paths: check ids, group names, the clone URL
NOT_PATHS = re.compile(r"^mrtrweb\.([EW]\d+|user|session|git)$")


def documented_texts() -> dict[str, str]:
    """What the documentation says: README.md, every page under docs/ and the settings reference's
    source (mrtrweb/conf/__init__.py's docstring)."""
    from mrtrweb import conf

    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    texts = {str(p.relative_to(ROOT)): p.read_text() for p in pages if "_build" not in p.parts}
    texts["mrtrweb/conf/__init__.py (docstring)"] = conf.__doc__ or ""
    return texts


def documented_paths() -> set[str]:
    found = set()
    for text in documented_texts().values():
        for m in re.finditer(r"(?<![\w/.])mrtrweb(?:\.[A-Za-z_]\w*)+", text):
            if not NOT_PATHS.match(m.group(0)):
                found.add(m.group(0))
    return found


def resolve(path: str) -> object:
    """The module ``path`` names (found, not run: a production settings module needs its
    environment), or the attribute of the longest module prefix."""
    parts = path.split(".")
    for n in range(len(parts), 0, -1):
        try:
            spec = importlib.util.find_spec(".".join(parts[:n]))
        except ImportError:
            continue
        if spec is None:
            continue
        if n == len(parts):
            return spec
        obj = importlib.import_module(".".join(parts[:n]))
        for attr in parts[n:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(path)


def test_every_path_the_docs_name_resolves():
    paths = documented_paths()
    assert "mrtrweb.tenancy.TenantGrant" in paths and "mrtrweb.authz.service" in paths
    unresolved = {}
    for path in sorted(paths):
        try:
            resolve(path)
        except (ImportError, AttributeError) as exc:
            unresolved[path] = repr(exc)
    assert not unresolved, unresolved


@pytest.mark.parametrize("old, new, name", [
    ("mrtrweb.drain", "mrtrweb.runtime.drain", "lifespan"),
    ("mrtrweb.origin", "mrtrweb.live.origin", "SameOriginValidator"),
    ("mrtrweb.gcpolicy", "mrtrweb.runtime.gcpolicy", "configure"),
    ("mrtrweb.onehop", "mrtrweb.runtime.onehop", "get_asgi_application"),
    ("mrtrweb.health", "mrtrweb.runtime.health", "HealthMiddleware"),
    ("mrtrweb.sampling", "mrtrweb.consent.sampling", "PersonWritesReply"),
])
def test_a_documented_old_path_is_the_new_module(old, new, name):
    assert importlib.import_module(old) is importlib.import_module(new)
    assert import_string(f"{old}.{name}") is import_string(f"{new}.{name}")


def test_documented_settings_strings_resolve():
    from mrtrweb.runtime.health import HealthMiddleware
    from mrtrweb.tenancy.sync import TenantGrant, TenantSyncMiddleware

    assert import_string("mrtrweb.health.HealthMiddleware") is HealthMiddleware
    assert import_string("mrtrweb.tenancy.TenantSyncMiddleware") is TenantSyncMiddleware
    assert import_string("mrtrweb.tenancy.TenantGrant") is TenantGrant
    assert import_string("mrtrweb.middleware.FailClosedMiddleware")
    assert import_string("mrtrweb.headless.arun") is import_string("mrtrweb.headless.client.arun")


def test_an_undocumented_old_path_names_its_new_place():
    assert "mrtrweb.push" not in moved.ALIASED
    with pytest.raises(ImportError, match=r"mrtrweb\.push moved to mrtrweb\.runtime\.push"):
        importlib.import_module("mrtrweb.push")
    with pytest.raises(ImportError, match=r"mrtrweb\.history moved to mrtrweb\.audit\.history"):
        importlib.import_module("mrtrweb.history.views")


def test_every_old_module_has_a_new_home():
    for old, new in moved.MOVED.items():
        assert importlib.util.find_spec(new) is not None, (old, new)


def test_the_asgi_face_loads_without_django_set_up():
    code = ("import sys, mrtrweb.asgi as a; "
            "assert 'django.apps.registry' not in sys.modules or not __import__('django.apps').apps.ready; "
            "assert 'mrtrweb.models' not in sys.modules; "
            "print(sorted(a.__all__))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert "mrtrweb_application" in out.stdout
