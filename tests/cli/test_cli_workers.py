"""``actorbus run --workers``: forked host processes that a supervisor starts
again when they die, tested as separate processes on a real nats-server with
real SIGKILLs."""

from __future__ import annotations

import os
import re
import signal
import sys
import uuid

import pytest
from _cli import REPO, WAIT, CliProcess, cli, pid_alive

from actorbus import ActorSystem
from actorbus.bus.server import EmbeddedServer
from actorbus.cli import main
from actorbus.testing import eventually

STARTED = re.compile(r"worker (\d+): pid (\d+)")


async def started(p: CliProcess, count: int) -> dict[int, int]:
    """The pid of each worker, once each of ``count`` said it is ready."""
    pids: dict[int, int] = {}
    ready: set[int] = set()
    while len(ready) < count:
        line = await p.readline()
        if m := STARTED.search(line):
            pids[int(m[1])] = int(m[2])
        elif m := re.search(r"worker (\d+) ready", line):
            ready.add(int(m[1]))
    return pids


async def echo(system: ActorSystem, address: str) -> object:
    return await system.ask(address, {"text": "hi"}, intent="Ping", returns=dict, timeout=WAIT)


async def test_a_killed_worker_is_started_again_and_serves(server: EmbeddedServer) -> None:
    ns = f"wk{uuid.uuid4().hex[:10]}"
    args = ("run", "examples.echo:Echo", "--url", server.url, "--namespace", ns)
    async with (
        cli(*args, "--workers", "2", "--key", "w{worker}", "--restart-delay", "0.2") as p,
        ActorSystem.connect(server.url, namespace=ns) as system,
    ):
        pids = await started(p, 2)
        assert set(pids) == {0, 1}
        assert len(set(pids.values())) == 2
        assert await echo(system, "echo/w0") == {"text": "hi", "by": "echo/w0"}
        assert await echo(system, "echo/w1") == {"text": "hi", "by": "echo/w1"}

        os.kill(pids[1], signal.SIGKILL)
        died = await p.wait_for_line("supervisor: worker 1")
        assert f"(pid {pids[1]}) killed by SIGKILL" in died
        # 0.2 s, or 0.4 s if it died within a second of its start (a crash loop's rule)
        assert re.search(r"starting it again in 0\.[24]s$", died), died
        again = await started(p, 1)
        assert again[1] != pids[1]
        assert await echo(system, "echo/w1") == {"text": "hi", "by": "echo/w1"}
        assert await echo(system, "echo/w0") == {"text": "hi", "by": "echo/w0"}  # untouched

        assert await p.terminate() == 0, p.stderr
        stops = sorted(line.strip() for line in p.lines if line.strip().endswith("stopped"))
        assert stops == ["supervisor: stopped", "worker 0 stopped", "worker 1 stopped"]
        assert p.lines[-1].strip() == "supervisor: stopped"
        assert not pid_alive(pids[0])
        assert not pid_alive(again[1])
        assert "Traceback" not in p.stderr


async def test_workers_stop_when_their_supervisor_dies(server: EmbeddedServer) -> None:
    ns = f"wk{uuid.uuid4().hex[:10]}"
    args = ("run", "examples.echo:Echo", "--url", server.url, "--namespace", ns)
    async with cli(*args, "--workers", "2", "--key", "w{worker}") as p:
        pids = await started(p, 2)
        p.proc.send_signal(signal.SIGKILL)
        await p.proc.wait()

        async def orphans_gone() -> bool:
            return not any(pid_alive(pid) for pid in pids.values())

        # a worker looks for its parent once a second while it serves
        await eventually(orphans_gone, timeout=WAIT)


async def test_a_crash_looping_worker_waits_longer_each_time() -> None:
    # nothing listens there: each worker fails to connect at once and exits
    url = "nats://127.0.0.1:1"
    args = ("run", "examples.echo:Echo", "--url", url, "--connect-timeout", "0.2")
    async with cli(*args, "--workers", "1", "--restart-delay", "0.05") as p:
        delays: list[float] = []
        while len(delays) < 3:
            line = await p.wait_for_line("supervisor: worker 0 (pid")
            assert "exited with 1" in line
            m = re.search(r"starting it again in ([\d.]+)s", line)
            assert m is not None, line
            delays.append(float(m[1]))
        assert delays == [0.2, 0.4, 0.8]  # doubled from 0.1 while it dies within a second
        assert await p.terminate() == 0, p.stderr
    assert "cannot connect to NATS" in p.stderr


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--workers", "0"], "--workers must be at least 1"),
        (["--workers", "2", "--reload"], "--workers and --reload do not go together"),
        (["--workers", "2", "--restart-delay", "-1"], "--restart-delay cannot be negative"),
        (["--workers", "2", "--health-file", "/tmp/h"], "--health-file needs {worker}"),
        (["--key", "w{worker}"], "{worker} is filled in only with --workers"),
    ],
)
def test_worker_options_that_do_not_go_together(
    options: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(sys, "path", list(sys.path))  # undo the CLI adding the cwd
    assert main(["run", "examples.echo:Echo", "--url", "nats://127.0.0.1:1", *options]) == 2
    err = capsys.readouterr().err
    assert err.startswith("actorbus: error: "), err
    assert message in err, err
    assert err.count("\n") == 1
