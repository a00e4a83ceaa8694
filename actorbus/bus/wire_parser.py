"""Reading messages off the NATS wire without nats-py's per-message regex work.

nats-py's parser matches every control line against regular expressions (an
``HMSG`` line, which every actorbus message is, only after the ``MSG``
expression failed), keeps the line's fields in a dict, and copies each payload
out of a ``bytearray`` it shifts after every message. On the path of every
``ask`` that is done twice (the request read by the actor, the reply by the
caller). :class:`MessageParser` reads ``MSG`` and ``HMSG`` lines by splitting
them, slices payloads out of the bytes the socket gave, and keeps only an
unfinished tail between reads. Anything else (``PING``, ``INFO``, ``-ERR`` ...)
and any line it cannot read is handed to nats-py's parser, which keeps its
meaning and its errors. The fields of a message whose payload has not all come
yet are kept where nats-py keeps them, so the two can take turns on one stream.

Each message goes to the client's ``deliver_now`` (a plain subscription's
message queued with no coroutine); what that declines goes to nats-py's
``_process_msg`` as before.
"""

from __future__ import annotations

from typing import Protocol

from nats.errors import ProtocolError
from nats.protocol.parser import AWAITING_CONTROL_LINE, AWAITING_MSG_PAYLOAD, Parser

_CRLF = b"\r\n"


class MessageSink(Protocol):
    """What the parser hands messages to: the client (``bus/client.py``)."""

    def deliver_now(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> bool: ...

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None: ...


class MessageParser(Parser):
    """nats-py's parser with its message path done by slicing (see the module)."""

    nc: MessageSink

    async def parse(self, data: bytes = b"") -> None:
        buf = self.buf
        if buf:  # the tail of the last read: one message's start, or nats-py's
            buf.extend(data)
            if self.state == AWAITING_MSG_PAYLOAD and len(buf) < self.needed + 2:
                return  # a large payload still coming: kept, not copied at every read
            data = bytes(buf)
            buf.clear()
        pos, size = 0, len(data)
        nc = self.nc
        line: _MessageLine | None = None
        if self.state == AWAITING_MSG_PAYLOAD:  # a payload the last read did not finish
            args = self.msg_arg
            line = (args["sid"], args["subject"], args["reply"], self.header_needed, self.needed)
            self.state, self.header_needed = AWAITING_CONTROL_LINE, 0
        while True:
            if line is None:
                end = data.find(_CRLF, pos)
                if end < 0:
                    break  # no more, or the line's end is in the next read
                line = _message_line(data[pos:end].split())
                if line is None:
                    buf.extend(data[pos:])  # not a message: nats-py's parser takes the rest
                    await super().parse()
                    return
                pos = end + 2
            sid, subject, reply, header_size, needed = line
            if size - pos < needed + 2:  # kept where nats-py keeps it, for the next read
                self.msg_arg.update(sid=sid, subject=subject, reply=reply)
                self.header_needed, self.needed = header_size, needed
                self.state = AWAITING_MSG_PAYLOAD
                break
            if header_size:
                headers: bytes | None = data[pos : pos + header_size]
                payload = data[pos + header_size : pos + needed]
            else:
                headers = None
                payload = data[pos : pos + needed]
            pos += needed + 2
            line = None
            if not nc.deliver_now(sid, subject, reply, payload, headers):
                await nc._process_msg(sid, subject, reply, payload, headers)
        if pos < size:
            buf.extend(data[pos:])


# sid, subject, reply, header bytes, total bytes
_MessageLine = tuple[int, bytes, bytes, int, int]


def _message_line(fields: list[bytes]) -> _MessageLine | None:
    """An ``MSG``/``HMSG`` line's fields (None for any other line)."""
    count = len(fields)
    if not count:
        return None
    op = fields[0]
    if op == b"MSG" and count in (4, 5):
        header_at = 0
    elif op == b"HMSG" and count in (5, 6):
        header_at = count - 2
    else:
        return None
    try:
        sid = int(fields[2])
        needed = int(fields[-1])
        header_size = int(fields[header_at]) if header_at else 0
    except ValueError:
        raise ProtocolError("nats: malformed MSG") from None
    if not 0 <= header_size <= needed:
        raise ProtocolError("nats: malformed MSG")
    reply = fields[3] if count == (6 if header_at else 5) else b""
    return sid, fields[1], reply, header_size, needed
