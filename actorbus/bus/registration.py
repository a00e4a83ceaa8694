"""Keeping one ephemeral service registered: renew it every interval, register it
again if it was deleted, deregister it on the way out."""

from __future__ import annotations

import asyncio
import logging

from actorbus.bus.service_records import ServiceRecords
from actorbus.bus.tasks import stop_task, supervise
from actorbus.codecs.uap import EphemeralCheck, ServiceResponse, UapNotFoundError

log = logging.getLogger("actorbus.registry.store")


class Registration:
    """Keeps one ephemeral service registered, the way a registrant should.

    :meth:`start` puts the record; a background task then renews it every
    ``renewal_interval`` of its ``ephemeral_check`` and, if the registry deleted
    it meanwhile (the registrant was cut off for longer than the delete
    timeout), registers it again. Failed renewals (NATS unreachable) are logged
    and retried at the next interval. :meth:`stop` deletes the record, so
    discovery stops offering it at once rather than after the timeouts::

        reg = Registration(store, ephemeral_service("echo", service_id=f"{sid}-echo"))
        await reg.start()
        ...
        await reg.stop()
    """

    def __init__(self, store: ServiceRecords, service: ServiceResponse) -> None:
        if not service.ephemeral:
            raise ValueError("only ephemeral services are renewed by their registrant")
        self.store = store
        self.record = service
        self.service = service  # as last stored
        self.registrations = 0
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    @property
    def interval(self) -> float:
        return (self.record.ephemeral_check or EphemeralCheck()).interval

    async def start(self) -> ServiceResponse:
        await self._register()
        if not self._stopped:  # stop() may have come while the record was stored
            self._task = supervise(f"renewal of {self.record.id}", self._renew_forever, logger=log)
        return self.service

    async def register_again(self) -> None:
        """Put the record again now (the registry lost it with its store)."""
        await self._register()

    async def _register(self) -> None:
        self.registrations += 1  # counted first: readers may see the record before we return
        self.service = await self.store.put_service(self.record)

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                try:
                    self.service = await self.store.renew(self.record.id)
                except UapNotFoundError:
                    log.info("service %s was deleted; registering it again", self.record.id)
                    await self._register()
            except Exception as exc:  # NATS unreachable and the like: next interval
                log.warning("renewing service %s failed: %r", self.record.id, exc)

    async def stop(self, *, deregister: bool = True) -> None:
        """Stop renewing (bounded, however the renewal is waiting) and deregister."""
        self._stopped = True
        await stop_task(self._task, what=f"renewal of {self.record.id}")
        self._task = None
        if deregister:
            for attempt in range(3):  # a busy server may time one out: discovery must
                try:  # stop offering a service whose registrant left
                    await self.store.delete_service(self.record.id, force=True)
                    return
                except Exception as exc:
                    log.warning(
                        "deregistering %s failed (attempt %d): %r", self.record.id, attempt + 1, exc
                    )
