"""`actorbus security deploy`: everything a deployment of several processes needs
on the secured broker, made at once, used as it would be: a real nats-server
running its nats.conf, members joining with their own homes (read-only), each
limited to its actor types, and an outsider refused."""

from __future__ import annotations

import asyncio
import os
import stat
import sys
import uuid
from pathlib import Path

import nats
import pytest
from _util import WAIT

from actorbus import Actor, ActorSystem, AuthError, ConnectionLostError, handler
from actorbus.bus.server import EmbeddedServer, ServerConfig
from actorbus.cli import main as cli

REPO = Path(__file__).resolve().parents[2]


class Greeter(Actor):
    type_name = "greeter"

    @handler
    async def greet(self, name: str) -> str:
        return f"hello {name}"


class Intruder(Actor):
    type_name = "intruder"

    @handler
    async def take(self, text: str) -> str:
        return text


@pytest.fixture
def deployment(tmp_path: Path) -> Path:
    out = tmp_path / "deployment"
    argv = [
        *("security", "deploy", "--out", str(out), "--nats-host", "nats-1"),
        *("--member", "greeter=greeter", "--member", "client"),
        *("--member", "gateway=gateway-tasks+issuer@gateway", "--token-client", "operator"),
    ]
    assert cli(argv) == 0
    return out


def home(out: Path, member: str) -> str:
    return str(out / "homes" / member)


async def test_members_join_with_their_own_homes_and_nobody_else_does(
    deployment: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = ServerConfig(host="127.0.0.1", extra=(deployment / "nats.conf").read_text())
    async with EmbeddedServer(config) as server:
        monkeypatch.setenv("ACTORBUS_HOME", home(deployment, "greeter"))
        async with ActorSystem.connect(server.url, registry=False) as host:
            assert host.runtime.security.secured  # sealed end to end
            await host.spawn(Greeter, "1")
            with pytest.raises(AuthError, match="intruder"):  # not among its types
                await host.spawn(Intruder, "1")
            monkeypatch.setenv("ACTORBUS_HOME", home(deployment, "client"))
            async with ActorSystem.connect(server.url, registry=False) as client:
                assert await client.ask("greeter/1", "ada", timeout=WAIT) == "hello ada"
        with pytest.raises((nats.errors.Error, OSError, TimeoutError)):  # no credentials
            await nats.connect(server.url, allow_reconnect=False, connect_timeout=2)
        monkeypatch.setenv("ACTORBUS_HOME", str(tmp_path / "elsewhere"))
        with pytest.raises(ConnectionLostError):  # another home's credentials: refused at once
            async with asyncio.timeout(WAIT):
                await ActorSystem.connect(server.url, namespace=f"x{uuid.uuid4().hex[:6]}")


def test_what_it_writes(deployment: Path) -> None:
    """Secrets are 0600; the gateway and registry share one token issuer key;
    the gateway's HTTPS certificate and the nodes' are from the same CA; a
    second run with --if-missing keeps everything."""
    gateway = deployment / "homes" / "gateway" / "ab"
    for secret in (
        gateway / "token-issuer.key",
        gateway / "broker.creds",
        deployment / "token-clients.json",
        deployment / "https" / "gateway-key.pem",
    ):
        assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600, secret
    assert (deployment / "https" / "gateway.pem").exists()
    conf = (deployment / "nats.conf").read_text()
    assert "operator:" in conf
    assert "tls {" in conf
    ca = (deployment / "ca.pem").read_bytes()
    assert cli(["security", "deploy", "--out", str(deployment), "--if-missing"]) == 0
    assert (deployment / "ca.pem").read_bytes() == ca


def test_run_says_in_one_line_which_type_its_member_may_not_host(
    deployment: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A host started with a member's home that lacks one of its types (compose:
    AGENT_TYPES not naming a class it runs) exits with the reason and the fix,
    having closed its connection: no traceback, no task left pending."""
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(sys, "path", list(sys.path))  # undo the CLI adding the cwd
    config = ServerConfig(host="127.0.0.1", extra=(deployment / "nats.conf").read_text())
    with EmbeddedServer(config) as server:
        monkeypatch.setenv("ACTORBUS_HOME", home(deployment, "greeter"))
        assert cli(["run", "examples.echo:Echo", "--url", server.url]) == 1
    err = capsys.readouterr().err
    assert err.startswith("actorbus: error: cannot host actors: no credential for types/echo")
    assert "actorbus security issue" in err
    assert "Traceback" not in err
    assert "was destroyed but it is pending" not in err
