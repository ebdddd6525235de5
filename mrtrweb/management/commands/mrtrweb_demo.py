"""``manage.py mrtrweb_demo [--port N]``: the whole product on embedded defaults.

Migrates SQLite, creates two tenants with users (printed), starts the demo MCP server and the
legacy (2025-11-25) demo server on loopback, points each tenant's "Demo server" and "Demo (legacy
2025-11-25)" at them, and serves the ASGI app (HTTP + WebSockets) on 127.0.0.1:N until interrupted.
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
DEMO_SERVER = "Demo server"
LEGACY_SERVER = "Demo (legacy 2025-11-25)"


def _demo_server(tenant: Tenant, name: str, url: str) -> McpServer:
    server, _ = McpServer.objects.get_or_create(tenant=tenant, name=name, defaults={"url": url})
    if server.url != url or not server.enabled:
        server.url, server.enabled = url, True
        server.save()
    return server


def seed_demo(mcp_url: str, legacy_url: str | None = None) -> list[tuple[str, str, str]]:
    """Create (or refresh) the demo tenants, users and servers (with ``legacy_url``, also the
    legacy 2025-11-25 demo server in each tenant). Returns (user, password, tenant)."""
    User = get_user_model()
    out = []
    with transaction.atomic():
        tenants = {}
        for slug, name in DEMO_TENANTS:
            tenants[slug], _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": name})
            _demo_server(tenants[slug], DEMO_SERVER, mcp_url)
            if legacy_url:
                _demo_server(tenants[slug], LEGACY_SERVER, legacy_url)
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
        parser.add_argument("--legacy-port", type=int, default=0,
                            help="port of the legacy (2025-11-25) demo MCP server (default: any free)")
        parser.add_argument("--no-serve", action="store_true", help="set up and exit (for checks)")
        parser.add_argument("--seed-only", metavar="MCP_URL",
                            help="only create the demo tenants, users and servers pointing at MCP_URL, then exit "
                                 "(for a production-like deployment against another demo server)")
        parser.add_argument("--seed-legacy", metavar="LEGACY_URL",
                            help="with --seed-only: also seed the legacy (2025-11-25) demo server at LEGACY_URL")

    def handle(self, *args, **options):
        from mrtrweb.demo.legacy import serve_legacy_in_thread
        from mrtrweb.demo.server import serve_in_thread

        call_command("migrate", interactive=False, verbosity=0)
        if options["seed_only"]:
            for username, password, tenant in seed_demo(options["seed_only"], options.get("seed_legacy")):
                self.stdout.write(f"  user {username:6} password {password:15} tenant {tenant}")
            return
        mcp = serve_in_thread(host="127.0.0.1", port=options["mcp_port"])
        legacy = serve_legacy_in_thread(host="127.0.0.1", port=options["legacy_port"])
        self.stdout.write(f"Demo MCP server (Streamable HTTP): {mcp.url}")
        self.stdout.write(f"Legacy demo MCP server (2025-11-25, elicitation during the call): {legacy.url}")
        for username, password, tenant in seed_demo(mcp.url, legacy.url):
            self.stdout.write(f"  user {username:6} password {password:15} tenant {tenant}")
        url = f"http://127.0.0.1:{options['port']}/"
        if options["no_serve"]:
            mcp.stop()
            legacy.stop()
            return
        self.stdout.write(self.style.SUCCESS(f"mrtrweb demo: open {url} and sign in (Ctrl-C stops)"))
        import uvicorn

        try:
            # proxy_headers off: no proxy in front, so a client's X-Forwarded-For is not its address
            # (it would dodge the sign-in throttling, which counts per user name and address)
            uvicorn.run("mrtrweb.site.asgi:application", host="127.0.0.1", port=options["port"],
                        ws="websockets-sansio", lifespan="off", log_level="info", proxy_headers=False)
        finally:
            mcp.stop()
            legacy.stop()
