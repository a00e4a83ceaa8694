"""The authenticated broker: NATS JWT auth with nkeys and TLS on a real nats-server.
Outsiders cannot connect; members work normally but cannot delete the durable
store, read another system's replies or answer durable stores."""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import nats.errors
import nats.js.errors
import pytest
from _util import WAIT, raw_member
from pydantic import BaseModel

from actorbus import Actor, ActorSystem, ConnectionLostError, ConnectOptions, handler
from actorbus.bus.server import EmbeddedServer, ServerConfig
from actorbus.security.broker import BrokerAuth, DevCertificates


class Item(BaseModel):
    n: int


class Keeper(Actor):
    type_name = "keeper"
    durable = True
    got: asyncio.Queue[int] = asyncio.Queue()

    @handler
    async def keep(self, item: Item) -> None:
        await Keeper.got.put(item.n)

    @handler
    async def echo(self, text: str) -> str:
        return text


class Secured:
    def __init__(self, home: Path, ns: str) -> None:
        self.ns = ns
        self.auth = BrokerAuth(home)
        self.tls = DevCertificates(home)
        extra = self.auth.server_config([ns]) + self.tls.server_config()
        self.server = EmbeddedServer(ServerConfig(host="127.0.0.1", extra=extra))

    def options(self, name: str, *, admin: bool = False) -> ConnectOptions:
        creds, prefix = self.auth.write_user(self.ns, name, admin=admin)
        return ConnectOptions(
            credentials_file=str(creds),
            tls=self.tls.client_context(),
            inbox_prefix=prefix,
            reconnect_deadline=5.0,
        )

    async def raw(self, name: str, *, admin: bool = False, **connect: Any) -> nats.NATS:
        o = self.options(name, admin=admin)
        return await nats.connect(
            self.server.url,
            user_credentials=o.credentials_file,
            tls=o.tls,
            inbox_prefix=o.inbox_prefix,
            allow_reconnect=False,
            **connect,
        )


@pytest.fixture
async def secured(tmp_path: Path) -> AsyncIterator[Secured]:
    s = Secured(tmp_path / "home", f"b{uuid.uuid4().hex[:8]}")
    async with s.server:
        yield s


async def system_on(s: Secured, name: str) -> ActorSystem:
    return await ActorSystem.connect(
        s.server.url, namespace=s.ns, connect_options=s.options(name), registry=False
    )


async def test_outsiders_cannot_connect(secured: Secured) -> None:
    refused = (nats.errors.Error, OSError, TimeoutError)
    with pytest.raises(refused):  # TLS is required: no plaintext client gets in
        await nats.connect(secured.server.url, allow_reconnect=False, connect_timeout=2)
    tls_only = secured.tls.client_context()
    with pytest.raises(refused):  # TLS but no credentials: authorization violation
        await nats.connect(
            secured.server.url, tls=tls_only, allow_reconnect=False, connect_timeout=2
        )
    wrong_ca = ssl.create_default_context()  # the system CAs do not know the dev CA
    with pytest.raises(refused):
        await nats.connect(
            secured.server.url, tls=wrong_ca, allow_reconnect=False, connect_timeout=2
        )


async def test_members_work_and_cannot_destroy_the_store(secured: Secured) -> None:
    host = await system_on(secured, "host")
    caller = await system_on(secured, "caller")
    try:
        await host.spawn(Keeper, "1")
        assert await caller.ask("keeper/1", "hello", timeout=WAIT) == "hello"
        await caller.tell("keeper/1", Item(n=7), durable=True)
        assert await asyncio.wait_for(Keeper.got.get(), WAIT) == 7
        stream = f"actorbus-{secured.ns}-d-keeper"
        mallory = await secured.raw("mallory")  # a member gone bad
        try:
            js = mallory.jetstream(timeout=1.0)
            for attempt in (js.delete_stream, js.purge_stream):
                with pytest.raises((nats.errors.Error, TimeoutError)):  # refused: no answer
                    await attempt(stream)
            # nor a new config that keeps one message (it wiped 37 down to 1)
            config = (await js.stream_info(stream)).config
            with pytest.raises((nats.errors.Error, TimeoutError)):
                await js.update_stream(dataclasses.replace(config, max_msgs=1))
        finally:
            await mallory.close()
        info = await caller.runtime.js.stream_info(stream)
        assert info.config.name == stream  # still there
        await caller.tell("keeper/1", Item(n=8), durable=True)
        assert await asyncio.wait_for(Keeper.got.get(), WAIT) == 8
    finally:
        await caller.close(timeout=2.0)
        await host.close(timeout=2.0)


async def test_a_member_cannot_read_anothers_replies_or_the_durable_subjects(
    secured: Secured,
) -> None:
    errors: list[Exception] = []
    refused = asyncio.Event()

    async def record(exc: Exception) -> None:
        errors.append(exc)
        if sum("permissions violation" in str(e).lower() for e in errors) >= 2:
            refused.set()

    victim = await system_on(secured, "victim")
    nosy = await secured.raw("nosy", error_cb=record)  # violations arrive asynchronously
    try:
        await nosy.subscribe(f"{victim.runtime.mux.prefix}>")
        await nosy.subscribe(f"{secured.ns}.d.>")
        await nosy.flush()

        await asyncio.wait_for(refused.wait(), WAIT)  # both subscriptions refused
    finally:
        await nosy.close()
        await victim.close(timeout=2.0)


async def test_the_admin_may_delete_what_members_may_not(secured: Secured) -> None:
    member = await system_on(secured, "member")
    try:
        await member.durable_ready("member")
    finally:
        await member.close(timeout=2.0)
    admin = await secured.raw("admin", admin=True)
    try:
        js = admin.jetstream()
        assert await js.delete_stream(f"actorbus-{secured.ns}-d-member")
    finally:
        await admin.close()


async def test_start_runs_a_secure_broker_by_default(actorbus_home: Path) -> None:
    async with ActorSystem.start(registry=False) as system:
        assert system.server is not None
        with pytest.raises((nats.errors.Error, OSError, TimeoutError)):
            await nats.connect(system.server.url, allow_reconnect=False, connect_timeout=2)
        assert system.runtime.security.secured  # and its messages are sealed
        await system.spawn(Keeper, "s")
        assert await system.ask("keeper/s", "in the open?", timeout=WAIT) == "in the open?"
    async with ActorSystem.start(secure=False, registry=False) as open_system:
        assert open_system.server is not None
        nc = await nats.connect(open_system.server.url, allow_reconnect=False)
        await nc.close()


async def test_services_join_a_secured_broker_on_their_own(tmp_path: Path) -> None:
    """The gateway and the registry, given only a URL, read the server's INFO and
    join as members from this machine's ACTORBUS_HOME (as `actorbus` commands do)."""
    from actorbus.security.secure_broker import SecureBroker
    from actorbus.services.gateway import GatewayService, GatewaySettings
    from actorbus.services.registry import RegistryService, RegistrySettings

    ns = f"j{uuid.uuid4().hex[:8]}"
    extra = SecureBroker().server_config([ns])
    async with EmbeddedServer(ServerConfig(host="127.0.0.1", extra=extra)) as server:
        gw_settings = GatewaySettings(http_port=0, db_path=str(tmp_path / "gw.db"))
        async with (
            RegistryService(nats_url=server.url, namespace=ns, settings=RegistrySettings()) as reg,
            GatewayService(nats_url=server.url, namespace=ns, settings=gw_settings) as gw,
        ):
            assert reg.system is not None
            assert reg.system.runtime.security.secured
            assert gw.system is not None
            assert gw.system.runtime.security.secured
            assert gw.http_url is not None


async def test_reading_a_secured_brokers_info_leaves_no_error_in_its_log(
    actorbus_home: Path,
) -> None:
    """Every process that joins without options, and every CLI command, reads the
    server's INFO first; on a TLS broker it completes the handshake before leaving,
    so the broker's log does not gain a "TLS handshake error" for each of them."""
    from actorbus.bus.probe import server_info, wants_security
    from actorbus.security.secure_broker import SecureBroker

    ns = f"i{uuid.uuid4().hex[:8]}"
    extra = SecureBroker().server_config([ns])
    async with EmbeddedServer(ServerConfig(host="127.0.0.1", extra=extra)) as server:
        for _ in range(3):
            assert wants_security(await server_info(server.url))
        async with ActorSystem.connect(server.url, namespace=ns, registry=False):
            pass
        assert "handshake error" not in server.log_tail(200)


class Oracle(Actor):
    type_name = "oracle"

    @handler
    async def answer(self, text: str) -> str:
        return f"yes, {text}"


async def test_a_member_that_names_its_types_takes_no_other_types_messages(
    actorbus_home: Path,
) -> None:
    """On the development broker as in an issued deployment: a system that says
    which types it hosts (``actorbus run`` does) gets a user that may subscribe to
    those types' subjects and no other, and is told so if it tries to host one."""
    from actorbus.codecs.errors import AuthError
    from actorbus.security.secure_broker import SecureBroker, join_options

    ns = f"p{uuid.uuid4().hex[:8]}"
    broker = SecureBroker()
    async with EmbeddedServer(
        ServerConfig(host="127.0.0.1", extra=broker.server_config([ns]))
    ) as server:
        joining = await join_options(server.url, ns, "oracle-host", hosts=["oracle"])
        assert joining["security"].hosts == ("oracle",)
        host = await ActorSystem.connect(server.url, namespace=ns, registry=False, **joining)
        client = await ActorSystem.connect(
            server.url,
            namespace=ns,
            registry=False,
            **await join_options(server.url, ns, "client", hosts=[]),
        )
        try:
            await host.spawn(Oracle, "1")
            assert await client.ask("oracle/1", "ok", timeout=WAIT) == "yes, ok"
            with pytest.raises(AuthError, match="hosts oracle"):
                await host.spawn(Keeper, "1")
            # another member's user, for other types, tries to take a share of the oracle's
            refused = asyncio.Event()

            async def on_error(exc: Exception) -> None:
                if "permissions violation" in str(exc).lower():
                    refused.set()

            nosy = await raw_member(server.url, broker, ns, "nosy", ["keeper"], on_error)
            try:
                await nosy.subscribe(f"{ns}.a.oracle.>", queue=f"{ns}.q.oracle.1")
                await nosy.flush()
                await asyncio.wait_for(refused.wait(), WAIT)
            finally:
                await nosy.close()
            assert await client.ask("oracle/1", "still", timeout=WAIT) == "yes, still"
            # every process its own user, in memory: nothing written to share or race on
            assert not list((actorbus_home / "broker").glob(f"{ns}/*.creds"))
        finally:
            await client.close(timeout=2.0)
            await host.close(timeout=2.0)


async def test_connect_joins_a_secured_server_given_only_its_url(actorbus_home: Path) -> None:
    """A second process of a development machine needs nothing but the URL: it
    joins as the commands do, with end-to-end security on."""
    async with ActorSystem.start(registry=False) as host:
        await host.spawn(Keeper, "joined")
        async with ActorSystem.connect(host.url, registry=False) as other:
            assert other.runtime.security.secured
            assert await other.ask("keeper/joined", "hi", timeout=WAIT) == "hi"


async def test_a_refused_first_connect_fails_at_once_saying_why(secured: Secured) -> None:
    """nats-py keeps its first connect waiting after a refused TLS handshake or an
    authorization violation; actorbus ends it with the cause and what to give."""
    untrusted = ConnectOptions(servers=[secured.server.url], connect_timeout=2)
    no_creds = ConnectOptions(connect_timeout=2, tls=secured.tls.client_context())
    cases = [
        (untrusted, "certificate is not trusted"),
        (no_creds, "takes only authenticated members"),
    ]
    for options, advice in cases:
        async with asyncio.timeout(WAIT):
            with pytest.raises(ConnectionLostError, match=advice):
                await ActorSystem.connect(
                    secured.server.url, namespace=secured.ns, connect_options=options
                )


class Ledger(Actor):
    durable = True
    got: asyncio.Queue[int] = asyncio.Queue()

    @handler
    async def keep(self, item: Item) -> None:
        await Ledger.got.put(item.n)


async def test_a_queue_for_a_type_nobody_hosted_yet_is_sealed_and_kept(
    actorbus_home: Path,
) -> None:
    """A durable send to an actor that starts later: the sender makes the type's
    identity (as its first host would), so the message is sealed and the host,
    when it starts, takes it instead of refusing it as unauthenticated."""
    ns = f"q{uuid.uuid4().hex[:8]}"
    async with ActorSystem.start(namespace=ns, registry=False) as sender:
        for n in range(3):
            await sender.tell("ledger/1", Item(n=n), durable=True)
        async with ActorSystem.connect(sender.url, namespace=ns, registry=False) as host:
            await host.spawn(Ledger, "1")
            async with asyncio.timeout(WAIT):
                assert [await Ledger.got.get() for _ in range(3)] == [0, 1, 2]
            assert await host.dead_letters("ledger/1") == []


async def test_the_synadia_agent_protocol_works_on_the_secured_broker(
    actorbus_home: Path,
) -> None:
    """Its subjects ($SRV.*, agents.*) are outside the namespace's prefix; each
    namespace is an account of its own, so members may use them."""
    from actorbus.services.synadia import SynadiaAgent, SynadiaBridge

    async with ActorSystem.start(registry=False) as system:
        await system.spawn(Keeper, "synadia")
        async with SynadiaBridge(system, [Keeper], owner="acme"):
            agent = SynadiaAgent(system.nc, "keeper", owner="acme")
            async with asyncio.timeout(WAIT):
                assert await agent.ask("over the protocol") == "over the protocol"


def test_the_permission_lists_name_every_bucket_of_the_namespace() -> None:
    from actorbus.actors.placement import hosts_bucket, placement_bucket
    from actorbus.bus.jetstream import (
        attempts_bucket,
        idempotency_bucket,
        readers_bucket,
        stats_bucket,
    )
    from actorbus.bus.service_records import registry_bucket, renewals_bucket
    from actorbus.security.broker import PER_TYPE_BUCKETS, SHARED_BUCKETS
    from actorbus.security.topic_guard import topic_keys_bucket
    from actorbus.security.trust import identities_bucket
    from actorbus.services.registry.service import leader_bucket
    from actorbus.state.kv_store import state_bucket

    shared = {
        f(ns)
        for ns in ("x",)
        for f in (
            identities_bucket,
            registry_bucket,
            renewals_bucket,
            leader_bucket,
            topic_keys_bucket,
            placement_bucket,
            hosts_bucket,
            readers_bucket,
            stats_bucket,
        )
    }
    assert shared == {f"actorbus-x-{name}" for name in SHARED_BUCKETS}
    per_type = {idempotency_bucket("x"), attempts_bucket("x"), state_bucket("x")}
    assert per_type == {f"actorbus-x-{name}" for name in PER_TYPE_BUCKETS}


async def test_an_insider_cannot_write_another_types_handled_keys_or_attempts(
    actorbus_home: Path,
) -> None:
    """A member for type spy pre-wrote keeper's idempotency key (so keeper's message
    was skipped unhandled) by reading it from stored messages: now only keeper's
    hosts write keeper's entries, in the handled keys and the attempts alike."""
    from actorbus.bus.jetstream import (
        attempts_bucket,
        attempts_entry,
        idempotency_bucket,
        idempotency_entry,
    )
    from actorbus.bus.subjects import Address
    from actorbus.security.secure_broker import SecureBroker, join_options

    ns = f"i{uuid.uuid4().hex[:8]}"
    broker = SecureBroker()
    async with EmbeddedServer(
        ServerConfig(host="127.0.0.1", extra=broker.server_config([ns]))
    ) as server:
        host = await ActorSystem.connect(
            server.url,
            namespace=ns,
            registry=False,
            **await join_options(server.url, ns, "keeper-host", hosts=["keeper"]),
        )
        spy = await raw_member(server.url, broker, ns, "spy", ["spy"])
        try:
            await host.durable_ready("keeper")
            js = spy.jetstream(timeout=1.0)
            handled = await js.key_value(idempotency_bucket(ns))
            attempts = await js.key_value(attempts_bucket(ns))
            with pytest.raises((nats.errors.Error, TimeoutError)):  # refused: no answer
                await handled.put(idempotency_entry(Address("keeper", "1"), "order-7"), b"x")
            with pytest.raises((nats.errors.Error, TimeoutError)):
                await attempts.put(attempts_entry("keeper", "keeper__1-x", 1), b"\x81")
            # its own type's entries, as its hosts write them
            await handled.put(idempotency_entry(Address("spy", "1"), "order-7"), b"x")
            # keeper's hosts write keeper's
            await host.runtime.durable.stores.handled.put(
                idempotency_entry(Address("keeper", "1"), "order-8"), b"x"
            )
        finally:
            await spy.close()
            await host.close(timeout=2.0)


async def test_an_insider_cannot_delete_or_read_another_types_durable_consumer(
    actorbus_home: Path,
) -> None:
    """A member for type spy deleted keeper's durable consumer, and fetched and acked
    keeper's messages (12 of 20 never reached keeper). Each type's messages are in a
    stream of its own now, and a member limited to spy may touch the consumers and
    acks of spy's stream only: every attempt on keeper's is refused, and keeper
    gets all its messages. On its own type's stream the same calls work."""
    from nats.js.api import AckPolicy, ConsumerConfig

    from actorbus.bus.jetstream import consumer_name, stream_name
    from actorbus.bus.subjects import Address
    from actorbus.security.secure_broker import SecureBroker, join_options

    ns = f"i{uuid.uuid4().hex[:8]}"
    broker = SecureBroker()
    errors: list[Exception] = []

    async def record(exc: Exception) -> None:
        errors.append(exc)

    async with EmbeddedServer(
        ServerConfig(host="127.0.0.1", extra=broker.server_config([ns]))
    ) as server:
        host = await ActorSystem.connect(
            server.url,
            namespace=ns,
            registry=False,
            **await join_options(server.url, ns, "keeper-host", hosts=["keeper"]),
        )
        caller = await ActorSystem.connect(
            server.url, namespace=ns, registry=False, **await join_options(server.url, ns, "c")
        )
        spy = await raw_member(server.url, broker, ns, "spy", ["spy"], error_cb=record)
        try:
            Keeper.got = asyncio.Queue()  # of this test's loop
            await host.spawn(Keeper, "1")
            await host.stop_actor("keeper/1")  # its consumer stays, its messages wait there
            for n in range(5):
                await caller.tell("keeper/1", Item(n=n), durable=True)
            js = spy.jetstream(timeout=1.0)
            theirs, consumer = stream_name(ns, "keeper"), consumer_name(Address("keeper", "1"))
            refused = (nats.errors.Error, TimeoutError)
            with pytest.raises(refused):
                await js.delete_consumer(theirs, consumer)
            with pytest.raises(refused):
                await js.consumer_info(theirs, consumer)
            thief = await js.pull_subscribe_bind(consumer, theirs)
            with pytest.raises(refused):
                await thief.fetch(1, timeout=1.0)
            with pytest.raises(refused):  # nor a consumer of its own on keeper's stream
                await js.add_consumer(
                    theirs,
                    ConsumerConfig(
                        name="thief", filter_subject=f"{ns}.d.keeper.1", ack_policy=AckPolicy.ALL
                    ),
                )
            await spy.publish(f"$JS.ACK.{theirs}.{consumer}.1.1.1.1.0", b"")  # a forged ack
            await spy.flush()
            # The same calls on spy's own stream work.
            mine = stream_name(ns, "spy")
            await js.add_stream(name=mine, subjects=[f"{ns}.d.spy.*"])
            await spy.publish(f"{ns}.d.spy.1", b"own")
            await js.add_consumer(mine, ConsumerConfig(name="own", filter_subject=f"{ns}.d.spy.1"))
            own = await js.pull_subscribe_bind("own", mine)
            [msg] = await own.fetch(1, timeout=WAIT)
            await msg.ack_sync()
            await js.delete_consumer(mine, "own")

            await host.spawn(Keeper, "1")
            got = [await asyncio.wait_for(Keeper.got.get(), WAIT) for _ in range(5)]
            assert got == [0, 1, 2, 3, 4]  # all there, in order
            violations = [e for e in errors if "permissions violation" in str(e).lower()]
            assert any("$js.ack" in str(e).lower() for e in violations), violations
        finally:
            await spy.close()
            await caller.close(timeout=2.0)
            await host.close(timeout=2.0)


def test_the_operator_stays_the_same_across_renders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A running server refuses a reload whose operator JWT changed (its issue
    time would, a second later): adding a namespace is a reload, so the operator
    is rendered once."""
    import time

    auth = BrokerAuth(tmp_path)
    first = auth.server_config(["a"])
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 5)
    later = auth.server_config(["a", "b"])

    def operator(config: str) -> str:
        return next(line for line in config.splitlines() if line.startswith("operator:"))

    assert operator(first) == operator(later)
    assert later.count("\n  A") == first.count("\n  A") + 1  # one more account


async def test_a_running_secured_server_takes_new_namespaces() -> None:
    """The test broker adds a namespace's account with a config reload, while the
    members of the others stay connected and keep working."""
    from actorbus.testing import TestBroker

    with TestBroker() as broker:
        first = await ActorSystem.connect(broker.url, namespace="one", **await broker.join("one"))
        try:
            await first.spawn(Oracle, "1")
            for ns in ("two", "three", "four"):
                other = await ActorSystem.connect(broker.url, namespace=ns, **await broker.join(ns))
                try:
                    await other.spawn(Oracle, "1")
                    assert await other.ask("oracle/1", ns) == f"yes, {ns}"
                finally:
                    await other.close()
                assert await first.ask("oracle/1", "still") == "yes, still"
        finally:
            await first.close()


class Claimed(Actor):
    """A keyed type: its activations claim records in the shared placement bucket."""

    type_name = "claimed"
    keyed = True

    @handler
    async def ping(self, _: dict[str, Any]) -> str:
        return self.address


@pytest.mark.parametrize("bucket_made_before", [False, True])
async def test_a_member_claims_in_batches_on_a_bucket_it_made_and_one_by_one_on_an_old_one(
    actorbus_home: Path, bucket_made_before: bool
) -> None:
    """A member may make a stream but not change one: the placement bucket it
    makes takes atomic batches from the start; one made before batches (without
    them) stays so, and its claims go one by one, the refused change not holding
    up the first claim for longer than a second."""
    from nats.js.api import KeyValueConfig, StorageType

    from actorbus.actors.placement import placement_bucket
    from actorbus.security.secure_broker import SecureBroker, join_options

    ns = f"b{uuid.uuid4().hex[:8]}"
    broker = SecureBroker()
    async with EmbeddedServer(
        ServerConfig(host="127.0.0.1", extra=broker.server_config([ns]))
    ) as server:
        if bucket_made_before:
            other = await raw_member(server.url, broker, ns, "other", ["other"])
            try:
                await other.jetstream(timeout=2.0).create_key_value(
                    KeyValueConfig(bucket=placement_bucket(ns), history=1, storage=StorageType.FILE)
                )
            finally:
                await other.close()
        host = await ActorSystem.connect(
            server.url,
            namespace=ns,
            registry=False,
            **await join_options(server.url, ns, "claimed-host", hosts=["claimed"]),
        )
        try:
            await host.register(Claimed)
            loop = asyncio.get_running_loop()
            started = loop.time()
            assert await host.ask("claimed/first", {}) == "claimed/first"
            assert loop.time() - started < 3.0
            answers = await asyncio.gather(*(host.ask(f"claimed/k{i}", {}) for i in range(40)))
            assert answers == [f"claimed/k{i}" for i in range(40)]
            table = await host.hosting.placement.table()
            assert table.creates.batched is not bucket_made_before
        finally:
            await host.close(timeout=2.0)
