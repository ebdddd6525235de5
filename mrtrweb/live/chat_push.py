"""A conversation's pushes to the browser (issue 32, :mod:`mrtrweb.chat.push`): a mixin of
:class:`~mrtrweb.live.consumers.OperationsConsumer`, whose ``dispatch`` lets them through only
while the session holds. They reach only the person's own group (``mrtrweb.user.<id>``), which
only their conversations push to.

* ``{"type": "chat.delta", "conversation": <uuid>, "text": <a piece of the model's reply>}`` --
  the page shows it as text (``textContent``) while the reply streams;
* ``{"type": "chat.update", "conversation": <uuid>}`` -- the conversation changed: the page re-reads
  its messages (rendered server-side, Markdown sanitised).
"""

from __future__ import annotations

import uuid
from typing import Any

__all__ = ["ChatPush"]

#: the most characters one delta frame carries (a sender batches more: never more than this here)
MAX_DELTA_CHARS = 4096


def _conversation(value: Any) -> str | None:
    try:
        return str(uuid.UUID(str(value)))
    except (ValueError, TypeError):
        return None


class ChatPush:
    async def chat_delta(self, event: dict[str, Any]) -> None:
        conv = _conversation(event.get("conversation"))
        if conv is None:
            return
        await self.send_json({"type": "chat.delta", "conversation": conv,  # type: ignore[attr-defined]
                              "text": str(event.get("text") or "")[:MAX_DELTA_CHARS]})

    async def chat_update(self, event: dict[str, Any]) -> None:
        conv = _conversation(event.get("conversation"))
        if conv is not None:
            await self.send_json({"type": "chat.update", "conversation": conv})  # type: ignore[attr-defined]
