"""A conversation's pushes to its person's WebSocket group (``mrtrweb.user.<id>``), never raising
(:func:`mrtrweb.runtime.push.group_send`): ``chat.delta`` (a piece of the model's reply as it
streams: text, shown as text by the page) and ``chat.update`` (the conversation changed: the page
re-reads its messages, rendered server-side with the safe Markdown renderer). The WebSocket relays
them (:mod:`mrtrweb.live.chat_push`) while the person's session holds."""

from __future__ import annotations

import time
from typing import Any

from ..runtime.push import group_send, user_group

#: a delta is pushed at most this often (seconds) and when this many characters wait
FLUSH_S = 0.1
FLUSH_CHARS = 2000


async def changed(user_id: Any, conversation_id: Any) -> None:
    await group_send(user_group(user_id), {"type": "chat.update", "conversation": str(conversation_id)},
                     what="chat update")


class Streamer:
    """Batches a reply's pieces into ``chat.delta`` pushes (:data:`FLUSH_S`, :data:`FLUSH_CHARS`)."""

    def __init__(self, user_id: Any, conversation_id: Any) -> None:
        self.user_id, self.conversation_id = user_id, str(conversation_id)
        self.buffer: list[str] = []
        self.size = 0
        self.last = time.monotonic()

    async def on_text(self, piece: str) -> None:
        self.buffer.append(piece)
        self.size += len(piece)
        if self.size >= FLUSH_CHARS or time.monotonic() - self.last >= FLUSH_S:
            await self.flush()

    async def flush(self) -> None:
        if not self.buffer:
            return
        text, self.buffer, self.size, self.last = "".join(self.buffer), [], 0, time.monotonic()
        await group_send(user_group(self.user_id), {"type": "chat.delta", "conversation": self.conversation_id,
                                                    "text": text}, what="chat delta")
