from django.contrib import admin
from django.db import models, transaction
from django.utils.translation import gettext_lazy

from .text import display
from .authz.forms import ServerAuthForm
from .consent.jsonfields import bounded_json_overrides
from .models import (
    AuditEvent, McpServer, Membership, OAuthClientRegistration, OAuthConnection, Operation, Tenant,
)


def _shown_field(name: str, label: str):
    """A read-only admin column/field showing the model's text field ``name`` with its control and
    bidi characters made visible (:func:`mrtrweb.text.display.shown`; the admin escapes it): server,
    admin and user text must not reorder or hide what the admin reads."""

    @admin.display(description=label, ordering=name)
    def show(self, obj) -> str:
        return display.shown(getattr(obj, name))

    show.__name__ = f"shown_{name}"
    return show


def _shown_json_field(name: str, label: str):
    """A read-only admin field showing the model's JSON field ``name`` as :func:`mrtrweb.text.display.json_text`
    (control, bidi and invisible characters and lone surrogates as ``\\uXXXX`` escapes; the admin
    escapes it): Django's own display writes them raw, and a lone surrogate makes the page a 500."""

    @admin.display(description=label)
    def show(self, obj) -> str:
        value = getattr(obj, name)
        return "-" if value is None else display.json_text(value, indent=2)

    show.__name__ = f"shown_{name}"
    return show


def _readonly_shown(model, shown: tuple[str, ...]) -> list[str]:
    """Every field of ``model`` read-only, those in ``shown`` through their ``shown_<name>`` display."""
    return [f"shown_{f.name}" if f.name in shown else f.name for f in model._meta.fields]


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("shown_name", "slug", "external_key", "created_at")
    prepopulated_fields = {"slug": ("name",)}
    inlines = [MembershipInline]
    shown_name = _shown_field("name", "name")

    def save_model(self, request, obj, form, change) -> None:
        """Turning personal servers on or off here does what the servers page's switch does (the
        event; off: every personal server disabled, its waiting rounds ended)."""
        from .serverconfig import limits, views as serverconfig_views

        with transaction.atomic():
            was = limits.lock_tenant(obj.pk).allow_personal_servers if change else False
            super().save_model(request, obj, form, change)
            if was != obj.allow_personal_servers:
                serverconfig_views.personal_switch_saved(obj, request.user.pk)


class McpServerAdminForm(ServerAuthForm):
    """Every editable field of the server (the protocol setting too, with its choices and help
    text), with the authorization part of :class:`ServerAuthForm` (secrets write-only; the sealed
    columns are not editable and so never in the form)."""

    class Meta(ServerAuthForm.Meta):
        fields = "__all__"
        # as the admin's formfield_overrides do (the admin builds its own fields from this form)
        formfield_callback = staticmethod(
            lambda f, **kw: f.formfield(**({"assume_scheme": "https"} if isinstance(f, models.URLField) else {}), **kw))

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if "url" in self.fields:
            self.fields["url"].help_text = URL_POLICY_NOTE


#: the admin form's note on the URL: the superuser's servers are not under the deployer's URL policy
URL_POLICY_NOTE = gettext_lazy(
    "Servers added here are not restricted by the deployment's URL policy (MRTRWEB[\"SERVER_URL_POLICY\"]): "
    "any address may be used, private ones and plain http included. Servers that tenant admins and people add "
    "from the product's pages are restricted by it, and stay so when edited here (\"under the URL policy\").")


@admin.register(McpServer)
class McpServerAdmin(admin.ModelAdmin):
    form = McpServerAdminForm
    list_display = ("shown_name", "tenant", "shown_url", "verified_origin", "enabled", "protocol", "auth_mode",
                    "allow_sampling", "allow_roots", "under_url_policy")
    readonly_fields = ("under_url_policy",)
    list_filter = ("tenant", "enabled", "protocol", "auth_mode", "allow_sampling", "allow_roots")
    search_fields = ("name", "url")
    shown_name = _shown_field("name", "display name")
    shown_url = _shown_field("url", "Streamable HTTP URL")
    # roots: bad JSON of any depth is a form error; a URL typed without a scheme reads as https
    formfield_overrides = {**bounded_json_overrides(), models.URLField: {"assume_scheme": "https"}}

    # the superuser's changes are configuration events of the tenant's chain, as the pages' are
    # (issue 29, item 6), each in the transaction of its change

    def save_model(self, request, obj, form, change) -> None:
        from .serverconfig import events

        with transaction.atomic():
            was, old_owner = (McpServer.objects.filter(pk=obj.pk).values_list("tenant_id", "owner_id").first()
                              if change else None) or (None, None)
            new_secret = getattr(form, "new_secret", None)
            if old_owner is not None and old_owner != obj.owner_id and new_secret is None and obj.auth_secret_sealed:
                # a person's own token or headers are theirs: never used for whoever the server goes to
                obj.auth_secret_sealed, obj.auth_secret_digest, new_secret = "", "", {}
            if "enabled" in form.changed_data or not change:
                # disabled here: as by a tenant admin, its owner may not enable it again
                obj.disabled_by_admin = obj.owner_id is not None and not obj.enabled
            super().save_model(request, obj, form, change)
            if was is not None and was != obj.tenant_id:  # moved: removed from one chain, added to the other
                moved_from = McpServer(pk=obj.pk, tenant_id=was, owner_id=obj.owner_id, name=obj.name, url=obj.url)
                events.server_removed(moved_from, request.user.pk)
                events.server_added(obj, request.user.pk)
            else:
                events.admin_saved(obj, request.user.pk, not change, form.changed_data, new_secret)

    def delete_model(self, request, obj) -> None:
        from .serverconfig import events

        with transaction.atomic():
            events.server_removed(obj, request.user.pk)
            super().delete_model(request, obj)

    def delete_queryset(self, request, queryset) -> None:
        from .serverconfig import events

        with transaction.atomic():
            for server in queryset:
                events.server_removed(server, request.user.pk)
            super().delete_queryset(request, queryset)

    @admin.display(description=gettext_lazy("under the URL policy"), boolean=True)
    def under_url_policy(self, obj: McpServer) -> bool:
        """Whether the server was added under the deployer's URL policy (``McpServer.url_policy``)."""
        return bool(obj.url_policy)

    @admin.display(description="verified origin")
    def verified_origin(self, obj: McpServer) -> str:
        try:
            return display.shown(obj.origin)
        except ValueError:
            return "(invalid URL)"


#: text fields of operations and audit events that hold server text (tool names, messages, reasons)
_OPERATION_TEXT = ("name", "error_message", "params", "result", "server_log")
_AUDIT_TEXT = ("name", "reason", "server_origin", "schema_digests", "actions")


@admin.register(Operation)
class OperationAdmin(admin.ModelAdmin):
    list_display = ("id", "method", "shown_name", "user", "tenant", "status", "rounds", "created_at")
    list_filter = ("status", "method", "tenant")
    readonly_fields = _readonly_shown(Operation, _OPERATION_TEXT)
    exclude = _OPERATION_TEXT  # shown through shown_<name> only, never as a raw or editable field
    shown_name = _shown_field("name", "name")
    shown_error_message = _shown_field("error_message", "error message")
    shown_params = _shown_json_field("params", "params")
    shown_result = _shown_json_field("result", "result")
    shown_server_log = _shown_json_field("server_log", "server log")

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """Read-only: audit events are append-only."""

    list_display = ("created_at", "event", "code", "operation_id", "round_number", "method", "shown_name", "tenant")
    list_filter = ("event", "code", "tenant", "method")
    readonly_fields = _readonly_shown(AuditEvent, _AUDIT_TEXT)
    exclude = _AUDIT_TEXT
    shown_name = _shown_field("name", "name")
    shown_reason = _shown_field("reason", "reason")
    shown_server_origin = _shown_field("server_origin", "server origin")
    shown_schema_digests = _shown_json_field("schema_digests", "schema digests")
    shown_actions = _shown_json_field("actions", "actions")

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


#: the columns of authorization rows an admin may read (no token, secret, family or flow)
_CONNECTION_SHOWN = ("tenant", "user", "server", "shown_issuer", "shown_client_id", "shown_scope", "expires_at",
                     "created_at", "refreshed_at")


@admin.register(OAuthConnection)
class OAuthConnectionAdmin(admin.ModelAdmin):
    """Read-only, without tokens: an admin sees who connected where, never the tokens (sealed, and
    excluded here). Deleting a row disconnects the person locally (no revocation: use their
    Connections page for that)."""

    list_display = ("user", "server", "tenant", "shown_issuer", "expires_at", "created_at")
    list_filter = ("tenant",)
    fields = readonly_fields = _CONNECTION_SHOWN
    shown_issuer = _shown_field("issuer", "authorization server (issuer)")
    shown_scope = _shown_field("scope", "scopes")
    shown_client_id = _shown_field("client_id", "client id")

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(OAuthClientRegistration)
class OAuthClientRegistrationAdmin(admin.ModelAdmin):
    """Read-only, without the sealed client information (it may hold a client secret). Deleting a
    row makes the product register again at the next Connect."""

    list_display = ("server", "shown_issuer", "how", "shown_client_id", "created_at")
    fields = readonly_fields = ("server", "shown_issuer", "how", "shown_client_id", "created_at")
    shown_issuer = _shown_field("issuer", "authorization server (issuer)")
    shown_client_id = _shown_field("client_id", "client id")

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
