"""Tool arguments as generated fields: a tool's ``inputSchema`` with objects, arrays of scalars or of
objects, ``anyOf``/``oneOf`` with ``null``, object variants and local ``$ref`` becomes a Django form.

* :mod:`.shapes` (no Django) -- reads a schema into a tree of :class:`~.shapes.Node` (objects,
  arrays, scalars, enums with titles, optional/nullable, a choice of variants), following local
  ``$ref`` (``#/$defs/...``, ``#/definitions/...``, any ``#/`` pointer) only, bounded in depth,
  size and reference hops, refusing cycles; what it cannot express raises
  :class:`~.shapes.Unsupported` (the page then shows the JSON box). :func:`~.shapes.template_for`
  builds the JSON box's starting text from a schema (defaults, required keys with placeholders).
* :mod:`.form` -- :class:`~.form.NestedArgumentsForm`: fields named by stable paths
  (``arg-items.0.name``), array rows added and removed by the server (a POST that re-renders the
  form, never sends), the assembled arguments checked with
  :func:`mrtrweb.consent.argschema.check_arguments` (the truth; the fields are a convenience).

The consent card's ``requestedSchema`` (flat, checked by the gate) is not this package's.

May import: gate, text, consent (argschema, fieldhints, forms); not views, models, live or operations.
"""

from __future__ import annotations

from .form import NestedArgumentsForm, ROWS_ACTION
from .shapes import Unsupported, read_schema, template_for

__all__ = ["NestedArgumentsForm", "ROWS_ACTION", "Unsupported", "read_schema", "template_for"]
