"""The ``actorbus`` command, tested the way people use it: as separate processes on
real nats-servers. Readiness is a line on stdout, never a sleep; every process a
test starts is stopped by the test (SIGTERM, then SIGKILL if it must).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import socket
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import nats
import pytest
from _cli import REPO, WAIT, cli, cli_env, pid_alive
from pydantic import BaseModel
from rich.console import Console

import actorbus
from actorbus import Actor, ActorSystem, handler
from actorbus.actors.interim import InputRequired
from actorbus.bus.jetstream import stream_name
from actorbus.bus.server import EmbeddedServer
from actorbus.cli import main
from actorbus.demo import READERS, run_demo
from actorbus.security.secure_broker import SecureBroker
from actorbus.testing import eventually

# `actorbus up` on the default port: one such test at a time across workers.
pytestmark = pytest.mark.usefixtures("default_port")


EXPECTED_ANSWER = (
    "Agents built as actors recover from failures because a supervisor restarts them. "
    "Actors communicate only by sending messages, never by sharing memory. "
    "A supervisor restarts an actor that crashes, so failures stay local."
)


# -- helpers -----------------------------------------------------------------


def field(lines: list[str], name: str) -> str:
    """The value of an ``  name   value`` line of ``actorbus up``."""
    for line in lines:
        parts = line.split(None, 1)
        if len(parts) == 2 and parts[0] == name:
            return parts[1].strip()
    raise AssertionError(f"no {name!r} line in {lines}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# -- actorbus demo -----------------------------------------------------------


NO_MODEL = {"OPENAI_API_KEY": "", "OPENAI_BASE_URL": "", "ANTHROPIC_API_KEY": ""}


@pytest.mark.timeout(120)
async def test_demo_json_subprocess() -> None:
    async with cli("demo", "--json", env=NO_MODEL) as p:
        assert p.proc.stdout is not None
        # a whole program's run (a broker, its team, an agent): seconds on a quiet
        # machine, more with the other test worker building images
        async with asyncio.timeout(60):
            out = await p.proc.stdout.read()
            code = await p.proc.wait()
        assert code == 0, p.stderr
    result = json.loads(out)
    assert result["answer"] == EXPECTED_ANSWER
    assert result["streamed"] == EXPECTED_ANSWER
    assert result["events"] == list(READERS)
    assert result["sentences"][1]["sources"] == ["reader/0", "reader/1"]  # deduplicated
    agents = {step["agent"] for step in result["timeline"]}
    assert {"planner/0", "aggregator/0", "narrator/0", "monitor/0", *READERS} <= agents
    # The LLM agent, with the team as its tool, on the scripted model (none configured).
    agent = result["agent"]
    assert agent["model"].startswith("scripted (no model configured")
    assert agent["answer"] == "The team found: " + EXPECTED_ANSWER.split(". ")[0] + "."
    assert agent["usage"] == {"input_tokens": 22, "output_tokens": 14}


async def test_run_demo_in_process() -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=120, color_system=None)
    async with ActorSystem.start() as system:
        first = await run_demo(system, console=console)
        again = await run_demo(system, "What is NATS?", console=console)
    assert first.answer == EXPECTED_ANSWER
    assert first.streamed == first.answer
    assert first.tokens == len(first.answer.split())
    assert first.events == list(READERS)
    assert [s.score for s in first.sentences] == [0.75, 0.5, 0.5]
    # The same team answers a second question; events are counted per run.
    assert again.answer.startswith("NATS is a lightweight message broker")
    assert again.events == list(READERS)
    text = buf.getvalue()
    assert "narrator/0 streaming: Agents built as actors" in text
    assert "counted 3 'reading.done' event(s)" in text


# -- actorbus up -------------------------------------------------------------


async def test_up_is_secure_by_default_and_members_get_in() -> None:
    async with cli("up") as p:
        await p.wait_for_line("keys")
        url = field(p.lines, "url")
        assert field(p.lines, "security").startswith("NATS JWT auth + TLS")
        with pytest.raises((nats.errors.Error, OSError, TimeoutError)):  # an outsider
            await nats.connect(url, allow_reconnect=False, connect_timeout=2)
        member = SecureBroker().connect_options("ab", "cli-test")  # same ACTORBUS_HOME
        nc = await nats.connect(
            url,
            user_credentials=member.nats_credentials(),
            tls=member.tls,
            inbox_prefix=member.inbox_prefix,
            allow_reconnect=False,
        )
        try:
            sub = await nc.subscribe("ab.cli", cb=None)
            await nc.publish("ab.cli", b"member")
            assert (await sub.next_msg(timeout=WAIT)).data == b"member"
        finally:
            await nc.close()
        assert await p.terminate() == 0, p.stderr


async def test_up_insecure_serves_anyone_until_sigterm() -> None:
    async with cli("up", "--insecure", "--ephemeral") as p:
        await p.wait_for_line("pid")
        url, pid = field(p.lines, "url"), int(field(p.lines, "pid"))
        store = Path(field(p.lines, "store").split(" (")[0])
        assert url.startswith("nats://127.0.0.1:")
        assert await asyncio.to_thread(store.is_dir)

        nc = await nats.connect(url, allow_reconnect=False, connect_timeout=2)
        try:
            sub = await nc.subscribe("cli.test", cb=None)
            await nc.publish("cli.test", b"hello")
            msg = await sub.next_msg(timeout=WAIT)
            assert msg.data == b"hello"
        finally:
            await nc.close()

        assert await p.terminate() == 0, p.stderr
    assert any("stopped" in line for line in p.lines)
    assert not pid_alive(pid), "nats-server outlived `actorbus up`"
    assert not await asyncio.to_thread(store.exists), "temporary store left behind"
    # Nothing listens on the port any more (a raw TCP connect: nats-py would retry).
    host, port = url.removeprefix("nats://").rsplit(":", 1)
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection(host, int(port))


async def finished(*args: str, env: dict[str, str]) -> tuple[int | None, str, str]:
    """Run one short command to its end: exit code, stdout, stderr."""
    async with cli(*args, env=env) as p:
        assert p.proc.stdout is not None
        async with asyncio.timeout(3 * WAIT):
            out = (await p.proc.stdout.read()).decode()
            code = await p.proc.wait()
    return code, out, p.stderr


async def test_commands_find_the_server_actorbus_up_runs(
    tmp_path: Path, nats_server: EmbeddedServer
) -> None:
    """A second terminal needs no URL: `actorbus up` records the one it serves (and
    removes it on exit); $ACTORBUS_URL or $NATS_URL name another; without any of
    them, a command says how to name one."""
    home = {"ACTORBUS_HOME": str(tmp_path / "home"), "ACTORBUS_URL": "", "NATS_URL": ""}
    context = tmp_path / "home" / "context.json"
    async with cli("up", "--insecure", env=home) as up:
        await up.wait_for_line("pid")
        url = field(up.lines, "url")
        assert json.loads(context.read_text())["url"] == url
        code, out, err = await finished("dlq", "ls", "--json", env=home)
        assert code == 0, err
        assert json.loads(out) == []
        assert await up.terminate() == 0, up.stderr
    assert not context.exists()
    code, out, err = await finished("dlq", "ls", env=home)
    assert code == 2
    assert "which NATS server? give --url, set ACTORBUS_URL" in err + out
    with_env = {**home, "NATS_URL": nats_server.url}
    code, out, err = await finished("dlq", "ls", "--json", env=with_env)
    assert code == 0, err


async def test_the_services_run_from_the_one_command(
    tmp_path: Path, nats_server: EmbeddedServer
) -> None:
    """`actorbus gateway`, `router` and `registry serve` take the services' own
    options, and find the server as every other command does."""
    env = {"ACTORBUS_HOME": str(tmp_path / "home"), "ACTORBUS_URL": nats_server.url}
    for words in (["gateway"], ["router"], ["registry", "serve"]):
        code, out, err = await finished(*words, "--help", env=env)
        assert code == 0, err
        assert "--http" in out
    db = str(tmp_path / "gw.db")
    ns = f"t{uuid.uuid4().hex[:8]}"
    async with cli(
        "gateway", "--http", "127.0.0.1:0", "--db", db, "--namespace", ns, env=env
    ) as gw:
        await gw.wait_for_line("ready")
        assert any(line.startswith("gateway http://127.0.0.1:") for line in gw.lines)
        assert await gw.terminate() == 0, gw.stderr


class Shouter(Actor):
    """Answers text in capitals, objects with their keys, streams words, and keeps
    what it is told."""

    type_name = "shouter"
    heard: ClassVar[list[Any]] = []

    @handler
    async def shout(self, text: str) -> str:
        return text.upper()

    @handler
    async def keys(self, obj: dict[str, Any]) -> list[str]:
        return sorted(obj)

    @handler(intent="words")
    async def words(self, text: Any) -> AsyncIterator[dict[str, Any]]:
        for i, word in enumerate(str(text).split()):
            yield {"i": i, "word": word}

    @handler(intent="tokens")
    async def tokens(self, text: Any) -> AsyncIterator[str | InputRequired]:
        for word in str(text).split():
            yield word.upper() + " "
        if str(text).endswith("?"):
            yield InputRequired(message="which one?")  # the run waits for a person

    @handler(intent="note", durable=True)
    async def note(self, text: Any) -> None:
        Shouter.heard.append(text)

    @handler(intent="headline", topic="news")
    async def headline(self, text: Any) -> None:
        Shouter.heard.append(("news", text))


async def test_ask_tell_stream_and_publish_from_the_shell(
    make_system: Any, nats_server: EmbeddedServer, ns: str, tmp_path: Path
) -> None:
    host = await make_system()
    await host.spawn(Shouter, "1")
    env = {"ACTORBUS_HOME": str(tmp_path / "home"), "ACTORBUS_URL": nats_server.url}
    bus = ("--namespace", ns)
    code, out, err = await finished("ask", "shouter/1", "hello", *bus, env=env)
    assert (code, out.strip()) == (0, '"HELLO"'), err
    code, out, err = await finished("ask", "shouter/1", '{"b": 1, "a": 2}', *bus, env=env)
    assert (code, json.loads(out)) == (0, ["a", "b"]), err
    code, out, err = await finished(
        "stream", "shouter/1", '"two words"', "--intent", "words", *bus, env=env
    )
    assert code == 0, err
    assert [json.loads(line) for line in out.splitlines()] == [
        {"i": 0, "word": "two"},
        {"i": 1, "word": "words"},
    ]
    code, out, err = await finished(
        "stream", "shouter/1", '"an agent speaks"', "--intent", "tokens", "--text", *bus, env=env
    )
    assert (code, out) == (0, "AN AGENT SPEAKS \n"), err  # tokens as one text
    code, out, err = await finished(
        "stream", "shouter/1", '"pick?"', "--intent", "tokens", "--text", *bus, env=env
    )
    assert code == 0, err
    assert out == "PICK? \nwhich one?\n(answer: actorbus stream shouter/1 'ANSWER' --text)\n"
    code, out, err = await finished(  # an ask of a streaming handler: its items collected
        "ask", "shouter/1", '"an agent speaks"', "--intent", "tokens", *bus, env=env
    )
    assert (code, json.loads(out)) == (0, "AN AGENT SPEAKS "), err
    code, out, err = await finished(
        "tell", "shouter/1", "remember", "--intent", "note", "--durable", *bus, env=env
    )
    assert (code, out.strip()) == (0, "stored"), err
    await eventually(lambda: Shouter.heard == ["remember"], what="the durable note")
    code, out, err = await finished(
        "publish", "news", '"extra"', "--intent", "headline", *bus, env=env
    )
    assert code == 0, err
    await eventually(lambda: ("news", "extra") in Shouter.heard, what="the published news")
    code, out, err = await finished("ask", "nobody/1", "x", "--timeout", "1", *bus, env=env)
    assert code == 1
    assert "nobody/1" in err


class Dripper(Actor):
    """A stream whose second item waits for the test: its first must be out first."""

    release = asyncio.Event()

    @handler(intent="drip")
    async def drip(self, _: Any) -> AsyncIterator[dict[str, int]]:
        yield {"i": 0}
        await Dripper.release.wait()
        yield {"i": 1}


async def test_a_streams_items_reach_a_pipe_as_they_come(
    make_system: Any, nats_server: EmbeddedServer, ns: str, tmp_path: Path
) -> None:
    """`actorbus stream ... | jq`: each item is a line written at once, not held in
    the pipe's buffer until the stream ends (the stream here cannot end until
    the first line was read)."""
    host = await make_system()
    Dripper.release = asyncio.Event()
    await host.spawn(Dripper, "1")
    env = {
        "ACTORBUS_HOME": str(tmp_path / "home"),
        "ACTORBUS_URL": nats_server.url,
        "PYTHONUNBUFFERED": "",  # a pipe, buffered as a user's is
    }
    args = ("stream", "dripper/1", "{}", "--intent", "drip", "--namespace", ns)
    async with cli(*args, env=env) as p:
        assert json.loads(await p.readline()) == {"i": 0}
        Dripper.release.set()
        assert json.loads(await p.readline()) == {"i": 1}
        async with asyncio.timeout(WAIT):
            assert await p.proc.wait() == 0, p.stderr


class CliBooking(BaseModel):
    nights: int


class Booker(Actor):
    """One handler, taking a model: what the shell's JSON is fitted to."""

    @handler
    async def book(self, b: CliBooking) -> str:
        return f"{b.nights} nights"


async def test_ask_fits_json_to_a_one_handler_actor_as_the_gateway_does(
    make_system: Any, nats_server: EmbeddedServer, ns: str, tmp_path: Path
) -> None:
    """No --intent: the object goes to the actor's one handler (it used to be sent
    as 'dict' and refused: no handler for intent 'dict')."""
    host = await make_system()
    await host.spawn(Booker, "1")
    await host.directory.announced()
    env = {"ACTORBUS_HOME": str(tmp_path / "home"), "ACTORBUS_URL": nats_server.url}
    code, out, err = await finished("ask", "booker/1", '{"nights": 3}', "--namespace", ns, env=env)
    assert code == 0, err
    assert json.loads(out) == "3 nights"


async def test_a_durable_tell_to_a_type_the_registry_says_reads_no_queue_is_refused(
    make_system: Any, nats_server: EmbeddedServer, ns: str, tmp_path: Path
) -> None:
    """It would wait in JetStream unread: the shell says so and stores nothing."""
    host = await make_system()
    await host.spawn(Booker, "1")  # no durable handler
    await host.directory.announced()
    env = {"ACTORBUS_HOME": str(tmp_path / "home"), "ACTORBUS_URL": nats_server.url}
    code, out, err = await finished(
        "tell", "booker/1", '{"nights": 3}', "--durable", "--namespace", ns, env=env
    )
    assert code == 1, out
    assert "would never be delivered" in err
    assert "@handler(durable=True)" in err
    assert [e async for e in host.history(address="booker/1")] == []


GREETER = """
from actorbus import Actor, handler

class Greeter(Actor):
    @handler
    async def greet(self, name: str) -> str:
        return "{greeting} " + name
"""


async def test_run_reload_starts_again_with_the_changed_code(
    make_system: Any, nats_server: EmbeddedServer, ns: str, tmp_path: Path
) -> None:
    module = tmp_path / "greeter_agent.py"
    module.write_text(GREETER.format(greeting="hello"))
    caller = await make_system()
    args = ("run", "greeter_agent:Greeter", "--key", "1", "--reload", "--namespace", ns)
    async with cli(*args, env={"ACTORBUS_URL": nats_server.url}, cwd=tmp_path) as host:
        await host.wait_for_line("ready")
        assert await caller.ask("greeter/1", "ada") == "hello ada"
        module.write_text(GREETER.format(greeting="bonjour"))
        await host.wait_for_line("changed")
        await host.wait_for_line("ready")  # the same command, started again
        assert await caller.ask("greeter/1", "ada") == "bonjour ada"
        module.write_text("this is not python")  # a typo: it says so and waits
        await host.wait_for_line("changed")
        module.write_text(GREETER.format(greeting="hi"))
        await host.wait_for_line("ready")
        assert await caller.ask("greeter/1", "ada") == "hi ada"
        assert await host.terminate() == 0, host.stderr


BUGGY = """
from actorbus import Actor, handler

class Buggy(Actor):
    @handler
    async def look_up(self, query: dict) -> str:
        return {}[query["name"]]
"""


@pytest.mark.parametrize("debug", [False, True], ids=["plain", "debug"])
async def test_run_logs_each_handler_failure_with_its_traceback(
    make_system: Any, nats_server: EmbeddedServer, ns: str, tmp_path: Path, debug: bool
) -> None:
    """The caller gets a RemoteError; the host's operator sees the traceback where
    the agent runs; --debug sends it to the caller too."""
    from actorbus import RemoteError

    (tmp_path / "buggy_agent.py").write_text(BUGGY)
    caller = await make_system()
    args = ("run", "buggy_agent:Buggy", "--key", "1", "--namespace", ns)
    extra = ("--debug",) if debug else ()
    async with cli(*args, *extra, env={"ACTORBUS_URL": nats_server.url}, cwd=tmp_path) as host:
        await host.wait_for_line("ready")
        with pytest.raises(RemoteError) as info:
            await caller.ask("buggy/1", {"name": "missing"})
        assert str(info.value) == "KeyError in buggy/1: 'missing'"
        assert await host.terminate() == 0, host.stderr
    logged = host.stderr
    assert "buggy/1.look_up failed on message" in logged, logged
    assert "Traceback (most recent call last)" in logged, logged
    assert 'return {}[query["name"]]' in logged, logged
    if debug:
        assert 'return {}[query["name"]]' in (info.value.remote_traceback or "")
    else:
        assert info.value.remote_traceback is None


class Keeper(Actor):
    durable = True

    def __init__(self, got: list[str], arrived: asyncio.Event) -> None:
        self.got = got
        self.arrived = arrived

    @handler
    async def keep(self, text: str) -> None:
        self.got.append(text)
        self.arrived.set()


async def test_up_restarted_keeps_its_store_and_its_port_and_hosts_carry_on(
    tmp_path: Path,
) -> None:
    """A restarted `actorbus up` has what it acknowledged (its store is in
    ACTORBUS_HOME), listens where it did although its old connections linger in
    TIME_WAIT, and a host connected all along serves again without a restart."""
    from actorbus.bus.connection import ConnectOptions
    from actorbus.bus.jetstream import DurableSettings

    env = {"ACTORBUS_HOME": str(tmp_path / "home")}
    ns = f"up{uuid.uuid4().hex[:8]}"
    got: list[str] = []
    arrived = asyncio.Event()
    async with cli("up", "--insecure", env=env) as first:
        await first.wait_for_line("pid")
        url = field(first.lines, "url")
        assert field(first.lines, "store") == str(tmp_path / "home" / "jetstream")
        options = ConnectOptions(reconnect_deadline=60.0)
        fast = DurableSettings(ack_wait=2.0)
        sender = await ActorSystem.connect(url, namespace=ns, connect_options=options)
        host = await ActorSystem.connect(url, namespace=ns, connect_options=options, durable=fast)
        try:
            await host.spawn(Keeper, "k", got=got, arrived=arrived)
            await sender.tell("keeper/k", "served", durable=True)
            await asyncio.wait_for(arrived.wait(), 30)
            await sender.tell("keeper/q", "queued", durable=True)  # nobody reads it yet
            assert await first.terminate() == 0, first.stderr  # clients still connected
            async with cli("up", "--insecure", env=env) as second:
                await second.wait_for_line("pid")
                assert "kept" in field(second.lines, "store")
                # 4222, or when something else holds it the port this home had
                assert field(second.lines, "url") == url
                arrived.clear()
                await sender.tell("keeper/k", "after", durable=True, timeout=30)
                await asyncio.wait_for(arrived.wait(), 30)
                assert got == ["served", "after"]
                queued: list[str] = []
                came = asyncio.Event()
                await host.spawn(Keeper, "q", got=queued, arrived=came)
                await asyncio.wait_for(came.wait(), 30)
                assert queued == ["queued"]
                assert await second.terminate() == 0, second.stderr
        finally:
            await sender.close(timeout=2)
            await host.close(timeout=2)


async def test_up_says_how_its_server_ended_when_it_dies_under_it(tmp_path: Path) -> None:
    env = {"ACTORBUS_HOME": str(tmp_path / "home")}
    async with cli("up", "--insecure", env=env) as p:
        await p.wait_for_line("pid")
        os.kill(int(field(p.lines, "pid")), signal.SIGKILL)
        async with asyncio.timeout(WAIT):
            assert await p.proc.wait() == 1
    assert "killed by SIGKILL" in p.stderr
    assert "again serves what it stored, on the same port" in p.stderr


async def test_up_keeps_an_explicit_store_dir(tmp_path: Path) -> None:
    store = tmp_path / "js"
    async with cli("up", "--insecure", "--store-dir", str(store)) as p:
        await p.wait_for_line("pid")
        assert field(p.lines, "store") == str(store)
        assert await p.terminate() == 0, p.stderr
    assert await asyncio.to_thread(store.is_dir)


async def test_up_cluster_runs_a_jetstream_cluster_until_sigterm(tmp_path: Path) -> None:
    """As `actorbus up`, it records where it serves (every node) for the commands
    of other terminals, and forgets it when it stops."""
    home = {"ACTORBUS_HOME": str(tmp_path / "home"), "ACTORBUS_URL": "", "NATS_URL": ""}
    context = tmp_path / "home" / "context.json"
    async with cli("up", "--cluster", "3", "--insecure", env=home) as p:
        await p.wait_for_line("urls")
        urls = field(p.lines, "urls").split(",")
        assert len(urls) == 3
        assert json.loads(context.read_text())["url"] == ",".join(urls)
        code, out, err = await finished("dlq", "ls", "--json", env=home)
        assert (code, json.loads(out)) == (0, []), err
        # a command not told --js-replicas makes its streams with the cluster's three
        code, out, err = await finished(
            "tell", "tallies/1", "{}", "--intent", "x", "--durable", env=home
        )
        assert (code, out.strip()) == (0, "stored"), err
        pids = [int(line.split("(pid ")[1].rstrip(")")) for line in p.lines if "(pid " in line]
        assert len(pids) == 3
        nc = await nats.connect(urls, allow_reconnect=False, connect_timeout=2)
        try:
            js = nc.jetstream()
            await js.add_stream(name="cli-r3", subjects=["cli.r3"], num_replicas=3)
            info = await js.stream_info("cli-r3")
            assert info.config.num_replicas == 3
            queue = await js.stream_info(stream_name("ab", "tallies"))
            assert queue.config.num_replicas == 3
        finally:
            await nc.close()
        # a node that dies is started again on its port; the cluster goes on
        os.kill(pids[1], signal.SIGKILL)
        back = await p.wait_for_line("node 1")
        assert "killed by SIGKILL" in back
        back = await p.wait_for_line("node 1", timeout=30)  # 0.4-6 s here
        assert back.split()[2] == urls[1], back
        pids.append(int(back.split("(pid ")[1].split(")")[0]))
        nc = await nats.connect([urls[1]], allow_reconnect=False, connect_timeout=2)
        try:
            js = nc.jetstream(timeout=2)

            async def replicated() -> bool:  # its raft group catches up: a few seconds
                with contextlib.suppress(nats.errors.Error):
                    return (await js.stream_info("cli-r3")).config.num_replicas == 3
                return False

            await eventually(replicated, timeout=30, what="the R3 stream through node 1")
        finally:
            await nc.close()
        assert await p.terminate() == 0, p.stderr
    assert not any(pid_alive(pid) for pid in pids), "a cluster node outlived `actorbus up`"
    assert not context.exists()


async def test_up_on_a_busy_port_says_why_in_one_line() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        async with cli("up", "--port", str(port)) as p:
            async with asyncio.timeout(WAIT):
                code = await p.proc.wait()
            errors = p.stderr.strip().splitlines()
    assert code == 1
    assert len(errors) == 1, errors
    assert "address already in use" in errors[0]


# -- actorbus run ------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "address"),
    [
        (["--key", "k1", "--replicas", "2"], "echo/k1"),
        ([], "echo/any-key"),  # registered: activated on the first message
    ],
)
async def test_run_hosts_an_example_actor(
    server: EmbeddedServer, options: list[str], address: str
) -> None:
    ns = f"cli{uuid.uuid4().hex[:10]}"
    async with cli(
        "run", "examples.echo:Echo", "--url", server.url, "--namespace", ns, *options
    ) as p:
        await p.wait_for_line("ready")
        async with ActorSystem.connect(server.url, namespace=ns) as system:
            # Sent as plain data with the intent spelled out, like a non-Python client.
            reply = await system.ask(
                address, {"text": "hi"}, intent="Ping", returns=dict, timeout=WAIT
            )
        assert reply == {"text": "hi", "by": address}
        assert await p.terminate() == 0, p.stderr
    assert p.lines[-1].strip() == "stopped"
    assert "Traceback" not in p.stderr


async def test_run_rejects_a_bad_spec_in_one_line() -> None:
    async with cli("run", "examples/echo.py", "--url", "nats://127.0.0.1:1") as p:
        async with asyncio.timeout(WAIT):
            code = await p.proc.wait()
        assert code == 2
        errors = p.stderr.strip().splitlines()
    assert len(errors) == 1, errors
    assert "expected module:Class" in errors[0]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("echo", "invalid actor 'echo': expected module:Class"),
        ("a:b:c", "invalid actor 'a:b:c': expected module:Class"),
        ("no_such_module_xyz:Echo", "module 'no_such_module_xyz' not found"),
        ("examples.echo:Nope", "'examples.echo' has no attribute 'Nope'"),
        ("examples.echo:Ping", "examples.echo:Ping is not an Actor subclass"),
        ("actorbus.demo:Reader", "needs constructor arguments (document)"),
    ],
)
def test_run_explains_what_is_wrong(
    spec: str, message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(sys, "path", list(sys.path))  # undo the CLI adding the cwd
    assert main(["run", spec, "--url", "nats://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("actorbus: error: ")
    assert message in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["ask", "echo/1", "Ping", '{"text": "hi"}'],
            """to name the handler's intent, give it as --intent Ping '{"text": "hi"}'""",
        ),
        (["tell", "echo/1", "hello", "there"], "quote text with spaces, as 'hello there'"),
        (["publish", "news", "it's", "out"], """as 'it'"'"'s out'"""),
    ],
)
def test_content_given_as_several_arguments_is_explained_before_connecting(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """No server is reachable at the URL: the usage error comes first, in one line."""
    assert main([*argv, "--url", "nats://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("actorbus: error: CONTENT is one argument")
    assert message in err
    assert err.count("\n") == 1, err


def test_run_cannot_connect(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(sys, "path", list(sys.path))
    url = f"nats://127.0.0.1:{free_port()}"
    args = ["run", "examples.echo:Echo", "--url", url, "--connect-timeout", "0.5"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"actorbus: error: cannot connect to NATS at {url}")
    assert err.endswith("(is a server running? start one with `actorbus up`)\n")
    assert err.count("\n") == 1


# -- the command itself ------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        [str(Path(sys.executable).with_name("actorbus"))],  # the installed console script
        [sys.executable, "-m", "actorbus"],
    ],
)
async def test_entry_points_report_the_version(command: list[str]) -> None:
    proc = await asyncio.create_subprocess_exec(
        *command, "--version", stdout=asyncio.subprocess.PIPE, env=cli_env(), cwd=REPO
    )
    async with asyncio.timeout(WAIT):
        out, _ = await proc.communicate()
    assert proc.returncode == 0
    assert out.decode().strip() == f"actorbus {actorbus.__version__}"


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("demo", "up", "run"):
        assert f"    {command} " in out
    assert main([]) == 2  # a command is required


def test_a_command_imports_only_what_it_uses() -> None:
    """The CLI's modules all load to build its parser; what one command alone
    needs (the broker's JWT and X.509 code, the demo's agents, a progress bar)
    loads with that command. Each was a restarted `actorbus run`'s start too."""
    import subprocess

    heavy = ("nats_jwt", "joserfc", "actorbus.security.broker", "actorbus.demo", "rich.progress")
    probe = f"import sys, actorbus.cli.main; print([m for m in {heavy!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


async def test_up_cluster_is_secure_by_default() -> None:
    async with cli("up", "--cluster", "3") as p:
        await p.wait_for_line("security")
        urls = field(p.lines, "urls").split(",")
        assert field(p.lines, "security").startswith("NATS JWT auth + TLS")
        with pytest.raises((nats.errors.Error, OSError, TimeoutError)):
            await nats.connect(urls, allow_reconnect=False, connect_timeout=2)
        member = SecureBroker().connect_options("ab", "cluster-test")
        nc = await nats.connect(
            urls,
            user_credentials=member.nats_credentials(),
            tls=member.tls,
            inbox_prefix=member.inbox_prefix,
            allow_reconnect=False,
        )
        try:
            js = nc.jetstream()
            await js.add_stream(name="cli-secure-r3", subjects=["ab.r3"], num_replicas=3)
            assert (await js.stream_info("cli-secure-r3")).config.num_replicas == 3
        finally:
            await nc.close()
        assert await p.terminate() == 0, p.stderr


def test_a_server_this_home_does_not_trust_is_explained_for_the_shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A secured broker made by another ACTORBUS_HOME: the command says which home to
    use, not how to build an SSL context in Python, and does not ask whether a server
    is running (one is)."""
    from actorbus.bus.server import ServerConfig

    extra = SecureBroker().server_config(["ab"])
    with EmbeddedServer(ServerConfig(host="127.0.0.1", extra=extra)) as server:
        monkeypatch.setenv("ACTORBUS_HOME", str(tmp_path / "another-home"))
        code = main(["ask", "echo/1", "{}", "--url", server.url, "--connect-timeout", "3"])
    err = capsys.readouterr().err
    assert code == 1
    assert "not signed by a CA this machine's ACTORBUS_HOME" in err, err
    assert str(tmp_path / "another-home") in err
    assert "ConnectOptions" not in err
    assert "is a server running" not in err


HIDING = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None  # importing it now fails as if it were not installed
from actorbus.cli import main

sys.exit(main(sys.argv[2:]))
"""


async def without(
    tmp_path: Path, modules: str, *args: str, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """``actorbus ARGS`` in a process where ``modules`` cannot be imported."""
    script = tmp_path / "without.py"
    script.write_text(HIDING)
    return await finished_script(script, modules, *args, env=env)


async def finished_script(*argv: Any, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *map(str, argv),
        env={**cli_env(), **(env or {})},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_a_missing_extra_is_one_line_naming_it(
    tmp_path: Path, nats_server: EmbeddedServer
) -> None:
    """`gateway --help` without the gateway extra, `run --reload` without watchfiles
    (before anything says ready), an OTLP endpoint without the exporter: each is one
    line naming the extra (and the package, and the variable the user set)."""
    code, _, err = await without(tmp_path, "aiohttp", "gateway", "--help")
    assert code == 1
    assert "Traceback" not in err
    assert "pip install 'actorbus[gateway]'" in err
    spec = "examples.echo:Echo"
    code, out, err = await without(
        tmp_path, "watchfiles", "run", spec, "--reload", "--url", nats_server.url
    )
    assert code == 2
    assert "ready" not in out
    assert "pip install 'actorbus[reload]'" in err
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "ACTORBUS_URL": ""}
    code, _, err = await without(
        tmp_path,
        "opentelemetry.exporter.otlp.proto.http.trace_exporter",
        "ask",
        "echo/1",
        "{}",
        "--url",
        nats_server.url,
        env=endpoint,
    )
    assert code == 1
    assert "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318" in err, err
    assert "'opentelemetry-exporter-otlp-proto-http'" in err
    assert "pip install 'actorbus[otlp]'" in err
    assert "is a server running" not in err
