"""Objects with ``start()`` and ``stop()`` used as context managers.

Servers, clusters and services all follow one rule: ``async with`` (or
``with``) starts them and stops them on the way out, whatever happened inside.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self


class AsyncStartStop:
    """``async with`` for a class with ``async start()`` and ``async stop()``."""

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()


class SyncStartStop:
    """``with`` for a class with ``start_sync()`` and ``stop_sync()``."""

    def start_sync(self) -> None:
        raise NotImplementedError

    def stop_sync(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start_sync()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop_sync()
