"""The shipped German catalog (mrtrweb/locale/de) is complete and compiled: ``makemessages`` run on
a copy of the sources finds no msgid the catalog does not translate (none empty, none fuzzy, none
stale), the committed .mo is the .po compiled, and every translation keeps its msgid's
placeholders and HTML tags. Needs Debian's gettext (``./dev test`` installs it); refresh the
catalog with ``./dev messages``."""

from __future__ import annotations

import gettext
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "mrtrweb" / "locale" / "de" / "LC_MESSAGES"
#: what ./dev messages leaves out of makemessages (MESSAGES_IGNORE there)
IGNORED = (".venv", "var", "tests", "docs", "static", "node_modules")

PLACEHOLDER = re.compile(r"%\(\w+\)[sdr]|%[sd]|\{\w*\}")
TAG = re.compile(r"</?\w+[^>]*>")


def _catalog(mo: Path) -> dict:
    """The messages of a compiled catalog: ``{msgid: msgstr}``, ``{(msgid, i): msgstr[i]}`` for plurals."""
    with mo.open("rb") as fh:
        return dict(gettext.GNUTranslations(fh)._catalog)  # type: ignore[attr-defined]


def _msgfmt(po: Path, mo: Path) -> None:
    subprocess.run(["msgfmt", "--check-format", "-o", str(mo), str(po)], check=True, capture_output=True)


@pytest.fixture(scope="module")
def shipped() -> dict:
    return {k: v for k, v in _catalog(CATALOG / "django.mo").items() if k != ""}


def test_mo_is_the_po_compiled(tmp_path):
    """The committed .mo holds exactly what the committed .po compiles to (run ./dev messages)."""
    _msgfmt(CATALOG / "django.po", tmp_path / "django.mo")
    assert _catalog(tmp_path / "django.mo") == _catalog(CATALOG / "django.mo")


def test_po_has_no_empty_or_fuzzy_entry():
    po = CATALOG / "django.po"
    for flag in ("--untranslated", "--only-fuzzy"):
        out = subprocess.run(["msgattrib", flag, "--no-obsolete", str(po)], check=True, capture_output=True,
                             text=True).stdout
        assert "msgid" not in out, f"{flag} entries in {po}:\n{out[:2000]}"


def test_makemessages_finds_nothing_untranslated(tmp_path, shipped):
    """makemessages over a copy of the sources (the package and the demo site's templates/) merges
    no new msgid into the catalog (it would be empty, or fuzzy when msgmerge guesses it from a
    similar one), and compiled it holds the same messages as the shipped catalog (a stale msgid,
    gone from the sources, is dropped by --no-obsolete: they differ)."""
    copy = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "mrtrweb", copy / "mrtrweb", ignore=ignore)
    shutil.copytree(ROOT / "templates", copy / "templates", ignore=ignore)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MRTRWEB_", "DJANGO_"))}
    # the copy's own demo settings: its LOCALE_PATHS is the copy's mrtrweb/locale
    env.update(PYTHONPATH=str(copy), DJANGO_SETTINGS_MODULE="mrtrweb.site.settings",
               MRTRWEB_VAR_DIR=str(tmp_path / "var"))
    cmd = [sys.executable, "-m", "django", "makemessages", "-l", "de", "--no-location", "--no-obsolete",
           *(f"--ignore={name}" for name in IGNORED)]
    done = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    po = copy / "mrtrweb" / "locale" / "de" / "LC_MESSAGES" / "django.po"
    for flag in ("--untranslated", "--only-fuzzy"):  # a new msgid: empty, or guessed (fuzzy) by msgmerge
        out = subprocess.run(["msgattrib", flag, "--no-obsolete", str(po)], check=True, capture_output=True,
                             text=True).stdout
        assert "msgid" not in out, f"makemessages found {flag[2:]} msgids (run ./dev messages):\n{out[:3000]}"
    _msgfmt(po, tmp_path / "found.mo")
    found = {k: v for k, v in _catalog(tmp_path / "found.mo").items() if k != ""}
    missing = sorted(str(k) for k in set(found) ^ set(shipped))
    assert not missing, f"msgids found but not translated, or translated but gone: {missing[:20]}"
    assert found == shipped


def _msgid(key) -> str:
    return key[0] if isinstance(key, tuple) else key


def test_placeholders_and_tags_match(shipped):
    """Each msgstr keeps its msgid's %(name)s / {name} placeholders and its HTML tags, exactly."""
    assert len(shipped) > 300
    bad = []
    for key, msgstr in shipped.items():
        msgid = _msgid(key)
        assert msgstr.strip(), f"empty translation of {msgid!r}"
        if sorted(PLACEHOLDER.findall(msgid)) != sorted(PLACEHOLDER.findall(msgstr)):
            bad.append((msgid, msgstr))
        elif sorted(TAG.findall(msgid)) != sorted(TAG.findall(msgstr)):
            bad.append((msgid, msgstr))
    assert not bad, bad[:10]


def test_product_terms_are_consistent(shipped):
    """Operation is "Vorgang", round "Runde", Accept/Decline/Cancel "Annehmen/Ablehnen/Abbrechen", everywhere."""
    assert shipped["Operation"] == "Vorgang" and shipped["round %(n)s"] == "Runde %(n)s" and shipped["Round closed"] == "Runde geschlossen"
    assert (shipped["Accept"], shipped["Decline"], shipped["Cancel"]) == ("Annehmen", "Ablehnen", "Abbrechen")
    for msgid_word, wrong in (("operation", "Operation"), ("round", "Round")):
        for key, msgstr in shipped.items():
            if re.search(rf"\b{msgid_word}s?\b", _msgid(key), re.I):
                assert not re.search(rf"\b{wrong}\b(?!-Trip)", msgstr), (key, msgstr)
    # the Sie-form: no informal "du"/"dein"
    informal = [m for m in shipped.values() if re.search(r"\b(du|dein\w*|dich|dir)\b", m, re.I)]
    assert not informal, informal[:5]
