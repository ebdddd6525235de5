"""The OpenAI-compatible provider: any chat-completions endpoint (OpenAI, Azure OpenAI, Ollama,
vLLM, llama.cpp's server, LM Studio) through the official ``openai`` SDK, streamed.

* Outbound: the SDK's HTTP client is :func:`mrtrweb.mcp.outbound.guarded_client` -- the endpoint's
  origin checked by ``MRTRWEB["MODEL_URL_POLICY"]`` (the shape of ``SERVER_URL_POLICY``: https to
  public addresses by default; ``allow_hosts`` / ``allow_networks`` / ``allow_http_hosts`` for an
  on-premises model) and pinned to the address checked, every other origin by the guard's public-only
  rule, no redirect followed; the whole reply bounded by ``MODEL_REPLY_TIMEOUT_S`` and
  ``MODEL_RESPONSE_MAX_BYTES``.
* Streaming: ``stream=True``; text pieces go to ``on_text`` as they come; tool calls are assembled
  by their ``index`` (parallel calls: several indexes); the text and calls' arguments together are cut
  at ``MODEL_REPLY_CHARS``, and a reply is cut at more than :data:`~.base.MAX_TOOL_CALLS` calls
  (the reply is then ``cut``: its calls are dropped, never half-sent).
* No automatic retry (``max_retries=0``): a 429 is said to the person at once.

Errors map to :class:`~.base.ProviderError` codes: connection failures ``provider_unavailable``,
429 ``provider_rate_limited``, the time bound ``provider_timeout``, 401/403 ``provider_refused``,
other statuses ``provider_error``, an answer that is not a chat completion ``provider_malformed``,
the URL policy ``provider_url_refused``. The API key is never logged or put in a reason.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from .. import conf
from ..mcp.outbound import OutboundPolicy, OutboundRefused, guarded_client
from .base import MAX_TOOL_CALLS, OnText, ProviderError, Reply, ToolCall, ToolSpec
from .policy import model_url_policy

logger = logging.getLogger("mrtrweb.providers")


class OpenAICompatible:
    kind = "openai"

    def __init__(self, *, name: str, base_url: str, model: str, api_key: str = "") -> None:
        self.name, self.base_url, self.model = name, base_url, model
        self._api_key = api_key

    def __repr__(self) -> str:  # never the key
        return f"OpenAICompatible(name={self.name!r}, model={self.model!r})"

    async def reply(self, messages: list[dict[str, Any]], tools: list[ToolSpec], on_text: OnText) -> Reply:
        timeout_s = float(conf.get("MODEL_REPLY_TIMEOUT_S"))
        try:
            async with asyncio.timeout(timeout_s):
                return await self._reply(messages, tools, on_text, timeout_s)
        except TimeoutError:
            logger.info("provider %s: no complete reply within %s s", self.name, timeout_s)
            raise ProviderError("provider_timeout", f"no complete reply within {timeout_s:g} s") from None

    async def _reply(self, messages: list[dict[str, Any]], tools: list[ToolSpec], on_text: OnText,
                     timeout_s: float) -> Reply:
        import openai
        from mrtrweb.mcp.url_policy import UrlRefused

        policy = model_url_policy()
        try:
            await policy.resolve(self.base_url)
        except UrlRefused as exc:
            logger.warning("provider %s: endpoint refused by MODEL_URL_POLICY (%s)", self.name, exc.code)
            raise ProviderError("provider_url_refused", f"the endpoint is refused by MODEL_URL_POLICY ({exc.code})") \
                from None
        http = guarded_client(OutboundPolicy(timeout_s=timeout_s, max_bytes=int(conf.get("MODEL_RESPONSE_MAX_BYTES"))),
                              mcp_origin=self.base_url, bound_mcp=True, mcp_policy=policy)
        client = openai.AsyncOpenAI(api_key=self._api_key or "not-needed", base_url=self.base_url, max_retries=0,
                                    timeout=timeout_s, http_client=http)
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "stream": True}
        if tools:
            kwargs["tools"] = [t.as_openai() for t in tools]
        try:
            stream = await client.chat.completions.create(**kwargs)
            return await _read_stream(stream, on_text, int(conf.get("MODEL_REPLY_CHARS")))
        except ProviderError:
            raise
        except openai.RateLimitError:
            logger.info("provider %s: rate limited (429)", self.name)
            raise ProviderError("provider_rate_limited", "the endpoint answered 429 (rate limited)") from None
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            logger.warning("provider %s: refused (%s)", self.name, exc.status_code)
            raise ProviderError("provider_refused", f"the endpoint refused the key ({exc.status_code})") from None
        except openai.APIStatusError as exc:
            logger.warning("provider %s: HTTP %s", self.name, exc.status_code)
            raise ProviderError("provider_error", f"the endpoint answered HTTP {exc.status_code}") from None
        except openai.APITimeoutError:
            raise ProviderError("provider_timeout", f"no complete reply within {timeout_s:g} s") from None
        except openai.APIConnectionError as exc:
            cause = _outbound_cause(exc)
            logger.warning("provider %s: unreachable (%s)", self.name, cause or type(exc.__cause__).__name__)
            if cause and "in time" in cause:
                raise ProviderError("provider_timeout", f"no complete reply within {timeout_s:g} s") from None
            raise ProviderError("provider_unavailable", "the endpoint could not be reached") from None
        except OutboundRefused as exc:
            logger.warning("provider %s: the outbound guard stopped the reply (%s)", self.name, exc.reason)
            code = ("provider_timeout" if "in time" in exc.reason else
                    "provider_unavailable" if "request failed" in exc.reason else "provider_malformed")
            raise ProviderError(code, exc.reason) from None
        except (openai.APIError, ValueError, TypeError, AttributeError, KeyError) as exc:
            logger.warning("provider %s: not a chat completion (%s)", self.name, type(exc).__name__)
            raise ProviderError("provider_malformed", "the endpoint's answer is not a chat completion") from None
        finally:
            try:
                await client.close()
            except Exception:  # noqa: BLE001 -- closing a failed client
                pass


def _outbound_cause(exc: BaseException) -> str:
    seen = exc
    for _ in range(5):
        seen = seen.__cause__ or seen.__context__
        if seen is None:
            return ""
        if isinstance(seen, OutboundRefused):
            return seen.reason
    return ""


async def _read_stream(stream: Any, on_text: OnText, max_chars: int) -> Reply:
    """The streamed chunks as one :class:`Reply` (see the module doc)."""
    text: list[str] = []
    size = 0
    calls: dict[int, dict[str, str]] = {}
    async for chunk in stream:
        for choice in getattr(chunk, "choices", None) or []:
            if getattr(choice, "index", 0) not in (0, None):
                continue  # n > 1 is never asked for
            delta = choice.delta
            if delta is None:
                continue
            piece = delta.content
            if isinstance(piece, str) and piece:
                if size + len(piece) > max_chars:
                    text.append(piece[:max_chars - size])
                    await _close(stream)
                    return Reply(text="".join(text), cut=True)
                size += len(piece)
                text.append(piece)
                await on_text(piece)
            for call in delta.tool_calls or []:
                index = int(call.index or 0)
                if index not in calls and len(calls) >= MAX_TOOL_CALLS:
                    logger.info("provider: a reply with more than %d tool calls, cut", MAX_TOOL_CALLS)
                    await _close(stream)
                    return Reply(text="".join(text), cut=True)
                slot = calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
                if call.id:
                    slot["id"] = str(call.id)[:200]
                fn = call.function
                if fn is not None:
                    if fn.name:
                        slot["name"] = (slot["name"] + str(fn.name))[:300]
                    if fn.arguments:
                        size += len(fn.arguments)
                        if size > max_chars:
                            await _close(stream)
                            return Reply(text="".join(text), cut=True)
                        slot["arguments"] += str(fn.arguments)
    return Reply(text="".join(text), tool_calls=tuple(
        ToolCall(id=c["id"] or f"call_{i}", name=c["name"], arguments=c["arguments"]) for i, c in sorted(calls.items())))


async def _close(stream: Any) -> None:
    try:
        await stream.close()
    except Exception:  # noqa: BLE001
        pass
