"""What the person reads when a turn cannot go on (stable codes, translated texts)."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _

MESSAGES = {
    "provider_unavailable": _("The model could not be reached. Your conversation is saved; try again later."),
    "provider_rate_limited": _("The model is busy (rate limited). Your conversation is saved; try again in a moment."),
    "provider_timeout": _("The model did not finish its reply in time. Your conversation is saved; try again."),
    "provider_refused": _("The model's endpoint refused this tenant's key. A tenant admin must check it."),
    "provider_error": _("The model's endpoint answered with an error. Your conversation is saved; try again."),
    "provider_malformed": _("The model's endpoint answered something that is not a reply. Your conversation is saved."),
    "provider_url_refused": _("The model's endpoint is not allowed by this deployment's rules (MODEL_URL_POLICY)."),
    "provider_not_configured": _("No model is configured for this organisation. A tenant admin chooses one on the "
                                 "organisation's model page."),
    "steps_exhausted": _("The model took the most steps one turn may take; send a message to go on."),
    "reply_cut": _("The model's reply was too long and was cut; calls it proposed in it were dropped."),
    "interrupted": _("The last step was interrupted (the server restarted). Your conversation is saved; choose "
                     "Try again."),
    "no_access": _("You can no longer use this organisation."),
    "audit_unavailable": _("The model's reply could not be recorded in the audit trail, so nothing of it was kept "
                           "or proposed. Your conversation is saved; try again."),
}

#: why a proposal was refused by the product (told to the model, shown on the card)
REFUSALS = {
    "policy_never": _("The organisation's policy never allows this tool."),
    "unknown_tool": _("The model named a tool this conversation does not offer."),
    "malformed_arguments": _("The model's arguments are not a JSON object."),
    "too_many": _("The model proposed more calls at once than allowed; these were not offered to you."),
    "server_gone": _("The server is no longer available to you."),
    "start_refused": _("The call could not be started."),
}


def message(code: str) -> str:
    return str(MESSAGES.get(code, MESSAGES["provider_error"]))
