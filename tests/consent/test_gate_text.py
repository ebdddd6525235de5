"""The gate's per-field messages and format descriptions read in the page's language on the card,
while the gate itself keeps its English wording (mrtrweb.consent.gate_text)."""

from __future__ import annotations

import jsonschema
import pytest
from django.utils import translation

from mrtrweb.consent import gate_text
from mrtrweb.gate import formats
from mrtrweb.gate.content import PATTERN_MESSAGE, _message

#: a schema for each of the gate's messages, and a value it refuses
CASES = [
    ({"type": "string"}, 5), ({"type": "number"}, "x"), ({"type": "integer"}, 1.5), ({"type": "boolean"}, "x"),
    ({"type": "array"}, "x"), ({"type": "object"}, 1), ({"minLength": 3}, "ab"), ({"maxLength": 2}, "abc"),
    ({"pattern": "^a$"}, "b"), ({"minimum": 2}, 1), ({"maximum": 2.5}, 3), ({"exclusiveMinimum": 0}, 0),
    ({"exclusiveMaximum": 10}, 10), ({"multipleOf": 5}, 7), ({"enum": ["a"]}, "b"), ({"minItems": 2}, [1]),
    ({"maxItems": 1}, [1, 2]), ({"uniqueItems": True}, [1, 1]),
    ({"type": "object", "required": ["a"]}, {}),
    ({"type": "object", "properties": {}, "additionalProperties": False}, {"b": 1}),
    ({"not": {}}, 1),
    *[({"format": name}, "nope") for name in formats.DESCRIPTIONS],
]


def _gate_message(schema, value) -> str:
    """The gate's message for the first error (formats: the gate checks them itself, and words
    their error from the format's description)."""
    if "format" in schema:
        return f"Enter {formats.DESCRIPTIONS[schema['format']]}."
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(value))
    assert errors, (schema, value)
    return _message(errors[0], None)


@pytest.mark.parametrize("schema,value", CASES)
def test_every_gate_message_reads_in_german_and_stays_english_in_english(schema, value):
    message = _gate_message(schema, value)
    with translation.override("en"):
        assert gate_text.field_message(message) == message
    with translation.override("de"):
        german = gate_text.field_message(message)
    assert german != message, message  # listed here and translated
    for digit in "0123456789":
        assert german.count(digit) == message.count(digit), (message, german)  # the bound kept


def test_every_format_the_gate_describes_is_listed_long_and_short():
    for described in formats.DESCRIPTIONS.values():
        assert described in gate_text.FORMAT_DESCRIPTIONS
        if described.endswith(")") and " (" in described:
            assert described[:-1].replace(" (", ", ", 1) in gate_text.FORMAT_DESCRIPTIONS
    with translation.override("de"):
        assert gate_text.format_description("a calendar date, YYYY-MM-DD") != "a calendar date, YYYY-MM-DD"


def test_text_that_is_no_gate_message_is_left_as_it_is():
    with translation.override("de"):
        for text in ("Enter <b>bold</b>.", "Enter at least many characters.", "The server said no.", PATTERN_MESSAGE + "x"):
            assert gate_text.field_message(text) == text
