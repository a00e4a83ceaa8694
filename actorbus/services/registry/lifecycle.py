"""What the leader does, and only the leader: the services' lifecycles.

Every ``sweep_interval`` seconds it looks at every service in the mirror:

- **ephemeral**: silent for ``renewal_unhealthy_timeout`` (no renewal, counted
  from the last renewal or the registration) -> marked ``unhealthy``; silent for
  ``renewal_delete_timeout`` -> deleted. A renewal makes it healthy again (the
  store does that at once, on whichever instance took the renewal).
- **persistent** with a ``persistent_check``: an HTTP(S) request every
  ``check_interval`` (bounded by ``check_timeout``); any 2xx passes. It is marked
  ``unhealthy`` once no check has passed for ``check_unhealthy_timeout``, and
  ``healthy`` again at the first check that passes. Never deleted.
- **agent_info** that could not be fetched at registration: tried again every
  ``card_retry_interval``.

Status changes are written with optimistic concurrency against the revision
the decision was based on, so a renewal or an edit that lands meanwhile wins.
Check history lives in the leader's memory: a new leader gives each persistent
service a fresh ``check_unhealthy_timeout`` before it can mark it unhealthy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import aiohttp

from actorbus.bus.bucket_mirror import now_ms
from actorbus.bus.tasks import stop_task
from actorbus.codecs.uap import (
    HEALTHY,
    UNHEALTHY,
    EphemeralCheck,
    PersistentCheck,
    ServiceResponse,
    UapConflictError,
)
from actorbus.services.registry.cards import AgentInfoFetcher, AgentInfoFetchError
from actorbus.services.registry.store import RegistryStore

log = logging.getLogger("actorbus.registry.lifecycle")


@dataclass
class _CheckState:
    last_ok: float  # monotonic time of the last passing check (or of the first sight)
    next_due: float
    running: asyncio.Task[None] | None = None


def check_url(svc: ServiceResponse, check: PersistentCheck) -> str | None:
    """The URL a persistent check requests: ``check_http_url`` if absolute, else
    that path on ``check_type://host:port``."""
    url = check.check_http_url.strip()
    if url.startswith(("http://", "https://")):
        return url
    if not svc.host:
        return None
    host = f"[{svc.host}]" if ":" in svc.host and not svc.host.startswith("[") else svc.host
    port = f":{svc.port}" if svc.port else ""
    return f"{check.check_type.lower()}://{host}{port}/{url.lstrip('/')}"


class Lifecycle:
    """Runs the sweeps while this instance leads; :meth:`stop` when it no longer does."""

    def __init__(
        self,
        store: RegistryStore,
        fetcher: AgentInfoFetcher,
        *,
        sweep_interval: float = 1.0,
        card_retry_interval: float = 30.0,
    ) -> None:
        self.store = store
        self.fetcher = fetcher
        self.sweep_interval = sweep_interval
        self.card_retry_interval = card_retry_interval
        self.sweeps = 0
        self._checks: dict[str, _CheckState] = {}
        self._card_due: dict[str, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._session: aiohttp.ClientSession | None = None

    async def run(self) -> None:
        """Sweep until cancelled."""
        try:
            while True:
                try:
                    await self.sweep()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("registry sweep failed; next one in %gs", self.sweep_interval)
                await asyncio.sleep(self.sweep_interval)
        finally:
            await self.stop()

    async def sweep(self) -> None:
        self.sweeps += 1
        now = time.monotonic()
        services = self.store.list_services()
        for svc in services:
            if svc.ephemeral:
                await self._expire(svc)
            elif svc.persistent_check is not None:
                self._schedule_check(svc, svc.persistent_check, now)
            if svc.agent_info_error and now >= self._card_due.setdefault(
                svc.id, now + self.card_retry_interval
            ):
                self._card_due[svc.id] = now + self.card_retry_interval
                self._spawn(self._refetch(svc))
        live = {s.id for s in services}
        for gone in [sid for sid in self._checks if sid not in live]:
            state = self._checks.pop(gone)
            if state.running is not None:
                state.running.cancel()
        for gone in [sid for sid in self._card_due if sid not in live]:
            del self._card_due[gone]
        self.store.forget_renewals(live.__contains__)

    # -- ephemeral ----------------------------------------------------------------
    async def _expire(self, svc: ServiceResponse) -> None:
        check = svc.ephemeral_check or EphemeralCheck()
        last = max(self.store.renewed_at(svc.id) or 0, svc.created_at)
        silent = (now_ms() - last) / 1000
        if silent >= check.delete_after:
            try:
                await self.store.delete_service(svc.id, expect_index=svc.index)
            except UapConflictError:
                return  # renewed or edited meanwhile: judged again next sweep
            log.info(
                "deleted ephemeral service %s (%s): no renewal for %.1fs", svc.name, svc.id, silent
            )
        elif silent >= check.unhealthy_after and svc.healthy:
            note = (
                f"no renewal for {silent:.1f}s (unhealthy after {check.renewal_unhealthy_timeout})"
            )
            if await self._set_health(svc, UNHEALTHY, note):
                log.info("ephemeral service %s (%s) unhealthy: %s", svc.name, svc.id, note)

    async def _set_health(self, svc: ServiceResponse, status: str, note: str) -> bool:
        """Write ``status`` if the record is still the one the decision was based on."""
        new = svc.model_copy(update={"health_status": status, "health_output": note})
        try:
            await self.store.put_service(new, expect_index=svc.index)
        except UapConflictError:
            return False
        return True

    # -- persistent -----------------------------------------------------------------
    def _schedule_check(self, svc: ServiceResponse, check: PersistentCheck, now: float) -> None:
        state = self._checks.get(svc.id)
        if state is None:
            state = self._checks[svc.id] = _CheckState(last_ok=now, next_due=now)
        if state.running is None and now >= state.next_due:
            state.next_due = now + check.interval
            state.running = self._spawn(self._check(svc.id, state))

    async def _check(self, service_id: str, state: _CheckState) -> None:
        try:
            svc = self.store.get_service(service_id)
            if svc is None or svc.persistent_check is None:
                return
            check = svc.persistent_check
            ok, detail = await self._probe(svc, check)
            now = time.monotonic()
            if ok:
                state.last_ok = now
            svc = self.store.get_service(service_id)  # the freshest, after the wait
            if svc is None:
                return
            if ok and not svc.healthy:
                if await self._set_health(svc, HEALTHY, detail):
                    log.info("persistent service %s (%s) healthy: %s", svc.name, svc.id, detail)
            elif not ok and svc.healthy and now - state.last_ok >= check.unhealthy_after:
                note = f"{detail} (no passing check for {now - state.last_ok:.1f}s)"
                if await self._set_health(svc, UNHEALTHY, note):
                    log.info("persistent service %s (%s) unhealthy: %s", svc.name, svc.id, note)
        finally:
            state.running = None

    async def _probe(self, svc: ServiceResponse, check: PersistentCheck) -> tuple[bool, str]:
        url = check_url(svc, check)
        if url is None:
            return False, "no host to check"
        what = f"{check.method} {url}"
        try:
            async with self._http().request(
                check.method, url, timeout=aiohttp.ClientTimeout(total=check.timeout)
            ) as resp:
                await resp.content.read(64 * 1024)
                return 200 <= resp.status < 300, f"{what}: HTTP {resp.status}"
        except TimeoutError:
            return False, f"{what}: no answer within {check.check_timeout}"
        except (aiohttp.ClientError, ValueError) as exc:
            return False, f"{what}: {exc or type(exc).__name__}"

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    # -- agent info ---------------------------------------------------------------
    async def _refetch(self, svc: ServiceResponse) -> None:
        try:
            info = await self.fetcher.fetch(svc)
        except AgentInfoFetchError as exc:
            error = str(exc)
            if error != svc.agent_info_error:
                with contextlib.suppress(UapConflictError):
                    await self.store.put_service(
                        svc.model_copy(update={"agent_info_error": error}),
                        expect_index=svc.index,
                    )
            return
        with contextlib.suppress(UapConflictError):
            await self.store.put_service(
                svc.model_copy(update={"agent_info": info, "agent_info_error": None}),
                expect_index=svc.index,
            )
            log.info("fetched agent_info of %s (%s)", svc.name, svc.id)

    # -- housekeeping -------------------------------------------------------------
    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("registry lifecycle task failed", exc_info=task.exception())

    async def stop(self) -> None:
        """Cancel running checks and forget their history (a new term starts afresh)."""
        for task in list(self._tasks):
            await stop_task(task, what="registry check")
        self._checks.clear()
        self._card_due.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None
