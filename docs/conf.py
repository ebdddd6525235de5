"""Sphinx configuration of mrtrweb's documentation (``./dev docs``; tests/docs/test_docs_site.py builds
it with warnings as errors). The pages are Markdown (MyST), so they read on GitHub as well."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # mrtrweb itself: the settings reference reads mrtrweb/conf.py
sys.path.insert(0, str(HERE / "_ext"))

project = "mrtrweb"
author = "the mrtrweb authors"
copyright = "the mrtrweb authors"  # noqa: A001
release = version = "0.1.0"

extensions = ["myst_parser", "mrtrweb_settings"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "Thumbs.db", ".DS_Store",
                    "benchmarks/NOTES.md"]  # the report's hand-written analysis, shown inside benchmarks/README.md

myst_enable_extensions = ["colon_fence", "deflist"]
# "## Heading" anchors, so that [text](page.md#heading) works on the site as on GitHub
myst_heading_anchors = 4

html_theme = "furo"
html_title = "mrtrweb"
html_static_path: list[str] = []
