"""Durable delivery to lazily hosted types (``register()``): one queue for every key,
in order per key, retries that hold only their own key, shared by host processes."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict

import pytest
from test_durable import FAST, Entry, Progress, wait_for_dead_letters

from actorbus import Actor, ActorBusError, DurableSettings, handler


class Book(Actor):
    """One key per book; records what each book handled, fails on demand."""

    type_name = "book"
    durable = True

    def __init__(
        self,
        progress: dict[str, Progress],
        fail: dict[tuple[str, int], int],
        log: list[str],
        failed: asyncio.Event,
    ) -> None:
        self.progress = progress
        self.fail = fail  # (key, n) -> how many more times to fail (-1: always)
        self.log = log
        self.failed = failed

    @handler
    async def add(self, e: Entry) -> None:
        left = self.fail.get((self.key, e.n), 0)
        if left:
            self.fail[(self.key, e.n)] = left - 1 if left > 0 else left
            self.failed.set()
            raise RuntimeError(f"{self.key}:{e.n} is not welcome yet")
        self.log.append(f"{self.key}:{e.n}")
        self.progress[self.key].add(e.n)


class Books:
    def __init__(self) -> None:
        self.progress: defaultdict[str, Progress] = defaultdict(Progress)
        self.fail: dict[tuple[str, int], int] = {}
        self.log: list[str] = []
        self.failed = asyncio.Event()

    def kwargs(self) -> dict[str, object]:
        return {
            "progress": self.progress,
            "fail": self.fail,
            "log": self.log,
            "failed": self.failed,
        }


async def test_queued_messages_activate_each_key_and_keep_its_order(make_system) -> None:
    sender = await make_system(durable=FAST)
    for n in range(50):
        for key in ("a", "b", "c"):
            await sender.tell(f"book/{key}", Entry(n=n), durable=True)
    books = Books()
    host = await make_system(durable=FAST)
    await host.register(Book, **books.kwargs())
    for key in ("a", "b", "c"):
        await books.progress[key].reached(50)
        assert books.progress[key].seen == list(range(50))
    assert set(host.local_actors()) == {"book/a", "book/b", "book/c"}
    stats = await sender.queue_stats("book")
    assert stats.shared
    assert stats.address == "book/*"
    assert (stats.pending, stats.delivered) == (0, 150)


async def test_a_retry_holds_its_own_key_only(make_system) -> None:
    books = Books()
    books.fail[("slow", 0)] = 2  # two failures: retried after 0.05 s, then 0.1 s
    host = await make_system(durable=FAST)
    await host.register(Book, **books.kwargs())
    await host.tell("book/slow", Entry(n=0))  # durable by the type's default
    await host.tell("book/slow", Entry(n=1))
    for n in range(3):
        await host.tell("book/fast", Entry(n=n))
    await books.progress["fast"].reached(3)
    await books.progress["slow"].reached(2)
    assert books.progress["slow"].seen == [0, 1]
    assert books.log.index("fast:2") < books.log.index("slow:0")  # not stuck behind it


async def test_poison_is_dead_lettered_and_the_key_goes_on(make_system) -> None:
    books = Books()
    books.fail[("p", 1)] = -1
    host = await make_system(durable=FAST)
    await host.register(Book, **books.kwargs())
    for n in range(3):
        await host.tell("book/p", Entry(n=n))
    await books.progress["p"].reached(2)
    assert books.progress["p"].seen == [0, 2]
    [letter] = await wait_for_dead_letters(host, "book/p", 1)
    assert letter.attempts == FAST.max_deliver
    assert letter.envelope().content == {"n": 1}


async def test_host_processes_share_a_type_and_each_message_runs_once(make_system) -> None:
    books = Books()
    hosts = [await make_system(durable=FAST) for _ in range(2)]
    for host in hosts:
        await host.register(Book, **books.kwargs())
    keys = [f"k{i}" for i in range(8)]
    for n in range(20):
        for key in keys:
            await hosts[0].tell(f"book/{key}", Entry(n=n))
    for key in keys:
        await books.progress[key].reached(20)
    assert len(books.log) == len(set(books.log)) == 160
    await hosts[0].close()  # its share of later messages goes to the other host
    for key in keys:
        await hosts[1].tell(f"book/{key}", Entry(n=20))
    for key in keys:
        await books.progress[key].reached(21)
        assert books.progress[key].seen == list(range(21))  # one reader at a time


async def test_a_pull_request_outliving_its_fetch_takes_nothing_handed_back(
    make_system,
) -> None:
    """Under load a fetch times out on the client a moment before the server lets
    its pull request expire. Here one is left waiting for three seconds: a message
    handed back at close must not go to it (it would be held there for ack_wait
    while the key's later message went to the next host first)."""
    slow = DurableSettings(backoff=(0.05, 0.1, 0.2), ack_wait=30.0)
    books = Books()
    books.fail[("h", 0)] = 2
    first = await make_system(durable=slow)
    await first.register(Book, **books.kwargs())
    await first.tell("book/h", Entry(n=0))
    await first.tell("book/h", Entry(n=1))
    await asyncio.wait_for(books.failed.wait(), 5)
    psub = first.hosting.residents.hosts["book"].inbox._psub
    # A pull request as the server sees it, from this subscription (nats-py's names).
    request = json.dumps({"batch": 10, "expires": 3_000_000_000}).encode()
    await first.nc.publish(psub._nms, request, psub._deliver)
    await first.nc.flush()
    await asyncio.wait_for(first.close(), 10)
    second = await make_system(durable=slow)
    await second.register(Book, **books.kwargs())
    await books.progress["h"].reached(2, timeout=5)  # not after ack_wait
    assert books.progress["h"].seen == [0, 1]


async def test_spawning_and_registering_one_durable_type_is_refused(make_system) -> None:
    books = Books()
    lazy = await make_system(durable=FAST)
    await lazy.register(Book, **books.kwargs())
    other = await make_system(durable=FAST)
    with pytest.raises(ActorBusError, match="hosted lazily"):
        await other.spawn(Book, "x", **books.kwargs())

    spawned = await make_system(namespace=lazy.namespace + "s", durable=FAST)
    await spawned.spawn(Book, "y", **books.kwargs())
    late = await make_system(namespace=lazy.namespace + "s", durable=FAST)
    with pytest.raises(ActorBusError, match="spawned durable instances"):
        await late.register(Book, **books.kwargs())


async def test_closing_hands_queued_messages_to_another_host(make_system) -> None:
    books = Books()
    books.fail[("h", 0)] = 2  # the first host is retrying this one when it closes
    first = await make_system(durable=FAST)
    await first.register(Book, **books.kwargs())
    await first.tell("book/h", Entry(n=0))
    await first.tell("book/h", Entry(n=1))
    await asyncio.wait_for(books.failed.wait(), 5)  # it is retrying now
    await asyncio.wait_for(first.close(), 10)
    second = await make_system(durable=FAST)
    await second.register(Book, **books.kwargs())
    await books.progress["h"].reached(2)
    assert books.progress["h"].seen == [0, 1]
    assert "book/h" in second.local_actors()  # the second host handled them
