"""The tenant history's filter form: user, server, tool, event, code, date range, page size.

Every choice is limited to the tenant; the form is bound to GET parameters (a filtered page is a
link an admin can keep), and a wrong value is a form error, never a page of unfiltered events.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import forms
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from ...text import display
from ...models import AuditEvent, McpServer, Membership, Tenant
from .rows import EVENT_LABELS
from .rows import user_digest

PER_PAGE = 50
#: the page sizes an admin may choose
PAGE_SIZES = (25, 50, 100, 200)
#: a person's own history: operations per page (each with all its rounds' events: 46 operations on
#: one page made it 10,781 px tall, issue 28)
OWN_OPERATIONS_PER_PAGE = 10
#: the parameters that narrow the selection (an export holds the same selection)
FILTER_PARAMS = ("user", "initiator", "server", "tool", "outcome", "code", "from", "to")
#: what the admin chose: the filters and the page size (kept across pages, exports and visits)
CHOICE_PARAMS = FILTER_PARAMS + ("per_page",)


class DateInput(forms.DateInput):
    input_type = "date"


class TenantHistoryForm(forms.Form):
    """Filters of the tenant history; every choice is limited to the tenant."""

    user = forms.ChoiceField(label=_("User"), required=False)
    initiator = forms.ChoiceField(label=_("Made by"), required=False,
                                  choices=[("", _("anyone")), ("person", _("a person")), ("app", _("an app")),
                                           ("model", _("a model"))],
                                  help_text=_("Who made the operation's call: the person, an app on their page, or a "
                                              "model whose proposal they approved."))
    server = forms.ModelChoiceField(label=_("Server"), queryset=McpServer.objects.none(), required=False,
                                    empty_label=_("any"))
    tool = forms.CharField(label=_("Tool"), required=False, max_length=500,
                           help_text=_("The exact tool or prompt name, or resource URI."))
    outcome = forms.ChoiceField(label=_("Event"), required=False,
                                choices=[("", _("any"))] + [(value, EVENT_LABELS.get(value, label))
                                                             for value, label in AuditEvent.Event.choices])
    code = forms.CharField(label=_("Code"), required=False, max_length=64)
    #: who made the call (issue 31/32): a person's own events have no initiator
    initiator = forms.ChoiceField(label=_("Initiator"), required=False,
                                  choices=[("", _("any")), ("person", _("Person")), ("app", _("MCP App")),
                                           ("model", _("Model"))])
    per_page = forms.TypedChoiceField(label=_("Per page"), required=False, coerce=int, empty_value=PER_PAGE,
                                      choices=[(str(n), str(n)) for n in PAGE_SIZES])

    def __init__(self, *args: Any, tenant: Tenant, **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        self.tenant = tenant
        self.members = dict(Membership.objects.filter(tenant=tenant).order_by("user__username")
                            .values_list("user__username", "user_id"))
        # names chosen by users and admins: shown with their control and bidi characters visible
        self.fields["user"].choices = [("", _("anyone"))] + [(name, display.shown(name)) for name in self.members]
        self.fields["server"].queryset = McpServer.objects.filter(tenant=tenant).order_by("name")
        self.fields["server"].label_from_instance = lambda server: display.shown(server.name)
        # "from" and "to" are Python keywords: declared here rather than as class attributes.
        self.fields["from"] = forms.DateField(label=_("From"), required=False, widget=DateInput,
                                              input_formats=["%Y-%m-%d"])
        self.fields["to"] = forms.DateField(label=_("To"), required=False, widget=DateInput,
                                            input_formats=["%Y-%m-%d"])
        self.order_fields(CHOICE_PARAMS)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        start, end = data.get("from"), data.get("to")
        if start and end and start > end:
            self.add_error("to", _("The end date is before the start date."))
        return data

    def filter(self, events: QuerySet) -> QuerySet:
        """``events`` narrowed by the (valid) filters."""
        data = self.cleaned_data
        if data.get("user"):
            events = events.filter(user_digest=user_digest(self.members[data["user"]]))
        if data.get("initiator") == "person":  # a person's own rows leave it empty
            events = events.filter(initiator__in=("", "person"))
        elif data.get("initiator"):
            events = events.filter(initiator=data["initiator"])
        if data.get("server") is not None:
            events = events.filter(server_id=str(data["server"].pk))
        if data.get("tool"):
            events = events.filter(name=data["tool"])
        if data.get("outcome"):
            events = events.filter(event=data["outcome"])
        if data.get("code"):
            events = events.filter(code=data["code"])
        if data.get("initiator"):
            events = events.filter(initiator="" if data["initiator"] == "person" else data["initiator"])
        tz = timezone.get_current_timezone()
        if data.get("from"):
            events = events.filter(created_at__gte=dt.datetime.combine(data["from"], dt.time.min, tzinfo=tz))
        if data.get("to"):
            end = data["to"] + dt.timedelta(days=1)
            events = events.filter(created_at__lt=dt.datetime.combine(end, dt.time.min, tzinfo=tz))
        return events
