"""The forms of the servers pages (issue 29): a server's name, URL and protocol; a server.json
import; the authorization of a personal server.

:class:`ServerForm` (a ``ModelForm`` of :class:`~mrtrweb.models.McpServer`: ``name``, ``url``,
``protocol``), bound to the tenant and (for a personal server) its owner: the name unique among
the tenant's servers, or among the owner's own; a new URL, or a changed one, must pass the
deployer's URL policy (:func:`mrtrweb.serverconfig.policy.validate_url`; its sentence is the
error, code ``url_policy_<why>``), and the server is then marked ``url_policy`` (checked again at every connection).
:class:`RegistryImportForm`: a ``server.json`` pasted or uploaded (:mod:`.registry`).
:class:`PersonalAuthForm`: :class:`mrtrweb.authz.forms.ServerAuthForm` for a person's own server
(none, OAuth per user, or a bearer token / headers of their own; sealed and write-only the same way).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from ..authz.forms import ServerAuthForm
from ..mcp import origin_of
from ..models import McpServer
from . import registry


def check_url(url: str) -> None:
    """The deployer's URL policy for ``url`` (sync: it may resolve the host name).

    Raises:
        forms.ValidationError: ``url_policy_<code>`` (:func:`mrtrweb.serverconfig.policy.validate_url`),
            the sentence saying why.
    """
    from . import policy

    policy.validate_url(url)


class ServerForm(forms.ModelForm):
    """See the module doc. ``tenant`` and ``owner`` (a user or None) place a new server."""

    class Meta:
        model = McpServer
        fields = ["name", "url", "protocol"]

    url = forms.URLField(label=_("Streamable HTTP URL"), max_length=500, assume_scheme="https",
                         help_text=_("The server's Streamable HTTP endpoint (e.g. https://mcp.example.com/mcp)."))

    def __init__(self, *args: Any, tenant: Any, owner: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is None:
            self.instance.tenant, self.instance.owner = tenant, owner
        self.fields["url"].widget.attrs.update({"autocomplete": "off", "spellcheck": "false", "size": 60})
        self.fields["name"].widget.attrs.update({"autocomplete": "off"})

    def clean_name(self) -> str:
        name = (self.cleaned_data.get("name") or "").strip()
        if not name:
            raise forms.ValidationError(_("Enter a name."), code="required")
        server = self.instance
        same = McpServer.objects.filter(tenant_id=server.tenant_id, name=name).exclude(pk=server.pk)
        same = same.filter(owner_id=server.owner_id) if server.owner_id else same.filter(owner__isnull=True)
        if same.exists():
            raise forms.ValidationError(_("A server with this name exists already here."), code="duplicate_name")
        return name

    def clean_url(self) -> str:
        url = (self.cleaned_data.get("url") or "").strip()
        if url and (self.instance.pk is None or url != self.initial.get("url")):
            check_url(url)
            self._check_not_disabled_by_admin(url)
        return url

    def _check_not_disabled_by_admin(self, url: str) -> None:
        """A personal server may not be added or re-pointed to the origin of one of its owner's
        servers a tenant admin disabled (the admin's disable would be undone by a copy)."""
        server = self.instance
        if server.owner_id is None:
            return
        try:
            origin = origin_of(url)
        except ValueError:
            return  # the URL's own checks say why
        disabled = McpServer.objects.filter(tenant_id=server.tenant_id, owner_id=server.owner_id,
                                            disabled_by_admin=True).exclude(pk=server.pk).values_list("url", flat=True)
        for other in disabled:
            try:
                same = origin_of(other) == origin
            except ValueError:
                same = False
            if same:
                raise forms.ValidationError(_("A tenant admin disabled your server at this address; ask them to "
                                              "enable it again."), code="disabled_by_admin")

    @property
    def url_changed(self) -> bool:
        return self.instance.pk is None or "url" in self.changed_data

    def save(self, commit: bool = True) -> McpServer:
        server = super().save(commit=False)
        if self.url_changed:
            server.url_policy = True  # added or re-pointed from the product's pages: the policy holds
        if commit:
            server.save()
        return server


class RegistryImportForm(forms.Form):
    """A server.json pasted (``server_json``) or uploaded (``server_json_file``); ``cleaned_data
    ["imported"]`` is the :class:`.registry.Imported`."""

    server_json = forms.CharField(label=_("Paste a server.json"), required=False, max_length=registry.MAX_BYTES,
                                  widget=forms.Textarea(attrs={"rows": 6, "cols": 70, "spellcheck": "false"}))
    server_json_file = forms.FileField(label=_("or upload one"), required=False)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        upload = cleaned.get("server_json_file")
        text: str | bytes = cleaned.get("server_json") or ""
        if upload is not None:
            if upload.size is not None and upload.size > registry.MAX_BYTES:
                raise forms.ValidationError(_("A server.json may be at most %(max)s bytes."), code="too_large",
                                            params={"max": registry.MAX_BYTES})
            text = upload.read(registry.MAX_BYTES + 1)
        if not text:
            raise forms.ValidationError(_("Paste a server.json or choose a file."), code="required")
        try:
            cleaned["imported"] = registry.parse(text)
        except registry.RegistryError as exc:
            raise forms.ValidationError(exc.message, code=exc.code) from None
        return cleaned


class PersonalAuthForm(ServerAuthForm):
    """:class:`ServerAuthForm` for a personal server: no client credentials (a machine identity is
    the tenant's business); "tenant credentials" are the person's own bearer token or headers."""

    MODES = ("none", "oauth_user", "tenant")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        labels = {"none": _("None"), "oauth_user": _("OAuth (you connect your own account)"),
                  "tenant": _("A bearer token or headers of your own")}
        self.fields["auth_mode"].choices = [(m, labels[m]) for m in self.MODES]
        self.fields["bearer_token"].label = _("Your bearer token")
        self.fields["bearer_token"].help_text = _("Sent as “Authorization: Bearer …” to this server's origin only, "
                                                  "for you alone. Write-only: leave empty to keep the stored one.")
        self.fields["headers"].label = _("Your headers")
        self.fields["headers"].help_text = _("Instead of a bearer token: one “Name: value” per line, sent to this "
                                             "server's origin only. Write-only: leave empty to keep the stored ones.")

    def clean_auth_mode(self) -> str:
        mode = self.cleaned_data.get("auth_mode")
        if mode not in self.MODES:
            raise forms.ValidationError(_("Choose one of the modes offered."), code="invalid_choice")
        return mode
