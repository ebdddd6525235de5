"""mrtrweb: a browser-based, multi-tenant MCP client for Django and Channels that gates MCP
Multi Round-Trip Requests (``resultType: "input_required"``, MCP 2026-07-28).

The framework-free core is :mod:`mrtrweb.gate`; everything else is the Django edge.
"""

__version__ = "0.1.0"

# the old flat paths: documented ones keep importing, others name their new place
from . import moved as _moved  # noqa: E402

_moved.install()
