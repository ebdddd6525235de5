"""What an app is told about its call (issue 31, item 3): ``tool-result`` with the result once it
completed, ``tool-cancelled`` with the product's own reason when it ended without one
(:func:`mrtrweb.views.apps.call_outcome`, the JSON of ``GET /mcp/operations/<id>/app/outcome/``)."""

from __future__ import annotations

import pytest

from mrtrweb.models import Operation
from mrtrweb.views.apps import call_outcome


@pytest.mark.parametrize(("status", "stopped_by", "expected"), [
    ("running", "", {"status": "running"}),
    ("awaiting_input", "", {"status": "running"}),
    ("failed", "", {"status": "cancelled", "reason": "failed"}),
    ("interrupted", "", {"status": "cancelled", "reason": "failed"}),
    ("denied", "", {"status": "cancelled", "reason": "denied"}),
    ("denied", "person", {"status": "cancelled", "reason": "stopped"}),
    ("expired", "", {"status": "cancelled", "reason": "expired"}),
])
def test_outcome_without_a_result(status, stopped_by, expected):
    op = Operation(status=status, stop_requested_by=stopped_by, error_message="server text <b>never sent</b>")
    assert call_outcome(op) == expected


def test_outcome_with_a_result():
    result = {"content": [{"type": "text", "text": "done"}]}
    assert call_outcome(Operation(status="completed", result=result)) == {"status": "completed", "result": result}
    # completed without a result object: as ended without one
    assert call_outcome(Operation(status="completed", result=None)) == {"status": "cancelled", "reason": "failed"}
