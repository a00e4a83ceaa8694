"""The answering side of a message: replies, stream frames and typed errors.

Replies go back in the encoding the request came in (a JSON tool gets JSON), as
envelopes whose context points at the request (``parent_id``) and keeps its
trace. The envelopes themselves are built and read by ``actors/pipeline.py``;
this is where it is decided what to answer and when a bad message is only
logged (nobody waits for an answer).
"""

from __future__ import annotations

import logging
from typing import Any

from nats.aio.msg import Msg

from actorbus.actors.messages import INTENT_ERROR, INTENT_ITEMS, to_content
from actorbus.actors.pipeline import encode_answer, request_encoding
from actorbus.bus.transport import Transport
from actorbus.codecs.errors import ActorBusError, MessageTooLargeError
from actorbus.codecs.inbound import Inbound
from actorbus.codecs.wire import H_SEQ, Encoding, SizeLimits

log = logging.getLogger("actorbus.replies")


class Replies:
    def __init__(self, conn: Transport, limits: SizeLimits, debug: bool) -> None:
        self.conn = conn
        self.limits = limits
        self.debug = debug

    async def reply(self, msg: Msg, env: Inbound, address: str, result: Any) -> None:
        """Answer an ask with a handler's result."""
        intent, content = to_content(result)
        await self.send(msg.reply, env, intent, content, None, src=address, msg=msg)

    async def send(
        self,
        inbox: str,
        env: Inbound,
        intent: str,
        content: Any,
        headers: dict[str, str] | None,
        *,
        src: str | None = None,
        msg: Msg | None = None,
        reply: str = "",
    ) -> int:
        """Send one answer (a reply or a stream frame) to ``inbox``; ``reply`` asks
        the receiver for an answer (a stream's first frame, written at once: the
        stream's time to first item). Returns the bytes sent (a stream's window is
        sized by them)."""
        enc = Encoding.MSGPACK if msg is None or msg.headers is None else request_encoding(msg)
        try:
            body, encoded = encode_answer(
                env, src or env.dst, intent, content, enc, self.limits, headers
            )
        except ActorBusError as err:
            # The answer itself is bad (too large, not encodable): tell the caller why.
            await self.send_error(inbox, err, env, headers, src=src, msg=msg)
            return 0
        if not self.conn.publish_now(inbox, body, encoded, reply, at_once=bool(reply)):
            await self.conn.publish(inbox, body, encoded, reply=reply)
        return len(body)

    async def send_items(
        self,
        inbox: str,
        env: Inbound,
        items: list[Any],
        headers: dict[str, str],
        *,
        msg: Msg,
        reply: str = "",
    ) -> int:
        """Send a stream's items as one frame (``$items``: ``[[intent, content], ...]``);
        a frame over the size limit goes as two halves, each with its own
        ``Ab-Seq``, the credit request (if any) on the last. Returns the bytes sent."""
        if len(items) == 1:
            intent, content = to_content(items[0])
            return await self.send(inbox, env, intent, content, headers, msg=msg, reply=reply)
        frame = [list(to_content(item)) for item in items]
        enc = request_encoding(msg)
        try:
            body, encoded = encode_answer(
                env, env.dst, INTENT_ITEMS, frame, enc, self.limits, headers
            )
        except MessageTooLargeError:
            first = len(items) // 2
            seq = int(headers[H_SEQ])
            head = {H_SEQ: str(seq)}
            tail = {**headers, H_SEQ: str(seq + first)}
            sent = await self.send_items(inbox, env, items[:first], head, msg=msg, reply=reply)
            return sent + await self.send_items(inbox, env, items[first:], tail, msg=msg)
        except ActorBusError as err:
            await self.send_error(inbox, err, env, headers, msg=msg)
            return 0
        if not self.conn.publish_now(inbox, body, encoded, reply, at_once=bool(reply)):
            await self.conn.publish(inbox, body, encoded, reply=reply)
        return len(body)

    async def error(self, msg: Msg, err: ActorBusError, env: Inbound | None, address: str) -> None:
        """Answer ``msg`` with a typed error, or log it when nobody waits for one."""
        if not msg.reply:
            what = f"{env.intent!r} from {env.src}" if env else "undecodable message"
            log.warning("%s: dropped %s: %s", address, what, err)
            return
        await self.send_error(msg.reply, err, env, None, src=address, msg=msg)

    async def send_error(
        self,
        inbox: str,
        err: ActorBusError,
        env: Inbound | None,
        headers: dict[str, str] | None,
        *,
        src: str | None = None,
        msg: Msg | None = None,
    ) -> None:
        tb = getattr(err, "remote_traceback", None) if self.debug else None
        content = err.to_wire(include_traceback=tb)
        src = src or (env.dst if env else "")
        body, encoded = encode_answer(
            env, src, INTENT_ERROR, content, request_encoding(msg), self.limits, headers
        )
        await self.conn.publish(inbox, body, encoded)
