from django.apps import AppConfig


class OrgsConfig(AppConfig):
    """The portal's organisations app."""

    name = "tests.embed_orgs.orgs"
    label = "orgs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import tenancy

        tenancy.connect_signals()
