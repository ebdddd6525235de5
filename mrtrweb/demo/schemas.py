"""The demo server's elicitation schemas (:mod:`.tools`): the spec's restricted JSON Schema subset,
flat objects of primitive fields, as plain dicts; and the bases of its URL-mode targets (reserved
``.test`` names: never resolvable). Data only.
"""

from __future__ import annotations

from typing import Any

#: Base of the URL-mode elicitation target (a reserved ``.test`` name: never resolvable).
CONNECT_URL_BASE = "https://auth.example.test/connect"

DEPLOY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "confirm": {
            "type": "boolean",
            "title": "Confirm deployment",
            "description": "Tick to confirm you want to deploy now.",
        },
        "ticket": {
            "type": "string",
            "title": "Change ticket",
            "description": "The change-management ticket id (3 to 32 characters).",
            "minLength": 3,
            "maxLength": 32,
        },
        "email": {
            "type": "string",
            "title": "Contact email",
            "description": "Who to contact if the deployment fails.",
            "format": "email",
        },
        "window": {
            "type": "integer",
            "title": "Maintenance window (hours)",
            "description": "How long the maintenance window lasts, in hours.",
            "minimum": 1,
            "maximum": 24,
            "default": 2,
        },
        "region": {
            "type": "string",
            "title": "Region",
            "description": "The region to deploy to.",
            "oneOf": [
                {"const": "eu-west-1", "title": "Europe (Ireland)"},
                {"const": "us-east-1", "title": "US East (N. Virginia)"},
                {"const": "ap-south-1", "title": "Asia Pacific (Mumbai)"},
            ],
        },
        "notify": {
            "type": "array",
            "title": "Notify",
            "description": "Channels to notify when the deployment finishes.",
            "items": {"type": "string", "enum": ["email", "slack", "pager"]},
        },
    },
    "required": ["confirm", "ticket"],
}

GO_ON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"go": {"type": "boolean", "title": "Go on", "default": True}},
    "required": ["go"],
}

TRIP_DATES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "start": {
            "type": "string",
            "title": "Check-in date",
            "description": "First night of the stay.",
            "format": "date",
        },
        "nights": {
            "type": "integer",
            "title": "Nights",
            "description": "How many nights to stay.",
            "minimum": 1,
            "maximum": 30,
        },
    },
    "required": ["start", "nights"],
}

TRIP_SEAT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "seat": {
            "type": "string",
            "title": "Seat",
            "description": "Seat preference for the flight.",
            "enum": ["window", "aisle", "middle"],
        },
        "confirm": {
            "type": "boolean",
            "title": "Confirm booking",
            "description": "Tick to book the trip.",
        },
    },
    "required": ["seat", "confirm"],
}

TEAM_PROFILE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "display_name": {
            "type": "string",
            "title": "Display name",
            "description": "Letters, digits, spaces, dots, dashes and underscores (2 to 40).",
            "minLength": 2,
            "maxLength": 40,
            "pattern": "^[A-Za-z0-9 ._-]+$",
        },
        "budget": {
            "type": "number",
            "title": "Monthly budget (EUR)",
            "description": "What the team may spend each month.",
            "minimum": 0,
            "maximum": 10000,
            "default": 250.5,
        },
        "homepage": {"type": "string", "title": "Team page", "description": "Its web address.", "format": "uri"},
        "channels": {
            "type": "array",
            "title": "Channels",
            "description": "Where the team talks.",
            "items": {"anyOf": [{"const": "chat", "title": "Team chat"}, {"const": "mail", "title": "Mailing list"},
                                {"const": "wiki", "title": "Wiki"}]},
            "minItems": 1,
            "maxItems": 2,
        },
        "size": {"type": "string", "title": "Team size", "enum": ["small", "medium", "large"],
                 "enumNames": ["1 to 5 people", "6 to 20 people", "more than 20 people"]},
    },
    "required": ["display_name", "channels"],
}
#: Base of ``onboard_team``'s URL-mode request (a reserved ``.test`` name: never resolvable).
SSO_URL_BASE = "https://sso.example.test/enrol"

REPORT_FORMAT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "format": {
            "type": "string",
            "title": "Format",
            "description": "How the report should be delivered.",
            "oneOf": [
                {"const": "pdf", "title": "PDF document"},
                {"const": "html", "title": "Web page"},
                {"const": "csv", "title": "CSV data"},
            ],
        }
    },
    "required": ["format"],
}

AUDIENCE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "audience": {"type": "string", "title": "Audience", "enum": ["developers", "customers", "executives"],
                     "default": "developers"},
    },
    "required": ["audience"],
}
PERIOD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"since": {"type": "string", "format": "date", "title": "Since"}},
    "required": ["since"],
}
