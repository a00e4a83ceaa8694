"""Production: an authority kept offline issues each deployment its credentials
(`actorbus security`), and systems run with those alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _util import WAIT, guard_of
from pydantic import BaseModel

from actorbus import Actor, AuthError, SecuritySettings, handler
from actorbus.cli.main import main


class Question(BaseModel):
    text: str


class Oracle(Actor):
    type_name = "oracle"

    @handler
    async def answer(self, q: Question) -> str:
        return f"yes, {q.text}"


def cli(*args: str) -> None:
    assert main(list(args)) == 0


async def test_issued_credentials_need_no_authority_on_the_deployment(
    make_system: Any, tmp_path: Path, ns: str, capsys: pytest.CaptureFixture[str]
) -> None:
    authority, host_home, client_home = tmp_path / "auth", tmp_path / "host", tmp_path / "client"
    cli("security", "authority", "--dir", str(authority), "--namespace", ns)
    assert "did:key:" in capsys.readouterr().out
    cli(
        "security",
        "issue",
        "--authority",
        str(authority),
        "--namespace",
        ns,
        "--out",
        str(host_home),
        "--type",
        "oracle",
    )
    cli(
        "security",
        "issue",
        "--authority",
        str(authority),
        "--namespace",
        ns,
        "--out",
        str(client_home),
    )
    for home in (host_home, client_home):
        assert not (home / "authority.key").exists()  # the secret stayed home
        assert (home / "system.key").stat().st_mode & 0o777 == 0o600
    host = await make_system(security=SecuritySettings(home=host_home))
    await host.spawn(Oracle, "1")
    caller = await make_system(security=SecuritySettings(home=client_home))
    assert await caller.ask("oracle/1", Question(text="it works"), timeout=WAIT) == "yes, it works"

    # a type the host was not issued a credential for cannot be hosted
    class Stranger(Actor):
        type_name = "stranger"

        @handler
        async def hi(self, text: str) -> str:
            return text

    with pytest.raises(AuthError, match="actorbus security issue"):
        await host.spawn(Stranger, "1")
    # rotating needs the authority, which this deployment does not have
    assert host.runtime.security.secured
    with pytest.raises(AuthError, match="authority"):
        await guard_of(host).rotate()
    # a deployment vouched for by another authority is not trusted here
    other, rogue_home = tmp_path / "other", tmp_path / "rogue"
    cli("security", "authority", "--dir", str(other), "--namespace", ns)
    cli("security", "issue", "--authority", str(other), "--namespace", ns, "--out", str(rogue_home))
    rogue = await make_system(security=SecuritySettings(home=rogue_home))
    with pytest.raises(AuthError):
        await rogue.ask("oracle/1", Question(text="let me in"), timeout=WAIT)


async def test_a_deployment_user_subscribes_only_to_its_own_types(tmp_path: Path, ns: str) -> None:
    """Issued with --broker, a deployment's NATS user may take messages of the
    actor types it was issued and of no other (no share of another type's queue)."""
    import asyncio

    import nats

    from actorbus import ActorSystem
    from actorbus.bus.server import EmbeddedServer, ServerConfig
    from actorbus.security.secure_broker import SecureBroker, issued_connect_options

    broker_home, authority = tmp_path / "broker-home", tmp_path / "auth"
    host_home, client_home = tmp_path / "host", tmp_path / "client"
    extra = SecureBroker(broker_home).server_config([ns])
    cli("security", "authority", "--dir", str(authority), "--namespace", ns)
    for out, types in ((host_home, ["--type", "oracle"]), (client_home, [])):
        cli(
            "security",
            "issue",
            "--authority",
            str(authority),
            "--namespace",
            ns,
            "--out",
            str(out),
            "--broker",
            str(broker_home),
            *types,
        )
    async with EmbeddedServer(ServerConfig(host="127.0.0.1", extra=extra)) as server:
        systems = []
        try:
            for home, name in ((host_home, "host"), (client_home, "client")):
                options = issued_connect_options(home, name)
                assert options is not None
                systems.append(
                    await ActorSystem.connect(
                        server.url,
                        namespace=ns,
                        registry=False,
                        connect_options=options,
                        security=SecuritySettings(home=home),
                    )
                )
            host, client = systems
            await host.spawn(Oracle, "1")
            assert await client.ask("oracle/1", Question(text="ok"), timeout=WAIT) == "yes, ok"
            # the client deployment's own user tries to take a share of the oracle's asks
            refused = asyncio.Event()

            async def on_error(exc: Exception) -> None:
                if "permissions violation" in str(exc).lower():
                    refused.set()

            options = issued_connect_options(client_home, "nosy")
            assert options is not None
            nosy = await nats.connect(
                server.url,
                user_credentials=options.credentials_file,
                tls=options.tls,
                inbox_prefix=options.inbox_prefix,
                allow_reconnect=False,
                error_cb=on_error,
            )
            try:
                await nosy.subscribe(f"{ns}.a.oracle.>", queue=f"{ns}.q.oracle.1")
                await nosy.flush()
                await asyncio.wait_for(refused.wait(), WAIT)
            finally:
                await nosy.close()
            assert (
                await client.ask("oracle/1", Question(text="still"), timeout=WAIT) == "yes, still"
            )
        finally:
            for system in reversed(systems):
                await system.close(timeout=2.0)


class Tally(Actor):
    """A keyed type: each key lives in one of its hosts, the others forward to it."""

    type_name = "tally"
    keyed = True

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    @handler
    async def count_up(self, q: Question) -> list[Any]:
        self.count += 1
        return [self.count, self.system.system_id]


def issue_hosts(authority: Path, broker_home: Path, ns: str, *homes: Path) -> None:
    for home in homes:
        cli(
            "security",
            *("issue", "--authority", str(authority), "--namespace", ns, "--out", str(home)),
            *("--broker", str(broker_home), "--type", "tally"),
        )


async def open_issued(url: str, ns: str, home: Path, name: str) -> Any:
    from actorbus import ActorSystem
    from actorbus.security.secure_broker import issued_connect_options

    options = issued_connect_options(home, name)
    assert options is not None
    return await ActorSystem.connect(
        url,
        namespace=ns,
        registry=False,
        connect_options=options,
        security=SecuritySettings(home=home),
        activation_ttl=1.0,
    )


async def test_deployments_of_one_type_share_its_key_and_forward_to_each_other(
    tmp_path: Path, ns: str
) -> None:
    """Two deployments issued separately for one keyed type (and a development
    host beside them would be the same): the authority hands each the type's one
    key, so whichever host a message reaches opens it, and a key held by the
    other host is reached by forwarding."""
    from actorbus.bus.server import EmbeddedServer, ServerConfig
    from actorbus.security.secure_broker import SecureBroker

    broker_home, authority = tmp_path / "broker-home", tmp_path / "auth"
    homes = [tmp_path / "host-a", tmp_path / "host-b", tmp_path / "client"]
    extra = SecureBroker(broker_home).server_config([ns])
    cli("security", "authority", "--dir", str(authority), "--namespace", ns)
    issue_hosts(authority, broker_home, ns, *homes[:2])
    cli(
        "security",
        *("issue", "--authority", str(authority), "--namespace", ns, "--out", str(homes[2])),
        *("--broker", str(broker_home)),
    )
    keys = [(home / "types" / "tally.key").read_bytes() for home in homes[:2]]
    assert keys[0] == keys[1] == (authority / "types" / "tally.key").read_bytes()
    async with EmbeddedServer(ServerConfig(host="127.0.0.1", extra=extra)) as server:
        systems = []
        try:
            for home in homes:
                systems.append(await open_issued(server.url, ns, home, home.name))
            a, b, client = systems
            await a.register(Tally)
            await b.register(Tally)
            # Each key's first message reaches one host at random, which then
            # holds it: with 24 keys both hosts hold some (with 8, all went to one
            # host about once in 128 runs).
            replies = [
                await client.ask(f"tally/k{n % 24}", Question(text="one"), timeout=WAIT)
                for n in range(72)
            ]
            assert sorted(count for count, _ in replies) == sorted([1, 2, 3] * 24)
            assert {host for _, host in replies} == {a.system_id, b.system_id}
        finally:
            for system in reversed(systems):
                await system.close(timeout=2.0)


async def test_a_host_with_another_key_for_its_type_says_so(
    tmp_path: Path, ns: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A deployment issued before types had one key (or by hand) holds a key of its
    own: its start warns, and what it cannot open it refuses naming the cause."""
    from actorbus.bus.server import EmbeddedServer, ServerConfig
    from actorbus.security.secure_broker import SecureBroker

    broker_home, authority = tmp_path / "broker-home", tmp_path / "auth"
    first, second = tmp_path / "host-a", tmp_path / "host-b"
    extra = SecureBroker(broker_home).server_config([ns])
    cli("security", "authority", "--dir", str(authority), "--namespace", ns)
    issue_hosts(authority, broker_home, ns, first)
    (authority / "types" / "tally.key").unlink()  # the next issue makes another key
    issue_hosts(authority, broker_home, ns, second)
    async with EmbeddedServer(ServerConfig(host="127.0.0.1", extra=extra)) as server:
        a = await open_issued(server.url, ns, first, "a")
        b = await open_issued(server.url, ns, second, "b")
        try:
            await a.register(Tally)
            with caplog.at_level("WARNING", logger="actorbus.security"):
                await b.register(Tally)
            assert "hosts of one type need one key" in caplog.text
            with pytest.raises(AuthError, match="another host of the type has a key of its own"):
                guard_of(a)._recipient("tally", guard_of(b).types["tally"].kid)
        finally:
            await b.close(timeout=2.0)
            await a.close(timeout=2.0)
