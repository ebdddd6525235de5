"""Refresh the vendored MCP Apps host library (issue 31, docs/apps.md): ``./dev vendor-ext-apps``.

npm installs the pinned ``@modelcontextprotocol/ext-apps`` and esbuild into ``var/ext-apps``
(tests/nodejs.py's ``npm_install``), esbuild bundles its ``app-bridge`` entry (``AppBridge``,
``PostMessageTransport`` and their dependencies) into one browser ES module, and the module and the
library's LICENSE are copied to ``mrtrweb/static/mrtrweb/vendor/ext-apps/`` with a VERSION file.
Change :data:`EXT_APPS` to move to another version, run this, and commit what changed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.nodejs import VAR, node22, node_env, npm_install  # noqa: E402

#: the pinned library and bundler
EXT_APPS = "@modelcontextprotocol/ext-apps@2.0.4"
ESBUILD = "esbuild@0.28.2"
PREFIX = VAR / "ext-apps"
OUT = ROOT / "mrtrweb" / "static" / "mrtrweb" / "vendor" / "ext-apps"


def main() -> int:
    modules = npm_install(PREFIX, EXT_APPS, ESBUILD, marker="@modelcontextprotocol/ext-apps")
    if not (modules / ".bin" / "esbuild").exists():
        npm_install(PREFIX, ESBUILD, marker="esbuild")
    package = modules / "@modelcontextprotocol" / "ext-apps"
    entry = package / "dist" / "src" / "app-bridge.js"
    OUT.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(modules / ".bin" / "esbuild"), str(entry), "--bundle", "--format=esm", "--minify",
                    "--platform=browser", "--target=es2022", "--legal-comments=eof",
                    f"--outfile={OUT / 'app-bridge.js'}"], check=True, env=node_env(node22()))
    shutil.copyfile(package / "LICENSE", OUT / "LICENSE")
    (OUT / "VERSION").write_text(f"{EXT_APPS}\nbundled with {ESBUILD} by tools/vendor_ext_apps.py\n")
    print(f"vendored {EXT_APPS} into {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
