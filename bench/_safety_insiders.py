"""Insider probes of the secured bus (for ``bench/safety.py``): a member with
credentials for one unrelated actor type (``spy``) tries what it has no right to:
reconfigure another type's durable stream, delete its durable consumer, fetch
(and so ack) its messages through that consumer or one of its own, write its
handled keys or attempts ahead of its messages, and send in another member's
name."""

from __future__ import annotations

import dataclasses
from typing import Any

import nats
from _safety_probes import NS, TIMEOUT, Note, Probes, quiet
from nats.js.api import ConsumerConfig

from actorbus import ActorSystem, SecuritySettings
from actorbus.actors.runtime import Runtime
from actorbus.bus.jetstream import (
    attempts_bucket,
    attempts_entry,
    consumer_config,
    idempotency_bucket,
    idempotency_entry,
    stream_name,
)
from actorbus.bus.subjects import Address
from actorbus.security.secure_broker import SecureBroker


async def insider_probes(
    p: Probes, url: str, broker: SecureBroker, host: ActorSystem, caller: ActorSystem
) -> None:
    # vault's durable stream, a message in it, and the consumer a host of vault reads
    # it through: what the insider goes for
    await caller.tell("vault/1", Note(text="for the vault only"), durable=True)
    consumer = consumer_config(
        host.runtime.subjects, Address("vault", "1"), host.runtime.durable_settings
    )
    await host.runtime.js.add_consumer(stream_name(NS, "vault"), config=consumer)
    options = broker.connect_options(NS, "spy", hosts=["spy"])
    spy = await nats.connect(
        url,
        user_credentials=options.nats_credentials(),
        tls=options.tls,
        inbox_prefix=options.inbox_prefix,
        allow_reconnect=False,
        error_cb=quiet,
    )
    try:
        js = spy.jetstream(timeout=TIMEOUT)
        stream = stream_name(NS, "vault")
        name = consumer.durable_name or ""

        async def keep_one_message() -> Any:
            config = (await js.stream_info(stream)).config
            return await js.update_stream(dataclasses.replace(config, max_msgs=1))

        await p.refused("bus", "insider", "the durable stream reconfigured", keep_one_message)
        await p.refused(
            "bus",
            "insider",
            "another type's durable consumer deleted",
            lambda: js.delete_consumer(stream, name),
        )

        async def fetch_theirs() -> Any:
            thief = await js.pull_subscribe_bind(name, stream)
            return await thief.fetch(1, timeout=TIMEOUT)

        await p.refused("bus", "insider", "another type's messages fetched", fetch_theirs)

        async def fetch_through_own_consumer() -> Any:
            own = ConsumerConfig(name="thief", filter_subject=f"{NS}.d.vault.1")
            await js.add_consumer(stream, config=own)
            return await (await js.pull_subscribe_bind("thief", stream)).fetch(1, timeout=TIMEOUT)

        await p.refused(
            "bus",
            "insider",
            "another type's messages, through a consumer of its own",
            fetch_through_own_consumer,
        )
        handled = await js.key_value(idempotency_bucket(NS))
        attempts = await js.key_value(attempts_bucket(NS))
        victim = Address("vault", "1")
        await p.refused(
            "bus",
            "insider",
            "another type's idempotency key written ahead",
            lambda: handled.put(idempotency_entry(victim, "order-1"), b"\x80"),
        )
        await p.refused(
            "bus",
            "insider",
            "another type's attempts written ahead",
            lambda: attempts.put(attempts_entry("vault", "vault__1-0", 1), b"\x80"),
        )
    finally:
        await spy.close()
    await impostor_probe(p, url, broker, caller)


async def impostor_probe(p: Probes, url: str, broker: SecureBroker, victim: ActorSystem) -> None:
    """An insider's own system, its sends saying they come from the victim member's
    ``client/...`` address: the receiver checks that against the signing key."""
    insider = await ActorSystem.connect(
        url,
        namespace=NS,
        name="impostor",
        registry=False,
        connect_options=broker.connect_options(NS, "impostor", hosts=[]),
        security=SecuritySettings(home=broker.home / NS, hosts=()),
    )
    theirs = victim.client_address

    class Impostor(Runtime):
        @property
        def client_address(self) -> str:
            return theirs

    try:
        insider.runtime.__class__ = Impostor
        await p.refused(
            "bus",
            "insider",
            "another member's client address as src",
            lambda: insider.ask("vault/1", Note(text="in your name"), timeout=TIMEOUT),
        )
    finally:
        insider.runtime.__class__ = Runtime
        await insider.close(timeout=2.0)
