"""The answering side of a message: decode what arrived, reply, report errors.

Replies go back in the encoding the request came in (a JSON tool gets JSON), as
envelopes whose context points at the request (``parent_id``) and keeps its
trace. The plain msgpack ask reply is the hot path of the whole system: no
headers, one pack, one publish.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from nats.aio.msg import Msg

from actorbus.actors.messages import INTENT_ERROR, to_content
from actorbus.bus.client import BadHeaders
from actorbus.bus.connection import BusConnection
from actorbus.codecs.envelope import new_id, now_ms
from actorbus.codecs.errors import ActorBusError, DecodeError, EncodeError, ExpiredError
from actorbus.codecs.inbound import Inbound, decode_inbound
from actorbus.codecs.wire import (
    H_ENC,
    Encoding,
    SizeLimits,
    check_size,
    encode_body,
    encoding_from_header,
    pack,
)

log = logging.getLogger("actorbus.replies")


def _answer(env: Inbound | None, src: str, intent: str, content: Any) -> dict[str, Any]:
    """The envelope (as plain data) that answers ``env``."""
    return {
        "id": new_id(),
        "ts": now_ms(),
        "src": src,
        "dst": env.src if env else "",
        "intent": intent,
        "content": content,
        "context": {"trace_id": env.context.trace_id, "parent_id": env.id} if env else {},
    }


def request_encoding(msg: Msg | None) -> Encoding:
    """The encoding a request came in (msgpack unless its Ab-Enc header says otherwise)."""
    headers = msg.headers if msg is not None else None
    if headers is None or H_ENC not in headers:  # no header parse needed
        return Encoding.MSGPACK
    try:
        return encoding_from_header(headers[H_ENC])
    except DecodeError:
        return Encoding.MSGPACK


class Replies:
    def __init__(self, conn: BusConnection, limits: SizeLimits, debug: bool) -> None:
        self.conn = conn
        self.limits = limits
        self.debug = debug

    def decode(self, msg: Msg, address: str) -> Inbound:
        """What arrived for ``address``, or the typed error to answer with."""
        headers: Mapping[str, str] | None = msg.headers  # nats-py says dict; ours may not be
        if headers is None:
            enc = Encoding.MSGPACK
        elif H_ENC in headers:
            enc = encoding_from_header(headers[H_ENC])  # an unknown one is a DecodeError
        elif type(headers) is BadHeaders:
            raise DecodeError(headers.problem)
        else:
            enc = Encoding.MSGPACK
        env = decode_inbound(msg.data, enc, self.limits)
        ttl = env.context.ttl_ms
        if ttl is not None and now_ms() > env.ts + ttl:
            raise ExpiredError(f"message {env.id} to {address} expired ({ttl} ms ttl)")
        return env

    async def decode_or_answer(self, msg: Msg, address: str) -> Inbound | None:
        """decode(), answering a bad message with its typed error instead of raising."""
        try:
            return self.decode(msg, address)
        except ActorBusError as err:
            await self.error(msg, err, None, address)
            return None

    async def reply(self, msg: Msg, env: Inbound, address: str, result: Any) -> None:
        """Answer an ask with a handler's result."""
        intent, content = to_content(result)
        headers = msg.headers
        if headers is not None and H_ENC in headers:
            await self.send(msg.reply, env, intent, content, None, src=address, msg=msg)
            return
        try:
            body = pack(_answer(env, address, intent, content))
        except (TypeError, ValueError, OverflowError) as exc:
            err = EncodeError(f"{address} cannot encode its {intent!r} reply: {exc}")
            await self.send_error(msg.reply, err, env, None, src=address)
            return
        if len(body) > self.limits.max_payload:
            try:
                check_size(body, content, Encoding.MSGPACK, self.limits)
            except ActorBusError as err:
                await self.send_error(msg.reply, err, env, None, src=address)
                return
        await self.conn.publish(msg.reply, body)

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
    ) -> None:
        """Send one answer (a reply or a stream frame) to ``inbox``; ``reply`` asks
        the receiver for an answer (a stream's first frame)."""
        enc = request_encoding(msg)
        try:
            body = encode_body(_answer(env, src or env.dst, intent, content), enc)
            check_size(body, content, enc, self.limits)
        except ActorBusError as err:
            # The answer itself is bad (too large, not encodable): tell the caller why.
            await self.send_error(inbox, err, env, headers, src=src, msg=msg)
            return
        if enc is not Encoding.MSGPACK:
            headers = {**(headers or {}), H_ENC: enc.value}
        await self.conn.publish(inbox, body, headers, reply=reply)

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
        data = _answer(
            env, src or (env.dst if env else ""), INTENT_ERROR, err.to_wire(include_traceback=tb)
        )
        enc = request_encoding(msg)
        if enc is not Encoding.MSGPACK:
            headers = {**(headers or {}), H_ENC: enc.value}
        await self.conn.publish(inbox, encode_body(data, enc), headers)
