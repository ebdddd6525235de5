"""The documentation site (docs/, issue 27): it builds with Sphinx with warnings as errors (a broken
link, a missing anchor, a page outside every toctree, a setting without a meaning), its settings
reference is generated from ``mrtrweb.conf`` and names every key, and the README stays a front page.

The deploy recipe's pages are run by tests/docs/test_deploy_readme.py and docs/embedding.md by
tests/embedding/test_embed_docs.py; here only their markers are checked, which takes no services.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from ..deploy_recipe import KINDS, RECIPE_PAGES, recipe_text, steps

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
_spec = importlib.util.spec_from_file_location("mrtrweb_settings", DOCS / "_ext" / "mrtrweb_settings.py")
mrtrweb_settings = importlib.util.module_from_spec(_spec)  # the settings reference's generator
_spec.loader.exec_module(mrtrweb_settings)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    started = time.monotonic()
    build = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                            "-d", str(out / ".doctrees"), str(DOCS), str(out / "html")],
                           capture_output=True, text=True, timeout=300, cwd=ROOT)
    elapsed = time.monotonic() - started
    assert build.returncode == 0, f"sphinx-build failed:\n{build.stdout[-3000:]}\n{build.stderr[-6000:]}"
    print(f"docs built in {elapsed:.1f} s")
    return out / "html"


def test_the_site_builds_with_warnings_as_errors(site):
    for page in ("index", "demo", "person", "round", "tenant-admin", "embedding", "translations",
                 "deploy/production", "deploy/upgrading", "deploy/sizing", "deploy/what-holds",
                 "deploy/authorization", "settings", "security", "audit", "rejection-codes", "headless",
                 "interop/legacy", "interop/conformance", "interop/typescript", "interop/servers-tried",
                 "benchmarks", "benchmarks/README", "tests"):
        assert (site / f"{page}.html").is_file(), page
    index = (site / "index.html").read_text()
    for caption in ("A tenant admin", "A portal team", "A deployer", "Security and audit", "Interop"):
        assert caption in index, caption


def test_the_settings_reference_names_every_key_of_the_code(site):
    from mrtrweb import conf

    page = (site / "settings.html").read_text()
    text = re.sub(r"<[^>]+>", " ", page)
    for key in conf.DEFAULTS:
        assert f'id="setting-{key.lower().replace("_", "-")}"' in page, key
        assert re.search(rf"\b{key}\b", text), key
    # the authorization page shows its own keys from the same table
    auth = (site / "deploy" / "authorization.html").read_text()
    for key in ("SECRET_KEYS", "OAUTH_REDIRECT_URI", "OUTBOUND_ALLOW_HOSTS"):
        assert f'id="setting-{key.lower().replace("_", "-")}"' in auth, key
    assert 'id="setting-ttl-s"' not in auth


def test_the_generator_reads_the_code_and_refuses_drift():
    from mrtrweb import conf

    rows, undocumented, unknown = mrtrweb_settings.rows(conf)
    assert not undocumented and not unknown, (undocumented, unknown)
    assert [r[0] for r in rows if r[0] == "TTL_S"] == ["TTL_S"]
    assert {r[0] for r in rows} == set(conf.DEFAULTS)
    by_key = {r[0]: r for r in rows}
    assert by_key["TTL_S"][1:3] == ("600", "a number")
    assert by_key["BINDING_STORE"][1] == '"database"'
    assert by_key["GC_THRESHOLDS"][1:3] == ("(5000, 4, 1000)", "numbers separated by spaces")
    assert by_key["SECRET_KEYS"][2] == "a JSON list, or words separated by spaces"
    # a key added in code without a meaning, and a meaning left for a removed key, are both found
    fake = types.SimpleNamespace(
        __doc__="Intro.\n\n``A_S``\n    first\n    line two\n``GONE``\n    removed\n",
        DEFAULTS={"A_S": 1, "NEW": "x"}, NUMERIC_KEYS={"A_S"}, LIST_KEYS=set(), BOOL_KEYS=set(), INT_TUPLE_KEYS=set(),
        DICT_KEYS=set())
    rows, undocumented, unknown = mrtrweb_settings.rows(fake)
    assert rows == [("A_S", "1", "a number", "first line two"), ("NEW", '"x"', "text", "")]
    assert undocumented == ["NEW"] and unknown == ["GONE"]


def test_the_readme_is_a_front_page():
    readme = (ROOT / "README.md").read_text()
    lines = readme.splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: the manual belongs in docs/"
    section = readme.split("## Two commands on a fresh machine", 1)[1]
    block = re.search(r"```sh\n(.*?)\n```", section, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]
    assert commands == ["./dev demo", "./dev test"]
    # every relative link and image of the README leads to a file of the repository
    for target in re.findall(r"\]\(([^)\s]+)\)", readme):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#")[0]
        assert (ROOT / path).exists(), f"README.md links {target}, which does not exist"


def test_the_recipe_pages_mark_every_kind_of_step():
    """What tests/docs/test_deploy_readme.py runs (slow, services): here only that its pages are there,
    in order, with every kind of marked block."""
    pages = {page: (ROOT / page).read_text() for page in RECIPE_PAGES}
    recipe = steps(recipe_text(pages))
    assert {s.kind for s in recipe} == KINDS
    assert recipe[-1].kind == "rolling"
