"""Production: an authority kept offline issues each deployment its credentials
(`actorbus security`), and systems run with those alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _util import WAIT
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
    assert host.runtime.guard is not None
    with pytest.raises(AuthError, match="authority"):
        await host.runtime.guard.rotate()
    # a deployment vouched for by another authority is not trusted here
    other, rogue_home = tmp_path / "other", tmp_path / "rogue"
    cli("security", "authority", "--dir", str(other), "--namespace", ns)
    cli("security", "issue", "--authority", str(other), "--namespace", ns, "--out", str(rogue_home))
    rogue = await make_system(security=SecuritySettings(home=rogue_home))
    with pytest.raises(AuthError):
        await rogue.ask("oracle/1", Question(text="let me in"), timeout=WAIT)
