"""The tenant admin's choice of provider and model (the key sealed at rest, write-only, audited by
digest), the per-server/tool policy form, the demo's ``--model-url`` and the scripted demo model."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from mrtrweb.chat import choice
from mrtrweb.models import AuditEvent, TenantModel, ToolPolicy
from mrtrweb.providers import ToolSpec

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_an_admin_chooses_the_model_and_the_key_is_sealed(seeded, model_settings, model_server):
    alice, carol = seeded["users"]["alice"], seeded["users"]["carol"]
    client = Client()
    client.force_login(alice)
    page = client.get("/mcp/tenants/acme/model/")
    assert page.status_code == 200 and "local/scripted-1" in page.content.decode()
    r = client.post("/mcp/tenants/acme/model/", {"choice": "local/scripted-1", "api_key": "sk-very-secret-123"})
    assert r.status_code == 302
    assert "The tenant&#x27;s model is saved: scripted-1" in client.get(r["Location"]).content.decode()  # said once
    row = TenantModel.objects.get(tenant__slug="acme")
    assert (row.provider, row.model) == ("local", "scripted-1")
    assert "sk-very-secret-123" not in row.api_key_sealed and row.api_key_digest.startswith("hmac-sha256:")
    again = client.get("/mcp/tenants/acme/model/").content.decode()
    assert "sk-very-secret-123" not in again and "A key is saved" in again
    event = AuditEvent.objects.get(event="model_changed")
    assert event.actions == {"provider": "local", "secret": "replaced"} and "sk-very" not in json.dumps(
        event.__dict__, default=str)
    # the key goes to the endpoint, nowhere else
    import asyncio

    provider = choice.provider_of(row.tenant_id)

    async def ask():
        async def on_text(piece):
            pass
        return await provider.reply([{"role": "user", "content": "hi"}], [], on_text)
    asyncio.run(ask())
    assert model_server.requests[-1]["authorization"] == "Bearer sk-very-secret-123"
    # kept when the form leaves it empty; removed when asked
    client.post("/mcp/tenants/acme/model/", {"choice": "local/scripted-1"})
    assert TenantModel.objects.get(tenant__slug="acme").api_key_sealed
    client.post("/mcp/tenants/acme/model/", {"choice": "local/scripted-1", "remove_key": "on"})
    assert not TenantModel.objects.get(tenant__slug="acme").api_key_sealed
    # a member who is not an admin, and an admin of another tenant: 404
    other = Client()
    other.force_login(carol)
    assert other.get("/mcp/tenants/acme/model/").status_code == 404
    bob = Client()
    bob.force_login(seeded["users"]["bob"])
    assert bob.post("/mcp/tenants/acme/model/", {"choice": "demo/scripted"}).status_code == 404
    # a provider the deployer does not offer is refused by the form
    assert client.post("/mcp/tenants/acme/model/", {"choice": "elsewhere/gpt"}).status_code == 200
    assert TenantModel.objects.get(tenant__slug="acme").provider == "local"


def test_the_policy_form_sets_server_and_tool_rules(seeded):
    alice, server = seeded["users"]["alice"], seeded["servers"]["acme"]
    client = Client()
    client.force_login(alice)
    r = client.post("/mcp/tenants/acme/model/", {"what": "policy", f"rule-{server.pk}": "read_only",
                                                 f"tool-{server.pk}": "deploy", f"tool-rule-{server.pk}": "never"},
                    follow=True)
    assert '<li class="message success">Rules saved: Demo server</li>' in r.content.decode()
    assert "Rules saved" not in client.get("/mcp/tenants/acme/model/").content.decode()  # said once
    rules = dict(ToolPolicy.objects.filter(server=server).values_list("tool", "rule"))
    assert rules == {"": "read_only", "deploy": "never"}
    event = AuditEvent.objects.get(method="chat/policy")
    assert event.event == "tenant_changed" and event.actions == {"*": "read_only", "deploy": "never"}
    r = client.post("/mcp/tenants/acme/model/", {"what": "policy", f"rule-{server.pk}": "read_only"}, follow=True)
    assert AuditEvent.objects.filter(method="chat/policy").count() == 1  # nothing changed: nothing audited
    assert "No rule changed." in r.content.decode() and "Rules saved" not in r.content.decode()
    client.post("/mcp/tenants/acme/model/", {"what": "policy", f"rule-{server.pk}": "anything"})
    assert ToolPolicy.objects.get(server=server, tool="").rule == "read_only"  # an unknown rule changes nothing
    globex = seeded["servers"]["globex"]
    client.post("/mcp/tenants/acme/model/", {"what": "policy", f"rule-{globex.pk}": "never"})
    assert not ToolPolicy.objects.filter(server=globex).exists()  # another tenant's server: untouched


def test_a_tools_rule_is_removed_and_the_tool_follows_the_servers_rule(seeded):
    """A tool's own rule has a Remove button (named for the tool and the server); pressing it deletes
    the rule alone, audited ``removed``; the server's own rule is never removed, a tool without a rule
    or another tenant's server changes nothing, and nothing is audited for them."""
    from mrtrweb.chat import policy

    alice, server = seeded["users"]["alice"], seeded["servers"]["acme"]
    client = Client()
    client.force_login(alice)
    client.post("/mcp/tenants/acme/model/", {"what": "policy", f"rule-{server.pk}": "read_only",
                                             f"tool-{server.pk}": "deploy", f"tool-rule-{server.pk}": "never"})
    page = client.get("/mcp/tenants/acme/model/").content.decode()
    button = f'<button type="submit" name="remove-{server.pk}" value="deploy" class="link policy-remove" ' \
             f'aria-label="Remove the rule for deploy of {server.name}: it then follows the server\'s rule">Remove</button>'
    assert button in page
    form = {"what": "policy", f"rule-{server.pk}": "read_only", f"tool-{server.pk}": "",
            f"tool-rule-{server.pk}": "ask"}  # what the browser sends with the button: the form as it stands
    client.post("/mcp/tenants/acme/model/", {**form, f"remove-{server.pk}": "deploy"})
    assert dict(ToolPolicy.objects.filter(server=server).values_list("tool", "rule")) == {"": "read_only"}
    rules = policy.rules_of(server.tenant_id, [server.pk])
    assert policy.rule(rules, server.pk, "deploy") == "read_only"  # the server's rule now
    events = list(AuditEvent.objects.filter(method="chat/policy").order_by("sequence"))
    assert [e.actions for e in events] == [{"*": "read_only", "deploy": "never"}, {"deploy": "removed"}]
    assert 'value="deploy" class="link policy-remove"' not in client.get("/mcp/tenants/acme/model/").content.decode()
    for gone in ("", "deploy", "echo"):  # the server's own rule; a tool whose rule is gone; one that never had one
        client.post("/mcp/tenants/acme/model/", {**form, f"remove-{server.pk}": gone})
    globex = seeded["servers"]["globex"]
    ToolPolicy.objects.create(tenant=globex.tenant, server=globex, tool="deploy", rule="never")
    client.post("/mcp/tenants/acme/model/", {**form, f"remove-{globex.pk}": "deploy"})
    assert ToolPolicy.objects.filter(server=globex, tool="deploy").exists()  # another tenant's: untouched
    assert ToolPolicy.objects.get(server=server, tool="").rule == "read_only"
    assert AuditEvent.objects.filter(method="chat/policy").count() == 2  # nothing else changed, nothing audited


def test_a_tools_rule_is_chosen_from_the_servers_listing(seeded):
    """Item 3: the tool of a rule is chosen from the tools the server lists (app-only tools left out),
    the listing kept a while; a name the server does not list is refused; only a server that cannot
    be listed takes a typed name, and says so."""
    import re

    from django.core.cache import caches

    from mrtrweb.chat import tool_lists
    from mrtrweb.models import McpServer

    alice, server = seeded["users"]["alice"], seeded["servers"]["acme"]
    down = McpServer.objects.create(tenant=server.tenant, name="Down server", url="http://127.0.0.1:9/mcp")
    client = Client()
    client.force_login(alice)
    page = client.get("/mcp/tenants/acme/model/").content.decode()
    listed = re.search(rf'<select name="tool-{server.pk}" class="policy-tool"[^>]*>(.*?)</select>', page, re.S)
    assert listed is not None and f'<input name="tool-{server.pk}"' not in page
    names = re.findall(r'<option value="([^"]*)">', listed.group(1))
    assert names[0] == "" and {"echo", "deploy", "book_trip"} <= set(names[1:])
    assert re.search(r'<option value="deploy">deploy — may change or delete things</option>', listed.group(1))
    assert caches["default"].get(tool_lists._key(server.pk))["tools"]  # kept for the next page
    # the server that cannot be listed: a typed name, said so
    assert f'<input name="tool-{down.pk}" class="policy-tool-typed"' in page
    assert "This server's tools cannot be listed now" in page
    # a name the server does not list: refused, nothing saved or audited
    r = client.post("/mcp/tenants/acme/model/", {"what": "policy", f"tool-{server.pk}": "no_such_tool",
                                                 f"tool-rule-{server.pk}": "never"}, follow=True)
    assert "Not a tool the server lists" in r.content.decode()
    assert not ToolPolicy.objects.filter(server=server).exists() and not AuditEvent.objects.filter(
        method="chat/policy").exists()
    # a listed one, and a typed one for the server that cannot be listed
    client.post("/mcp/tenants/acme/model/", {"what": "policy", f"tool-{server.pk}": "deploy",
                                             f"tool-rule-{server.pk}": "never", f"tool-{down.pk}": "wipe",
                                             f"tool-rule-{down.pk}": "never"})
    assert ToolPolicy.objects.get(server=server, tool="deploy").rule == "never"
    assert ToolPolicy.objects.get(server=down, tool="wipe").rule == "never"
    page = client.get("/mcp/tenants/acme/model/").content.decode()
    assert "<code>deploy</code>: Never allow" in page


def test_demo_model_url_makes_every_tenant_use_the_endpoint(seeded, settings, model_server):
    from mrtrweb.management.commands.mrtrweb_demo import use_model

    use_model(model_server.url, "llama-test")
    assert set(TenantModel.objects.values_list("provider", "model")) == {("endpoint", "llama-test")}
    from mrtrweb import conf

    assert conf.get("SAMPLING_PROVIDER") == "mrtrweb.chat.sampling.ModelDraftsReply"  # the model drafts sampling replies
    provider = choice.provider_of(seeded["servers"]["acme"].tenant_id)
    assert provider.kind == "openai" and provider.model == "llama-test"


async def test_the_scripted_demo_model_maps_phrases_to_the_demo_tools():
    from mrtrweb.providers.scripted import ScriptedDemoModel

    tools = [ToolSpec(name=f"demo_server_1__{n}", description="", parameters={}) for n in
             ("echo", "deploy", "busy_report", "book_trip")]
    model = ScriptedDemoModel()
    pieces = []

    async def on_text(piece):
        pieces.append(piece)

    reply = await model.reply([{"role": "user", "content": "deploy 3 replicas to production"}], tools, on_text)
    assert reply.tool_calls[0].name == "demo_server_1__deploy"
    assert json.loads(reply.tool_calls[0].arguments) == {"env": "production", "replicas": 3}
    reply = await model.reply([{"role": "user", "content": "book a trip to Porto"}], tools, on_text)
    assert json.loads(reply.tool_calls[0].arguments) == {"destination": "Porto"}
    reply = await model.reply([{"role": "user", "content": "what can you do?"}], tools, on_text)
    assert not reply.tool_calls and "not a language model" in reply.text
    reply = await model.reply([{"role": "user", "content": "echo hi"}, {"role": "tool", "content": '{"x": 1}'}],
                              tools, on_text)
    assert not reply.tool_calls and '> {"x": 1}' in reply.text


def test_the_model_key_is_resealed_by_mrtr_rotate_secrets(seeded, model_settings):
    import io

    from cryptography.fernet import Fernet
    from django.core.management import call_command

    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    model_settings.MRTRWEB = {**model_settings.MRTRWEB, "SECRET_KEYS": [old]}
    tenant = seeded["servers"]["acme"].tenant
    choice.choose(tenant, seeded["users"]["alice"].pk, "local", "scripted-1", "sk-rotate-me")
    model_settings.MRTRWEB = {**model_settings.MRTRWEB, "SECRET_KEYS": [new, old]}
    out = io.StringIO()
    call_command("mrtr_rotate_secrets", stdout=out)
    assert "TenantModel.api_key_sealed: 1 resealed" in out.getvalue() and "sk-rotate-me" not in out.getvalue()
    model_settings.MRTRWEB = {**model_settings.MRTRWEB, "SECRET_KEYS": [new]}  # the old key dropped
    assert choice.provider_of(tenant.pk)._api_key == "sk-rotate-me"
