"""Reading a worker's ``/mcp/metrics/`` in tests: fetch it over HTTP and parse it with
``prometheus_client.parser`` into ``{(sample name, labels): value}``."""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset], float]


def fetch(base: str, token: str | None) -> tuple[int, str, str]:
    """``GET base/mcp/metrics/`` (with ``Authorization: Bearer token`` when given): (status, content type, body)."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    req = urllib.request.Request(base + "/mcp/metrics/", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers.get("Content-Type", ""), err.read().decode()


def parse(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def scrape(base: str, token: str) -> Samples:
    status, _ctype, body = fetch(base, token)
    assert status == 200, (status, body[:300])
    return parse(body)


def value(samples: Samples, name: str, **labels: str) -> float:
    """The value of one sample (0 when absent: a labelled counter appears at its first increment)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def delta(after: Samples, before: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def mrtrweb_labels(samples: Samples) -> set[tuple[str, str]]:
    """Every (label name, value) of the ``mrtrweb_*`` samples (``le`` of histogram buckets left out)."""
    return {(k, v) for (name, labels) in samples if name.startswith("mrtrweb_") for k, v in labels if k != "le"}
