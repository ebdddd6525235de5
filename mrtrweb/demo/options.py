"""The options of ``./dev demo`` (``manage.py mrtrweb_demo``), argparse alone: the command adds
them to its parser (:func:`add_options`), and ``./dev demo --help`` prints them with the system
Python before anything is installed (``python3 -m mrtrweb.demo.options``: this module imports
nothing of Django or of the rest of the product).
"""

from __future__ import annotations

import argparse

DESCRIPTION = ("Run the mrtrweb demo: SQLite, in-process cache and channel layer, and the demo MCP servers "
               "(the demo server, its legacy 2025-11-25 twin, and one behind its own OAuth authorization "
               "server), all on 127.0.0.1.")


def add_options(parser: argparse.ArgumentParser) -> None:
    """The demo's options (ports, the model, the set-up-only modes)."""
    parser.add_argument("--port", type=int, default=8000,
                        help="HTTP port of the web app (default 8000); MCP Apps' sandbox is the same port under "
                             "the host name localhost")
    parser.add_argument("--mcp-port", type=int, default=0, help="port of the demo MCP server (default: any free)")
    parser.add_argument("--legacy-port", type=int, default=0,
                        help="port of the legacy (2025-11-25) demo MCP server (default: any free)")
    parser.add_argument("--protected-port", type=int, default=0,
                        help="port of the protected (OAuth per user) demo MCP server (default: any free)")
    parser.add_argument("--oauth-port", type=int, default=0,
                        help="port of its demo OAuth authorization server (default: any free)")
    parser.add_argument("--model-url", metavar="URL",
                        help="an OpenAI-compatible endpoint (e.g. http://127.0.0.1:11434/v1) for the chat page; "
                             "without it the chat page offers the scripted demo model")
    parser.add_argument("--model", metavar="NAME", help="with --model-url: the model's name at the endpoint")
    parser.add_argument("--no-serve", action="store_true", help="set up and exit (for checks)")
    parser.add_argument("--seed-only", metavar="MCP_URL",
                        help="only create the demo tenants, users and servers pointing at MCP_URL, then exit "
                             "(for a production-like deployment against another demo server)")
    parser.add_argument("--seed-legacy", metavar="LEGACY_URL",
                        help="with --seed-only: also seed the legacy (2025-11-25) demo server at LEGACY_URL")


def main(argv: list[str] | None = None) -> None:
    """``python3 -m mrtrweb.demo.options``: the help of ``./dev demo``, then exit."""
    parser = argparse.ArgumentParser(prog="./dev demo", description=DESCRIPTION,
                                     epilog="The first run creates .venv and installs mrtrweb into it "
                                            "(about 1-3 minutes). See docs/demo.md.")
    add_options(parser)
    parser.print_help()


if __name__ == "__main__":
    main()
