from django.contrib import admin

from .jsonfields import bounded_json_overrides
from .models import AuditEvent, McpServer, Membership, Operation, Tenant


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "created_at")
    prepopulated_fields = {"slug": ("name",)}
    inlines = [MembershipInline]


@admin.register(McpServer)
class McpServerAdmin(admin.ModelAdmin):
    list_display = ("name", "tenant", "url", "verified_origin", "enabled", "allow_sampling", "allow_roots")
    list_filter = ("tenant", "enabled", "allow_sampling", "allow_roots")
    search_fields = ("name", "url")
    formfield_overrides = bounded_json_overrides()  # roots: bad JSON of any depth is a form error

    @admin.display(description="verified origin")
    def verified_origin(self, obj: McpServer) -> str:
        try:
            return obj.origin
        except ValueError:
            return "(invalid URL)"


@admin.register(Operation)
class OperationAdmin(admin.ModelAdmin):
    list_display = ("id", "method", "name", "user", "tenant", "status", "rounds", "created_at")
    list_filter = ("status", "method", "tenant")
    readonly_fields = [f.name for f in Operation._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """Read-only: audit events are append-only."""

    list_display = ("created_at", "event", "code", "operation_id", "round_number", "method", "name", "tenant")
    list_filter = ("event", "code", "tenant", "method")
    readonly_fields = [f.name for f in AuditEvent._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
