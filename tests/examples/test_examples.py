"""The bundled examples, tested the way a user tests their own agents: with the
fixtures of ``actorbus.testing`` (a real broker, a fresh namespace per test), and
a user's own test file run by pytest in a process of its own."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import nats
import pytest
from _util import run_to_end

from actorbus import ActorSystem
from actorbus.testing import SystemFactory, TestBroker, running_system

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(name: str) -> ModuleType:
    """An example module, imported from examples/ by its file name."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


async def test_echo_answers_across_two_systems(actorbus_systems: SystemFactory) -> None:
    echo = example("echo")
    host = await actorbus_systems()  # the agent's process
    caller = await actorbus_systems()  # and a client's
    await host.spawn(echo.Echo, "1")
    pong = await caller.ask("echo/1", echo.Ping(text="hello"), returns=echo.Pong)
    assert pong == echo.Pong(text="hello", by="echo/1")


async def test_the_typist_streams_in_order_and_stops_when_asked(
    actorbus_system: ActorSystem,
) -> None:
    streaming = example("streaming")
    await actorbus_system.spawn(streaming.Typist, "1")
    words = [
        w.text
        async for w in actorbus_system.stream(
            "typist/1", streaming.Dictate(text="a b c", delay_s=0), returns=streaming.Word
        )
    ]
    assert words == ["a", "b", "c"]


async def test_the_fixtures_run_secured_as_production(
    actorbus_system: ActorSystem, actorbus_server: TestBroker
) -> None:
    """Authentication and TLS on the broker, every message sealed end to end: a
    test exercises what its deployment runs. A client without credentials is
    refused; a member's own client (``actorbus_server.client``) gets in."""
    assert actorbus_server.secure
    assert actorbus_system.runtime.security.secured
    with pytest.raises((nats.errors.Error, OSError, TimeoutError)):
        await nats.connect(actorbus_server.url, allow_reconnect=False, connect_timeout=2)
    member = await actorbus_server.client(actorbus_system.namespace)
    try:
        assert member.is_connected
    finally:
        await member.close()


async def test_each_test_has_a_namespace_of_its_own(
    actorbus_system: ActorSystem, actorbus_systems: SystemFactory
) -> None:
    other = await actorbus_systems(namespace="elsewhere")
    assert actorbus_system.namespace != other.namespace
    assert actorbus_system.namespace.startswith("t")


async def test_running_system_starts_and_stops_its_own_server() -> None:
    echo = example("echo")
    async with running_system(namespace="solo") as system:
        assert system.runtime.security.secured  # as production runs
        await system.spawn(echo.Echo, "1")
        pong = await system.ask("echo/1", echo.Ping(text="x"), returns=echo.Pong)
        assert pong.text == "x"
    assert system.nc.is_closed  # closed with its server


USER_TESTS = """
from actorbus import Actor, handler

class Greeter(Actor):
    @handler
    async def greet(self, name: str) -> str:
        return f"hello {name}"

async def test_greeter(actorbus_system):
    await actorbus_system.spawn(Greeter, "1")
    assert await actorbus_system.ask("greeter/1", "ada") == "hello ada"

async def test_isolated(actorbus_system):
    assert actorbus_system.local_actors() == {}

async def test_secured_unless_asked_open(actorbus_system, request):
    secured = not request.config.getoption("--actorbus-open")
    assert actorbus_system.runtime.security.secured is secured

async def test_greeter_in_process(actorbus_in_process_systems, request):
    host, caller = await actorbus_in_process_systems(), await actorbus_in_process_systems()
    await host.spawn(Greeter, "1")
    assert await caller.ask("greeter/1", "ada") == "hello ada"
    on_the_broker = request.config.getoption("--actorbus-broker")
    assert host.url.startswith("local:") is not on_the_broker
"""


@pytest.mark.parametrize(
    ("mode", "flags"),
    [
        ("auto", ()),
        ("strict", ()),
        ("auto", ("--actorbus-open",)),
        ("auto", ("--actorbus-broker",)),
    ],
)
async def test_a_users_own_tests_get_the_fixtures(
    tmp_path: Path, mode: str, flags: tuple[str, ...]
) -> None:
    """A project that installed actorbus writes tests with the fixtures and nothing
    else: no conftest, the plugin comes with the package (pytest11). Secured as
    production is, or open with one flag; the in-process fixtures on the real
    broker with another."""
    (tmp_path / "test_user.py").write_text(
        USER_TESTS
        if mode == "auto"
        else "import pytest\npytestmark = pytest.mark.asyncio\n" + USER_TESTS
    )
    (tmp_path / "pytest.ini").write_text(f"[pytest]\nasyncio_mode = {mode}\n")
    pytest_argv = ("-m", "pytest", "-q", "-p", "no:cacheprovider", *flags, str(tmp_path))
    code, text, _ = await run_to_end(sys.executable, *pytest_argv, cwd=tmp_path, merge=True)
    assert code == 0, text
    assert "4 passed" in text, text
