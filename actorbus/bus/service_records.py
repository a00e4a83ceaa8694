"""The bucket of UAP service records every ActorSystem and registry instance shares.

Two JetStream key-value buckets per namespace (file storage, history 1, R1
locally, R3 on a cluster):

- ``actorbus-{ns}-registry``: the records. ``svc.<id>`` holds a service as JSON
  with the UAP schema's field names (the registry keeps its routes in the same
  bucket under ``route.<name>``: :mod:`actorbus.services.registry.store`). Ids
  pass through :mod:`actorbus.bus.kvkeys`, so any UAP name is a legal key. Every
  change is a new revision of the bucket's stream, and a record's ``index`` is
  its revision: this is the registry's blocking-query index.
- ``actorbus-{ns}-registry-renewals``: ``svc.<id>`` rewritten on every renewal of
  an ephemeral service. Renewals arrive every 15 s per service and change
  nothing a reader cares about, so they live apart: they never move the index
  nor wake a blocking query. The time of a renewal is the server's timestamp
  of the write, so registrants' clocks do not matter. Renewal state is kept
  for a day (``RENEWAL_RETENTION``), so no renewal timeout may be longer.

:class:`ServiceRecords` keeps an in-memory mirror of both buckets, fed by KV
watchers (the spec's "cache layer"): lookups never leave the process, and a
blocking query waits on an event the watcher sets when a revision arrives, not
on a poll. Writes go
to the bucket with optimistic concurrency (``expect_index``) and return once
the local mirror has seen them (read your writes). Instances converge within
milliseconds (the spec's AP model).

This is the part of the registry an ActorSystem needs to announce its actor
types, discover others and watch for changes, so it sits in the NATS layer
below the actors; what only the registry service keeps (gateway routes and
their index) is its subclass in the registry's package.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Literal, Self, TypeVar

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig
from nats.js.kv import KeyValue
from pydantic import ValidationError

from actorbus.bus.bucket_mirror import BucketMirror, latest_only, now_ms, open_bucket
from actorbus.bus.kvkeys import decode_token, encode_token
from actorbus.codecs.uap import (
    HEALTHY,
    MAX_RENEWAL_TIMEOUT,
    RouteResponse,
    ServiceResponse,
    UapConflictError,
    UapNotFoundError,
)

log = logging.getLogger("actorbus.registry.records")

SERVICE = "svc"
ROUTE = "route"
RENEWAL_RETENTION = MAX_RENEWAL_TIMEOUT
WRITE_ATTEMPTS = 8  # read-modify-write retries when another writer got there first

Kind = Literal["services", "routes", "all"]
M = TypeVar("M", ServiceResponse, RouteResponse)


def registry_bucket(ns: str) -> str:
    return f"actorbus-{ns}-registry"


def renewals_bucket(ns: str) -> str:
    return f"actorbus-{ns}-registry-renewals"


def parse_record(model: type[M], value: bytes, revision: int) -> M | None:
    try:
        record = model.model_validate_json(value)
    except ValidationError as exc:
        log.warning("ignoring a malformed %s record @%d: %s", model.__name__, revision, exc)
        return None
    record.index = revision
    return record


def bucket_configs(ns: str, replicas: int) -> tuple[KeyValueConfig, KeyValueConfig]:
    """The records bucket and the renewals bucket of a namespace."""
    return (
        latest_only(registry_bucket(ns), replicas, "actorbus UAP registry: services and routes"),
        latest_only(
            renewals_bucket(ns),
            replicas,
            "actorbus UAP registry: renewals of ephemeral services",
            ttl=RENEWAL_RETENTION,
        ),
    )


class ServiceRecords:
    """The services of one namespace; see the module docstring for the layout.

    Reads (``get_service``, ``list_services`` ...) answer from the mirror and are
    plain methods. Writes are coroutines that raise :class:`UapConflictError`
    when ``expect_index`` (0: "must not exist") does not match the stored
    revision.
    """

    def __init__(
        self, js: JetStreamContext, kv: KeyValue, renewals: KeyValue, ns: str, replicas: int = 1
    ) -> None:
        self.js = js
        self.configs = bucket_configs(ns, replicas)
        self.kv = kv
        self.renewals_kv = renewals
        self.namespace = ns
        self._services: dict[str, ServiceResponse] = {}
        self._by_name: dict[str, dict[str, ServiceResponse]] = {}
        # Sorted views for discovery reads, rebuilt on the first read after a change.
        self._ordered: list[ServiceResponse] | None = None
        self._ordered_by_name: dict[str, list[ServiceResponse]] = {}
        self._renewed: dict[str, int] = {}  # service id -> ms of its last renewal
        self.services_index = 0
        self.records_mirror = BucketMirror(kv, self._apply_record, registry_bucket(ns))
        self._renewals_mirror = BucketMirror(renewals, self._apply_renewal, renewals_bucket(ns))

    @classmethod
    async def open(
        cls, js: JetStreamContext, ns: str, *, replicas: int = 1, timeout: float = 10.0
    ) -> Self:
        """Create (or bind to) the namespace's buckets and load the mirror."""
        records_config, renewals_config = bucket_configs(ns, replicas)
        kv = await open_bucket(js, records_config)
        renewals = await open_bucket(js, renewals_config)
        store = cls(js, kv, renewals, ns, replicas)
        try:
            await store.records_mirror.start(timeout)
            await store._renewals_mirror.start(timeout)
        except BaseException:
            await store.close()
            raise
        return store

    async def close(self) -> None:
        await self.records_mirror.stop()
        await self._renewals_mirror.stop()

    async def restore_if_lost(self) -> bool:
        """Make the buckets again if the broker lost them (a fresh store), with
        every record mirrored from them forgotten; True when it did: registrants
        must register again."""
        records_config, renewals_config = self.configs
        lost = await self.records_mirror.restore_if_lost(self.js, records_config, self.forget)
        renewals = self._renewals_mirror
        lost |= await renewals.restore_if_lost(self.js, renewals_config, self._renewed.clear)
        return lost

    def forget(self) -> None:
        """Drop every mirrored record (the bucket they came from is gone)."""
        self._services.clear()
        self._by_name.clear()
        self._ordered = None
        self._ordered_by_name.clear()
        self.services_index = 0

    # -- the mirror ----------------------------------------------------------
    def _apply_record(self, key: str, value: bytes | None, revision: int, _created: int) -> None:
        family, _, token = key.partition(".")
        name = decode_token(token)
        if family != SERVICE:
            self.on_other_record(family, name, value, revision)
            return
        self.services_index = max(self.services_index, revision)
        self._ordered = None
        self._ordered_by_name.clear()
        self._drop_service(name)
        svc = parse_record(ServiceResponse, value, revision) if value is not None else None
        if svc is not None:
            self._services[name] = svc
            self._by_name.setdefault(svc.name, {})[name] = svc

    def on_other_record(self, family: str, name: str, value: bytes | None, revision: int) -> None:
        """A record that is not a service (a registry's route): ignored here."""

    def _drop_service(self, sid: str) -> None:
        old = self._services.pop(sid, None)
        if old is not None:
            same = self._by_name.get(old.name)
            if same is not None:
                same.pop(sid, None)
                if not same:
                    del self._by_name[old.name]

    def _apply_renewal(self, key: str, value: bytes | None, _revision: int, created: int) -> None:
        sid = decode_token(key.partition(".")[2])
        if value is None:
            self._renewed.pop(sid, None)
        else:
            self._renewed[sid] = created

    async def revision(self) -> int:
        """The bucket's last sequence, asked of the server (the mirror may trail it)."""
        status = await self.kv.status()
        return int(status.stream_info.state.last_seq or 0)

    def index_of(self, kind: Kind) -> int:
        """The highest revision seen of records of ``kind`` (here: services)."""
        return self.services_index

    async def wait_for_change(self, after_index: int, timeout: float, kind: Kind = "all") -> int:
        """Return the index of ``kind`` once it is above ``after_index``, or when
        ``timeout`` seconds pass (then it is the unchanged index).

        Woken by the watcher as soon as a revision arrives, never by polling. An
        ``after_index`` beyond anything the bucket ever held (a bucket created
        anew) returns at once, so a client cannot hang on a stale index.
        """
        deadline = time.monotonic() + timeout
        if after_index > self.records_mirror.last_seq:
            with contextlib.suppress(Exception):
                if after_index > await self.revision():
                    return self.index_of(kind)
        while self.index_of(kind) <= after_index:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            await self.records_mirror.next_change(left)
        return self.index_of(kind)

    async def sync(self, timeout: float = 5.0) -> None:
        """Until the mirror has everything the bucket held when this was called."""
        await self.records_mirror.wait_seen(await self.revision(), timeout)

    # -- services --------------------------------------------------------------
    def get_service(self, service_id: str) -> ServiceResponse | None:
        return self._services.get(service_id)

    def services_named(self, name: str) -> list[ServiceResponse]:
        """Every instance registered under ``name`` (oldest first)."""
        return list(self._named(name))

    def _named(self, name: str) -> list[ServiceResponse]:
        ordered = self._ordered_by_name.get(name)
        if ordered is None:
            found = self._by_name.get(name)
            if not found:
                return []
            ordered = self._ordered_by_name[name] = sorted(found.values(), key=_service_order)
        return ordered

    def list_services(
        self,
        *,
        name: str | None = None,
        tags: Iterable[str] = (),
        agent_protocol: str | None = None,
        health_status: str | None = None,
        ephemeral: bool | None = None,
    ) -> list[ServiceResponse]:
        """Services matching every given filter (a service must carry all ``tags``),
        ordered by name, then age."""
        if name is not None:
            pool = self._named(name)
        else:
            if self._ordered is None:
                self._ordered = sorted(self._services.values(), key=_service_order)
            pool = self._ordered
        want = set(tags)
        if not want and agent_protocol is None and health_status is None and ephemeral is None:
            return list(pool)
        return [
            s
            for s in pool
            if (agent_protocol is None or s.agent_protocol == agent_protocol)
            and (health_status is None or s.health_status == health_status)
            and (ephemeral is None or s.ephemeral == ephemeral)
            and (not want or want.issubset(s.tags))
        ]

    async def fetch_service(self, service_id: str) -> ServiceResponse | None:
        """The service as the bucket holds it now (a server round trip)."""
        try:
            entry = await self.kv.get(_service_key(service_id))
        except nats.js.errors.KeyNotFoundError:
            return None
        if entry.value is None or entry.revision is None:
            return None
        return parse_record(ServiceResponse, entry.value, entry.revision)

    async def put_service(
        self, service: ServiceResponse, *, expect_index: int | None = None
    ) -> ServiceResponse:
        """Store ``service``; returns it with its new ``index``.

        ``expect_index``: None writes unconditionally (a registration: an
        ephemeral service counts as renewed), 0 only if the id is free, N only if
        the stored record is still at revision N. ``updated_at`` is stamped
        now, ``created_at`` too when it is zero.
        """
        stamp = now_ms()
        svc = service.model_copy(
            update={
                "created_at": service.created_at or stamp,
                "updated_at": stamp,
                "index": 0,
            }
        )
        payload = svc.model_dump_json(exclude_none=True, exclude={"index"}).encode()
        seq = await self.write(_service_key(svc.id), payload, expect_index, f"service {svc.id}")
        if svc.ephemeral and not expect_index:
            await self._beat(svc.id)
        svc.index = seq
        await self.records_mirror.wait_seen(seq)
        return svc

    async def modify_service(
        self,
        service_id: str,
        change: Callable[[ServiceResponse], ServiceResponse | None],
        *,
        attempts: int = WRITE_ATTEMPTS,
    ) -> ServiceResponse | None:
        """Read, ``change``, write back if nobody wrote meanwhile; retried with a
        fresh read on a conflict. Returns the record as stored afterwards (as it
        was, when ``change`` returns None), or None if the service does not exist.
        Exceptions from ``change`` propagate."""
        current = self.get_service(service_id)
        for _ in range(attempts):
            if current is None:
                current = await self.fetch_service(service_id)
                if current is None:
                    return None
            new = change(current)
            if new is None:
                return current
            try:
                return await self.put_service(new, expect_index=current.index)
            except UapConflictError:
                current = await self.fetch_service(service_id)
        raise UapConflictError(f"service {service_id} kept changing; try again")

    async def delete_service(
        self, service_id: str, *, expect_index: int | None = None, force: bool = False
    ) -> bool:
        """Delete a service (and its renewal state); False if there was none.
        With ``expect_index``, only if it is still at that revision (else
        UapConflictError). ``force`` deletes even when neither the mirror nor the
        bucket shows it yet (a registrant leaving must not depend on its mirror
        having caught up with its own last write)."""
        current = self.get_service(service_id) or await self.fetch_service(service_id)
        if current is None and not force:
            return False
        key = _service_key(service_id)
        try:
            if expect_index:
                await self.delete_at(key, expect_index)
            else:
                await self.kv.delete(key)
        except nats.js.errors.KeyWrongLastSequenceError:
            raise UapConflictError(f"service {service_id} changed; not deleted") from None
        with contextlib.suppress(Exception):
            await self.renewals_kv.delete(_service_key(service_id))
        await self.records_mirror.wait_seen(await self.revision())
        return True

    # -- renewals ----------------------------------------------------------------
    async def renew(self, service_id: str) -> ServiceResponse:
        """Record a renewal of an ephemeral service; an unhealthy one becomes healthy.

        UapNotFoundError if the service is unknown (deleted: register it again),
        UapConflictError if it is persistent (the registry checks those itself).
        """
        svc = self.get_service(service_id) or await self.fetch_service(service_id)
        if svc is None:
            raise UapNotFoundError(f"no service with id {service_id!r}; register it again")
        if not svc.ephemeral:
            raise UapConflictError(
                f"service {service_id} is persistent: the registry checks its health, "
                "renewals are for ephemeral services"
            )
        await self._beat(service_id)
        if svc.healthy:
            return svc

        def heal(cur: ServiceResponse) -> ServiceResponse | None:
            if cur.healthy:
                return None
            return cur.model_copy(update={"health_status": HEALTHY, "health_output": "renewed"})

        return await self.modify_service(service_id, heal) or svc

    async def _beat(self, service_id: str) -> None:
        """Stamp a renewal and wait (bounded) until this store's mirror has it, so
        ``renewed_at`` reads the store's own writes like every other read does."""
        seq = await self.renewals_kv.put(_service_key(service_id), str(now_ms()).encode())
        await self._renewals_mirror.wait_seen(seq)

    def renewed_at(self, service_id: str) -> int | None:
        """Unix ms of the service's last renewal (or registration), as the server
        stamped it; None if none is known."""
        return self._renewed.get(service_id)

    def forget_renewals(self, keep: Callable[[str], bool]) -> None:
        """Drop mirrored renewal times of services ``keep`` rejects (expired
        renewal entries leave no marker behind, so the mirror is pruned here)."""
        for sid in [s for s in self._renewed if not keep(s)]:
            del self._renewed[sid]

    # -- writing -----------------------------------------------------------------
    async def write(self, key: str, payload: bytes, expect: int | None, what: str) -> int:
        """Put ``payload`` at ``key``: unconditionally (``expect`` None), only as a
        new key (0) or only over revision ``expect``; returns the new revision."""
        try:
            if expect is None:
                return await self.kv.put(key, payload)
            if expect == 0:
                return await self.kv.create(key, payload)
            return await self.kv.update(key, payload, last=expect)
        except nats.js.errors.KeyWrongLastSequenceError:
            if expect == 0:
                raise UapConflictError(f"{what} exists already") from None
            raise UapConflictError(f"{what} changed since revision {expect}") from None

    async def delete_at(self, key: str, revision: int) -> None:
        """Delete ``key`` only while it is at ``revision`` (else KeyWrongLastSequenceError)."""
        try:
            await self.kv.delete(key, last=revision)
        except nats.js.errors.APIError as err:
            if err.err_code in (10071, 10164):  # wrong last sequence
                raise nats.js.errors.KeyWrongLastSequenceError(description=err.description) from err
            raise


def record_key(family: str, name: str) -> str:
    """The bucket key of a record: its family and its name made key-safe."""
    return f"{family}.{encode_token(name)}"


def _service_key(service_id: str) -> str:
    return record_key(SERVICE, service_id)


def _service_order(s: ServiceResponse) -> tuple[str, int, str]:
    return (s.name, s.created_at, s.id)
