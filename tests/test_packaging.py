"""What ``pip install actorbus`` gives: the runtime with no extras, extras that say
their name when missing, and a built wheel that installs into a clean venv and
runs a two-process example (an actor host and a shell client)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest
from _docs import README, reader_env, terminal, written_out
from _util import exclusive, run_to_end

from actorbus.bus.server import EmbeddedServer, find_nats_server

REPO = Path(__file__).resolve().parents[1]

# The packages only extras bring: a core install has none of them.
EXTRAS_ONLY = (
    "aiohttp",
    "aiosqlite",
    "jsonschema",
    "anp",
    "watchfiles",
    "pytest",
    "pytest_asyncio",
    "opentelemetry.exporter",
    "openai",
    "anthropic",
    "mcp",
)

BLOCKER = textwrap.dedent(
    """
    import importlib.abc, sys
    BLOCKED = {blocked!r}

    class Absent(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if any(name == b or name.startswith(b + ".") for b in BLOCKED):
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, Absent())
    """
).format(blocked=EXTRAS_ONLY)


async def python(code: str, *, env: dict[str, str] | None = None) -> tuple[int, str]:
    """``code`` in a new interpreter where no extra's package can be imported."""
    argv = (sys.executable, "-c", BLOCKER + code)
    status, out, _ = await run_to_end(
        *argv, cwd=REPO, env={**os.environ, **(env or {})}, merge=True
    )
    return status, out


async def test_the_runtime_needs_no_extra() -> None:
    """Without any extra's packages: actors ask and answer on a real server, the
    CLI starts, the router's selection runs; the services name their extra."""
    code, out = await python(
        textwrap.dedent(
            """
            import asyncio
            import actorbus, actorbus.cli.main, actorbus.services.router, actorbus.codecs.uap
            from actorbus import Actor, ActorSystem, handler
            from actorbus.codecs.errors import MissingExtraError

            class Echo(Actor):
                @handler
                async def shout(self, text: str) -> str:
                    return text.upper()

            async def main():
                async with ActorSystem.start() as system:
                    await system.spawn(Echo, "1")
                    print("reply", await system.ask("echo/1", "lean"))

            asyncio.run(main())
            for name, extra in (("gateway", "gateway"), ("registry", "registry")):
                try:
                    __import__(f"actorbus.services.{name}")
                except MissingExtraError as e:
                    print("missing", e)
            try:
                actorbus.codecs.uap.validate_request("ServiceRequest", {})
            except MissingExtraError as e:
                print("missing", e)
            from actorbus.agents import OpenAIModel
            try:
                OpenAIModel("a-model", api_key="k")
            except MissingExtraError as e:
                print("missing", e)
            """
        ),
        env={"ACTORBUS_NATS_SERVER": find_nats_server()},
    )
    assert code == 0, out
    assert "reply LEAN" in out
    assert "the HTTP gateway needs the 'aiohttp' package: pip install 'actorbus[gateway]'" in out
    assert "pip install 'actorbus[registry]'" in out
    assert (
        "the OpenAI model client needs the 'openai' package: pip install 'actorbus[agents]'" in out
    )
    assert out.count("missing") == 4, out


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel and sdist, built once from this checkout. Its wait for the source
    tree can last as long as the compose tests' image build on the other worker
    (minutes on a fresh machine), so the tests that use it time only their own
    run (``func_only``); the build has its own bound."""
    out = tmp_path_factory.mktemp("dist")
    with exclusive("source-build"):  # it writes actorbus.egg-info into the tree
        subprocess.run(
            [sys.executable, "-m", "build", "--outdir", str(out), str(REPO)],
            check=True,
            capture_output=True,
            timeout=300,
        )
    return out


@pytest.mark.timeout(60, func_only=True)
def test_the_wheel_and_sdist_carry_license_types_and_data(dist: Path) -> None:
    [wheel] = dist.glob("*.whl")
    [sdist] = dist.glob("*.tar.gz")
    names = zipfile.ZipFile(wheel).namelist()
    assert "actorbus/py.typed" in names
    assert "actorbus/services/router/features.json" in names
    assert any(n.endswith("licenses/LICENSE") for n in names)
    meta = next(n for n in names if n.endswith("METADATA"))
    metadata = zipfile.ZipFile(wheel).read(meta).decode()
    assert "License-Expression: Apache-2.0" in metadata
    assert "Provides-Extra: gateway" in metadata
    assert "Requires-Dist: aiohttp" in metadata  # under an extra only
    assert "Requires-Dist: aiohttp<4,>=3.9; extra ==" in metadata
    with tarfile.open(sdist) as tar:
        assert any(n.endswith("/LICENSE") for n in tar.getnames())


def clean_venv_with(dist: Path, venv: Path) -> Path:
    """A new venv with the wheel installed, no extras (pip fetches the runtime's
    dependencies); checks that no extra's package came along."""
    [wheel] = dist.glob("*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    pip = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    extra = subprocess.run([python, "-c", "import aiohttp"], capture_output=True, timeout=60)
    assert extra.returncode != 0  # no extra's package came with it
    assert shutil.which("actorbus", path=str(venv / "bin"))
    return venv


@pytest.mark.timeout(300, func_only=True)  # pip installs the runtime's dependencies
async def test_the_wheel_installs_into_a_clean_venv_and_runs_two_processes(
    dist: Path, tmp_path: Path
) -> None:
    """`pip install actorbus` (the wheel, no extras) in a venv of its own runs the
    README's two-process example as written: `actorbus run first_agent:Echo` in
    one process, `python client.py` in another (on a server of the test's, as
    the runtime alone has no nats-server binary)."""
    venv = await asyncio.to_thread(clean_venv_with, dist, tmp_path / "venv")
    work = tmp_path / "project"
    work.mkdir()
    assert set(written_out(README, work)) == {"first_agent.py", "client.py"}
    async with EmbeddedServer() as server:
        env = {**reader_env(tmp_path / "home"), "ACTORBUS_URL": server.url}
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"
        env.pop("VIRTUAL_ENV", None)
        run = "actorbus run first_agent:Echo --key 1"
        async with terminal(run, work, env, ready="ready"):
            code, out, err = await run_to_end(
                str(venv / "bin" / "python"), "client.py", cwd=work, env=env, timeout=60
            )
    assert code == 0, out + err
    assert out.strip() == "text='HELLO FROM ANOTHER PROCESS'"


def test_a_misspelt_call_option_is_a_type_error_where_it_is_written(tmp_path: Path) -> None:
    """Actor.ask/tell/stream and ActorRef's take typed options: mypy (and the
    editor) catch ``timout=`` at the call, not a TypeError at run time."""
    from mypy import api

    snippet = tmp_path / "typo.py"
    snippet.write_text(
        "from actorbus import Actor, ActorRef, handler\n"
        "\n"
        "\n"
        "class Caller(Actor):\n"
        "    @handler\n"
        "    async def go(self, text: str) -> str:\n"
        '        reply: str = await self.ask("echo/1", text, timout=5)\n'
        '        await ActorRef(self.system, "echo/1").tell(text, durabel=True)\n'
        '        async for _ in self.stream("echo/1", text, tiemout=1):\n'
        "            pass\n"
        '        return await self.ask("echo/1", text, timeout=5, returns=str)\n'
    )
    out, _, code = api.run(["--strict", "--no-error-summary", str(snippet)])
    assert code == 1
    wrong = sorted(line.split(": error: ")[1] for line in out.splitlines() if ": error: " in line)
    assert any('"timout"' in w and 'did you mean "timeout"' in w for w in wrong), out
    assert any('"durabel"' in w for w in wrong), out
    assert any('"tiemout"' in w for w in wrong), out
    assert ":11:" not in out  # the well-spelt call type-checks, returning str
