"""``actorbus run --workers N``: host processes forked from a warm parent, and
started again when they die.

A new Python process needs about half a second of CPU before it serves (the
interpreter, nats-py, pydantic, actorbus and the user's module, imported anew);
three processes restarted at once on two cores take a second. The parent here
imports everything once and never connects: each worker is a ``fork`` of it,
so a worker killed by the kernel, the OOM killer or an operator is serving
again within milliseconds of its restart delay. Ray keeps warm workers and
gunicorn preloads the application for the same reason.

The parent runs no event loop and no thread (a fork copies only the thread that
calls it); it sleeps in ``select`` on a self-pipe that the signal handlers
write to, so a worker's death, SIGTERM and SIGINT wake it at once.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from actorbus.cli.common import EXIT_OK, EXIT_USAGE, CliError, stderr

#: a worker that dies sooner than this after its start is crash-looping: the
#: delay before its next start doubles, up to MAX_BACKOFF
MIN_UPTIME = 1.0
MAX_BACKOFF = 30.0
#: how long the workers get to stop gracefully before they are killed
STOP_GRACE = 15.0

WORKER_FIELD = "{worker}"


@dataclass
class Worker:
    """One worker slot: the process filling it now, and when to fill it again."""

    index: int
    pid: int = 0
    started: float = 0.0
    delay: float = 0.0
    restart_at: float | None = None  # monotonic time of the next start, while it is down


@dataclass
class Supervisor:
    """Forks ``count`` workers that each run ``serve(index)`` and starts one again,
    ``restart_delay`` seconds after it dies, until SIGTERM or SIGINT."""

    count: int
    restart_delay: float
    serve: Callable[[int], int]
    say: Callable[[str], None]
    workers: list[Worker] = field(default_factory=list)
    stopping: bool = False

    def run(self) -> int:
        """Supervise until asked to stop; then stop every worker and return."""
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        previous = {s: signal.getsignal(s) for s in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT)}
        for sig in previous:
            signal.signal(sig, lambda *_: None)  # only to wake select through the pipe
        old_fd = signal.set_wakeup_fd(wake_w)
        try:
            self.workers = [Worker(i, delay=self.restart_delay) for i in range(self.count)]
            for worker in self.workers:
                self._start(worker, (wake_r, wake_w))
            while not self.stopping:
                self._wait(wake_r)
                self._reap()
                self._restart_due((wake_r, wake_w))
        finally:
            # whatever ended the loop, no worker outlives its supervisor
            self._stop_all(wake_r)
            signal.set_wakeup_fd(old_fd)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            os.close(wake_r)
            os.close(wake_w)
        return EXIT_OK

    def _wait(self, wake_r: int) -> None:
        due = [w.restart_at for w in self.workers if w.restart_at is not None]
        timeout = max(0.0, min(due) - time.monotonic()) if due else None
        readable, _, _ = select.select([wake_r], [], [], timeout)
        if readable:
            with contextlib.suppress(BlockingIOError):
                for signum in os.read(wake_r, 512):
                    if signum in (signal.SIGTERM, signal.SIGINT):
                        self.say(f"{signal.Signals(signum).name}: stopping the workers")
                        self.stopping = True

    def _start(self, worker: Worker, pipe: tuple[int, int]) -> None:
        try:
            pid = os.fork()
        except OSError as exc:  # out of processes or memory: try again later
            worker.delay = min(MAX_BACKOFF, max(worker.delay, 0.1) * 2)
            worker.restart_at = time.monotonic() + worker.delay
            self.say(f"could not start worker {worker.index} ({exc}); trying in {worker.delay:g}s")
            return
        if pid == 0:  # the worker: no trace of the supervisor's signal plumbing
            code = 1
            try:
                signal.set_wakeup_fd(-1)
                for fd in pipe:
                    os.close(fd)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                # Ctrl-C reaches the whole process group: the supervisor alone answers
                # it, and stops the workers with SIGTERM
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                code = self.serve(worker.index)
            except CliError as exc:
                stderr().print(f"[bold red]worker {worker.index}: error:[/] {exc}")
                code = exc.code
            # a worker never returns into the supervisor's loop, whatever happens
            except BaseException as exc:
                stderr().print(f"[bold red]worker {worker.index}:[/] {type(exc).__name__}: {exc}")
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        worker.pid, worker.started, worker.restart_at = pid, time.monotonic(), None
        self.say(f"worker {worker.index}: pid {pid}")

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            worker = next((w for w in self.workers if w.pid == pid), None)
            if worker is None:
                continue
            worker.pid = 0
            if self.stopping:
                continue
            uptime = time.monotonic() - worker.started
            worker.delay = (
                min(MAX_BACKOFF, max(worker.delay, 0.1) * 2)
                if uptime < MIN_UPTIME
                else self.restart_delay
            )
            worker.restart_at = time.monotonic() + worker.delay
            self.say(
                f"worker {worker.index} (pid {pid}) {_how(status)} after {uptime:.1f}s; "
                f"starting it again in {worker.delay:g}s"
            )

    def _restart_due(self, pipe: tuple[int, int]) -> None:
        now = time.monotonic()
        for worker in self.workers:
            if worker.restart_at is not None and worker.restart_at <= now and not self.stopping:
                self._start(worker, pipe)

    def _stop_all(self, wake_r: int) -> None:
        for worker in self.workers:
            if worker.pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE
        while any(w.pid for w in self.workers) and time.monotonic() < deadline:
            select.select([wake_r], [], [], min(0.2, max(0.0, deadline - time.monotonic())))
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 512)
            self._reap()
        for worker in self.workers:
            if worker.pid:
                self.say(f"worker {worker.index} (pid {worker.pid}) did not stop; killing it")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.pid, signal.SIGKILL)
                os.waitpid(worker.pid, 0)
                worker.pid = 0
        self.say("stopped")


def _how(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with {os.waitstatus_to_exitcode(status)}"


def check_worker_args(args: argparse.Namespace) -> None:
    """The options that cannot go with ``--workers``, said before anything starts."""
    if args.workers < 1:
        raise CliError("--workers must be at least 1", EXIT_USAGE)
    if not hasattr(os, "fork"):
        raise CliError("--workers needs os.fork (Linux or macOS)", EXIT_USAGE)
    if args.reload:
        raise CliError("--workers and --reload do not go together", EXIT_USAGE)
    if args.restart_delay < 0:
        raise CliError("--restart-delay cannot be negative", EXIT_USAGE)
    if args.health_file and WORKER_FIELD not in args.health_file and args.workers > 1:
        raise CliError(
            f"with --workers, --health-file needs {WORKER_FIELD} in it "
            "(one file per worker, e.g. /tmp/health-{worker})",
            EXIT_USAGE,
        )


def for_worker(args: argparse.Namespace, index: int) -> argparse.Namespace:
    """The worker's own options (called in the worker): ``{worker}`` in ``--key``
    and ``--health-file`` becomes its index."""
    own = argparse.Namespace(**vars(args))
    own.worker = index
    own.supervisor = os.getppid()  # a worker whose parent changes is an orphan: it stops
    if own.key is not None:
        own.key = own.key.replace(WORKER_FIELD, str(index))
    if own.health_file:
        own.health_file = own.health_file.replace(WORKER_FIELD, str(index))
    return own
