"""Screenshots of pages in headless Chromium (for the tests that look at Phoenix)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from actorbus.services.trace_ui import ENV_CHROMIUM, TraceUIError

# -- screenshots ----------------------------------------------------------------


def find_chromium() -> Path | None:
    """``$ACTORBUS_CHROMIUM``, or chromium / chromium-browser / google-chrome on PATH."""
    if configured := os.environ.get(ENV_CHROMIUM):
        return Path(configured) if Path(configured).exists() else None
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if found := shutil.which(name):
            return Path(found)
    return None


def _run_chromium(
    url: str,
    args: Sequence[str],
    *,
    window_size: tuple[int, int],
    settle_ms: int,
    timeout: float,
    chromium: str | os.PathLike[str] | None,
) -> tuple[int, bytes, bytes]:
    """Headless Chromium on ``url`` with ``args``: (exit code, stdout, stderr)."""
    browser = Path(chromium) if chromium is not None else find_chromium()
    if browser is None:
        raise TraceUIError(
            "Chromium not found: `apt-get install chromium` (Debian) or set "
            f"{ENV_CHROMIUM}=/path/to/chromium"
        )
    width, height = window_size
    with tempfile.TemporaryDirectory(prefix="actorbus-chromium-") as profile:
        command = [
            os.fspath(browser),
            "--headless",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-default-apps",
            "--disable-sync",
            "--disable-extensions",
            # No animations: Phoenix's trace panel otherwise may be caught mid-fade.
            "--force-prefers-reduced-motion",
            "--proxy-server=http://127.0.0.1:9",  # non-loopback traffic goes nowhere
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            f"--virtual-time-budget={settle_ms}",
            *args,
            url,
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            command.insert(1, "--no-sandbox")  # Chromium refuses to run as root otherwise
        with tempfile.TemporaryFile() as stderr:  # chatty; a pipe nobody reads could block it
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                cwd=profile,
                start_new_session=True,
            )
            try:
                stdout, _ = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                raise TraceUIError(f"Chromium took more than {timeout:.0f} s on {url}") from None
            stderr.seek(0)
            errors = stderr.read()
    return proc.returncode, stdout, errors


def capture_page(
    url: str,
    path: str | os.PathLike[str],
    *,
    window_size: tuple[int, int] = (1400, 900),
    settle_ms: int = 5_000,
    timeout: float = 90.0,
    chromium: str | os.PathLike[str] | None = None,
    showing: tuple[str, ...] = (),
    attempts: int = 3,
) -> tuple[Path, str]:
    """Save a PNG of ``url`` as headless Chromium renders it: (the PNG's path, the DOM).

    One Chromium run takes both, so a test can check what the page shows (the
    DOM's text) and keep the picture. ``settle_ms`` is Chromium's virtual-time
    budget: how long the page's own scripts (Phoenix's UI fetching the trace)
    run before the shot. A page that does not show all of ``showing`` yet (its
    scripts were slow on a busy machine) is taken again with twice the budget,
    up to ``attempts`` runs. Chromium gets a fresh profile and a proxy that goes
    nowhere, so it reaches loopback addresses only.
    """
    target = Path(path).absolute()
    target.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(attempts):
        target.unlink(missing_ok=True)
        code, raw, errors = _run_chromium(
            url,
            ["--dump-dom", f"--screenshot={target}"],
            window_size=window_size,
            settle_ms=settle_ms * 2**attempt,
            timeout=timeout,
            chromium=chromium,
        )
        if code != 0 or not target.exists() or target.stat().st_size == 0:
            tail = "\n".join(errors.decode(errors="replace").splitlines()[-20:])
            raise TraceUIError(f"Chromium made no screenshot of {url} (exit {code}):\n{tail}")
        dom = raw.decode(errors="replace")
        if all(text in dom for text in showing):
            break
    return target, dom


def screenshot(
    url: str,
    path: str | os.PathLike[str],
    *,
    window_size: tuple[int, int] = (1400, 900),
    settle_ms: int = 5_000,
    timeout: float = 90.0,
    chromium: str | os.PathLike[str] | None = None,
) -> Path:
    """Save a PNG of ``url`` as headless Chromium renders it; its path.

    See :func:`capture_page`, which also returns the page's DOM.
    """
    png, _ = capture_page(
        url, path, window_size=window_size, settle_ms=settle_ms, timeout=timeout, chromium=chromium
    )
    return png


def render_dom(
    url: str,
    *,
    window_size: tuple[int, int] = (1400, 900),
    settle_ms: int = 5_000,
    timeout: float = 90.0,
    chromium: str | os.PathLike[str] | None = None,
) -> str:
    """The page's DOM (HTML) after its scripts ran, as headless Chromium sees it."""
    code, dom, errors = _run_chromium(
        url,
        ["--dump-dom"],
        window_size=window_size,
        settle_ms=settle_ms,
        timeout=timeout,
        chromium=chromium,
    )
    if code != 0:
        tail = "\n".join(errors.decode(errors="replace").splitlines()[-20:])
        raise TraceUIError(f"Chromium could not render {url} (exit {code}):\n{tail}")
    return dom.decode(errors="replace")
