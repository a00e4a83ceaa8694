"""Authenticated and sealed messages on a real nats-server, attacked from a plain
nats-py connection: what an outsider sees, forges, replays and answers."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest
from _util import WAIT, guard_of
from pydantic import BaseModel

from actorbus import Actor, ActorSystem, handler
from actorbus.codecs.errors import AuthError
from actorbus.codecs.wire import pack, unpack
from actorbus.security import guard as guard_module
from actorbus.security.guard import SecuritySettings
from actorbus.security.sessions import AUTH_HEADER, SESSION_HEADER
from actorbus.testing import eventually

SECRET = "PII-4111-1111-1111-1111"


class Note(BaseModel):
    text: str


class Vault(Actor):
    type_name = "vault"

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    @handler
    async def keep(self, note: Note) -> str:
        self.seen.append((self.envelope.src, note.text))
        return f"kept {note.text}"


class Loose(Actor):
    type_name = "loose"
    security = "allow"

    @handler
    async def keep(self, note: Note) -> str:
        return f"loose {note.text}"


class Spy:
    """An outsider's plain connection listening to everything of one test: its
    namespace's subjects and the reply inboxes of the systems it is told to
    ``watch``. It subscribes before the test's systems connect: a subscription
    made after a publisher's connection was up has been seen (with nats-server
    2.15) to miss that connection's messages for a while. It listens to every
    inbox from the start and keeps to those of the watched systems when asked
    what it saw, so what other tests leave on the shared server cannot count."""

    def __init__(self, nc: nats.NATS, ns: str) -> None:
        self.nc = nc
        self.subjects = [f"{ns}.>", "_INBOX.>"]
        self.prefixes = [f"{ns}."]
        self.heard: list[nats.aio.msg.Msg] = []
        self.subs: list[Any] = []

    async def __aenter__(self) -> Spy:
        async def collect(msg: nats.aio.msg.Msg) -> None:
            self.heard.append(msg)

        self.subs = [await self.nc.subscribe(s, cb=collect) for s in self.subjects]
        await self.nc.flush()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for sub in self.subs:
            await sub.unsubscribe()

    def watch(self, *systems: ActorSystem) -> None:
        """Count the reply inboxes of ``systems`` too."""
        self.prefixes += [f"_INBOX.{s.runtime.system_id}." for s in systems]

    @property
    def wire(self) -> list[nats.aio.msg.Msg]:
        """What it heard of this test: the namespace and the watched inboxes."""
        return [m for m in self.heard if m.subject.startswith(tuple(self.prefixes))]

    def seen(self, suffix: str) -> list[nats.aio.msg.Msg]:
        return [m for m in self.wire if m.subject.endswith(suffix)]

    async def settled(self) -> None:
        """Until the spy has handled everything the server sent it so far: a marker
        published now on each subscription reaches it after all that (one server,
        one connection, one subscription's messages in order)."""
        token = uuid.uuid4().hex
        markers = {s.replace(">", f"spy.{token}") for s in self.subjects}
        for marker in markers:
            await self.nc.publish(marker, b"")
        subjects = lambda: {m.subject for m in self.heard}  # noqa: E731
        await eventually(lambda: markers <= subjects(), what=f"the spy's markers {markers}")

    def carries(self, secret: str) -> list[str]:
        """Subjects of the messages whose bytes hold ``secret`` in the clear."""
        return [m.subject for m in self.wire if secret.encode() in m.data]


@pytest.fixture
def settings(tmp_path: Path) -> SecuritySettings:
    return SecuritySettings(home=tmp_path / "home")


async def secure_pair(make_system: Any, settings: SecuritySettings) -> tuple[ActorSystem, Vault]:
    host = await make_system(security=settings)
    ref = await host.spawn(Vault, "1")
    vault = host.hosting.residents.cells[ref.address][0].instance
    assert isinstance(vault, Vault)
    return host, vault


async def test_an_ask_goes_sealed_and_authenticated(
    make_system: Any, settings: SecuritySettings, raw_nc: nats.NATS, ns: str
) -> None:
    async with Spy(raw_nc, ns) as spy:
        host, vault = await secure_pair(make_system, settings)
        caller = await make_system(security=settings)
        spy.watch(host, caller)
        assert await caller.ask("vault/1", Note(text=SECRET)) == f"kept {SECRET}"
        await spy.settled()
    request = spy.seen(".a.vault.1")
    assert request, f"the spy saw no request, only {[m.subject for m in spy.wire]}"
    assert vault.seen == [(caller.client_address, SECRET)]
    assert request[0].headers is not None
    assert SESSION_HEADER in request[0].headers  # sealed: the content authenticates it all
    assert AUTH_HEADER not in request[0].headers
    inbox = f"_INBOX.{caller.runtime.system_id}."
    assert [m for m in spy.wire if m.subject.startswith(inbox) and ".spy." not in m.subject]
    assert spy.carries(SECRET) == []  # neither the request nor the reply
    assert guard_of(host).refused == 0


async def test_an_outsider_is_refused_and_the_actor_goes_on(
    make_system: Any, settings: SecuritySettings, raw_nc: nats.NATS, ns: str
) -> None:
    _, vault = await secure_pair(make_system, settings)
    body = pack(
        {
            "id": "forged-1",
            "ts": 0,
            "src": "bank/1",
            "dst": "vault/1",
            "intent": "Note",
            "content": {"text": "transfer"},
        }
    )
    answer = await raw_nc.request(f"{ns}.a.vault.1", body, timeout=WAIT)
    reply = unpack(answer.data)
    assert reply["intent"] == "$error"
    assert reply["content"]["code"] == "E_AUTH"
    assert "only authenticated" in reply["content"]["message"]
    assert vault.seen == []
    caller = await make_system(security=settings)
    assert await caller.ask("vault/1", Note(text="after")) == "kept after"


async def test_tampered_replayed_and_misattributed_messages_are_refused(
    make_system: Any,
    settings: SecuritySettings,
    raw_nc: nats.NATS,
    ns: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with Spy(raw_nc, ns) as spy:
        host, vault = await secure_pair(make_system, settings)
        caller = await make_system(security=settings)
        await caller.tell("vault/1", Note(text="once"))
        await caller.ask("vault/1", Note(text="sync"))  # the tell is handled by now
        await spy.settled()
    captured = spy.seen(".a.vault.1")
    assert len(captured) == 2, [m.subject for m in spy.wire]
    original = captured[0]
    assert original.headers is not None
    headers = dict(original.headers)

    async def refused_with(data: bytes, hdrs: dict[str, str]) -> str:
        answer = await raw_nc.request(f"{ns}.a.vault.1", data, timeout=WAIT, headers=hdrs)
        reply = unpack(answer.data)
        assert reply["intent"] == "$error"
        if reply.get("meta", {}).get("cipher"):  # answered on the session: only its caller reads it
            return "sealed"
        return str(reply["content"]["code"]) + ": " + str(reply["content"]["message"])

    # the captured message again, as it was: a replay, refused on its own session
    assert await refused_with(original.data, headers) == "sealed"
    assert "a replay" in caplog.text
    # one byte of the sealed content changed: it no longer opens
    at = original.data.index(b"context") - 10
    tampered = bytearray(original.data)
    tampered[at] ^= 1
    assert "forged or altered" in await refused_with(bytes(tampered), headers)
    # the cipher's name changed
    renamed = original.data.replace(b"A256GCM", b"A256GCX")
    assert "unknown cipher" in await refused_with(renamed, headers)
    # a valid session header with a body of the attacker's making, unsealed and untagged
    fake = pack(
        {
            "id": "x",
            "ts": 0,
            "src": "client/x",
            "dst": "vault/1",
            "intent": "Note",
            "content": {"text": "evil"},
        }
    )
    assert "without Ab-Auth" in await refused_with(fake, headers)
    tag = {**headers, AUTH_HEADER: "A" * 38}
    assert "forged" in await refused_with(fake, tag)  # with a made-up tag
    assert [text for _, text in vault.seen] == ["once", "sync"]
    assert guard_of(host).refused == 5


async def test_a_member_cannot_send_as_another_members_client_address(
    make_system: Any, settings: SecuritySettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client address is the member's key id: an insider that puts another
    member's address in ``src`` signs with its own key, which does not cover it."""
    from actorbus.actors.runtime import Runtime

    _, vault = await secure_pair(make_system, settings)
    victim = await make_system(security=settings)
    insider = await make_system(security=settings)
    assert victim.client_address == f"client/{guard_of(victim).system.kid}"
    assert await victim.ask("vault/1", Note(text="mine")) == "kept mine"
    theirs = victim.client_address
    monkeypatch.setattr(Runtime, "client_address", property(lambda _: theirs))
    with pytest.raises(AuthError, match="does not cover sending as client/"):
        await insider.ask("vault/1", Note(text="in your name"), timeout=WAIT)
    monkeypatch.undo()
    assert vault.seen == [(victim.client_address, "mine")]


async def test_a_forged_reply_is_dropped_and_the_real_one_taken(
    make_system: Any, settings: SecuritySettings, raw_nc: nats.NATS, ns: str
) -> None:
    """An outsider in the actor's queue group answers fast; the caller keeps
    waiting for the reply that checks out."""

    class Slow(Actor):
        type_name = "slow"

        @handler
        async def keep(self, note: Note) -> str:
            await asyncio.sleep(0.3)  # the forger answers first
            return f"real {note.text}"

    host = await make_system(security=settings)
    await host.spawn(Slow, "1")

    async def forge(msg: nats.aio.msg.Msg) -> None:
        await raw_nc.publish(
            msg.reply,
            pack(
                {
                    "id": "f",
                    "ts": 0,
                    "src": "slow/1",
                    "dst": "",
                    "intent": "str",
                    "content": "forged",
                }
            ),
        )

    await raw_nc.subscribe(f"{ns}.a.slow.1", cb=forge)  # no queue: sees every ask
    await raw_nc.flush()
    caller = await make_system(security=settings)
    assert await caller.ask("slow/1", Note(text="x"), timeout=WAIT) == "real x"
    assert caller.runtime.mux.dropped >= 1


async def test_allow_takes_the_unauthenticated_and_still_checks_the_rest(
    make_system: Any, settings: SecuritySettings, raw_nc: nats.NATS, ns: str
) -> None:
    host = await make_system(security=settings)
    await host.spawn(Loose, "1")
    body = pack(
        {
            "id": "plain-1",
            "ts": 0,
            "src": "client/x",
            "dst": "loose/1",
            "intent": "Note",
            "content": {"text": "hi"},
        }
    )
    answer = await raw_nc.request(f"{ns}.a.loose.1", body, timeout=WAIT)
    assert unpack(answer.data)["content"] == "loose hi"
    caller = await make_system(security=settings)
    assert await caller.ask("loose/1", Note(text="sealed")) == "loose sealed"


async def test_a_system_trusting_another_authority_is_refused(
    make_system: Any, settings: SecuritySettings, tmp_path: Path
) -> None:
    await secure_pair(make_system, settings)
    stranger = await make_system(security=SecuritySettings(home=tmp_path / "elsewhere"))
    with pytest.raises(AuthError):
        await stranger.ask("vault/1", Note(text="let me in"), timeout=WAIT)


async def test_durable_messages_stay_sealed_in_the_stream_and_open_for_the_actor(
    make_system: Any, settings: SecuritySettings, ns: str
) -> None:
    class Ledger(Actor):
        type_name = "ledger"
        durable = True
        got: asyncio.Queue[str] = asyncio.Queue()

        @handler
        async def keep(self, note: Note) -> None:
            await Ledger.got.put(note.text)

    sender = await make_system(security=settings)
    host = await make_system(security=settings)
    await host.spawn(Ledger, "1")
    await sender.tell("ledger/1", Note(text=SECRET), durable=True)
    assert await asyncio.wait_for(Ledger.got.get(), WAIT) == SECRET
    raw = await sender.runtime.js.get_last_msg(f"actorbus-{ns}-d-ledger", f"{ns}.d.ledger.1")
    assert SECRET.encode() not in raw.data
    # history opens it where the recipient's key is (held by a host, or in the
    # machine's home), and nowhere else
    [seen_by_host] = [e async for e in host.history(address="ledger/1")]
    assert seen_by_host.content == {"text": SECRET}
    [opened_at_home] = [e async for e in sender.history(address="ledger/1")]
    assert opened_at_home.content == {"text": SECRET}
    assert settings.home is not None
    key = settings.home / "types" / "ledger.key"
    key.rename(key.with_suffix(".elsewhere"))
    elsewhere = await make_system(security=settings)  # a machine with no host of ledger
    [seen_elsewhere] = [e async for e in elsewhere.history(address="ledger/1")]
    assert seen_elsewhere.meta.cipher == "A256GCM"
    assert SECRET.encode() not in seen_elsewhere.content


async def test_a_stream_runs_on_its_session_with_frames_sealed(
    make_system: Any, settings: SecuritySettings, raw_nc: nats.NATS, ns: str
) -> None:
    class Spell(Actor):
        type_name = "spell"

        @handler
        async def spell(self, word: str) -> AsyncIterator[str]:
            for letter in word:
                yield f"{letter}-{SECRET}"

    async with Spy(raw_nc, ns) as spy:
        host = await make_system(security=settings)
        await host.spawn(Spell, "1")
        caller = await make_system(security=settings)
        spy.watch(host, caller)
        items = [i async for i in caller.stream("spell/1", "abc", timeout=WAIT)]
        await spy.settled()
    assert items == [f"a-{SECRET}", f"b-{SECRET}", f"c-{SECRET}"]
    # The spy saw the stream (its request, or its frames on the caller's inbox),
    # so that it saw no secret means something.
    frames = f"_INBOX.{caller.runtime.system_id}."
    traffic = [m.subject for m in spy.wire if "spy." not in m.subject]
    seen = [t for t in traffic if t.endswith(".spell.1") or t.startswith(frames)]
    assert seen, traffic
    assert spy.carries(SECRET) == []


class Account(Actor):
    """A keyed virtual actor: one live instance per key across the hosts."""

    type_name = "account"
    keyed = True

    @handler
    async def whoami(self, note: Note) -> str:
        return f"{self.address} on {self.system.system_id}: {note.text}"


async def test_keyed_actors_forwarded_between_hosts_stay_sealed(
    make_system: Any, settings: SecuritySettings, raw_nc: nats.NATS, ns: str
) -> None:
    """A message that reaches a host not holding the key is forwarded to the
    holder with its session; the holder opens it and the caller its answer."""
    async with Spy(raw_nc, ns) as spy:
        hosts = [await make_system(security=settings) for _ in range(2)]
        for host in hosts:
            await host.register(Account)
        caller = await make_system(security=settings)
        spy.watch(*hosts, caller)
        answers = [
            await caller.ask(f"account/{k}", Note(text=SECRET), timeout=WAIT) for k in "abcdef"
        ]
        again = [
            await caller.ask(f"account/{k}", Note(text=SECRET), timeout=WAIT) for k in "abcdef"
        ]
        await spy.settled()
    assert answers == again  # each key answered by the same host both times
    assert {a.split(" on ")[1].split(":")[0] for a in answers} <= {h.system_id for h in hosts}
    assert all(a.endswith(SECRET) for a in answers)
    assert spy.seen(".account.a")
    assert spy.carries(SECRET) == []


async def test_rotation_keeps_a_grace_period_and_revocation_ends_it(
    make_system: Any, settings: SecuritySettings
) -> None:
    host, vault = await secure_pair(make_system, settings)
    caller = await make_system(security=settings)
    assert await caller.ask("vault/1", Note(text="before")) == "kept before"
    host_guard, caller_guard = guard_of(host), guard_of(caller)
    old_caller = caller_guard.system.did
    new_caller = await caller_guard.rotate()  # a new system identity: new sessions
    assert new_caller.did != old_caller
    assert await caller.ask("vault/1", Note(text="rotated caller")) == "kept rotated caller"
    await host_guard.rotate("vault")  # the caller's session is still sealed to the old key
    assert await caller.ask("vault/1", Note(text="rotated type")) == "kept rotated type"
    assert [t for _, t in vault.seen] == ["before", "rotated caller", "rotated type"]
    jti = caller_guard.trust.signer(new_caller.kid).jti
    await caller_guard.revoke(jti)

    await eventually(lambda: host_guard.trust.is_revoked(jti), what="the host sees it")
    with pytest.raises(AuthError, match="revoked"):
        await caller.ask("vault/1", Note(text="after revocation"), timeout=WAIT)


async def test_a_backlog_opens_after_its_session_ended(
    make_system: Any, settings: SecuritySettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Journal(Actor):
        type_name = "journal"
        durable = True
        got: asyncio.Queue[str] = asyncio.Queue()

        @handler
        async def keep(self, note: Note) -> None:
            await Journal.got.put(note.text)

    first = await make_system(security=settings)
    await first.spawn(Journal, "1")  # the type's key and credential are known
    await first.close()
    sender = await make_system(security=settings)
    await sender.tell("journal/1", Note(text="stored an hour ago"), durable=True)
    # read when its session (10 minutes) has long ended: it was genuine when stored
    real = guard_module._now_ms
    monkeypatch.setattr(guard_module, "_now_ms", lambda: real() + 60 * 60 * 1000)
    later = await make_system(security=settings)
    await later.spawn(Journal, "1")
    assert await asyncio.wait_for(Journal.got.get(), WAIT) == "stored an hour ago"
    assert guard_of(later).refused == 0
