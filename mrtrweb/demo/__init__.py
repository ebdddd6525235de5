"""Demo MCP servers for local development and tests (not part of the product's request path).

* :mod:`.server` -- the MRTR demo server (2026-07-28 ``input_required`` rounds), made of
  :mod:`.schemas`, :mod:`.rounds`, :mod:`.tools`, :mod:`.status_app` (its MCP App), :mod:`.recording`
  and :mod:`.serving`;
* :mod:`.board` -- a resource that changes (``resources.subscribe``), for following a read resource;
* :mod:`.legacy` -- the 2025-11-25-only demo server, recorded by :mod:`.wire`;
* :mod:`.protected` / :mod:`.oauth` / :mod:`.consent` -- the OAuth-protected demo server and its
  authorization server;
* :mod:`.options` -- the demo command's options (argparse only: ``./dev demo --help`` before installing).
"""
