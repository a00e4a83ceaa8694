"""Container healthchecks for compose/docker-compose.yml: exit 0 if healthy, 1 if not.

    python compose/healthcheck.py http URL
    python compose/healthcheck.py ask ADDRESS --url NATS_URL [--namespace NS]
    python compose/healthcheck.py file PATH [--max-age SECONDS]

``http``: a GET of URL answers 2xx. The image is python:slim, which has neither
curl nor wget, so the check is made with the standard library.

``file``: the ``actorbus run`` process of this container touched PATH (its
``--health-file``) within ``--max-age`` seconds: it runs, its event loop turns
and it is connected to NATS. This checks the container's own process, where
``ask`` is answered by whichever replica of the address NATS picks.

``ask``: an actor serves ADDRESS. It sends a message with an intent no actor
handles; the actor's own answer (a reply, or the typed error it sends back:
unknown intent, invalid payload, handler error) proves that an instance is
subscribed and handling messages. No responders, a stopped actor, a timeout or
no connection to NATS means unhealthy. Replicas share an address, so this
checks the address the container serves, which is what callers depend on.

The check exports no spans of its own (OTEL_SDK_DISABLED), so the containers'
tracing variables do not fill Jaeger with healthcheck traffic.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import sys
import time
import urllib.error
import urllib.request

INTENT = "actorbus.healthcheck"


def check_http(url: str, timeout: float, cafile: str | None = None) -> str | None:
    """None when healthy, else why not (HTTPS trusting ``cafile``)."""
    context = ssl.create_default_context(cafile=cafile) if cafile else None
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as resp:
            status = int(resp.status)
    except urllib.error.HTTPError as exc:
        status = exc.code
    except OSError as exc:
        return f"{url}: {exc}"
    return None if 200 <= status < 300 else f"{url}: HTTP {status}"


async def check_ask(address: str, url: str, namespace: str, timeout: float) -> str | None:
    """None when an actor at ``address`` answered, else why not."""
    os.environ["OTEL_SDK_DISABLED"] = "true"  # before actorbus configures tracing
    from actorbus import (
        ActorBusError,
        ActorSystem,
        RemoteError,
        UnknownIntentError,
        ValidationFailedError,
    )

    try:
        async with asyncio.timeout(timeout):
            servers = [u.strip() for u in url.split(",") if u.strip()]  # a cluster's nodes
            system = await ActorSystem.connect(servers, namespace=namespace, registry=False)
            try:
                await system.ask(address, {}, intent=INTENT, timeout=timeout)
            except (UnknownIntentError, ValidationFailedError, RemoteError):
                pass  # the actor itself answered: it is subscribed and handling
            finally:
                await system.close(timeout=1.0)
    except TimeoutError:
        return f"{address}: no answer within {timeout:g}s"
    except ActorBusError as exc:  # no responders, stopped, no connection, ...
        return f"{address}: {type(exc).__name__}: {exc}"
    return None


def check_file(path: str, max_age: float) -> str | None:
    """None when ``actorbus run --health-file`` touched ``path`` lately, else why not."""
    try:
        age = time.time() - os.stat(path).st_mtime
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    return None if age <= max_age else f"{path}: not touched for {age:.0f}s"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="healthcheck.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--timeout", type=float, default=3.0, help="seconds for the whole check")
    sub = p.add_subparsers(dest="check", required=True)
    http = sub.add_parser("http", help="GET answers 2xx")
    http.add_argument("url")
    http.add_argument("--cafile", help="the CA an HTTPS URL's certificate is from")
    ask = sub.add_parser("ask", help="an actor answers at ADDRESS")
    ask.add_argument("address")
    ask.add_argument("--url", required=True, help="NATS URL (a comma list for a cluster)")
    ask.add_argument("--namespace", default="ab")
    own = sub.add_parser("file", help="this process touched PATH lately (--health-file)")
    own.add_argument("path")
    own.add_argument("--max-age", type=float, default=10.0, help="seconds (default: 10)")
    args = p.parse_args(argv)
    if args.check == "http":
        problem = check_http(args.url, args.timeout, args.cafile)
    elif args.check == "file":
        problem = check_file(args.path, args.max_age)
    else:
        problem = asyncio.run(check_ask(args.address, args.url, args.namespace, args.timeout))
    if problem is not None:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    print("healthy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
