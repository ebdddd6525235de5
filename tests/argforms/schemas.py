"""Schemas of the argument-form tests (public names): as third-party servers list them."""

from __future__ import annotations

#: what FastMCP (pydantic 2) makes of ``ship(shipment: Shipment, note: str | None = None)``
#: (tests/thirdparty_servers/fastmcp_features.py), as the server lists it
PYDANTIC = {
    "$defs": {
        "Address": {"properties": {"street": {"minLength": 1, "title": "Street", "type": "string"},
                                   "city": {"title": "City", "type": "string"},
                                   "zip_code": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None,
                                                "title": "ZIP code"}},
                    "required": ["street", "city"], "title": "Address", "type": "object"},
        "Parcel": {"properties": {"label": {"title": "Label", "type": "string"},
                                  "weight_kg": {"description": "Weight in kg", "exclusiveMinimum": 0, "maximum": 30,
                                                "title": "Weight Kg", "type": "number"}},
                   "required": ["label", "weight_kg"], "title": "Parcel", "type": "object"},
        "Shipment": {"properties": {
            "recipient": {"title": "Recipient", "type": "string"},
            "address": {"$ref": "#/$defs/Address"},
            "speed": {"$ref": "#/$defs/Speed", "default": "standard"},
            "insured_value": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None,
                              "title": "Insured Value"},
            "tags": {"default": [], "items": {"type": "string"}, "title": "Tags", "type": "array"},
            "parcels": {"items": {"$ref": "#/$defs/Parcel"}, "maxItems": 5, "title": "Parcels", "type": "array"}},
            "required": ["recipient", "address"], "title": "Shipment", "type": "object"},
        "Speed": {"description": "How fast a parcel goes.", "enum": ["standard", "express"], "title": "Speed",
                  "type": "string"}},
    "properties": {"shipment": {"$ref": "#/$defs/Shipment"},
                   "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "Note"}},
    "required": ["shipment"], "type": "object"}

#: ``create_entities`` of @modelcontextprotocol/server-memory 2026.8.31
MEMORY = {"type": "object", "properties": {"entities": {"type": "array", "items": {
    "type": "object", "properties": {
        "name": {"type": "string", "description": "The name of the entity"},
        "entityType": {"type": "string", "description": "The type of the entity"},
        "observations": {"type": "array", "items": {"type": "string"},
                         "description": "An array of observation contents associated with the entity"}},
    "required": ["name", "entityType", "observations"], "additionalProperties": False}}},
    "required": ["entities"]}
