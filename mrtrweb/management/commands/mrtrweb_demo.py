"""``manage.py mrtrweb_demo [--port N]``: the whole product on embedded defaults.

Migrates SQLite, creates two tenants with users (printed), starts the demo MCP server on
loopback, points each tenant's "Demo server" at it, and serves the ASGI app (HTTP + WebSockets)
on 127.0.0.1:N until interrupted.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import transaction

from mrtrweb.models import McpServer, Membership, Tenant

DEMO_USERS = [
    # username, password, tenant slug, role
    ("alice", "alice-demo-pw", "acme", Membership.Role.ADMIN),
    ("carol", "carol-demo-pw", "acme", Membership.Role.MEMBER),
    ("bob", "bob-demo-pw", "globex", Membership.Role.ADMIN),
]
DEMO_TENANTS = [("acme", "Acme Corp"), ("globex", "Globex Inc")]


def seed_demo(mcp_url: str) -> list[tuple[str, str, str]]:
    """Create (or refresh) the demo tenants, users and servers. Returns (user, password, tenant)."""
    User = get_user_model()
    out = []
    with transaction.atomic():
        tenants = {}
        for slug, name in DEMO_TENANTS:
            tenants[slug], _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": name})
            server, _ = McpServer.objects.get_or_create(tenant=tenants[slug], name="Demo server",
                                                         defaults={"url": mcp_url})
            if server.url != mcp_url or not server.enabled:
                server.url, server.enabled = mcp_url, True
                server.save()
        for username, password, slug, role in DEMO_USERS:
            user, _ = User.objects.get_or_create(username=username)
            user.set_password(password)
            user.save()
            Membership.objects.update_or_create(tenant=tenants[slug], user=user, defaults={"role": role})
            out.append((username, password, tenants[slug].name))
        admin, _ = User.objects.get_or_create(username="admin", defaults={"is_staff": True, "is_superuser": True})
        admin.is_staff = admin.is_superuser = True
        admin.set_password("admin-demo-pw")
        admin.save()
        out.append(("admin", "admin-demo-pw", "(superuser: /admin/)"))
    return out


class Command(BaseCommand):
    help = "Run the mrtrweb demo: SQLite, in-process cache and channel layer, and the demo MCP server."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8000, help="HTTP port of the web app (default 8000)")
        parser.add_argument("--mcp-port", type=int, default=0, help="port of the demo MCP server (default: any free)")
        parser.add_argument("--no-serve", action="store_true", help="set up and exit (for checks)")
        parser.add_argument("--seed-only", metavar="MCP_URL",
                            help="only create the demo tenants, users and servers pointing at MCP_URL, then exit "
                                 "(for a production-like deployment against another demo server)")

    def handle(self, *args, **options):
        from mrtrweb.demo.server import serve_in_thread

        call_command("migrate", interactive=False, verbosity=0)
        if options["seed_only"]:
            for username, password, tenant in seed_demo(options["seed_only"]):
                self.stdout.write(f"  user {username:6} password {password:15} tenant {tenant}")
            return
        mcp = serve_in_thread(host="127.0.0.1", port=options["mcp_port"])
        self.stdout.write(f"Demo MCP server (Streamable HTTP): {mcp.url}")
        for username, password, tenant in seed_demo(mcp.url):
            self.stdout.write(f"  user {username:6} password {password:15} tenant {tenant}")
        url = f"http://127.0.0.1:{options['port']}/"
        if options["no_serve"]:
            mcp.stop()
            return
        self.stdout.write(self.style.SUCCESS(f"mrtrweb demo: open {url} and sign in (Ctrl-C stops)"))
        import uvicorn

        try:
            uvicorn.run("mrtrweb.site.asgi:application", host="127.0.0.1", port=options["port"],
                        ws="websockets-sansio", lifespan="off", log_level="info")
        finally:
            mcp.stop()
