"""One headless Chromium for one MiniWoB++ env: launch with our flags, find its processes, tear it down.

``miniwob`` builds its driver with a bare ``webdriver.ChromeOptions()``, so it cannot be told to stay
off the network or out of ``/dev/shm``; :class:`FlaggedSeleniumInstance` replaces that one method and
keeps the rest of miniwob's ``SeleniumInstance`` (task URL, window geometry, field extractor).

Every browser gets its own scratch folder, used as ``TMPDIR`` of chromedriver and Chromium. Chromium
leaves ``org.chromium.Chromium.*`` folders there and puts its profile there, so removing the folder on
close leaves nothing behind; and the folder's path, found in every process's environment (chromedriver,
the browser, crashpad) or command line (zygote, renderers, GPU), tells this env's processes apart from
any other env's on the machine. That is how ``close`` can promise that no process of the env survives.

chromedriver starts in a session of its own, so a terminal's Ctrl-C (or a signal to the launcher's
process group) reaches only the launcher, which then closes its browsers in order; and each browser is
registered with :mod:`admire.envs.reaper`, which kills it if the launcher dies without closing it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from admire.envs.reaper import browser_processes, kill_processes, register_browser, unregister_browser

__all__ = ["browser_processes", "kill_processes"]  # re-exported: they live in the stdlib-only reaper

log = logging.getLogger(__name__)

CHROMIUM_FLAGS: tuple[str, ...] = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
"""Headless, no sandbox (containers), no GPU, no network of its own, no /dev/shm (small in Docker)."""

DEFAULT_CHROME_BINARY = "/usr/bin/chromium"
DEFAULT_CHROMEDRIVER = "/usr/bin/chromedriver"
INSTALL_HINT = (
    "install Debian's Chromium and its driver (`apt-get install -y chromium chromium-driver`, or "
    "`make system-deps`), or point MINIWOB_CHROME_BINARY and MINIWOB_CHROMEDRIVER at a matching pair"
)
PAGE_LOAD_TIMEOUT_S = 10.0


class BrowserNotFound(RuntimeError):
    """Chromium or chromedriver is missing: a set-up problem, not a crash, so restarting cannot help."""


@dataclass(frozen=True)
class BrowserPaths:
    chrome_binary: str
    chromedriver: str


def resolve_browser_paths(chrome_binary: str | None = None, chromedriver: str | None = None) -> BrowserPaths:
    """Explicit paths, else ``MINIWOB_CHROME_BINARY``/``MINIWOB_CHROMEDRIVER``, else Debian's.

    Both paths are always given to Selenium, so Selenium Manager (which downloads drivers) never runs.
    """
    paths = BrowserPaths(
        chrome_binary=chrome_binary or os.environ.get("MINIWOB_CHROME_BINARY") or DEFAULT_CHROME_BINARY,
        chromedriver=chromedriver or os.environ.get("MINIWOB_CHROMEDRIVER") or DEFAULT_CHROMEDRIVER,
    )
    for what, path in (("Chromium", paths.chrome_binary), ("chromedriver", paths.chromedriver)):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise BrowserNotFound(f"{what} not found at {path}: {INSTALL_HINT}")
    return paths


MAX_SCRATCH_PATH_CHARS = 60
"""Chromium puts its singleton socket at ``$TMPDIR/org.chromium.Chromium.XXXXXX/SingletonSocket``, and
a Unix socket path may not exceed 107 bytes: with a longer TMPDIR, Chromium exits at start."""


def new_scratch_dir(root: str | os.PathLike[str] | None = None) -> Path:
    """A fresh folder for one browser's TMPDIR, under ``root`` or the process's temp dir.

    A root so deep that Chromium could not start there is swapped for ``/tmp``, with a warning.
    """
    base = Path(root) if root is not None else Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="admire-miniwob-", dir=base)).resolve()
    if len(str(scratch)) > MAX_SCRATCH_PATH_CHARS:
        scratch.rmdir()
        log.warning("scratch folder under %s would be too long a path for Chromium; using /tmp", base)
        scratch = Path(tempfile.mkdtemp(prefix="admire-miniwob-", dir="/tmp")).resolve()
    return scratch


def launch_driver(paths: BrowserPaths, scratch: Path, command_timeout_s: float) -> Any:
    """Start chromedriver and Chromium with our flags, TMPDIR set to ``scratch``.

    chromedriver leads a new session and process group (Chromium's processes stay in it, all but
    crashpad): signals meant for the launcher do not hit the browser before the launcher can close
    it. ``scratch`` is registered with the reaper before anything starts, the group once it exists;
    :func:`shut_down` unregisters both.
    """
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.binary_location = paths.chrome_binary
    env = dict(os.environ, TMPDIR=str(scratch), TMP=str(scratch), TEMP=str(scratch))
    service = Service(executable_path=paths.chromedriver, env=env, log_output=subprocess.DEVNULL,
                      popen_kw={"start_new_session": True})
    register_browser(scratch)
    driver = webdriver.Chrome(options=options, service=service)
    register_browser(scratch, pgid=driver.service.process.pid)  # the session leader's pid is its group
    # Selenium's default HTTP timeout is 120 s; a hung browser should surface sooner than that.
    driver.command_executor.client_config.timeout = command_timeout_s
    driver.set_page_load_timeout(PAGE_LOAD_TIMEOUT_S)
    return driver


def load_task_page(driver: Any, url: str) -> tuple[int, int]:
    """Open a MiniWoB page, wait for its sync screen, return the viewport size (CSS px)."""
    driver.get(url)
    deadline = time.monotonic() + PAGE_LOAD_TIMEOUT_S
    while not driver.execute_script("return !!document.getElementById('sync-task-cover');"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the MiniWoB page {url} did not show its start screen")
        time.sleep(0.02)
    width, height = driver.execute_script("return [window.innerWidth, window.innerHeight];")
    return int(width), int(height)


def _make_flagged_instance_class() -> type:
    from miniwob.selenium_instance import SeleniumInstance

    class FlaggedSeleniumInstance(SeleniumInstance):
        """miniwob's ``SeleniumInstance`` whose driver comes from :func:`launch_driver`, or is adopted.

        Adopting lets one browser move between tasks: a new instance (new URL, geometry, field
        extractor) takes over the previous instance's driver instead of starting Chromium again.
        """

        def __init__(self, subdomain: str, *, paths: BrowserPaths, scratch: Path,
                     command_timeout_s: float, data_mode: str, base_url: str | None = None) -> None:
            super().__init__(index=0, subdomain=subdomain, headless=True, base_url=base_url,
                             data_mode=data_mode)
            self.task_name = subdomain
            self.paths = paths
            self.scratch = scratch
            self.command_timeout_s = command_timeout_s

        def create_driver(self) -> None:
            self.driver = launch_driver(self.paths, self.scratch, self.command_timeout_s)
            self.inner_width, self.inner_height = load_task_page(self.driver, self.url)

        def adopt_driver(self, driver: Any) -> None:
            self.driver = driver
            self.inner_width, self.inner_height = load_task_page(driver, self.url)

    return FlaggedSeleniumInstance


_FLAGGED_CLASS: type | None = None


def flagged_instance_class() -> type:
    """The ``SeleniumInstance`` subclass, built on first use so that importing admire stays cheap."""
    global _FLAGGED_CLASS
    if _FLAGGED_CLASS is None:
        _FLAGGED_CLASS = _make_flagged_instance_class()
    return _FLAGGED_CLASS


# --------------------------------------------------------------------------------------------------
# The processes of one browser
# --------------------------------------------------------------------------------------------------

def main_browser_pid(scratch: Path, chromedriver_pid: int | None) -> int | None:
    """The Chromium browser process (the child of chromedriver), or None when it is gone."""
    for pid, name in browser_processes(scratch).items():
        if name.startswith("chrom") and name != "chromedriver" and parent_pid(pid) == chromedriver_pid:
            return pid
    return None


def parent_pid(pid: int) -> int | None:
    """The parent of process ``pid`` (Linux: /proc), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
        return int(stat[stat.rindex(")") + 2:].split(" ")[1])
    except (OSError, ValueError, IndexError):
        return None


def shut_down(driver: Any | None, scratch: Path | None, quit_timeout_s: float = 10.0) -> None:
    """Quit the driver politely, then kill whatever of this browser still runs, then remove scratch.

    Safe to call on a dead or half-started browser, and more than once.
    """
    chromedriver = None
    if driver is not None:
        chromedriver = getattr(getattr(driver, "service", None), "process", None)
        with contextlib.suppress(Exception):
            driver.command_executor.client_config.timeout = quit_timeout_s
        with contextlib.suppress(Exception):  # a dead browser makes quit fail in many ways
            driver.quit()
    if scratch is not None:
        kill_processes(list(browser_processes(scratch)))
    if chromedriver is not None:
        with contextlib.suppress(Exception):
            chromedriver.kill()
        with contextlib.suppress(Exception):
            chromedriver.wait(timeout=quit_timeout_s)  # reap it: chromedriver is our child
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)
        unregister_browser(scratch)
