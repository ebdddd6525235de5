"""Views: servers and their tools, starting calls, the operation page and answering a round.

Every view requires login; objects are looked up through the requesting user's memberships or
ownership, so another user (same or other tenant) gets 404 and nothing is sent. Each request also
re-checks access (:mod:`mrtrweb.tenancy.access`: the user active, a member of the tenant, the server there
and enabled): once it ended, the person's own operations are 404 as well, and ended as denied.

One module per page or step: :mod:`.servers` (the server list and a server's page),
:mod:`.calls` (the tool, prompt and resource forms that start an operation), :mod:`.operation`
(the operation page, its panel, Stop, the result), :mod:`.contents` (a result's content items: downloads, Read on a resource link), :mod:`.answers` (answering a round) with
:mod:`.review` (the review before Send), :mod:`.waiting` (the rounds waiting for the person),
:mod:`.completions` (suggestions as the person types, JSON), :mod:`.server_log` (the person's log level
of a server), and
:mod:`.common` (what they share).
"""

from __future__ import annotations

from .answers import ANSWER_ACTIONS, operation_answer
from .contents import operation_content, resource_link_read
from .calls import MAX_CALL_FIELDS, PromptArgumentsForm, ResourceTemplateForm, prompt_get, resource_read, tool_call
from .operation import operation_detail, operation_panel, operation_result, operation_stop
from .review import (REVIEW_CHANGED_MESSAGE, REVIEW_INVALID_MESSAGE, REVIEW_MAX_AGE_S, REVIEW_SALT,
                     _review_context, _review_response)
from .servers import index, server_detail

__all__ = ["ANSWER_ACTIONS", "MAX_CALL_FIELDS", "REVIEW_CHANGED_MESSAGE", "REVIEW_INVALID_MESSAGE", "REVIEW_MAX_AGE_S",
           "REVIEW_SALT", "PromptArgumentsForm", "ResourceTemplateForm", "index", "operation_answer",
           "operation_content", "operation_detail", "operation_panel", "operation_result", "operation_stop", "prompt_get",
           "resource_link_read",
           "resource_read", "server_detail", "tool_call", "_review_context", "_review_response"]
