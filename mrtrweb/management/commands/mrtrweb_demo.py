"""``manage.py mrtrweb_demo [--port N]``: the whole product on embedded defaults.

Migrates SQLite, creates two tenants with users (printed), starts the demo MCP server, the
legacy (2025-11-25) demo server and the protected demo server with its own OAuth authorization
server (:mod:`mrtrweb.demo.protected`) on loopback, points each tenant's "Demo server", "Demo
(legacy 2025-11-25)" and "Demo (OAuth per user)" (auth mode OAuth per user) at them, and serves the
ASGI app (HTTP + WebSockets) on 127.0.0.1:N until interrupted.

The ports asked for (``--port`` and any non-zero ``--mcp-port``, ``--legacy-port``,
``--protected-port``, ``--oauth-port``) are checked before anything changes (:func:`taken_ports`): a
second demo on a taken port stops with a :class:`CommandError` naming them, the database untouched.

The run turns on ``MRTRWEB["OUTBOUND_ALLOW_HTTP_LOOPBACK"]`` in its own process (the demo's
authorization server is plain http on loopback): development only, said in the banner.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import socket
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from mrtrweb.demo.options import DESCRIPTION, add_options
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
PROTECTED_SERVER = "Demo (OAuth per user)"
LOOPBACK_NOTE = ("OUTBOUND_ALLOW_HTTP_LOOPBACK is on for this demo run: plain-http authorization servers on "
                 "loopback are allowed (development only; never in production)")


def _demo_server(tenant: Tenant, name: str, url: str, auth_mode: str | None = None) -> McpServer:
    """The tenant's server ``name`` at ``url``, enabled (and in ``auth_mode`` when given)."""
    mode = auth_mode or McpServer.AuthMode.NONE
    server, _ = McpServer.objects.get_or_create(tenant=tenant, name=name, owner=None, defaults={"url": url, "auth_mode": mode})
    if server.url != url or not server.enabled or (auth_mode and server.auth_mode != auth_mode):
        server.url, server.enabled, server.auth_mode = url, True, auth_mode or server.auth_mode
        server.save()
    return server


def _forget_oauth(server: McpServer) -> None:
    """The demo authorization server keeps clients and tokens in memory: what an earlier run
    registered or connected at it is gone, so the product's rows for it are deleted too."""
    from mrtrweb.authz.models import OAuthClientRegistration, OAuthConnection, PendingAuthorization

    OAuthConnection.objects.filter(server=server).delete()
    OAuthClientRegistration.objects.filter(server=server).delete()
    PendingAuthorization.objects.filter(server=server).delete()


def taken_ports(ports: dict[str, int], host: str = "127.0.0.1") -> list[tuple[str, int, str]]:
    """The ports of ``ports`` (option name -> port; 0: any free one, not checked) that cannot be
    bound on ``host`` now, as ``(option, port, reason)``: checked by binding each (as uvicorn binds,
    ``SO_REUSEADDR``) and closing it at once, before the demo changes anything."""
    taken = []
    for option, port in ports.items():
        if not port:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError as exc:
                reason = "in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
                taken.append((option, port, reason))
    return taken


def seed_demo(mcp_url: str, legacy_url: str | None = None, protected_url: str | None = None, *,
              apps: bool = False) -> list[tuple[str, str, str]]:
    """Create (or refresh) the demo tenants, users and servers (with ``legacy_url``, also the
    legacy 2025-11-25 demo server in each tenant; with ``protected_url``, the protected demo server
    in mode OAuth per user, its earlier registrations and connections deleted; with ``apps``, MCP
    Apps turned on for each tenant's "Demo server", whose ``service_status`` has an app). Returns
    (user, password, tenant)."""
    User = get_user_model()
    out = []
    with transaction.atomic():
        tenants = {}
        for slug, name in DEMO_TENANTS:
            tenants[slug], _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": name})
            demo = _demo_server(tenants[slug], DEMO_SERVER, mcp_url)
            if apps and not demo.apps_enabled:
                demo.apps_enabled = True
                demo.save(update_fields=["apps_enabled", "updated_at"])
            if legacy_url:
                _demo_server(tenants[slug], LEGACY_SERVER, legacy_url)
            if protected_url:
                _forget_oauth(_demo_server(tenants[slug], PROTECTED_SERVER, protected_url, McpServer.AuthMode.OAUTH_USER))
        for username, password, slug, role in DEMO_USERS:
            user, _ = User.objects.get_or_create(username=username)
            user.set_password(password)
            user.save()
            Membership.objects.update_or_create(tenant=tenants[slug], user=user, defaults={"role": role})
            label = f"{tenants[slug].name} (slug {slug}{', tenant admin' if role == Membership.Role.ADMIN else ''})"
            out.append((username, password, label))
        admin, _ = User.objects.get_or_create(username="admin", defaults={"is_staff": True, "is_superuser": True})
        admin.is_staff = admin.is_superuser = True
        admin.set_password("admin-demo-pw")
        admin.save()
        out.append(("admin", "admin-demo-pw", "none (the superuser, for /admin/)"))
    return out


@dataclasses.dataclass
class DemoServers:
    """The demo's MCP servers, running: ``mcp``, ``legacy`` (2025-11-25), ``protected`` (OAuth per
    user, with its authorization server: ``protected.as_url``)."""

    mcp: Any
    legacy: Any
    protected: Any

    def stop(self) -> None:
        for handle in (self.mcp, self.legacy, self.protected):
            handle.stop()


def start_servers(*, mcp_port: int = 0, legacy_port: int = 0, protected_port: int = 0,
                  oauth_port: int = 0) -> DemoServers:
    """Start the three demo servers on 127.0.0.1 (0: any free port), each in a daemon thread.

    Raises:
        RuntimeError: a server did not start in time. OSError: a port could not be bound.
    """
    from mrtrweb.demo.legacy import serve_legacy_in_thread
    from mrtrweb.demo.protected import serve_protected_demo
    from mrtrweb.demo.server import serve_in_thread

    started: list[Any] = []
    try:
        started.append(serve_in_thread(host="127.0.0.1", port=mcp_port))
        started.append(serve_legacy_in_thread(host="127.0.0.1", port=legacy_port))
        started.append(serve_protected_demo(host="127.0.0.1", port=protected_port, as_port=oauth_port))
    except BaseException:
        for handle in started:
            handle.stop()
        raise
    return DemoServers(*started)


def port_message(taken: list[tuple[str, int, str]]) -> str:
    """What the person reads when ports are taken (nothing was changed)."""
    ports = ", ".join(f"{port} ({option}: {reason})" for option, port, reason in taken)
    hint = " ".join(f"{option} N" for option, _port, _reason in taken)
    which = "ports" if len(taken) > 1 else "port"
    return (f"the demo cannot start: 127.0.0.1 {which} {ports} cannot be bound; is another demo (or another "
            f"program) running there? Nothing was changed: the database and the demo servers are as they were. "
            f"Stop the other one, or pick a free port: ./dev demo {hint}")


def allow_http_loopback() -> None:
    """Turn on ``MRTRWEB["OUTBOUND_ALLOW_HTTP_LOOPBACK"]`` for this process (development only: the
    demo's authorization server is plain http on loopback)."""
    from django.conf import settings

    settings.MRTRWEB = {**(getattr(settings, "MRTRWEB", None) or {}), "OUTBOUND_ALLOW_HTTP_LOOPBACK": True}


def use_model(url: str, name: str) -> None:
    """``--model-url URL --model NAME``: a real OpenAI-compatible endpoint as the provider ``endpoint``
    of this process (its host allowed by ``MODEL_URL_POLICY``, plain http too: a development run),
    chosen for every demo tenant; its key, if it needs one, from ``$MRTRWEB_DEMO_MODEL_KEY``. A server's
    sampling request (where a tenant admin allows it) is then drafted by that model for the person to
    review (``SAMPLING_PROVIDER`` :class:`mrtrweb.chat.sampling.ModelDraftsReply`), unless the deployer
    set a sampling provider of their own."""
    import urllib.parse

    from django.conf import settings

    from mrtrweb.models import Tenant, TenantModel

    host = (urllib.parse.urlsplit(url).hostname or "").lower()
    settings.MRTRWEB = {**(getattr(settings, "MRTRWEB", None) or {}),
                        "MODEL_PROVIDERS": {"endpoint": {"kind": "openai", "base_url": url, "models": [name],
                                                         "label": "--model-url", "api_key_env": "MRTRWEB_DEMO_MODEL_KEY"}},
                        "MODEL_URL_POLICY": {"allow_hosts": [host], "allow_http_hosts": [host]}}
    if "SAMPLING_PROVIDER" not in settings.MRTRWEB or settings.MRTRWEB["SAMPLING_PROVIDER"] == \
            "mrtrweb.consent.sampling.PersonWritesReply":
        settings.MRTRWEB = {**settings.MRTRWEB, "SAMPLING_PROVIDER": "mrtrweb.chat.sampling.ModelDraftsReply"}
    for tenant in Tenant.objects.all():
        TenantModel.objects.update_or_create(tenant=tenant, defaults={"provider": "endpoint", "model": name})


class Command(BaseCommand):
    help = DESCRIPTION

    def add_arguments(self, parser):
        add_options(parser)  # mrtrweb.demo.options: also what ./dev demo --help prints before installing

    def handle(self, *args, **options):
        # the app's lines once, through the site's own handler (LOGGING): a library that configures
        # the root logger (basicConfig) would print each of them a second time
        for name in ("mrtrweb", "axes"):
            logging.getLogger(name).propagate = False
        # seeding sets the demo users' passwords: not news worth a line per user
        logging.getLogger("mrtrweb.sessions").setLevel(logging.WARNING)
        if not options["seed_only"]:
            # before anything changes (the database, the servers' URLs): a second demo on a taken
            # port must leave the running one alone
            taken = taken_ports({"--port": options["port"], "--mcp-port": options["mcp_port"],
                                 "--legacy-port": options["legacy_port"], "--protected-port": options["protected_port"],
                                 "--oauth-port": options["oauth_port"]})
            if taken:
                raise CommandError(port_message(taken))
        if options["model_url"] and not options["model"]:
            raise CommandError("--model-url needs --model NAME")
        call_command("migrate", interactive=False, verbosity=0)
        if options["seed_only"]:
            for username, password, tenant in seed_demo(options["seed_only"], options.get("seed_legacy"), apps=True):
                self.stdout.write(f"  user {username:6} password {password:15} tenant {tenant}")
            return
        allow_http_loopback()
        running = start_servers(mcp_port=options["mcp_port"], legacy_port=options["legacy_port"],
                                protected_port=options["protected_port"], oauth_port=options["oauth_port"])
        mcp, legacy, protected = running.mcp, running.legacy, running.protected
        self.stdout.write(f"Demo MCP server (Streamable HTTP): {mcp.url}")
        self.stdout.write(f"Legacy demo MCP server (2025-11-25, elicitation during the call): {legacy.url}")
        self.stdout.write(f"Protected demo MCP server (OAuth per user: Connect, then whoami / confirm_as_me): "
                          f"{protected.url}")
        self.stdout.write(f"  its demo OAuth authorization server (in memory; sign-in page, DCR, PKCE, refresh, "
                          f"revocation): {protected.as_url}")
        self.stdout.write(self.style.WARNING(LOOPBACK_NOTE))
        for username, password, tenant in seed_demo(mcp.url, legacy.url, protected.url, apps=True):
            self.stdout.write(f"  user {username:6} password {password:15} tenant {tenant}")
        if options["model_url"]:
            use_model(options["model_url"], options["model"])
            self.stdout.write(f"Chat: the model {options['model']} at {options['model_url']}")
        else:
            from mrtrweb.models import TenantModel

            TenantModel.objects.filter(provider="endpoint").delete()  # an earlier run's --model-url
            self.stdout.write("Chat: the scripted demo model (not a language model; --model-url URL --model NAME "
                              "for a real one)")
        logging.getLogger("mrtrweb.sessions").setLevel(logging.NOTSET)
        url = f"http://127.0.0.1:{options['port']}/"
        # MCP Apps' sandbox (docs/apps.md): the same server under another host name (never the site's:
        # cookies ignore ports), unless the deployer named one
        from django.conf import settings

        if not (getattr(settings, "MRTRWEB", None) or {}).get("APPS_SANDBOX_ORIGIN"):
            settings.MRTRWEB = {**(getattr(settings, "MRTRWEB", None) or {}),
                                "APPS_SANDBOX_ORIGIN": f"http://localhost:{options['port']}"}
        sandbox = settings.MRTRWEB["APPS_SANDBOX_ORIGIN"]
        self.stdout.write(f"MCP Apps: service_status on {DEMO_SERVER} shows the demo's app (sandbox {sandbox}; "
                          "docs/apps.md: adding a registry app)")
        if options["no_serve"]:
            running.stop()
            return
        self.stdout.write(self.style.SUCCESS(f"mrtrweb demo: open {url} and sign in (Ctrl-C stops)"))
        import uvicorn

        try:
            # proxy_headers off: no proxy in front, so a client's X-Forwarded-For is not its address
            # (it would dodge the sign-in throttling, which counts per user name and address)
            uvicorn.run("mrtrweb.site.asgi:application", host="127.0.0.1", port=options["port"],
                        ws="websockets-sansio", lifespan="off", log_level="info", proxy_headers=False)
        finally:
            running.stop()
