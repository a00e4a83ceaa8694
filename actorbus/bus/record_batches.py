"""Claim records created while others are on their way go to the server together.

Each keyed activation's first step is a key-value *create* of its claim record
(``bus/claims.py``), and the server syncs every write to disk before its ack
(``sync_interval: always``). One synced write per activation held a burst of
new keys to what the disk syncs: 2,000-3,400 activations a second on the
development machine, 0.77-1.01x of raw nats-py creates. Written as one atomic
batch (nats-server 2.12+, ``allow_atomic`` on the bucket's stream), many
records are stored at once: raw creates went from 2,900/s one by one to
15,000/s in batches of 128 on the same disk (measured; how the server syncs a
batch was not looked at).

All or nothing is what makes it safe. A batch holding a name that is not free
(another process claimed it, or a released record left its tombstone) is
refused whole with "wrong last sequence", and nothing of it is stored; its
creates are then made one by one, as before batches, each name getting its
own answer (nats-py's create takes a tombstone's place). Splitting a refused
batch in halves to find the name instead took two claimants of the same 200
names at once 0.84 s against 0.16-0.19 s one by one. So batches speed up
bursts of new names (new conversations, a first load) and cost a name that
was active before one refused batch. A create that is alone goes alone, and
where the server or the bucket has no atomic batches, every create goes
alone. A batch whose outcome is unknown (a timeout) is made again one by one:
a record it did store names this holder, and the claim adopts it
(``ClaimTable.claim``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from dataclasses import dataclass

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, KeyValueConfig, StreamConfig
from nats.js.kv import KeyValue
from nats.nuid import NUID

from actorbus.bus.tasks import spawn

log = logging.getLogger("actorbus.bus")

BATCH_MOST = 128  # records in one batch
BATCHES_AT_ONCE = 2  # batches on their way at once, while the next one fills
_COMMIT_TIMEOUT = 10.0
_UPDATE_TIMEOUT = 1.0  # seconds to wait for a bucket made before batches to allow them
_NO_ATOMIC = {10174}  # atomic publish is disabled (on this stream)


_BATCH_IDS = NUID()


@dataclass
class _Create:
    name: str
    done: asyncio.Future[int]


class RecordCreates:
    """Creates of records holding ``value`` (each living ``ttl`` seconds) in one
    bucket, batched when several wait."""

    def __init__(self, kv: KeyValue, value: bytes, ttl: float, nc: Client | None = None) -> None:
        self.kv = kv
        self.value = value
        self.ttl = ttl
        self._nc = nc  # the connection batches go out on; None: one by one
        self._waiting: list[_Create] = []
        self._writers = 0
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    async def open(
        cls, js: JetStreamContext, kv: KeyValue, value: bytes, ttl: float
    ) -> RecordCreates:
        """Creates into ``kv``, batched if its stream takes atomic batches (they
        are allowed on it here when the server knows them)."""
        return cls(kv, value, ttl, await _atomic_connection(js, kv))

    @property
    def batched(self) -> bool:
        """Whether creates that wait together go out as one batch."""
        return self._nc is not None

    async def create(self, name: str) -> int:
        """Create ``name``'s record; its revision. KeyWrongLastSequenceError when
        the name is not free, as nats-py's own create raises it."""
        if self._nc is None:
            return await self.kv.create(name, self.value, msg_ttl=self.ttl)
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiting.append(_Create(name, done))
        if self._writers < BATCHES_AT_ONCE:
            self._writers += 1
            spawn(self._write_waiting(), "claim record writer", self._tasks)
        return await done

    async def close(self) -> None:
        """Stop the writers; creates still waiting fail with ConnectionClosedError."""
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=1.0)
        waiting, self._waiting = self._waiting, []
        for create in waiting:
            _fail(create, nats.errors.ConnectionClosedError())

    async def _write_waiting(self) -> None:
        """Take the waiting creates, up to a batch at a time, until none wait: those
        made while a batch is on its way fill the next one."""
        try:
            while self._waiting:
                group = self._waiting[:BATCH_MOST]
                del self._waiting[:BATCH_MOST]
                await self._write(group)
        finally:
            self._writers -= 1

    async def _write(self, group: list[_Create]) -> None:
        group = [create for create in group if not create.done.done()]  # given up on
        if len(group) <= 1 or self._nc is None:
            await asyncio.gather(*(self._one(create) for create in group))
            return
        try:
            revisions = await self._batch(self._nc, [create.name for create in group])
        except nats.js.errors.APIError as err:
            if err.err_code in _NO_ATOMIC:
                log.info("claim records: no atomic batches here (%s); one by one", err)
                self._nc = None
            await asyncio.gather(*(self._one(create) for create in group))
            return
        except Exception as exc:  # its outcome unknown: one by one (ours are adopted)
            log.debug("claim records: a batch of %d failed (%r); one by one", len(group), exc)
            await asyncio.gather(*(self._one(create) for create in group))
            return
        for create, revision in zip(group, revisions, strict=True):
            if not create.done.done():
                create.done.set_result(revision)

    async def _one(self, create: _Create) -> None:
        try:
            revision = await self.kv.create(create.name, self.value, msg_ttl=self.ttl)
        except Exception as exc:
            _fail(create, exc)
        else:
            if not create.done.done():
                create.done.set_result(revision)

    async def _batch(self, nc: Client, names: list[str]) -> list[int]:
        """Store one record per name as one atomic batch: their revisions (the
        batch is stored in a row, so the last one's sequence gives them all)."""
        batch_id = _BATCH_IDS.next().decode()
        prefix = self.kv._pre  # the bucket's subject prefix, as nats-py's own writes use
        ttl = str(int(self.ttl))
        last = len(names)
        for n, name in enumerate(names, 1):
            headers = {
                "Nats-Batch-Id": batch_id,
                "Nats-Batch-Sequence": str(n),
                "Nats-Expected-Last-Subject-Sequence": "0",  # a create: only if free
                "Nats-TTL": ttl,
            }
            if n < last:
                await nc.publish(prefix + name, self.value, headers=headers)
                continue
            headers["Nats-Batch-Commit"] = "1"
            reply = await nc.request(
                prefix + name, self.value, headers=headers, timeout=_COMMIT_TIMEOUT
            )
        answer = json.loads(reply.data)
        error = answer.get("error")
        if error is not None:
            raise nats.js.errors.APIError(
                code=error.get("code"),
                err_code=error.get("err_code"),
                description=error.get("description"),
            )
        if answer.get("batch") != batch_id or answer.get("count") != last:
            raise nats.errors.Error(f"a batch of {last} was not stored as one: {answer}")
        end = int(answer["seq"])
        return list(range(end - last + 1, end + 1))


def _fail(create: _Create, exc: BaseException) -> None:
    if not create.done.done():
        create.done.set_exception(exc)
        create.done.exception()  # retrieved: a claim given up on logs nothing


async def create_records_bucket(js: JetStreamContext, config: KeyValueConfig) -> KeyValue:
    """Make the bucket ``config`` describes, its stream taking atomic batches from
    the start: a member of a secured broker may make a stream but not change one
    (``security/broker.py``). The stream is a key-value bucket's as nats-py and
    every other client make it (ADR-8), with ``allow_atomic``. BadRequestError
    when it exists otherwise, as from ``create_key_value``."""
    if type(js) is not JetStreamContext:  # the in-process bus keeps buckets in memory
        return await js.create_key_value(config)
    await js.add_stream(
        StreamConfig(
            name=f"KV_{config.bucket}",
            subjects=[f"$KV.{config.bucket}.>"],
            allow_direct=config.direct,
            allow_rollup_hdrs=True,
            allow_msg_ttl=True,
            allow_atomic=True,
            deny_delete=True,
            discard=DiscardPolicy.NEW,
            duplicate_window=min(120.0, config.ttl) if config.ttl else 120.0,
            max_age=config.ttl,
            max_bytes=config.max_bytes,
            max_consumers=-1,
            max_msg_size=config.max_value_size,
            max_msgs=-1,
            max_msgs_per_subject=config.history,
            num_replicas=config.replicas,
            storage=config.storage,
        )
    )
    return await js.key_value(config.bucket)


async def _atomic_connection(js: JetStreamContext, kv: KeyValue) -> Client | None:
    """The connection to batch on, once the bucket's stream allows atomic batches
    (allowed now if it did not); None where that cannot be."""
    nc = getattr(js, "_nc", None)
    if not isinstance(nc, Client) or type(kv) is not KeyValue:
        return None  # an in-memory bucket (the in-process bus): nothing to batch
    try:
        info = (await kv.status()).stream_info
        if not info.config.allow_atomic:
            config = dataclasses.replace(info.config, allow_atomic=True)
            # Briefly: a member the broker does not let change streams gets no
            # answer at all (a permissions violation), only the request's timeout.
            async with asyncio.timeout(_UPDATE_TIMEOUT):
                info = await js.update_stream(config)
    except Exception as exc:  # an older server, or a bucket this credential may not change
        log.info("claim records: atomic batches not allowed on the bucket (%r)", exc)
        return None
    return nc if info.config.allow_atomic else None
