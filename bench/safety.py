"""Safety probes (the ProtocolBench "Safety Tech" dimensions) against the bus and
every protocol edge of the gateway, in their default secure configuration.

    python bench/safety.py [--out DIR] [--messages N]

Each probe is an attack; it is *blocked* when the system refuses it (or, for
the watermark, when no marked plaintext is seen). Dimensions:

- ``tls``: plaintext connections to the broker; a client without credentials;
- ``certificates``: the client refuses a server certificate that is expired,
  self-signed, for another host name, or from another CA;
- ``watermark``: every byte between the systems and the broker, captured by a
  TCP proxy on loopback and by tcpdump on the loopback interface (when this
  machine has it and may capture; else skipped, with the reason) while asks,
  tells and topic messages carry a marked PII string, and a marked request
  through every edge of the gateway: hits of the mark (goal 0); a control run
  without any security shows the probe sees them;
- ``hijack``: an expired and a forged broker credential; at each edge no token,
  an expired, a forged and another agent's token;
- ``replay``: captured bus messages sent again (two rounds); at every edge a
  captured request sent again (two rounds; MCP in a session and stateless),
  and a token-bearing request that carries no id a replay could be told by;
- ``clock``: authentic messages from a sender whose clock is off by 31 s, 2, 5
  and 10 minutes, both ways (a 20 s skew is taken, the control); at the edges,
  tokens from an issuer (DIDWba headers from a caller, at the ANP edge) whose
  clock is off by 2, 5 and 10 minutes, both ways;
- ``metadata``: the gateway's status page without a token;
- ``bus``: the attacks that opened the security issue: a forged ``src``, a
  forged reply, deleting or purging the durable stream, reading another
  system's inbox, answering durable stores.

Writes ``bench/results/safety.json`` and ``safety.png`` (a target x dimension
matrix of block rates) and prints the table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import ipaddress
import os
import ssl
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import nats
from _harness import machine_info, positive_int, pyplot, report_console, write_report
from _safety_gateway import gateway_probes
from _safety_insiders import insider_probes
from _safety_probes import (
    MARK,
    NS,
    TIMEOUT,
    TOPIC,
    Bulletin,
    Note,
    Probe,
    Probes,
    Vault,
    heard,
    member,
    quiet,
    sniffing,
)
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from nats_jwt.nkeys_ext import create_account_pair, create_user_pair
from nats_jwt.v2.user_claims import UserClaims
from rich.console import Console
from rich.table import Table

from actorbus import ActorSystem
from actorbus.actors import pipeline
from actorbus.bus.server import EmbeddedServer, ServerConfig
from actorbus.codecs.wire import pack, unpack
from actorbus.security.broker import DevCertificates
from actorbus.security.secure_broker import SecureBroker

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results"
DIMENSIONS = (
    "tls",
    "certificates",
    "watermark",
    "hijack",
    "replay",
    "clock",
    "metadata",
    "bus",
    "insider",
)


# -- a TCP proxy that keeps every byte ---------------------------------------------
class Recorder:
    """Loopback TCP proxy to ``port``; ``seen`` is every byte both ways."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.seen = bytearray()
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._pipe, "127.0.0.1", 0)
        return f"nats://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self.port)

        async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while data := await src.read(65536):
                    self.seen.extend(data)
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(Exception):
                dst.close()

        await asyncio.gather(copy(reader, up_w), copy(up_r, writer))

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2):
                    await self.server.wait_closed()


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


# -- certificates the client must refuse -----------------------------------------
def bad_certificates(dev: DevCertificates, where: Path) -> dict[str, tuple[Path, Path]]:
    """(cert, key) files of four server certificates a client trusting only the
    development CA must refuse."""
    ca_key = serialization.load_pem_private_key(dev.ca_key_file.read_bytes(), None)
    ca_cert = x509.load_pem_x509_certificate(dev.ca_file.read_bytes())
    other_key = ec.generate_private_key(ec.SECP256R1())
    other_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "another CA")])
    now = dt.datetime.now(dt.UTC)
    loopback = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    elsewhere = x509.SubjectAlternativeName([x509.DNSName("other.example")])
    day, hour = dt.timedelta(days=1), dt.timedelta(hours=1)
    valid = (now - hour, now + day)
    cases = {
        "expired certificate": (ca_cert.subject, ca_key, (now - 30 * day, now - day), loopback),
        "self-signed certificate": (None, None, valid, loopback),
        "hostname mismatch": (ca_cert.subject, ca_key, valid, elsewhere),
        "wrong CA": (other_name, other_key, valid, loopback),
    }
    out = {}
    for name, (issuer, signer, (start, end), names) in cases.items():
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer or subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(names, critical=False)
            .sign(signer or key, hashes.SHA256())
        )
        slug = name.replace(" ", "-")
        cert_file, key_file = where / f"{slug}.pem", where / f"{slug}-key.pem"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        out[name] = (cert_file, key_file)
    return out


# -- the bus ---------------------------------------------------------------------------
def creds_text(jwt_token: str, seed: bytes) -> str:
    return (
        f"-----BEGIN NATS USER JWT-----\n{jwt_token}\n------END NATS USER JWT------\n\n"
        f"-----BEGIN USER NKEY SEED-----\n{seed.decode()}\n------END USER NKEY SEED------\n"
    )


def rogue_creds(broker: SecureBroker, where: Path) -> dict[str, Path]:
    """An expired credential of the real account, and one signed by an account
    the server does not know."""
    out = {}
    for name, signer, exp in (
        ("expired credential", broker.auth.account(NS), int(time.time()) - 60),
        ("forged credential", create_account_pair(), None),
    ):
        user = create_user_pair()
        claims = UserClaims(user.public_key.decode(), name)
        claims.nats.pub.allow.append(">")
        claims.nats.sub.allow.append(">")
        if exp is not None:
            claims.exp = exp
        path = where / f"{name.replace(' ', '-')}.creds"
        path.write_text(creds_text(claims.encode(signer), user.seed))
        out[name] = path
    return out


@contextlib.asynccontextmanager
async def skewed_clock(offset_ms: int) -> AsyncIterator[None]:
    """Messages encoded inside stamp a clock ``offset_ms`` off (an honest sender
    with a wrong clock)."""
    real = pipeline.now_ms
    pipeline.now_ms = lambda: real() + offset_ms  # type: ignore[assignment]
    try:
        yield
    finally:
        pipeline.now_ms = real  # type: ignore[assignment]


async def bus_probes(p: Probes, home: Path, work: Path, messages: int) -> dict[str, Any]:
    broker = SecureBroker(home)
    extra = broker.server_config([NS])
    watermark: dict[str, Any] = {}
    async with EmbeddedServer(ServerConfig(host="127.0.0.1", extra=extra)) as server:
        url = server.url
        tls = broker.tls.client_context()
        await p.refused(
            "bus",
            "tls",
            "plaintext client",
            lambda: nats.connect(url, allow_reconnect=False, connect_timeout=2, error_cb=quiet),
        )
        await p.refused(
            "bus",
            "tls",
            "TLS client without credentials",
            lambda: nats.connect(
                url, tls=tls, allow_reconnect=False, connect_timeout=2, error_cb=quiet
            ),
        )
        for name, path in rogue_creds(broker, work).items():
            await p.refused(
                "bus",
                "hijack",
                name,
                lambda path=path: nats.connect(
                    url,
                    tls=tls,
                    user_credentials=str(path),
                    allow_reconnect=False,
                    connect_timeout=2,
                    error_cb=quiet,
                ),
            )
        # -- the watermark: every byte through a recording proxy, and on the wire
        recorder = Recorder(port_of(url))
        proxied = await recorder.start()
        host = await member(proxied, broker, "host")
        caller = await member(proxied, broker, "caller")
        try:
            await host.spawn(Vault, "1")
            async with sniffing(p, "bus", [port_of(url), port_of(proxied)], work) as wire:
                await marked_traffic(p, caller, messages)
            hits = recorder.seen.count(MARK.encode())
            watermark = {"bytes": len(recorder.seen), "hits": hits, "messages": 3 * messages}
            p.add(
                "bus",
                "watermark",
                f"marked PII in {len(recorder.seen):,} proxied bytes",
                hits == 0,
                f"{hits} hits",
            )
            if wire.data is not None:
                watermark["tcpdump"] = wire.summary()
                p.add(
                    "bus",
                    "watermark",
                    f"marked PII in {len(wire.data):,} bytes tcpdump saw",
                    wire.hits == 0,
                    f"{wire.hits} hits",
                )
            await bus_attacks(p, url, broker, host, caller, tls)
            await insider_probes(p, url, broker, host, caller)
        finally:
            await caller.close(timeout=2.0)
            await host.close(timeout=2.0)
            await recorder.stop()
    return watermark


async def marked_traffic(p: Probes, caller: ActorSystem, messages: int) -> None:
    """Asks, tells and topic messages that carry the mark; the topic ones are
    waited for (the watermark counts only what was really carried)."""
    Vault.heard = 0
    for i in range(messages):
        await caller.ask("vault/1", Note(text=f"{MARK} #{i}"), timeout=TIMEOUT)
        await caller.tell("vault/1", Note(text=f"{MARK} told #{i}"))
        await caller.publish(TOPIC, Bulletin(text=f"{MARK} published #{i}"))
    carried = await heard(messages)
    p.control("bus", "topic messages reach their listener", carried, f"{Vault.heard} of {messages}")


async def bus_attacks(
    p: Probes,
    url: str,
    broker: SecureBroker,
    host: ActorSystem,
    caller: ActorSystem,
    tls: ssl.SSLContext,
) -> None:
    mallory_opts = broker.connect_options(NS, "mallory")
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    mallory = await nats.connect(
        url,
        tls=tls,
        user_credentials=mallory_opts.nats_credentials(),
        inbox_prefix=mallory_opts.inbox_prefix,
        allow_reconnect=False,
        error_cb=on_error,
    )
    try:
        js = mallory.jetstream(timeout=1.0)
        stream = f"actorbus-{NS}-d-vault"
        await caller.durable_ready("vault")
        await p.refused("bus", "bus", "delete the durable stream", lambda: js.delete_stream(stream))
        await p.refused("bus", "bus", "purge the durable stream", lambda: js.purge_stream(stream))
        # a member may listen on an actor's subject: it captures sealed requests
        captured: list[nats.aio.msg.Msg] = []
        got_one = asyncio.Event()

        async def keep(msg: nats.aio.msg.Msg) -> None:
            captured.append(msg)
            got_one.set()

        await mallory.subscribe(f"{NS}.a.vault.1", cb=keep)
        await mallory.subscribe(f"{host.runtime.mux.prefix}>")  # another system's replies
        await mallory.subscribe(f"{NS}.d.>")  # to answer durable stores
        await mallory.flush()
        await asyncio.sleep(0.2)  # the server's permission answers come asynchronously
        refusals = [e for e in errors if "permissions violation" in e.lower()]
        p.add("bus", "bus", "read another system's inbox", len(refusals) >= 1, "; ".join(refusals))
        p.add(
            "bus",
            "bus",
            "answer durable stores (subscribe {ns}.d.>)",
            len(refusals) >= 2,
            "; ".join(refusals),
        )
        await caller.ask("vault/1", Note(text="to be captured"), timeout=TIMEOUT)
        async with asyncio.timeout(TIMEOUT):  # the spy's callback may still be behind
            await got_one.wait()
        original = captured[-1]
        for round_ in (1, 2):

            async def replay() -> Any:
                answer = await mallory.request(
                    original.subject,
                    original.data,
                    headers=dict(original.headers or {}),
                    timeout=TIMEOUT,
                )
                reply = unpack(answer.data)
                if reply.get("intent") == "$error":  # (sealed: only the real caller reads why)
                    raise RuntimeError("refused with an error answer")
                return reply

            await p.refused("bus", "replay", f"captured message, round {round_}", replay)
        forged = pack(
            {
                "id": uuid.uuid4().hex,
                "ts": int(time.time() * 1000),
                "src": "bank/1",
                "dst": "vault/1",
                "intent": "Note",
                "content": {"text": "pay"},
            }
        )

        async def forged_src() -> Any:
            answer = await mallory.request(f"{NS}.a.vault.1", forged, timeout=TIMEOUT)
            reply = unpack(answer.data)
            if reply.get("intent") == "$error":
                raise RuntimeError(f"refused: {reply['content']}")
            return reply

        await p.refused("bus", "bus", "a message with a forged src", forged_src)

        # the forged reply: mallory answers every ask first; the caller must wait it out
        async def answer_first(msg: nats.aio.msg.Msg) -> None:
            if msg.reply:
                await mallory.publish(
                    msg.reply,
                    pack(
                        {
                            "id": "f",
                            "ts": 0,
                            "src": "vault/1",
                            "dst": "",
                            "intent": "str",
                            "content": "forged",
                        }
                    ),
                )

        sub = await mallory.subscribe(f"{NS}.a.vault.1", cb=answer_first)
        await mallory.flush()
        got = await caller.ask("vault/1", Note(text="real?"), timeout=TIMEOUT)
        await sub.unsubscribe()
        p.add("bus", "bus", "a forged reply", got != "forged", f"the caller took {got!r}")
    finally:
        await mallory.close()
    # -- clock skew: honest senders with wrong clocks
    for offset_s in (-600, -300, -120, -31, 20, 31, 120, 300, 600):
        async with skewed_clock(offset_s * 1000):
            name = f"clock {offset_s:+d} s"
            if abs(offset_s) <= 30:
                try:
                    await caller.ask("vault/1", Note(text="skewed"), timeout=TIMEOUT)
                    p.control("bus", f"{name}, within the window, is taken", True, "taken")
                except Exception as exc:
                    p.control("bus", f"{name}, within the window, is taken", False, repr(exc))
            else:
                await p.refused(
                    "bus",
                    "clock",
                    name,
                    lambda: caller.ask("vault/1", Note(text="skewed"), timeout=TIMEOUT),
                )


# -- the gateway's edges ------------------------------------------------------------------


# -- certificates, TLS side ---------------------------------------------------------------
async def certificate_probes(p: Probes, home: Path, work: Path) -> None:
    """Servers presenting certificates a client trusting the dev CA must refuse."""
    dev = DevCertificates(home)
    for name, (cert, key) in bad_certificates(dev, work).items():
        tls = f'tls {{\n  cert_file: "{cert}"\n  key_file: "{key}"\n  timeout: 2\n}}\n'
        async with EmbeddedServer(ServerConfig(host="127.0.0.1", jetstream=False, extra=tls)) as s:
            await p.refused(
                "bus",
                "certificates",
                name,
                lambda s=s: nats.connect(
                    s.url,
                    tls=dev.client_context(),
                    allow_reconnect=False,
                    connect_timeout=2,
                    error_cb=quiet,
                ),
            )


async def control_watermark(p: Probes, messages: int, work: Path) -> dict[str, Any]:
    """The same traffic with no security at all: the probe must see the mark."""
    async with EmbeddedServer(ServerConfig(host="127.0.0.1")) as server:
        recorder = Recorder(port_of(server.url))
        proxied = await recorder.start()
        host = await ActorSystem.connect(proxied, namespace="open", registry=False)
        caller = await ActorSystem.connect(proxied, namespace="open", registry=False)
        try:
            await host.spawn(Vault, "1")
            async with sniffing(p, "open", [port_of(server.url)], work) as wire:
                Vault.heard = 0
                for i in range(messages):
                    await caller.ask("vault/1", Note(text=f"{MARK} #{i}"), timeout=TIMEOUT)
                    await caller.publish(TOPIC, Bulletin(text=f"{MARK} published #{i}"))
                await heard(messages)
        finally:
            await caller.close(timeout=2.0)
            await host.close(timeout=2.0)
            await recorder.stop()
    hits = recorder.seen.count(MARK.encode())
    p.control("bus", "an open bus shows the mark to the probe", hits > 0, f"{hits} hits")
    control: dict[str, Any] = {"bytes": len(recorder.seen), "hits": hits}
    if wire.data is not None:
        control["tcpdump"] = wire.summary()
        p.control(
            "bus", "an open bus shows the mark to tcpdump", wire.hits > 0, f"{wire.hits} hits"
        )
    return control


# -- report ---------------------------------------------------------------------------
def matrix(results: list[Probe]) -> dict[str, dict[str, list[int]]]:
    """target -> dimension -> [blocked, probes]."""
    out: dict[str, dict[str, list[int]]] = {}
    for r in results:
        cell = out.setdefault(r.target, {}).setdefault(r.dimension, [0, 0])
        cell[0] += int(r.blocked)
        cell[1] += 1
    return out


def print_report(console: Console, m: dict[str, dict[str, list[int]]]) -> None:
    t = Table(title="blocked / probed, by target and dimension")
    t.add_column("target")
    for d in DIMENSIONS:
        t.add_column(d, justify="center")
    for target, row in m.items():
        t.add_row(target, *(f"{row[d][0]}/{row[d][1]}" if d in row else "-" for d in DIMENSIONS))
    console.print(t)


def plot(path: Path, m: dict[str, dict[str, list[int]]], title: str) -> bool:
    plt = pyplot()
    if plt is None:
        return False

    targets = list(m)
    grid = [
        [(m[t][d][0] / m[t][d][1]) if d in m[t] else float("nan") for d in DIMENSIONS]
        for t in targets
    ]
    fig, ax = plt.subplots(figsize=(10, 0.6 * len(targets) + 2))
    ax.imshow(grid, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(DIMENSIONS)), DIMENSIONS, rotation=30, ha="right")
    ax.set_yticks(range(len(targets)), targets)
    for i, t in enumerate(targets):
        for j, d in enumerate(DIMENSIONS):
            if d in m[t]:
                ax.text(j, i, f"{m[t][d][0]}/{m[t][d][1]}", ha="center", va="center", fontsize=8)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


async def run(console: Console, messages: int) -> tuple[Probes, dict[str, Any]]:
    p = Probes(console)
    with tempfile.TemporaryDirectory(prefix="actorbus-safety-") as tmp:
        home, work = Path(tmp) / "home", Path(tmp) / "work"
        work.mkdir()
        os.environ["ACTORBUS_HOME"] = str(home)  # this run's own keys, nobody else's
        watermark = await bus_probes(p, home, work, messages)
        await certificate_probes(p, home, work)
        await gateway_probes(p, home, work)
        control = await control_watermark(p, messages, work)
    return p, {"secured": watermark, "open_control": control}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/safety.py", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--messages",
        type=positive_int,
        default=50,
        help="marked asks and tells in the watermark run (50)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    args = parser.parse_args(argv)
    console = report_console(140)
    started = time.time()
    probes, watermark = asyncio.run(run(console, args.messages))
    m = matrix(probes.results)
    print_report(console, m)
    blocked = sum(r.blocked for r in probes.results)
    total = len(probes.results)
    controls_ok = all(c["blocked"] for c in probes.controls)
    data = {
        "benchmark": "safety probes against the bus and the gateway's edges (secure defaults)",
        "duration_s": round(time.time() - started, 2),
        "machine": machine_info(packages=("nats-py", "cryptography", "joserfc")),
        "watermark": watermark,
        "matrix": m,
        "probes": [asdict(r) for r in probes.results],
        "controls": probes.controls,
        "skipped": probes.skipped,
        "blocked": blocked,
        "total": total,
    }
    verdict = (
        f"{'PASS' if blocked == total and controls_ok else 'FAIL'}: {blocked}/{total} probes "
        f"blocked; controls {'ok' if controls_ok else 'BROKEN'}; watermark hits "
        f"{watermark['secured'].get('hits')} (open control: {watermark['open_control']['hits']})"
    )
    write_report(
        console,
        args.out,
        "safety",
        data,
        lambda png: plot(png, m, f"actorbus safety probes: {blocked}/{total} blocked"),
        verdict,
    )
    return 0 if blocked == total and controls_ok else 1


if __name__ == "__main__":
    sys.exit(main())
