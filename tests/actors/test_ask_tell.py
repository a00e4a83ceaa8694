"""ask / tell: typed replies, raw payload kinds, custom intents, timeouts, no responders."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID, uuid4

import msgpack
import pytest
from _util import WAIT, barrier, subject_of
from pydantic import BaseModel

from actorbus import (
    Actor,
    ActorBusError,
    ActorRef,
    AskTimeoutError,
    Encoding,
    InvalidAddressError,
    MessageTooLargeError,
    NoRespondersError,
    handler,
)
from actorbus.codecs.errors import EncodeError
from actorbus.codecs.wire import H_DST, H_ID, H_INTENT, H_SRC, H_TRACE

pytestmark = pytest.mark.transports("nats", "local")


class AtQuestion(BaseModel):
    text: str


class AtAnswer(BaseModel):
    text: str
    n: int = 0


class AtDictQuestion(BaseModel):
    text: str


class AtNote(BaseModel):
    seq: int


class AtVersioned(BaseModel):
    __intent__ = "at.versioned.v2"
    value: int


class AtBig(BaseModel):
    size: int


class Responder(Actor):
    type_name = "responder"

    def __init__(self, notes: asyncio.Queue[int] | None = None) -> None:
        self.notes = notes
        self.count = 0

    @handler
    async def answer(self, q: AtQuestion) -> AtAnswer:
        self.count += 1
        return AtAnswer(text=q.text.upper(), n=self.count)

    @handler
    async def as_dict(self, q: AtDictQuestion) -> dict[str, Any]:
        return {"text": q.text, "n": 7}

    @handler
    async def echo_dict(self, d: dict[str, Any]) -> dict[str, Any]:
        return {"got": d, "me": self.address}

    @handler
    async def reverse(self, b: bytes) -> bytes:
        return b[::-1]

    @handler
    async def shout(self, s: str) -> str:
        return s.upper()

    @handler(intent="custom.op")
    async def custom(self, d: dict[str, Any]) -> dict[str, Any]:
        return {"custom": True, **d}

    @handler(intent="untyped")
    async def untyped(self, x: Any) -> Any:
        return x

    @handler
    async def versioned(self, v: AtVersioned) -> AtVersioned:
        return AtVersioned(value=v.value + 1)

    @handler
    async def note(self, n: AtNote) -> None:
        if self.notes is not None:
            self.notes.put_nowait(n.seq)

    @handler
    async def big(self, b: AtBig) -> bytes:
        return b"x" * b.size

    @handler(intent="unencodable")
    async def unencodable(self, _: dict[str, Any]) -> Any:
        return {"obj": object()}


@pytest.fixture
async def responder(system) -> ActorRef:
    return await system.spawn(Responder, "r1")


async def test_ask_returns_typed_model(system, responder: ActorRef) -> None:
    reply = await system.ask("responder/r1", AtQuestion(text="hi"), timeout=2)
    assert isinstance(reply, AtAnswer)
    assert reply == AtAnswer(text="HI", n=1)
    assert await responder.ask(AtQuestion(text="again"), timeout=2) == AtAnswer(text="AGAIN", n=2)


async def test_ref_by_address(system, responder: ActorRef) -> None:
    assert responder.address == "responder/r1"
    ref = system.ref("responder/r1")
    assert (await ref.ask(AtQuestion(text="x"), timeout=2)).text == "X"
    assert "responder/r1" in repr(ref)
    with pytest.raises(InvalidAddressError):
        system.ref("Bad Address")


async def test_returns_parameter_builds_model(system, responder: ActorRef) -> None:
    plain = await system.ask("responder/r1", AtDictQuestion(text="t"), timeout=2)
    assert plain == {"text": "t", "n": 7}
    typed = await system.ask("responder/r1", AtDictQuestion(text="t"), returns=AtAnswer, timeout=2)
    assert isinstance(typed, AtAnswer)
    assert typed == AtAnswer(text="t", n=7)


async def test_dict_bytes_str_handlers(system, responder: ActorRef) -> None:
    assert await system.ask("responder/r1", {"a": 1}, timeout=2) == {
        "got": {"a": 1},
        "me": "responder/r1",
    }
    assert await system.ask("responder/r1", b"\x00abc\xff", timeout=2) == b"\xffcba\x00"
    assert await system.ask("responder/r1", "quiet", timeout=2) == "QUIET"


async def test_handler_with_custom_intent(system, responder: ActorRef) -> None:
    reply = await system.ask("responder/r1", {"x": 1}, intent="custom.op", timeout=2)
    assert reply == {"custom": True, "x": 1}
    assert await system.ask("responder/r1", [1, "two", None], intent="untyped", timeout=2) == [
        1,
        "two",
        None,
    ]
    assert await system.ask("responder/r1", 42, intent="untyped", timeout=2) == 42


async def test_model_with_explicit_intent(system, responder: ActorRef) -> None:
    reply = await system.ask("responder/r1", AtVersioned(value=1), timeout=2)
    assert reply == AtVersioned(value=2)
    # the explicit intent is what travels, not the class name
    assert await system.ask("responder/r1", {"value": 5}, intent="at.versioned.v2", timeout=2) == (
        AtVersioned(value=6)
    )


async def test_handler_returning_none(system, responder: ActorRef) -> None:
    assert await system.ask("responder/r1", AtNote(seq=1), timeout=2) is None


async def test_anycast_reaches_an_instance(system, responder: ActorRef) -> None:
    reply = await system.ask("responder", {"any": 1}, timeout=2)
    assert reply["me"] == "responder/r1"


async def test_tell_delivers_in_order(system) -> None:
    notes: asyncio.Queue[int] = asyncio.Queue()
    await system.spawn(Responder, "t1", notes=notes)
    for i in range(20):
        await system.tell("responder/t1", AtNote(seq=i))
    got = [await asyncio.wait_for(notes.get(), WAIT) for _ in range(20)]
    assert got == list(range(20))


async def test_tell_to_nobody_is_fire_and_forget(system) -> None:
    await system.tell("nobody/here", AtNote(seq=1))


async def test_concurrent_asks_get_their_own_replies(system, responder: ActorRef) -> None:
    texts = [f"m{i}" for i in range(50)]
    replies = await asyncio.gather(
        *(system.ask("responder/r1", AtQuestion(text=t), timeout=5) for t in texts)
    )
    assert [r.text for r in replies] == [t.upper() for t in texts]
    assert sorted(r.n for r in replies) == list(range(1, 51))


async def test_ask_timeout_names_address_and_intent(system, raw_nc, ns: str) -> None:
    # somebody listens on the address but never answers
    await raw_nc.subscribe(subject_of(ns, "silent/s1"))
    await barrier(raw_nc)
    started = time.monotonic()
    with pytest.raises(AskTimeoutError) as info:
        await system.ask("silent/s1", AtQuestion(text="hello?"), timeout=0.3)
    elapsed = time.monotonic() - started
    err = info.value
    assert "silent/s1" in str(err)
    assert "AtQuestion" in str(err)
    assert "0.3" in str(err)
    assert (err.address, err.intent, err.timeout) == ("silent/s1", "AtQuestion", 0.3)
    assert isinstance(err, TimeoutError)
    assert err.code == "E_TIMEOUT"
    assert 0.25 <= elapsed < 2.0


async def test_ask_timeout_on_slow_handler(system) -> None:
    release = asyncio.Event()

    class Slow(Actor):
        type_name = "slow-at"

        @handler
        async def wait(self, _: dict[str, Any]) -> dict[str, Any]:
            await release.wait()
            return {}

    await system.spawn(Slow, "1")
    try:
        with pytest.raises(AskTimeoutError, match="slow-at/1"):
            await system.ask("slow-at/1", {}, timeout=0.2)
    finally:
        release.set()
    # the late reply to the timed-out ask does not confuse the next ask
    assert await system.ask("slow-at/1", {}, timeout=2) == {}


async def test_no_responders(system) -> None:
    with pytest.raises(NoRespondersError) as info:
        await system.ask("nobody/here", AtQuestion(text="x"), timeout=2)
    assert "nobody/here" in str(info.value)
    assert info.value.address == "nobody/here"
    assert info.value.intent == "AtQuestion"
    assert info.value.code == "E_NO_RESPONDERS"


async def test_no_responders_comes_within_half_a_second(system) -> None:
    """The brief second chance a no-responders answer gets stays brief."""
    started = time.monotonic()
    with pytest.raises(NoRespondersError):
        await system.ask("nobody/here", AtQuestion(text="x"), timeout=10)
    assert time.monotonic() - started < 1.5


async def test_an_ask_made_as_its_actor_is_spawned_elsewhere_is_answered(make_system) -> None:
    """Asked while another connection is still subscribing (or a host reconnects):
    the no-responders answer is asked again within the deadline, not raised."""
    caller = await make_system()
    host = await make_system()
    for n in range(20):
        asked = asyncio.create_task(caller.ask(f"responder/s{n}", AtQuestion(text="x"), timeout=3))
        await host.spawn(Responder, f"s{n}")
        assert (await asked).text == "X"


async def test_no_responders_after_stop_actor(system, responder: ActorRef) -> None:
    assert (await system.ask("responder/r1", AtQuestion(text="x"), timeout=2)).text == "X"
    await system.stop_actor("responder/r1")
    assert "responder/r1" not in system.local_actors()
    with pytest.raises(NoRespondersError):
        await system.ask("responder/r1", AtQuestion(text="x"), timeout=2)


async def test_invalid_address_rejected_before_sending(system) -> None:
    for bad in ("Bad/1", "x/a.b", ""):
        with pytest.raises(InvalidAddressError):
            await system.ask(bad, {}, timeout=1)
        with pytest.raises(InvalidAddressError):
            await system.tell(bad, {})


async def test_too_large_request_raises_before_sending(system, raw_nc, ns: str) -> None:
    seen: list[bytes] = []

    async def record(msg: Any) -> None:
        seen.append(msg.data)

    await raw_nc.subscribe(subject_of(ns, "responder/r1"), cb=record)
    await system.spawn(Responder, "r1")
    with pytest.raises(MessageTooLargeError) as info:
        await system.ask("responder/r1", b"x" * 950_000, timeout=2)
    assert info.value.what == "payload"
    with pytest.raises(MessageTooLargeError):
        await system.tell("responder/r1", b"x" * 950_000)
    # the actor still works and nothing oversized went out
    assert await system.ask("responder/r1", b"ok", timeout=2) == b"ko"
    await barrier(raw_nc)
    assert all(len(data) < 10_000 for data in seen)


async def test_too_large_reply_becomes_typed_error(system, responder: ActorRef) -> None:
    with pytest.raises(MessageTooLargeError, match="payload"):
        await system.ask("responder/r1", AtBig(size=950_000), timeout=3)
    assert await system.ask("responder/r1", AtBig(size=10), timeout=2) == b"x" * 10


async def test_unencodable_reply_becomes_typed_error(system, responder: ActorRef) -> None:
    with pytest.raises(EncodeError, match="cannot encode"):
        await system.ask("responder/r1", {}, intent="unencodable", timeout=2)
    assert (await system.ask("responder/r1", AtQuestion(text="x"), timeout=2)).text == "X"


async def test_json_encoding_round_trip(system, make_system, raw_nc, ns: str) -> None:
    await system.spawn(Responder, "j1")
    client = await make_system(encoding=Encoding.JSON)
    reply = await client.ask("responder/j1", AtQuestion(text="json"), timeout=2)
    assert reply == AtAnswer(text="JSON", n=1)
    assert await client.ask("responder/j1", {"k": [1, 2]}, timeout=2) == {
        "got": {"k": [1, 2]},
        "me": "responder/j1",
    }
    # the request really was JSON on the wire, and the reply came back in JSON
    reply_msg = await raw_nc.request(
        subject_of(ns, "responder/j1"),
        b'{"dst":"responder/j1","intent":"AtQuestion","content":{"text":"raw"}}',
        headers={"Ab-Enc": "json"},
        timeout=2,
    )
    assert reply_msg.headers is not None
    assert reply_msg.headers.get("Ab-Enc") == "json"
    body = json.loads(reply_msg.data)
    assert body["intent"] == "AtAnswer"
    assert body["content"]["text"] == "RAW"


async def test_routing_headers_on_the_wire(system, raw_nc, ns: str) -> None:
    got: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    async def record(msg: Any) -> None:
        if not got.done():
            got.set_result(msg)

    await raw_nc.subscribe(subject_of(ns, "watched/w1"), cb=record)
    await barrier(raw_nc)
    await system.tell("watched/w1", AtNote(seq=3), session_id="sess-1")
    msg = await asyncio.wait_for(got, WAIT)
    body = msgpack.unpackb(msg.data)
    headers = msg.headers
    assert headers[H_ID] == body["id"]
    assert headers[H_SRC] == body["src"] == system.client_address
    assert headers[H_DST] == body["dst"] == "watched/w1"
    assert headers[H_INTENT] == body["intent"] == "AtNote"
    assert headers[H_TRACE] == body["context"]["trace_id"]
    assert len(headers[H_TRACE]) == 32
    assert body["context"]["session_id"] == "sess-1"
    assert body["content"] == {"seq": 3}


async def test_calls_after_close_are_refused(make_system) -> None:
    client = await make_system()
    await client.close()
    with pytest.raises(ActorBusError, match="closed"):
        await client.ask("responder/r1", {}, timeout=1)
    with pytest.raises(ActorBusError, match="closed"):
        await client.tell("responder/r1", {})
    with pytest.raises(ActorBusError, match="closed"):
        await client.spawn(Responder, "x")
    await client.close()  # idempotent


async def test_handler_signature_errors() -> None:
    with pytest.raises(TypeError, match="async def"):

        class NotAsync(Actor):
            @handler
            def sync(self, d: dict[str, Any]) -> None:  # type: ignore[misc]
                return None

    with pytest.raises(TypeError, match="both take intent"):

        class Duplicate(Actor):
            @handler
            async def one(self, d: dict[str, Any]) -> None:
                return None

            @handler
            async def two(self, d: dict[str, Any]) -> None:
                return None

    with pytest.raises(TypeError, match="annotate"):

        class Unannotated(Actor):
            @handler
            async def what(self, x: int) -> None:
                return None

    with pytest.raises(ValueError, match="reserved"):

        class Reserved(Actor):
            @handler(intent="$error")
            async def err(self, d: dict[str, Any]) -> None:
                return None

    with pytest.raises(InvalidAddressError):

        class BadTopic(Actor):
            @handler(topic="news..x")
            async def news(self, d: dict[str, Any]) -> None:
                return None


def test_type_names() -> None:
    class MyFancyAgent(Actor):
        pass

    assert MyFancyAgent.type_name == "my-fancy-agent"
    assert Responder.type_name == "responder"
    assert set(Responder.handlers) >= {"AtQuestion", "dict", "bytes", "text", "custom.op"}


def _make_twin() -> type[BaseModel]:
    class AtTwin(BaseModel):  # same class name, different model: the intent is ambiguous
        other: str = "b"

    return AtTwin


class AtTwin(BaseModel):
    value: int = 1


async def test_ambiguous_intent_comes_back_as_plain_data(system, caplog, monkeypatch) -> None:
    from actorbus.actors import messages

    monkeypatch.setattr(messages, "_ambiguous", set())  # said once per process: said here
    Twin2 = _make_twin()

    class TwinHost(Actor):
        type_name = "twin-host"

        @handler
        async def one(self, _: AtNote) -> AtTwin:
            return AtTwin(value=5)

        @handler(intent="two")
        async def two(self, _: dict[str, Any]) -> Any:
            return Twin2(other="x")

    await system.spawn(TwinHost, "t")
    # the second model named AtTwin is remembered when first sent
    assert await system.ask("twin-host/t", {}, intent="two", returns=Twin2, timeout=2) == Twin2(
        other="x"
    )
    reply = await system.ask("twin-host/t", AtNote(seq=1), timeout=2)
    assert reply == {"value": 5}  # not silently the wrong model
    typed = await system.ask("twin-host/t", AtNote(seq=1), returns=AtTwin, timeout=2)
    assert typed == AtTwin(value=5)
    assert any("AtTwin" in r.getMessage() for r in caplog.records), "no warning about it"


class AtRich(BaseModel):
    when: datetime
    uid: UUID
    amount: Decimal
    tags: set[str]


async def test_rich_field_types_round_trip(system, make_system) -> None:
    class Keeper(Actor):
        type_name = "keeper"

        @handler
        async def keep(self, r: AtRich) -> AtRich:
            return r

    await system.spawn(Keeper, "k")
    value = AtRich(
        when=datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC),
        uid=uuid4(),
        amount=Decimal("12.50"),
        tags={"a", "b"},
    )
    assert await system.ask("keeper/k", value, timeout=2) == value
    json_client = await make_system(encoding=Encoding.JSON)
    assert await json_client.ask("keeper/k", value, timeout=2) == value


async def test_json_stream_frames_come_back_in_json(system, raw_nc, ns: str) -> None:
    class Counter(Actor):
        type_name = "json-counter"

        @handler
        async def count(self, n: dict[str, int]) -> Any:
            for i in range(n["n"]):
                yield {"i": i}

    await system.spawn(Counter, "c")
    inbox = raw_nc.new_inbox()
    sub = await raw_nc.subscribe(inbox)
    request = {
        "dst": "json-counter/c",
        "intent": "dict",
        "content": {"n": 2},
        "context": {"stream": True},
    }
    await raw_nc.publish(
        subject_of(ns, "json-counter/c"),
        json.dumps(request).encode(),
        reply=inbox,
        headers={"Ab-Enc": "json"},
    )
    frames = [await sub.next_msg(2) for _ in range(3)]
    for frame in frames:
        assert frame.headers is not None
        assert frame.headers.get("Ab-Enc") == "json", "a JSON caller got a non-JSON frame"
    bodies = [json.loads(f.data) for f in frames]
    assert [b["intent"] for b in bodies] == ["dict", "dict", "$end"]
