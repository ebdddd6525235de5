"""``manage.py mrtr_client URL ...``: the headless MCP client (the browser's code path, scripted consent).

Runs ``tools/call``, ``prompts/get`` or ``resources/read`` against the MCP server at URL through
:mod:`mrtrweb.headless` (start_operation -> gate -> binding store -> audit -> answer_round), with
a scripted consent policy instead of a person. Examples::

    manage.py mrtr_client http://127.0.0.1:8765/mcp --list
    manage.py mrtr_client URL --tool deploy --args '{"env": "staging", "replicas": 2}' --consent accept-defaults
    manage.py mrtr_client URL --prompt release_notes --args '{"version": "1.2"}' --consent decline --json
    manage.py mrtr_client URL --resource 'demo://reports/ops' --consent answers:answers.json
    manage.py mrtr_client URL --each --consent accept-defaults   # every tool, prompt and resource once

Who runs it: ``--user``/``--tenant`` (an existing member of an existing tenant), by default the
dedicated user ``mrtr-headless`` in the tenant ``headless``, created on first use.

Exit codes (several operations: the first non-zero one, in order):

==  =====================================================================================
0   every operation completed (whatever the consent answers were: a declined round
    completes when the server answers the decline)
1   nothing was run: bad options, unreachable server for ``--list``/``--each``, not a
    member, a limit reached (``CommandError``); or the database, the round store or Redis
    could not be reached (one line naming it, no traceback; what was run stops there); 2 is
    argparse's usage error
3   failed (transport or JSON-RPC error, a round refused by the gate, malformed result)
4   denied (a deny condition, a sampling/roots request the policy refused, an answer the
    gate refused)
5   expired (the round's binding expired)
6   interrupted (the worker stopped)
7   timeout (``--timeout`` passed; the operation was stopped)
8   completed, but the tool's result says ``isError: true``
9   ``accept-defaults`` answered a round ``cancel``: a form had a required field without a
    (valid) default; the fields are named (``KEY.FIELD``) on the outcome's line and in the
    JSON's ``missing_defaults``, and the operation completed with the server's answer to the
    cancel (a failed, denied... operation keeps its own code)
10  not run: the tool is listed with ``execution.taskSupport: "required"`` (it runs only as a
    task, which this client does not run yet; a plain call would be refused): nothing was sent
11  not run: the tool is for its MCP App alone (``_meta.ui.visibility: ["app"]``, issue 31): it
    is no person's call, nor this client's; nothing was sent. ``--list`` and ``--each`` leave
    such tools out.
==  =====================================================================================

``--conformance`` is for the official MCP conformance suite
(``@modelcontextprotocol/conformance client --command``): it reads the scenario name from
``MCP_CONFORMANCE_SCENARIO`` and runs that scenario's plan (:func:`mrtrweb.headless.conformance.plan_for`;
by default the same as ``--each``) on a fresh server row configured for the scenario (:mod:`mrtrweb.headless.conformance`:
auth mode, pre-registered client, CIMD URL, loopback http). When the server asks for
authorization it connects without a person (:mod:`mrtrweb.headless.auth`: the browser's
start/finish code path, the authorization URL followed up to its redirect) and runs the step
again, at most twice per step. Without ``--conformance`` only the user's stored credentials are
used: an operation that needs a connection fails ``authorization_required`` (exit 3).

Never printed or logged: answer values, ``requestState`` (the audit trail keeps digests).
A failed (denied, expired...) operation's line is followed by what its operation page says
(``HeadlessOutcome.error_message``: for a JSON-RPC error the server's code and message, cleaned
and cut as the page shows them; in ``--json`` as ``error_message``).
Server text (names, descriptions, results, error messages) is printed with its control, escape and bidi
characters made visible as ``⟨U+001B⟩`` (:mod:`mrtrweb.text.display`), and written as ``\\uXXXX``
escapes in ``--json`` output: a server cannot move the cursor, recolour or rewrite the terminal.

``--list`` is bounded like the server page: at most ``names.MAX_LISTED_SHOWN`` items of each kind
(then how many were left out), each name cut to ``results.MAX_LABEL_CHARS`` characters and each
description (its first line, in text) to ``results.LISTED_DESCRIPTION_CHARS``, a cut marked. In
``--json`` names stay whole (they are what is called), descriptions are cut the same way, and
``notShown`` counts the items left out of each kind.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from mrtrweb.headless import conformance, client as headless, auth as headless_auth
from mrtrweb.headless.arguments import prompt_arguments, synthesize_arguments  # noqa: F401 -- synthesize_arguments: this command's API too
from mrtrweb.runtime import outage
from mrtrweb.servers import connections
from mrtrweb.text import display, names, results
from mrtrweb import operations
from mrtrweb.mcp import McpCallError
from mrtrweb.mcpapps import meta as app_meta
from mrtrweb.models import Membership, Operation, Tenant
from mrtrweb.operations.tasks import TASK_REQUIRED_MESSAGE

logger = logging.getLogger("mrtrweb.headless")

#: the line boundaries of ``str.splitlines``
_LINE_BREAK = re.compile("[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")

#: what ``app_only`` (exit 11) says
APP_ONLY_MESSAGE = "This tool is for its MCP App alone (its visibility leaves out the model): not called."

DEFAULT_USER = "mrtr-headless"
DEFAULT_TENANT = "headless"

EXIT_CODES = {
    Operation.Status.COMPLETED: 0,
    Operation.Status.FAILED: 3,
    Operation.Status.DENIED: 4,
    Operation.Status.EXPIRED: 5,
    Operation.Status.INTERRUPTED: 6,
    headless.TIMEOUT: 7,
    headless.TASK_REQUIRED: 10,
    headless.APP_ONLY: 11,
}
EXIT_TOOL_ERROR = 8
EXIT_MISSING_DEFAULTS = 9


def _unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says a service mrtrweb needs cannot be reached (not a bug, not a server's error)."""
    from django.db import InterfaceError, OperationalError

    what = outage.kind(exc)
    return what not in (None, "network") and (what != "database" or isinstance(exc, (OperationalError, InterfaceError)))


def exit_code(outcome: headless.HeadlessOutcome) -> int:
    """The process exit code of one outcome (see the module docstring)."""
    code = EXIT_CODES.get(outcome.status, 3)
    if code == 0 and outcome.missing_defaults:
        return EXIT_MISSING_DEFAULTS
    if code == 0 and isinstance(outcome.result, dict) and outcome.result.get("isError") is True:
        return EXIT_TOOL_ERROR
    return code


# -- Plans: which operations one invocation runs ---------------------------------------------


async def _connection(user: Any, tenant: Any, url: str):
    server = await sync_to_async(headless.server_for)(url, tenant)
    return await connections.connection_for(user, server)


async def _optional_listing(fetch) -> list[dict[str, Any]]:
    try:
        return await fetch()
    except McpCallError as exc:
        if exc.code == "jsonrpc_error":  # the server has no such capability
            return []
        raise


async def plan_each(user: Any, tenant: Any, url: str) -> list[tuple[str, dict[str, Any]]]:
    """Every listed tool (arguments from its input schema), prompt and resource, once; only what
    the server declares (its ``tools`` / ``prompts`` / ``resources`` capabilities)."""
    conn = await _connection(user, tenant, url)
    caps = conn.server_capabilities or {}
    ops: list[tuple[str, dict[str, Any]]] = []
    if "tools" in caps:
        for tool in await conn.list_tools():
            if isinstance(tool.get("name"), str) and not app_meta.app_only(tool):  # an app's alone: not ours
                ops.append(("tools/call", {"name": tool["name"],
                                           "arguments": synthesize_arguments(tool.get("inputSchema"))}))
    if "prompts" in caps:
        for prompt in await _optional_listing(conn.list_prompts):
            if isinstance(prompt.get("name"), str):
                ops.append(("prompts/get", {"name": prompt["name"], "arguments": prompt_arguments(prompt)}))
    if "resources" in caps:
        for resource in await _optional_listing(conn.list_resources):
            if isinstance(resource.get("uri"), str):
                ops.append(("resources/read", {"uri": resource["uri"]}))
    return ops


class Command(BaseCommand):
    help = ("Headless MCP client: run tools/call, prompts/get or resources/read through the browser's code path "
            "(gate, binding store, audit) with a scripted consent policy.")

    def add_arguments(self, parser):
        parser.add_argument("url", help="the MCP server's Streamable HTTP URL")
        what = parser.add_mutually_exclusive_group(required=True)
        what.add_argument("--tool", metavar="NAME", help="call this tool (tools/call)")
        what.add_argument("--prompt", metavar="NAME", help="get this prompt (prompts/get)")
        what.add_argument("--resource", metavar="URI", help="read this resource (resources/read)")
        what.add_argument("--list", action="store_true", help="list the tools, prompts, resources and resource templates")
        what.add_argument("--each", action="store_true",
                          help="call every tool, get every prompt and read every resource once "
                               "(arguments from their schemas)")
        what.add_argument("--conformance", action="store_true",
                          help="run the plan of the conformance scenario named in $MCP_CONFORMANCE_SCENARIO")
        parser.add_argument("--args", dest="arguments", metavar="JSON", default="{}",
                            help="arguments of the tool or prompt, a JSON object (default {})")
        parser.add_argument("--consent", metavar="POLICY", default=headless.DECLINE,
                            help="accept-defaults, decline (default), cancel or answers:FILE.json")
        parser.add_argument("--url-done", action="store_true",
                            help="with accept-defaults or answers:FILE: accept URL-mode requests as completed "
                                 "(default: decline them; refused with decline/cancel)")
        parser.add_argument("--user", metavar="USERNAME", help=f"run as this user (default {DEFAULT_USER}, created)")
        parser.add_argument("--tenant", metavar="SLUG", help=f"in this tenant (default {DEFAULT_TENANT}, created)")
        parser.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                            help="per operation (default 60)")
        parser.add_argument("--json", action="store_true", help="print the outcomes as one JSON object")
        parser.add_argument("--migrate", action="store_true", help="apply the database migrations first")

    def handle(self, *args, **options):
        """:meth:`_handle`; a service that cannot be reached -- the database (its connection failed:
        ``OperationalError``, ``InterfaceError``), the round store, Redis -- ends it with one line
        naming it and exit status 1, never a traceback; logged with the error's first line. Any
        other error (a missing table, a constraint: no outage) goes on as it was."""
        try:
            return self._handle(options)
        except (CommandError, SystemExit):
            raise
        except Exception as exc:  # noqa: BLE001 -- only an outage is answered here
            if not _unreachable(exc):
                raise
            what = outage.kind(exc)
            logger.warning("mrtr_client stopped: %s unavailable (%s: %s)", what, exc.__class__.__name__,
                           (str(exc).splitlines() or [""])[0][:200])
            raise CommandError(f"{what} unavailable ({exc.__class__.__name__}): stopped, nothing more is sent; "
                               "run it again when it is back") from exc

    def _handle(self, options: dict[str, Any]) -> None:
        if options["migrate"]:
            call_command("migrate", interactive=False, verbosity=0)
        try:
            consent = headless.ConsentPolicy.parse(options["consent"], url_done=options["url_done"])
        except headless.HeadlessError as exc:
            raise CommandError(exc.message) from None
        try:
            arguments = json.loads(options["arguments"])
        except ValueError:
            raise CommandError("--args must be a JSON object") from None
        if not isinstance(arguments, dict):
            raise CommandError("--args must be a JSON object")
        user, tenant = self._identity(options["user"], options["tenant"])
        if options["conformance"]:
            conformance.apply_run_settings()
        try:
            code = asyncio.run(self._main(options, user, tenant, consent, arguments))
        except headless.HeadlessError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        except McpCallError as exc:
            raise CommandError(f"{exc.code}: {operations.failure_message(exc)}") from None
        except ValidationError as exc:
            raise CommandError(f"invalid URL: {'; '.join(exc.messages)}") from None
        if code:
            raise SystemExit(code)

    def _identity(self, username: str | None, slug: str | None) -> tuple[Any, Any]:
        User = get_user_model()
        if username is None and slug is None:
            user, _ = User.objects.get_or_create(username=DEFAULT_USER)
            tenant, _ = Tenant.objects.get_or_create(slug=DEFAULT_TENANT, defaults={"name": "Headless clients"})
            Membership.objects.get_or_create(tenant=tenant, user=user)
            return user, tenant
        try:
            user = User.objects.get(username=username or DEFAULT_USER)
            tenant = Tenant.objects.get(slug=slug or DEFAULT_TENANT)
        except (User.DoesNotExist, Tenant.DoesNotExist):
            raise CommandError("no such user or tenant") from None
        if not Membership.objects.filter(tenant=tenant, user=user).exists():
            raise CommandError("the user is not a member of the tenant")
        return user, tenant

    async def _main(self, options: dict[str, Any], user: Any, tenant: Any, consent: headless.ConsentPolicy,
                    arguments: dict[str, Any]) -> int:
        url = options["url"]

        async def step(run):  # --conformance follows the authorization URL; otherwise stored credentials only
            if not options["conformance"]:
                return await run()
            return await headless_auth.with_authorization(run, user=user, tenant=tenant, url=url)

        try:
            if options["list"]:
                await self._list(user, tenant, url, options["json"])
                return 0
            if options["tool"]:
                plan = [("tools/call", {"name": options["tool"], "arguments": arguments})]
            elif options["prompt"]:
                plan = [("prompts/get", {"name": options["prompt"], "arguments": arguments})]
            elif options["resource"]:
                plan = [("resources/read", {"uri": options["resource"]})]
            elif options["each"]:
                plan = await plan_each(user, tenant, url)
            else:
                scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
                await sync_to_async(conformance.prepare_server)(url, tenant, scenario, conformance.scenario_context())
                plan_of = conformance.plan_for(scenario, conformance.scenario_context()) or plan_each
                plan = await step(lambda: plan_of(user, tenant, url))
            outcomes = []
            for method, params in plan:
                outcome = await step(lambda m=method, p=params: headless.arun(
                    url=url, user=user, tenant=tenant, method=m, params=p, consent=consent, timeout_s=options["timeout"]))
                outcomes.append((method, params, outcome))
                if not options["json"]:
                    self._print_outcome(method, params, outcome)
        finally:
            await headless.close_connections()
        if options["json"]:
            self.stdout.write(display.json_text({"operations": [
                {"method": m, "name": headless.operation_name(m, p), "status": o.status, "rounds": o.rounds,
                 "operation_id": o.operation_id, "error_code": o.error_code,
                 "error_message": o.error_message, "result": o.result,
                 "missing_defaults": list(o.missing_defaults), "exit_code": exit_code(o)}
                for m, p, o in outcomes]}, indent=2))
        return next((c for c in (exit_code(o) for _, _, o in outcomes) if c), 0)

    async def _list(self, user: Any, tenant: Any, url: str, as_json: bool) -> None:
        conn = await _connection(user, tenant, url)
        caps = conn.server_capabilities or {}
        tools = await conn.list_tools() if "tools" in caps else []
        listing = {"tools": [t for t in tools if not app_meta.app_only(t)],  # an MCP App's alone: not offered
                   "resources": await _optional_listing(conn.list_resources) if "resources" in caps else [],
                   "prompts": await _optional_listing(conn.list_prompts) if "prompts" in caps else [],
                   "resourceTemplates": await _optional_listing(conn.list_resource_templates)
                   if "resources" in caps else []}
        # bounded like the server page (names.MAX_LISTED_SHOWN items of each kind, capped texts)
        not_shown = {kind: max(len(items) - names.MAX_LISTED_SHOWN, 0) for kind, items in listing.items()}
        listing = {kind: [dict(i) if isinstance(i, dict) else i for i in items[:names.MAX_LISTED_SHOWN]]
                   for kind, items in listing.items()}
        if as_json:
            for items in listing.values():
                results.cap_descriptions([i for i in items if isinstance(i, dict)], results.LISTED_DESCRIPTION_CHARS)
            self.stdout.write(display.json_text({**listing, "notShown": not_shown}, indent=2))
            return
        for kind, key in (("tools", "name"), ("prompts", "name"), ("resources", "uri"),
                          ("resourceTemplates", "uriTemplate")):
            self.stdout.write(f"{kind}:")
            for item in listing[kind]:
                item = item if isinstance(item, dict) else {}
                description = item.get("description") if isinstance(item.get("description"), str) else ""
                # its first line (as str.splitlines breaks), cut
                brk = _LINE_BREAK.search(description)
                first = results.shown_text(description[:brk.start()] if brk else description,
                                           results.LISTED_DESCRIPTION_CHARS)
                name = results.shown_text(str(item.get(key)), results.MAX_LABEL_CHARS)
                self.stdout.write(display.shown(f"  {name}  {first}".rstrip()))
            if not_shown[kind]:
                self.stdout.write(f"  ... {not_shown[kind]} more not shown (at most {names.MAX_LISTED_SHOWN})")

    def _print_outcome(self, method: str, params: dict[str, Any], outcome: headless.HeadlessOutcome) -> None:
        name = headless.operation_name(method, params)
        if outcome.status in (headless.TASK_REQUIRED, headless.APP_ONLY):  # not run: no operation, nothing sent
            self.stdout.write(f"{method} {display.shown(name)}: {outcome.status} (not run)")
            self.stdout.write(f"  {TASK_REQUIRED_MESSAGE if outcome.status == headless.TASK_REQUIRED else APP_ONLY_MESSAGE}")
            return
        line = f"{method} {display.shown(name)}: {outcome.status} after {outcome.rounds} round(s) (operation {outcome.operation_id})"
        if outcome.error_code:
            line += f" [{display.shown(outcome.error_code)}]"
        self.stdout.write(line)
        if outcome.error_message:  # what the operation page says (the server's words cleaned, bounded)
            self.stdout.write("  " + display.shown(outcome.error_message))
        if outcome.missing_defaults:
            self.stdout.write("  accept-defaults answered cancel: required field(s) without a default: "
                              + ", ".join(outcome.missing_defaults))
        result = outcome.result if isinstance(outcome.result, dict) else {}
        items = result.get("content") or [m.get("content") for m in result.get("messages", []) if isinstance(m, dict)] \
            or result.get("contents") or []
        for item in items:
            if isinstance(item, dict) and isinstance(item.get("text"), str):
                self.stdout.write("  " + display.shown_text(item["text"]))
