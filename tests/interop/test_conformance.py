"""The official MCP conformance suite (npm ``@modelcontextprotocol/conformance``) against the
headless client ``manage.py mrtr_client --conformance``.

For each client scenario the suite starts its own scenario server on loopback, runs our command
with the server URL appended (the scenario name in ``MCP_CONFORMANCE_SCENARIO``) and writes its
checks to ``<output>/<scenario>-<timestamp>/checks.json``. Every check must be SUCCESS or INFO;
SKIPPED only where listed in ``NOT_APPLICABLE`` (with the reason); never FAILURE or WARNING.

Node >= 22 and the suite are installed on first use under ``var/`` (tests/nodejs.py); without npm
the tests fail rather than skip. The database is migrated once (SQLite); every scenario then runs
on its own copy of it, :data:`PARALLEL` scenarios at a time (each is two processes mostly waiting
on loopback HTTP; SQLite takes one writer, so runs sharing a file would wait on each other).

The command is the real ``manage.py mrtr_client``; all but the :data:`REAL_PROCESS` scenarios
run it forked from one process that imported Django, the product and the SDK once
(``tests/forkserver.py``: ~1.7 s of CPU saved per scenario, ~110 s per suite run), the
:data:`REAL_PROCESS` ones as a process of its own, as a deployer starts it.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.nodejs import CONFORMANCE_SUITE, node22, node_env, npm_install

ROOT = Path(__file__).resolve().parents[2]
SUITE = CONFORMANCE_SUITE  # pinned in tests/nodejs.py (tests/peers.py installs it too)

SCENARIOS = [
    ("sep-2322-client-request-state", "2026-07-28"),
    ("tools_call", "2026-07-28"),
    ("request-metadata", "2026-07-28"),
    ("http-standard-headers", "2026-07-28"),
    ("http-custom-headers", "2026-07-28"),
    ("http-invalid-tool-headers", "2026-07-28"),
    ("json-schema-2020-12-preservation", "2026-07-28"),
    ("json-schema-2020-12-preservation", "2025-11-25"),
    ("json-schema-ref-no-deref", "2026-07-28"),
    ("elicitation-sep1034-client-defaults", "2025-11-25"),
    ("sse-retry", "2025-11-25"),
    ("initialize", "2025-11-25"),
    ("initialize", "2025-06-18"),
    ("tools_call", "2025-11-25"),
    ("tools_call", "2025-06-18"),
]

# The standard auth/* client scenarios (27) at every spec version `list` gives for each, and the
# client-credentials extension scenarios. What each one needs of the client (read from the suite's
# sources, dist/index.js; PRM = protected resource metadata, RFC 9728; AS = authorization server):
#
# | scenario                          | versions              | needs                                              |
# |-----------------------------------|-----------------------|----------------------------------------------------|
# | metadata-default                  | 2025-11-25 2026-07-28 | PRM from WWW-Authenticate resource_metadata (root PRM trapped); RFC 8414 at root; DCR; PKCE S256; resource = PRM's |
# | metadata-var1                     | 2025-11-25 2026-07-28 | PRM not in WWW-Authenticate: path-based well-known; AS via openid-configuration |
# | metadata-var2                     | 2025-11-25 2026-07-28 | PRM at the root well-known, resource without "/"; AS issuer with a path (/tenant1), path-aware RFC 8414 |
# | metadata-var3                     | 2025-11-25 2026-07-28 | PRM at a custom URL (WWW-Authenticate); OpenID path-appended (/tenant1/.well-known/openid-configuration) |
# | basic-cimd                        | 2025-11-25 2026-07-28 | CIMD: client_id = https://conformance-test.local/client-metadata.json, no DCR |
# | scope-from-www-authenticate       | 2025-11-25 2026-07-28 | scope from WWW-Authenticate                        |
# | scope-from-scopes-supported       | 2025-11-25 2026-07-28 | all of PRM scopes_supported when WWW-Authenticate has none |
# | scope-omitted-when-undefined      | 2025-11-25 2026-07-28 | no scope parameter                                 |
# | scope-step-up                     | 2025-11-25 2026-07-28 | 403 insufficient_scope on tools/call: re-authorize with the union (SEP-2350 at 2026) |
# | scope-retry-limit                 | 2025-11-25 2026-07-28 | 403 forever: at most 3 authorization requests (refused: client error allowed) |
# | token-endpoint-auth-basic/post/none | 2025-06-18 2025-11-25 2026-07-28 | the DCR response's token_endpoint_auth_method |
# | pre-registration                  | 2025-11-25 2026-07-28 | context client_id/secret (no registration endpoint), client_secret_basic |
# | 2025-03-26-oauth-metadata-backcompat | 2025-03-26         | back-compat: no PRM, RFC 8414 at the MCP server's origin |
# | 2025-03-26-oauth-endpoint-fallback | 2025-03-26           | back-compat: no metadata, /authorize /token /register at the origin |
# | resource-mismatch                 | 2026-07-28            | PRM resource of another origin: refuse before authorizing |
# | offline-access-scope              | 2026-07-28            | offline_access added when the AS lists it; refresh_token grant in client metadata (CIMD here) |
# | offline-access-not-supported      | 2026-07-28            | offline_access not added when the AS does not list it |
# | authorization-server-migration    | 2026-07-28            | 401 after the PRM names a new AS: rediscover, re-register, never reuse AS1's client id |
# | iss-supported / iss-not-advertised| 2026-07-28            | RFC 9207: proceed with a correct iss / with none when not advertised |
# | iss-supported-missing / -wrong-issuer / -unexpected / -normalized | 2026-07-28 | RFC 9207: refuse (no token request): missing though advertised, wrong, wrong though not advertised, issuer + "/" |
# | metadata-issuer-mismatch          | 2026-07-28            | AS metadata issuer differs from the discovery URL: refuse, use none of its endpoints |
# | client-credentials-basic          | extension             | oauth_client mode: client_credentials grant, client_secret_basic (context id/secret) |
# | client-credentials-jwt            | extension             | oauth_client mode: private_key_jwt (context ES256 key), iss = sub = client id |
# DCR at 2026-07-28 must also send application_type (SEP-837). Not run (other extensions, out of
# scope for issue 13): auth/enterprise-managed-authorization, auth/dpop, auth/dpop-nonce, auth/wif-jwt-bearer.
AUTH_SCENARIOS = [
    *[(f"auth/{name}", v) for name in ("metadata-default", "metadata-var1", "metadata-var2", "metadata-var3",
                                       "basic-cimd", "scope-from-www-authenticate", "scope-from-scopes-supported",
                                       "scope-omitted-when-undefined", "scope-step-up", "scope-retry-limit",
                                       "pre-registration")
      for v in ("2025-11-25", "2026-07-28")],
    *[(f"auth/token-endpoint-auth-{m}", v) for m in ("basic", "post", "none")
      for v in ("2025-06-18", "2025-11-25", "2026-07-28")],
    ("auth/2025-03-26-oauth-metadata-backcompat", "2025-03-26"),
    ("auth/2025-03-26-oauth-endpoint-fallback", "2025-03-26"),
    *[(f"auth/{name}", "2026-07-28") for name in (
        "resource-mismatch", "offline-access-scope", "offline-access-not-supported", "authorization-server-migration",
        "iss-supported", "iss-not-advertised", "iss-supported-missing", "iss-wrong-issuer", "iss-unexpected",
        "iss-normalized", "metadata-issuer-mismatch")],
    ("auth/client-credentials-basic", None),
    ("auth/client-credentials-jwt", None),
]
#: auth scenarios the suite lists that this client does not run (extensions beyond issue 13)
AUTH_NOT_RUN = {"auth/enterprise-managed-authorization", "auth/dpop", "auth/dpop-nonce", "auth/wif-jwt-bearer"}
#: scenarios whose right outcome is a refusal: the client exits non-zero naming this code (the
#: suite allows the client error there and checks that nothing was sent after the refusal)
AUTH_REFUSED = {
    "auth/scope-retry-limit": "",  # the server's own answer once it gives up (410); see the attempts count
    "auth/resource-mismatch": "authorization_failed",
    "auth/iss-supported-missing": "authorization_failed",
    "auth/iss-wrong-issuer": "authorization_failed",
    "auth/iss-unexpected": "authorization_failed",
    "auth/iss-normalized": "authorization_failed",
    "auth/metadata-issuer-mismatch": "authorization_failed",
}
#: scenarios whose client runs as a process of its own (``manage.py ...``), not forked from
#: tests/forkserver.py: the entry point exactly as a deployer runs it, with and without authorization
REAL_PROCESS = {("initialize", "2025-11-25"), ("tools_call", "2026-07-28"), ("sep-2322-client-request-state", "2026-07-28"),
                ("auth/metadata-default", "2026-07-28"), ("auth/client-credentials-jwt", None)}
#: scenarios run at once, auth or not (each is two processes mostly waiting on loopback HTTP)
PARALLEL = 4
#: client scenarios the suite lists that this client does not run, with the reason
NOT_RUN = {
    **{f"sep-2640-client-{name}": "an extension (SEP-2640 skills) this client does not claim"
       for name in ("no-prefetch", "verify-digest", "verify-size", "verify-frontmatter")},
}

#: (scenario, check name) -> why SKIPPED is right for this client at that protocol version
NOT_APPLICABLE = {
    ("request-metadata", "ClientDeclaresRootsCapability"):
        "the client does not declare roots (answered only inside input_required rounds, per server)",
    ("request-metadata", "ClientDeclaresSamplingCapability"):
        "the client does not declare sampling (answered only inside input_required rounds, per server)",
    ("http-standard-headers", "ClientMcpMethodHeader_initialize"):
        "2026-07-28 is stateless: there is no initialize request",
    ("http-standard-headers", "ClientMcpMethodHeader_notifications_initialized"):
        "2026-07-28 is stateless: there is no notifications/initialized",
}

#: scenarios that need what this checkout does not have yet (strict: passing them fails the test,
#: so the marker is removed when the feature lands)
NEEDS: dict[str, str] = {}


@pytest.fixture(scope="module")
def suite() -> tuple[str, Path]:
    node = node22()
    modules = npm_install(ROOT / "var" / "conformance", SUITE)
    cli = modules / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
    assert cli.exists(), cli
    return node, cli


@pytest.fixture(scope="module")
def client_env(tmp_path_factory) -> dict[str, str]:
    """The environment of the client processes: the standalone settings on a migrated SQLite file."""
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = "mrtrweb.site.settings"
    env["MRTRWEB_SQLITE_PATH"] = str(tmp_path_factory.mktemp("conformance-db") / "client.sqlite3")
    env.pop("MRTRWEB_LOG_LEVEL", None)
    subprocess.run([sys.executable, str(ROOT / "manage.py"), "migrate", "--no-input", "-v", "0"], env=env,
                   check=True, cwd=ROOT, timeout=600)
    return env


@pytest.fixture(scope="module")
def forkserver(client_env, tmp_path_factory):
    """The socket of a tests/forkserver.py process on the client's environment."""
    sock = tmp_path_factory.mktemp("forkserver") / "s.sock"
    proc = subprocess.Popen([sys.executable, "-m", "tests.forkserver", str(sock)], env=client_env, cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip() == "ready", f"the fork server did not start (exit {proc.poll()}): {line!r}"
        yield sock
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def run_scenario(suite: tuple[str, Path], env: dict[str, str], scenario: str, version: str | None,
                 out: Path, forkserver: Path | None = None) -> tuple[subprocess.CompletedProcess, list[dict], Path]:
    """Run one client scenario (``version`` None: an extension scenario, off the spec timeline);
    the client forked from ``forkserver`` (its socket) if given, else a process of its own."""
    node, cli = suite
    entry = (f"-S {ROOT / 'tests' / 'forkserver_client.py'} {forkserver}" if forkserver else str(ROOT / "manage.py"))
    command = f"{sys.executable} {entry} mrtr_client --conformance --consent accept-defaults"
    proc = subprocess.run(
        [node, str(cli), "client", "--command", command, "--scenario", scenario,
         *(["--spec-version", version] if version else []), "--timeout", "180000", "-o", str(out)],
        env={**node_env(node), **{k: v for k, v in env.items() if k != "PATH"}}, cwd=ROOT, capture_output=True,
        text=True, timeout=300)
    found = sorted(out.glob(f"{scenario}-*/checks.json"))  # an auth/... scenario writes under auth/
    assert found, f"the suite wrote no checks.json\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc, json.loads(found[-1].read_text()), found[-1].parent


def judge(scenario: str, checks: list[dict]) -> list[str]:
    """What is wrong with the checks (empty: every check passed)."""
    problems = []
    for check in checks:
        status, name = check.get("status"), check.get("name") or check.get("id")
        if status in ("SUCCESS", "INFO"):
            continue
        if status == "SKIPPED" and (scenario, name) in NOT_APPLICABLE:
            continue
        problems.append(f"{status} {check.get('id')} [{name}]: {check.get('errorMessage') or check.get('description')}")
    if not any(c.get("status") == "SUCCESS" for c in checks):
        problems.append("no check succeeded")
    return problems


def _id(scenario: str, version: str | None) -> str:
    return f"{scenario}@{version or 'extension'}"


@pytest.fixture(scope="module")
def runs(request, suite, client_env, forkserver, tmp_path_factory) -> dict[str, concurrent.futures.Future]:
    """``_id`` -> the future of (proc, checks, results dir) of every scenario this session selected
    (both tests below), run :data:`PARALLEL` at a time, each on its own copy of the migrated database."""
    selected = {_id(item.callspec.params["scenario"], item.callspec.params["version"])
                for item in request.session.items
                if getattr(item, "originalname", "") in ("test_conformance_scenario", "test_auth_scenario")
                and hasattr(item, "callspec")}
    template = Path(client_env["MRTRWEB_SQLITE_PATH"])

    def one(scenario: str, version: str | None) -> tuple:
        work = tmp_path_factory.mktemp(scenario.replace("/", "-"))
        db = work / "client.sqlite3"
        with sqlite3.connect(template) as src, sqlite3.connect(db) as dst:
            src.backup(dst)
        return run_scenario(suite, {**client_env, "MRTRWEB_SQLITE_PATH": str(db)}, scenario, version, work / "out",
                            None if (scenario, version) in REAL_PROCESS else forkserver)

    chosen = [(s, v) for s, v in [*SCENARIOS, *AUTH_SCENARIOS] if _id(s, v) in selected]
    with concurrent.futures.ThreadPoolExecutor(PARALLEL) as pool:
        return {_id(s, v): pool.submit(one, s, v) for s, v in chosen}


@pytest.mark.parametrize("scenario, version", [
    pytest.param(s, v, id=_id(s, v),
                 marks=[pytest.mark.xfail(reason=NEEDS[s], strict=True)] if s in NEEDS else [])
    for s, v in SCENARIOS
])
def test_conformance_scenario(runs, scenario, version):
    proc, checks, results = runs[_id(scenario, version)].result()
    for check in checks:  # the summary, never the details (they hold the wire messages)
        print(f"{check.get('status'):8} {check.get('id')} [{check.get('name')}]")
    problems = judge(scenario, checks)
    assert not problems, "\n".join(problems) + f"\nclient stderr:\n{(results / 'stderr.txt').read_text()[-3000:]}"
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    client_out = (results / "stdout.txt").read_text() + (results / "stderr.txt").read_text()
    # the client itself ended well (exit 0) and in time
    assert "CLIENT EXITED WITH ERROR" not in proc.stderr and "CLIENT TIMED OUT" not in proc.stderr, client_out[-3000:]
    if scenario == "sep-2322-client-request-state":
        # the requestState the scenario server minted never appears in what the client printed or logged
        echoed = next(c for c in checks if c["id"] == "sep-2322-client-request-state-echoed")
        state = echoed["details"]["requestStateSent"]
        assert state and state not in client_out
    if scenario == "http-custom-headers":
        # the values that must go base64 (non-ASCII, edge whitespace, controls) were each checked
        unsafe = [c for c in checks if c["id"] == "sep-2243-client-base64-unsafe"]
        assert len(unsafe) >= 6 and all(c["status"] == "SUCCESS" for c in unsafe)
    if scenario == "http-invalid-tool-headers":
        # each invalid tool was left out with a logged reason naming it; the valid one was called
        excluded = [c["name"].removeprefix("ClientRejectsInvalidTool_") for c in checks
                    if c["name"].startswith("ClientRejectsInvalidTool_")]
        assert len(excluded) == 11
        for tool in excluded:
            assert f"tool '{tool}' excluded: its inputSchema has an invalid x-mcp-header annotation" in client_out
        assert "tools/call valid_tool: completed" in client_out


def test_not_applicable_is_honest(runs):
    """Every NOT_APPLICABLE entry is a check its scenario really reports SKIPPED (a stale entry
    would excuse nothing, or hide a check that moved)."""
    for scenario, name in NOT_APPLICABLE:
        ran = [runs[_id(s, v)].result()[1] for s, v in SCENARIOS if s == scenario and _id(s, v) in runs]
        if not ran:
            continue  # that scenario was not selected in this session
        assert any(c.get("name") == name and c.get("status") == "SKIPPED" for checks in ran for c in checks), \
            (scenario, name)


def test_scenarios_cover_the_suite(suite):
    """Every client scenario `list` names that is not auth/* (27 of those, below), at every version
    it lists, is in SCENARIOS or NOT_RUN: bumping SUITE shows what is new."""
    node, cli = suite
    listing = subprocess.run([node, str(cli), "list"], capture_output=True, text=True, timeout=120, check=True,
                             env=node_env(node)).stdout
    client = listing[listing.index("Client scenarios"):]
    client = client[:client.index("\n\n")] if "\n\n" in client else client  # up to the next section
    listed = set()
    for line in client.splitlines():
        m = re.match(r"\s*- (\S+) \[([^\]]*)\]", line)
        if m and not m.group(1).startswith("auth/") and m.group(1) not in NOT_RUN:
            listed |= {(m.group(1), None if v == "extension" else v) for v in m.group(2).split(",")}
    assert listed == set(SCENARIOS)
    assert len(SCENARIOS) == 15 and len({s for s, _ in SCENARIOS}) == 11


# --------------------------------------------------------------------------------------------
# Authorization (issue 13): the auth/* scenarios, in the same parallel runs
# --------------------------------------------------------------------------------------------


def _never_shown(checks: list[dict], context_text: str) -> list[str]:
    """What the client must never print or log in an auth run: the suite's authorization codes and
    tokens, and the context's secrets."""
    values = ["test-auth-code", "test-token-", "cc-token-"]
    context = json.loads(context_text) if context_text else {}
    values += [context[k] for k in ("client_secret", "private_key_pem") if isinstance(context.get(k), str)]
    if isinstance(context.get("private_key_pem"), str):  # any line of the key's body
        values += [line for line in context["private_key_pem"].splitlines() if len(line) > 40]
    return values


@pytest.mark.parametrize("scenario, version", [
    pytest.param(s, v, id=_id(s, v),
                 marks=[pytest.mark.xfail(reason=NEEDS[s], strict=True)] if s in NEEDS else [])
    for s, v in AUTH_SCENARIOS])
def test_auth_scenario(runs, scenario, version):
    proc, checks, results = runs[_id(scenario, version)].result()
    for check in checks:
        print(f"{check.get('status'):8} {check.get('id')} [{check.get('name')}]")
    client_out = (results / "stdout.txt").read_text() + (results / "stderr.txt").read_text()
    problems = judge(scenario, checks)
    assert not problems, "\n".join(problems) + f"\nclient output:\n{client_out[-4000:]}"
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "CLIENT TIMED OUT" not in proc.stderr, client_out[-3000:]
    if scenario in AUTH_REFUSED:
        # refused for the right reason, by name (the suite accepts any client error here)
        assert f"CommandError: {AUTH_REFUSED[scenario]}" in client_out, client_out[-3000:]
        if scenario == "auth/scope-retry-limit":  # the client's own bound, not the suite's (3)
            from mrtrweb.headless import auth as headless_auth

            attempts = [c for c in checks if c.get("id") == "scope-retry-auth-attempt"]
            assert len(attempts) == headless_auth.MAX_CONNECTS, client_out[-3000:]
    else:
        assert "CLIENT EXITED WITH ERROR" not in proc.stderr and "Client exited with code" not in proc.stderr, \
            client_out[-3000:]
        assert any(c.get("id") == "valid-bearer-token" and c["status"] == "SUCCESS" for c in checks), \
            "the MCP server never saw a valid token"
    context = next((line.split("With context: ", 1)[1] for line in proc.stderr.splitlines()
                    if line.startswith("With context: ")), "")
    assert bool(context) == (scenario in ("auth/pre-registration", "auth/client-credentials-basic",
                                          "auth/client-credentials-jwt")), "the suite's context line moved"
    for value in _never_shown(checks, context):
        assert value not in client_out, "the client printed or logged an authorization secret"


def test_auth_scenarios_cover_the_suite(suite):
    """Every auth/* client scenario `list` names, at every version it lists, is run (or named in
    AUTH_NOT_RUN): bumping SUITE shows what is new."""
    node, cli = suite
    listing = subprocess.run([node, str(cli), "list"], capture_output=True, text=True, timeout=120, check=True,
                             env=node_env(node)).stdout
    listed = set()
    for line in listing.splitlines():
        m = re.match(r"\s*- (auth/\S+) \[([^\]]*)\]", line)
        if m and m.group(1) not in AUTH_NOT_RUN:
            listed |= {(m.group(1), None if v == "extension" else v) for v in m.group(2).split(",")}
    assert listed == set(AUTH_SCENARIOS)
    assert len({s for s, v in AUTH_SCENARIOS if v}) == 27
