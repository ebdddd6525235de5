"""Reading and following the production recipe (tests/docs/test_deploy_readme.py): the pages
:data:`RECIPE_PAGES` of the documentation, docs/deploy/production.md and then the rolling restart of
docs/deploy/upgrading.md.

Each page marks each block a deployer runs with an HTML comment
``<!-- deploy-step: KIND -->`` right before the fence. KIND is ``root`` (system administration the
test does not run: packages, users, systemctl), ``shell`` (bash, run as written after the
substitutions), ``sql`` (psql as the PostgreSQL superuser), ``daemon`` (one long-running command),
``systemd`` (a unit file: its ``ExecStart`` is run per instance), ``nginx`` (a site file) or
``rolling`` (the rolling restart of "Upgrading": run later, with a stand-in ``systemctl``).

Also here: :class:`Deployment`, what following the recipe built (its temporary directories,
ports, processes, private database role and Redis), and how it is torn down.
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import tempfile
import urllib.parse
from pathlib import Path

import psycopg

from .certs import self_signed
from .faults import RedisServer
from .topology import PG_ADMIN, free_port, wait_port

#: the pages the recipe is on, in the order a deployer follows them (paths in the repository)
RECIPE_PAGES = ("docs/deploy/production.md", "docs/deploy/upgrading.md")
#: the first heading of each
_TITLES = {"docs/deploy/production.md": "# Production: Redis, PostgreSQL, several workers",
           "docs/deploy/upgrading.md": "# Upgrading"}
_STEP = re.compile(r"<!-- deploy-step: ([a-z]+) -->\n```([a-z]*)\n(.*?)\n```", re.S)
KINDS = {"root", "shell", "sql", "daemon", "systemd", "nginx", "rolling"}


@dataclasses.dataclass(frozen=True)
class Step:
    """One marked block: ``kind`` (see the module docstring), the fence's language, its text."""

    kind: str
    lang: str
    text: str


def recipe_text(pages: dict[str, str]) -> str:
    """The recipe: the text of each of :data:`RECIPE_PAGES` (``pages``: path -> text), in order.

    Raises:
        AssertionError: a page is missing, or does not start with its heading."""
    texts = []
    for path in RECIPE_PAGES:
        assert path in pages, f"the recipe page {path} is missing"
        assert pages[path].startswith(_TITLES[path] + "\n"), f"{path} does not start with {_TITLES[path]!r}"
        texts.append(pages[path])
    return "\n".join(texts)


def steps(section: str) -> list[Step]:
    """The marked blocks of ``section``, in order.

    Raises:
        AssertionError: a marker with an unknown kind, or one not followed by a fenced block."""
    found = [Step(kind, lang, text) for kind, lang, text in _STEP.findall(section)]
    markers = re.findall(r"<!-- deploy-step: ([a-z]+) -->", section)
    assert len(markers) == len(found), "a deploy-step marker is not directly followed by a fenced block"
    unknown = {s.kind for s in found} - KINDS
    assert not unknown, f"unknown deploy-step kinds {unknown}"
    return found


def substitute(text: str, subs: list[tuple[str, str]]) -> str:
    """``text`` with each ``(literal, value)`` replaced, in order."""
    for literal, value in subs:
        text = text.replace(literal, value)
    return text


class Terminal:
    """One bash session for the ``shell`` blocks, as a deployer pasting them into one terminal:
    the working directory, umask and exported variables a block leaves are there for the next
    (each block runs in its own ``bash -euo pipefail``; the state is carried in a file)."""

    def __init__(self, state: Path, cwd: Path, env: dict[str, str]) -> None:
        self.state, self.cwd, self.env = state, cwd, env

    def run(self, script: str, timeout_s: float) -> str:
        """Run ``script``; returns its output (stdout and stderr together).

        Raises:
            AssertionError: it exited non-zero (the message quotes the script and the output's end)."""
        state = shlex.quote(str(self.state))
        wrapped = (f"if [ -f {state} ]; then . {state}; fi\n{script}\n"
                   f'{{ printf "cd %q\\n" "$PWD"; echo "umask $(umask)"; export -p; }} > {state}\n')
        out = subprocess.run(["bash", "-euo", "pipefail", "-c", wrapped], cwd=self.cwd, env=self.env,
                             capture_output=True, text=True, timeout=timeout_s)
        text = out.stdout + out.stderr
        assert out.returncode == 0, f"recipe step failed ({out.returncode}):\n{script}\n--- output ---\n{text[-4000:]}"
        return text


def parse_env_file(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines as systemd's ``EnvironmentFile`` reads them (comments and blank lines
    skipped, one pair of enclosing quotes removed)."""
    env = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        key, sep, value = line.partition("=")
        assert sep, f"not KEY=VALUE in {path}: {line!r}"
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        env[key.strip()] = value
    return env


def parse_unit(text: str) -> dict[str, dict[str, str]]:
    """A systemd unit file as ``{section: {key: value}}`` (the last value of a key wins)."""
    unit: dict[str, dict[str, str]] = {}
    section = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = unit.setdefault(line[1:-1], {})
            continue
        assert section is not None and "=" in line, f"not a unit file line: {line!r}"
        key, _, value = line.partition("=")
        section[key.strip()] = value.strip()
    return unit


def exec_start(unit: dict[str, dict[str, str]], instance: str) -> list[str]:
    """The unit's ``ExecStart`` for ``instance`` (``%i``) as an argument list."""
    return shlex.split(unit["Service"]["ExecStart"].replace("%i", instance))


def nginx_conf(prefix: Path, site: Path, *, as_root: bool) -> str:
    """A minimal main ``nginx.conf`` around ``site`` (what Debian's /etc/nginx/nginx.conf provides,
    with its pid, logs and temporary files under ``prefix``), for ``nginx -p prefix -c ...``.
    Started as root, its workers run as ``www-data`` as Debian's do (so they read only what the
    recipe leaves readable to others)."""
    user = "user www-data;\n" if as_root else ""
    temp = "".join(f"    {name}_temp_path {prefix / name};\n"
                   for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    return (f"{user}daemon off;\nworker_processes 1;\npid {prefix / 'nginx.pid'};\n"
            f"error_log {prefix / 'error.log'} info;\nevents {{ worker_connections 512; }}\n"
            f"http {{\n    include /etc/nginx/mime.types;\n    default_type application/octet-stream;\n"
            f"    access_log {prefix / 'access.log'};\n{temp}    include {site};\n}}\n")


ROOT = Path(__file__).resolve().parents[1]
#: what the environment of a test run must not leak into the deployment's processes
_LEAKS = ("DJANGO_", "MRTRWEB_", "REDIS_", "DATABASE_URL", "CSRF_TRUSTED_ORIGINS", "PYTHONPATH", "VIRTUAL_ENV",
          "PYTHONHOME", "PYTEST_")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what configures mrtrweb or Python (a deployer's shell
    has none of it), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_LEAKS)}
    env.update(extra)
    return env


class Deployment:
    """What the recipe built: a temporary tree standing for ``/srv/mrtrweb`` (``srv``),
    ``/etc/mrtrweb`` (``etc``) and ``/var/lib/mrtrweb`` (``var``), as step 1 makes them (0755
    readable by nginx's workers, ``etc`` 0700); free ports; a private ``redis-server``; a throwaway
    certificate; the processes started (``procs``, their logs in ``logs``). Filled in while the
    recipe is followed: ``workers`` (unit instance -> port), ``unit``, ``env`` (the environment
    file as systemd reads it), ``output`` (each shell block's output), ``person`` (user, password).
    """

    def __init__(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="mrtrweb-deploy-"))
        self.base.chmod(0o755)
        self.srv, self.etc, self.var = self.base / "srv", self.base / "etc", self.base / "var"
        self.nginx_dir = self.base / "nginx"
        for d in (self.etc, self.var, self.nginx_dir):
            d.mkdir(mode=0o755)
            d.chmod(0o755)
        self.etc.chmod(0o700)
        self.workers: dict[str, int] = {}
        self.unit: dict[str, dict[str, str]] = {}
        self.env: dict[str, str] = {}
        self.person: tuple[str, str] = ("", "")
        self.nginx_args: list[str] = []
        self.rolling = ""
        self.tag = secrets.token_hex(4)
        self.role = self.db = f"mrtr_deploy_{self.tag}"
        self.db_password = secrets.token_urlsafe(16)
        self.admin_password = secrets.token_urlsafe(16)
        self.https_port, self.http_port, self.mcp_port = free_port(), free_port(), free_port()
        self.loopback_port = free_port()
        self.redis = RedisServer()
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}
        self.cert, self.key = self_signed(self.nginx_dir)
        self.origin = f"https://localhost:{self.https_port}"
        self.output: dict[str, str] = {}

    # -- following the recipe ----------------------------------------------------------------
    def substitutions(self, section: str, workers: dict[str, int]) -> list[tuple[str, str]]:
        pg = urllib.parse.urlsplit(PG_ADMIN)
        subs = [
            ("https://git.example.com/your-org/mrtrweb.git", str(ROOT)),
            ("postgres://mrtr:db-password-change-me@127.0.0.1:5432/mrtr",
             f"postgres://{self.role}:{self.db_password}@{pg.hostname}:{pg.port or 5432}/{self.db}"),
            ("CREATE ROLE mrtr LOGIN PASSWORD 'db-password-change-me'",
             f"CREATE ROLE {self.role} LOGIN PASSWORD '{self.db_password}'"),
            ("CREATE DATABASE mrtr OWNER mrtr", f"CREATE DATABASE {self.db} OWNER {self.role}"),
            ("admin-password-change-me", self.admin_password),
            ("redis://127.0.0.1:6379", f"redis://127.0.0.1:{self.redis.port}"),
            ("/srv/mrtrweb", str(self.srv)),
            ("/etc/mrtrweb", str(self.etc)),
            ("/var/lib/mrtrweb", str(self.var)),
            ("/etc/ssl/mrtrweb/fullchain.pem", str(self.cert)),
            ("/etc/ssl/mrtrweb/privkey.pem", str(self.key)),
            ("https://mcp.example.com", self.origin),
            ("mcp.example.com", "localhost"),
            ("listen 443 ssl;", f"listen 127.0.0.1:{self.https_port} ssl;"),
            ("listen 80;", f"listen 127.0.0.1:{self.http_port};"),
            ("--port 8765", f"--port {self.mcp_port}"),
            ("--port 8009", f"--port {self.loopback_port}"),
            ("http://127.0.0.1:8009/", f"http://127.0.0.1:{self.loopback_port}/"),
        ]
        subs += [(f"127.0.0.1:{name}", f"127.0.0.1:{port}") for name, port in workers.items()]
        for literal, _ in subs:
            assert literal in section, f"the test substitutes {literal!r}, which the recipe no longer has"
        return subs

    def start(self, name: str, args: list[str], *, cwd: Path, env: dict[str, str], port: int,
              wait: bool = True) -> None:
        log = self.base / f"{name}.log"
        self.logs[name] = log
        proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=log.open("a"), stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.procs[name] = proc
        if wait:
            wait_port(port, timeout_s=60, proc=proc, log=log)

    def stop(self, name: str, timeout_s: float = 90.0) -> None:
        """SIGTERM (as ``systemctl stop`` sends), wait for a clean exit: the lifespan's shutdown
        (the drain) completed, and uvicorn ended by re-raising the SIGTERM it caught, which
        systemd counts as a clean stop.

        Raises:
            AssertionError: another exit, or no completed shutdown in its log."""
        proc = self.procs.pop(name)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=timeout_s)
        log = self.logs[name].read_text()
        assert code in (0, -signal.SIGTERM), f"{name} exited with {code}:\n{log[-2000:]}"
        assert "Application shutdown complete." in log.split("Shutting down")[-1], log[-2000:]

    def tails(self, lines: int = 15) -> str:
        """The last lines of every process's log (for assertion messages)."""
        return "\n".join(f"--- {name}:\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
                         for name, log in self.logs.items())

    def close(self) -> None:
        for name in list(self.procs):
            proc = self.procs.pop(name)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self.redis.close()
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.db}" WITH (FORCE)')
            conn.execute(f'DROP ROLE IF EXISTS "{self.role}"')
        shutil.rmtree(self.base, ignore_errors=True)

    def query(self, sql: str, *args):
        with psycopg.connect(self.env["DATABASE_URL"], autocommit=True) as conn:
            return conn.execute(sql, args).fetchall()
