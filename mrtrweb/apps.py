from django.apps import AppConfig


class MrtrwebConfig(AppConfig):
    """The mrtrweb Django app: per-user MCP sessions, gated input rounds, consent, audit."""

    name = "mrtrweb"
    verbose_name = "MCP consent gateway"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401 -- registers the system checks
        from .operations import expiry
        from .runtime import workers
        from .operations import reap_interrupted
        from .operations.revocation import connect_signals
        from .operations.untracked import check_own
        from .runtime.logsafe import hold_sdk_wire_loggers
        from .live.sessions import connect_signals as connect_session_signals
        from .tenancy.sync import connect_signals as connect_tenancy_signals
        from .serverconfig.events import connect_signals as connect_config_signals

        hold_sdk_wire_loggers()  # the SDK's DEBUG lines carry requestState and answers
        connect_signals()  # access that ends (membership, user, server, tenant) ends pending operations
        workers.register_duty("reaper", reap_interrupted)  # every heartbeat period, in this order
        workers.register_duty("expiry sweep", expiry.sweep)
        workers.register_duty("untracked check", check_own)  # this worker's operations nothing follows
        connect_session_signals()  # a session that ends (sign-out, password change) closes its sockets
        connect_tenancy_signals()  # a sign-in syncs the portal's organisations (MRTRWEB TENANT_RESOLVER)
        connect_config_signals()  # a personal server deleted with its owner's account is an audit event
