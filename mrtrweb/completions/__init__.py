"""Suggestions as a person types (issue 28, item 4): ``completion/complete`` for a prompt's
arguments and a resource template's variables, asked of servers that declare ``completions``.

* :mod:`.asking` -- the request's params (the argument's value and the other values as context,
  each bounded) and the answer's values, bounded and made fit to show;
* :mod:`.throttle` -- at most :data:`~.throttle.LIMIT` asks per person and
  :data:`~.throttle.SERVER_LIMIT` per server per :data:`~.throttle.WINDOW_S` seconds (shared
  cache; a cache that fails refuses).

The endpoint is :mod:`mrtrweb.views.completions`, the page's script ``static/mrtrweb/complete.js``
(debounced, a ``<datalist>`` filled as text). A suggestion is only a suggestion: what the form
sends is checked as any typed value.

May import: :mod:`mrtrweb.text` (display rules), :mod:`mrtrweb.mcp` (its log limiter), Django's
cache; never :mod:`mrtrweb.operations` or the request layer. Imported by :mod:`mrtrweb.views`.
"""

from __future__ import annotations

from .asking import MAX_SHOWN_CHARS, MAX_VALUE_CHARS, MAX_VALUES, declares_completions, params_for, values_of
from .throttle import LIMIT, SERVER_LIMIT, WINDOW_S, allowed

__all__ = ["LIMIT", "MAX_SHOWN_CHARS", "MAX_VALUES", "MAX_VALUE_CHARS", "WINDOW_S", "allowed", "declares_completions",
           "params_for", "SERVER_LIMIT", "values_of"]
