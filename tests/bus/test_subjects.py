"""The subject scheme: address parsing, subject building, namespace isolation."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from actorbus import Actor, ActorSystem, InvalidAddressError, NoRespondersError, handler
from actorbus.bus.subjects import Address, Subjects, validate_namespace, validate_topic


@pytest.mark.parametrize(
    ("text", "type_", "key"),
    [
        ("echo/1", "echo", "1"),
        ("echo", "echo", None),
        ("my-agent_2/user@example:x=1", "my-agent_2", "user@example:x=1"),
        ("a/with/slashes", "a", "with/slashes"),
        ("x/" + "k" * 256, "x", "k" * 256),
    ],
)
def test_parse_valid(text: str, type_: str, key: str | None) -> None:
    addr = Address.parse(text)
    assert (addr.type, addr.key) == (type_, key)
    assert str(addr) == text
    assert addr.is_anycast is (key is None)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Echo/1",  # uppercase type
        "-echo/1",  # leading dash
        "echo/",  # empty key
        "echo/a.b",  # dot would split the subject
        "echo/a*",
        "echo/a>",
        "echo/a b",
        "echo/tab\t",
        "ec.ho/1",
        "x/" + "k" * 257,
        "t" * 129,
        "/key",
    ],
)
def test_parse_invalid(text: str) -> None:
    with pytest.raises(InvalidAddressError):
        Address.parse(text)


def test_parse_non_string() -> None:
    with pytest.raises(InvalidAddressError, match="non-empty string"):
        Address.parse(None)  # type: ignore[arg-type]


def test_invalid_address_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="invalid actor key"):
        Address.parse("echo/a.b")


def test_subjects() -> None:
    s = Subjects("ns1")
    assert s.direct(Address("echo", "1")) == "ns1.a.echo.1"
    assert s.direct(Address("echo")) == "ns1.any.echo"
    assert s.anycast("echo") == "ns1.any.echo"
    assert s.direct_all("echo") == "ns1.a.echo.*"
    assert s.topic("news.sport") == "ns1.t.news.sport"
    assert s.topic("news.*", wildcards=True) == "ns1.t.news.*"
    assert s.topic_of("ns1.t.news.sport") == "news.sport"
    assert s.system("actor.failed") == "ns1.sys.actor.failed"
    assert s.control("abc") == "ns1.ctl.abc"
    assert s.key_of("ns1.a.echo.k1") == "k1"
    assert Subjects().ns == "ab"


@pytest.mark.parametrize("ns", ["", "a.b", "a b", "a*", "n" * 65])
def test_invalid_namespace(ns: str) -> None:
    with pytest.raises(InvalidAddressError):
        Subjects(ns)
    with pytest.raises(InvalidAddressError):
        validate_namespace(ns)


@pytest.mark.parametrize("topic", ["news", "news.sport", "a:b.c@d=e+f-g_h"])
def test_valid_topics(topic: str) -> None:
    assert validate_topic(topic, wildcards=False) == topic


@pytest.mark.parametrize("topic", ["news.*", "news.>", "*.x", ">"])
def test_wildcards_only_in_patterns(topic: str) -> None:
    assert validate_topic(topic, wildcards=True) == topic
    with pytest.raises(InvalidAddressError, match="no wildcards"):
        validate_topic(topic, wildcards=False)


@pytest.mark.parametrize("topic", ["", "news.", ".news", "news..x", "news.>.x", "new s", "a/b"])
def test_invalid_topics(topic: str) -> None:
    with pytest.raises(InvalidAddressError):
        validate_topic(topic, wildcards=True)


# -- namespace isolation on one server ---------------------------------------


class NsPing(BaseModel):
    pass


class NsPong(BaseModel):
    namespace: str
    instance: int


class NsEcho(Actor):
    type_name = "ns-echo"

    @handler
    async def ping(self, _: NsPing) -> NsPong:
        return NsPong(namespace=self.system.namespace, instance=id(self))


async def test_namespaces_do_not_cross(make_system, ns: str) -> None:
    a = await make_system(namespace=ns + "-a")
    b = await make_system(namespace=ns + "-b")
    await a.spawn(NsEcho, "same")
    await b.spawn(NsEcho, "same")
    for _ in range(20):
        ra = await a.ask("ns-echo/same", NsPing(), timeout=2)
        rb = await b.ask("ns-echo/same", NsPing(), timeout=2)
        assert ra.namespace == ns + "-a"
        assert rb.namespace == ns + "-b"
        assert ra.instance != rb.instance


async def test_actor_in_other_namespace_is_not_reachable(make_system, ns: str) -> None:
    a = await make_system(namespace=ns + "-a")
    b = await make_system(namespace=ns + "-b")
    await a.spawn(NsEcho, "only-a")
    assert (await a.ask("ns-echo/only-a", NsPing(), timeout=2)).namespace == ns + "-a"
    with pytest.raises(NoRespondersError):
        await b.ask("ns-echo/only-a", NsPing(), timeout=2)


async def test_invalid_namespace_refused(nats_server) -> None:
    with pytest.raises(InvalidAddressError):
        await ActorSystem.connect(nats_server.url, namespace="bad.ns")
