"""The OpenAI-compatible provider against a real scripted endpoint on loopback, through the
``openai`` SDK: streamed text, tool calls, parallel tool calls, errors (429, 500, 401, malformed
events), a stream that stalls and one that never ends (bounded by ``MODEL_REPLY_TIMEOUT_S`` for
the whole reply), a reply over the size bound, and the outbound rules."""

from __future__ import annotations

import json

import pytest

from mrtrweb.providers import ProviderError, ToolSpec, problems, provider_for

TOOLS = [ToolSpec(name="demo_1__echo", description="Echo", parameters={"type": "object",
                                                                      "properties": {"text": {"type": "string"}}})]


async def _reply(provider, messages=None, tools=TOOLS):
    pieces: list[str] = []

    async def on_text(piece: str) -> None:
        pieces.append(piece)

    reply = await provider.reply(messages or [{"role": "user", "content": "hi"}], tools, on_text)
    return reply, pieces


async def test_streamed_text_arrives_in_pieces_and_whole(model_settings, model_server):
    model_server.script({"text": "Hello **world**, in pieces.", "piece": 4})
    provider = provider_for("local", "scripted-1", "sk-test-key")
    reply, pieces = await _reply(provider)
    assert reply.text == "Hello **world**, in pieces."
    assert len(pieces) == 7 and "".join(pieces) == reply.text
    assert reply.tool_calls == () and not reply.cut
    sent = model_server.requests[0]
    assert sent["authorization"] == "Bearer sk-test-key"
    assert sent["body"]["stream"] is True and sent["body"]["model"] == "scripted-1"
    assert sent["body"]["tools"][0]["function"]["name"] == "demo_1__echo"
    assert "sk-test-key" not in repr(provider)


async def test_parallel_tool_calls_assembled_by_index(model_settings, model_server):
    model_server.script({"text": "Two calls.", "calls": [
        {"id": "c1", "name": "demo_1__echo", "arguments": json.dumps({"text": "one, with a long argument"})},
        {"id": "c2", "name": "other_2__search", "arguments": json.dumps({"q": "two"})}]})
    reply, _ = await _reply(provider_for("local", "scripted-1"))
    assert [(c.id, c.name) for c in reply.tool_calls] == [("c1", "demo_1__echo"), ("c2", "other_2__search")]
    assert json.loads(reply.tool_calls[0].arguments) == {"text": "one, with a long argument"}
    assert json.loads(reply.tool_calls[1].arguments) == {"q": "two"}
    assert model_server.requests[0]["authorization"] == "Bearer not-needed"  # no key: none of ours sent


async def test_malformed_arguments_are_returned_as_written(model_settings, model_server):
    model_server.script({"calls": [{"name": "demo_1__echo", "arguments": "{not json"}]})
    reply, _ = await _reply(provider_for("local", "scripted-1"))
    assert reply.tool_calls[0].arguments == "{not json"  # judged by the chat, never sent anywhere


@pytest.mark.parametrize("step, code", [
    ({"status": 429}, "provider_rate_limited"),
    ({"status": 500}, "provider_error"),
    ({"status": 401}, "provider_refused"),
    ({"malformed": True}, "provider_malformed"),
    ({"hang": True, "text": "starts"}, "provider_timeout"),
    ({"trickle": True}, "provider_timeout"),  # never ends, though every read answers in time
])
async def test_failures_are_stable_codes(model_settings, model_server, step, code):
    model_settings.MRTRWEB = {**model_settings.MRTRWEB, "MODEL_REPLY_TIMEOUT_S": 1}  # the bound, for the whole reply
    model_server.script(step)
    with pytest.raises(ProviderError) as caught:
        await _reply(provider_for("local", "scripted-1", "sk-secret"))
    assert caught.value.code == code
    assert "sk-secret" not in str(caught.value)
    assert len(model_server.requests) == 1  # no automatic retry


async def test_a_reply_over_the_size_bound_is_cut_and_its_calls_dropped(model_settings, model_server):
    model_settings.MRTRWEB = {**model_settings.MRTRWEB, "MODEL_REPLY_CHARS": 50}
    model_server.script({"text": "x" * 40, "calls": [{"name": "demo_1__echo", "arguments": json.dumps({"text": "y" * 80})}]})
    reply, _ = await _reply(provider_for("local", "scripted-1"))
    assert reply.cut and reply.tool_calls == () and reply.text == "x" * 40


async def test_the_endpoint_passes_the_outbound_rules(model_settings, model_server):
    model_settings.MRTRWEB = {**model_settings.MRTRWEB, "MODEL_URL_POLICY": {}}  # https to public addresses only
    with pytest.raises(ProviderError) as caught:
        await _reply(provider_for("local", "scripted-1"))
    assert caught.value.code == "provider_url_refused"
    assert model_server.requests == []  # nothing sent


async def test_an_unreachable_endpoint(model_settings, model_server):
    model_server.stop()
    with pytest.raises(ProviderError) as caught:
        await _reply(provider_for("local", "scripted-1"))
    assert caught.value.code == "provider_unavailable"


def test_settings_are_checked(settings):
    settings.MRTRWEB = {"MODEL_PROVIDERS": {"demo": {}, "Bad Name": {}, "ok": {"kind": "openai", "base_url": "ftp://x",
                                                                             "models": ["m"]},
                                            "two": {"kind": "openai", "base_url": "https://m.example/v1", "models": []},
                                            "three": {"kind": "openai", "base_url": "https://m.example/v1",
                                                      "models": ["m"], "api_key": "inline"}},
                        "MODEL_URL_POLICY": {"allow_networks": ["not a network"]}}
    found = problems()
    assert len(found) == 6, found
    assert any("reserved" in p for p in found) and any("unknown keys ['api_key']" in p for p in found)
    assert any(p.startswith("MODEL_URL_POLICY") for p in found)
    with pytest.raises(ProviderError) as caught:
        provider_for("ok", "m")
    assert caught.value.code == "provider_not_configured"


def test_the_start_up_check_says_e070(settings):
    from mrtrweb.checks import check_model_providers

    settings.MRTRWEB = {"MODEL_PROVIDERS": {"x": {"kind": "anthropic"}}}
    assert [m.id for m in check_model_providers()] == ["mrtrweb.E070"]
    settings.MRTRWEB = {}
    assert check_model_providers() == []
