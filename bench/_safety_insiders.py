"""Insider probes of the secured bus (for ``bench/safety.py``): a member with
credentials for one unrelated actor type (``spy``) tries what it has no right to:
reconfigure the durable stream, write another type's handled keys or attempts
ahead of its messages, and send in another member's name."""

from __future__ import annotations

import dataclasses
from typing import Any

import nats
from _safety_probes import NS, TIMEOUT, Note, Probes, quiet

from actorbus import ActorSystem, SecuritySettings
from actorbus.actors.runtime import Runtime
from actorbus.actors.secure_broker import SecureBroker
from actorbus.bus.jetstream import (
    attempts_bucket,
    attempts_entry,
    idempotency_bucket,
    idempotency_entry,
    stream_name,
)
from actorbus.bus.subjects import Address


async def insider_probes(
    p: Probes, url: str, broker: SecureBroker, host: ActorSystem, caller: ActorSystem
) -> None:
    await host.durable_ready()  # the stream and buckets the insider goes for
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
        stream = stream_name(NS)

        async def keep_one_message() -> Any:
            config = (await js.stream_info(stream)).config
            return await js.update_stream(dataclasses.replace(config, max_msgs=1))

        await p.refused("bus", "insider", "the durable stream reconfigured", keep_one_message)
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
