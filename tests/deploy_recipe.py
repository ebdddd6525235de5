"""Reading and following the README's production recipe (tests/test_deploy_readme.py).

The README's section "## Production: ..." marks each block a deployer runs with an HTML comment
``<!-- deploy-step: KIND -->`` right before the fence. KIND is ``root`` (system administration the
test does not run: packages, users, systemctl), ``shell`` (bash, run as written after the
substitutions), ``sql`` (psql as the PostgreSQL superuser), ``daemon`` (one long-running command),
``systemd`` (a unit file: its ``ExecStart`` is run per instance) or ``nginx`` (a site file).

Also here: an HTML form reader for the Django admin's add pages (the test follows the README's
admin steps like a person: it reads the form, keeps what the page pre-fills and changes only the
named fields) and a signed-in HTTPS session trusting the test's certificate.
"""

from __future__ import annotations

import dataclasses
import html.parser
import re
import shlex
import ssl
import subprocess
import urllib.request
from pathlib import Path

from .topology import WebSession, _NoRedirect

SECTION = "## Production: Redis, PostgreSQL, several workers"
_STEP = re.compile(r"<!-- deploy-step: ([a-z]+) -->\n```([a-z]*)\n(.*?)\n```", re.S)
KINDS = {"root", "shell", "sql", "daemon", "systemd", "nginx"}


@dataclasses.dataclass(frozen=True)
class Step:
    """One marked block: ``kind`` (see the module docstring), the fence's language, its text."""

    kind: str
    lang: str
    text: str


def production_section(readme: str) -> str:
    """The README's production section (its heading up to the next ``## `` heading).

    Raises:
        AssertionError: the heading is missing."""
    start = readme.find(SECTION)
    assert start >= 0, f"README has no section {SECTION!r}"
    end = readme.find("\n## ", start + len(SECTION))
    return readme[start:] if end < 0 else readme[start:end]


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
        assert out.returncode == 0, f"README step failed ({out.returncode}):\n{script}\n--- output ---\n{text[-4000:]}"
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


class _Form:
    """One ``<form method="post">``: ``fields`` as a browser would submit them untouched,
    ``options`` per select (value, label, selected)."""

    def __init__(self, form_id: str) -> None:
        self.id = form_id
        self.fields: list[tuple[str, str]] = []
        self.options: dict[str, list[tuple[str, str, bool]]] = {}


class _FormReader(html.parser.HTMLParser):
    """Every POST form of a page (a page may have several: the admin's sign-out is one)."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[_Form] = []
        self._form: _Form | None = None
        self._select: str | None = None
        self._option: list | None = None
        self._textarea: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = {k: (v if v is not None else "") for k, v in attrs}
        if tag == "form" and a.get("method", "").lower() == "post":
            self._form = _Form(a.get("id", ""))
            self.forms.append(self._form)
        form = self._form
        if form is None:
            return
        name = a.get("name", "")
        if tag == "input" and name and "__prefix__" not in name:
            kind = a.get("type", "text").lower()
            if kind in ("checkbox", "radio"):
                if "checked" in a:
                    form.fields.append((name, a.get("value", "on")))
            elif kind not in ("submit", "button", "reset", "file", "image"):
                form.fields.append((name, a.get("value", "")))
        elif tag == "select" and name:  # a "__prefix__" one is the template "Add another" copies
            self._select = name
            form.options[name] = []
        elif tag == "option" and self._select is not None:
            self._option = [a.get("value"), "", "selected" in a]
        elif tag == "textarea" and name and "__prefix__" not in name:
            self._textarea, self._text = name, []

    def handle_data(self, data):
        if self._option is not None:
            self._option[1] += data
        if self._textarea is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        form = self._form
        if form is None:
            return
        if tag == "option" and self._option is not None and self._select is not None:
            value, label, selected = self._option
            label = label.strip()
            form.options[self._select].append((label if value is None else value, label, selected))
            self._option = None
        elif tag == "select" and self._select is not None:
            opts = form.options[self._select]
            chosen = [v for v, _, s in opts if s] or [v for v, _, _ in opts[:1]]
            if "__prefix__" not in self._select:
                form.fields.extend((self._select, v) for v in chosen)
            self._select = None
        elif tag == "textarea" and self._textarea is not None:
            form.fields.append((self._textarea, "".join(self._text).lstrip("\n")))
            self._textarea = None
        elif tag == "form":
            self._form = None


def read_form(page: str) -> _Form:
    """The page's main POST form: the one with the most fields (the admin's add form, not its
    sign-out button).

    Raises:
        AssertionError: the page has no POST form."""
    reader = _FormReader()
    reader.feed(page)
    assert reader.forms, "no POST form on the page"
    return max(reader.forms, key=lambda f: len(f.fields) + len(f.options))


def option_value(form: _Form, select: str, label: str) -> str:
    """The value of the option labelled ``label`` in ``select``.

    Raises:
        AssertionError: no such option."""
    for value, text, _ in form.options.get(select, []):
        if text == label:
            return value
    raise AssertionError(f"no option {label!r} in {select!r}: {form.options.get(select)}")


class TlsSession(WebSession):
    """A :class:`tests.topology.WebSession` over https, trusting ``cafile`` only."""

    def __init__(self, cafile: Path) -> None:
        super().__init__()
        self.ssl = ssl.create_default_context(cafile=str(cafile))
        self.opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=self.ssl),
                                                  urllib.request.HTTPCookieProcessor(self.jar), _NoRedirect)

    def submit(self, url: str, changes: dict[str, str]) -> tuple[int, str, str]:
        """GET the form at ``url``, keep what it pre-fills, change ``changes``, POST it back.
        Returns ``(status, Location, body)``."""
        status, _, page = self.request(url)
        assert status == 200, (url, status, page[:300])
        form = read_form(page)
        data: dict[str, list[str]] = {}
        for name, value in form.fields:
            data.setdefault(name, []).append(value)
        for name, value in changes.items():
            data[name] = [value]
        data.pop("csrfmiddlewaretoken", None)
        return self.request(url, data)
