"""The handled-keys bucket as a reader sees it, when the broker cannot take a
write: the key is remembered by the process, answered from memory when its
message comes back, and written as soon as the bucket takes writes again."""

from __future__ import annotations

import time
from typing import Any

import nats
import pytest
from nats.js.api import KeyValueConfig

from actorbus.actors.handled_keys import HandledKeys


async def test_a_key_the_bucket_cannot_take_is_remembered_then_written(
    nats_server: Any, ns: str, caplog: pytest.LogCaptureFixture
) -> None:
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        bucket = f"handled-{ns}"
        kv = await js.create_key_value(KeyValueConfig(bucket=bucket))
        keys = HandledKeys(kv, patience=0.5, what="ledger/1")
        await keys.put("ledger.1.pay-1", b"first")
        assert await keys.get("ledger.1.pay-1") == b"first"
        assert await keys.get("ledger.1.pay-2") is None

        await js.delete_key_value(bucket)  # the bucket's stream is gone: no write lands
        started = time.monotonic()
        await keys.put("ledger.1.pay-2", b"second")  # does not raise: remembered
        assert time.monotonic() - started < 5  # retried for `patience`, then given up
        assert "could not be recorded" in caplog.text
        assert keys.unwritten == {"ledger.1.pay-2": b"second"}

        await js.create_key_value(KeyValueConfig(bucket=bucket))  # writes land again
        assert await keys.get("ledger.1.pay-2") == b"second"  # from memory, and written
        assert keys.unwritten == {}
        assert (await kv.get("ledger.1.pay-2")).value == b"second"
    finally:
        await nc.close()
