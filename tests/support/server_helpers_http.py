"""A headless Chromium to look at pages served for real (``serve_in_thread``: uvicorn on a free
localhost port, in a thread): for tests of web pages that must run in a browser (the dashboard, the viewer).

    with serve_in_thread(app) as url, headless_chromium() as driver:
        driver.get(url + "/ui")
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from admire.server.background import free_port, serve_in_thread

__all__ = ["free_port", "headless_chromium", "requested_urls", "serve_in_thread", "wait_for"]

CHROMIUM = os.environ.get("MINIWOB_CHROME_BINARY", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("MINIWOB_CHROMEDRIVER", "/usr/bin/chromedriver")


@contextlib.contextmanager
def headless_chromium(*, log_network: bool = False) -> Iterator[Any]:
    """Debian's Chromium through its chromedriver (never Selenium Manager, which would go online).

    ``log_network`` records Chromium's performance log, so a test can list every URL the page fetched.
    """
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip(f"needs {CHROMIUM} and {CHROMEDRIVER} (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1280,1000", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"):
        options.add_argument(flag)
    if log_network:
        options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    scratch = tempfile.mkdtemp(prefix="chromium-")  # Chromium leaves a folder in TMPDIR: keep it in ours
    service = Service(executable_path=CHROMEDRIVER, env={**os.environ, "TMPDIR": scratch})
    try:
        driver = webdriver.Chrome(service=service, options=options)
        try:
            yield driver
        finally:
            driver.quit()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def requested_urls(driver: Any) -> list[str]:
    """URLs the page asked for since the last call (needs ``headless_chromium(log_network=True)``)."""
    import json

    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def wait_for(condition: Callable[[], Any], timeout_s: float = 20.0, interval_s: float = 0.1) -> Any:
    """Poll ``condition`` until it returns something truthy; its last value (falsy on time-out)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval_s)


# The dashboard as a browser shows it (tests/server/test_dashboard.py, tests/commands/test_serve_command.py)

def card(driver: Any, device_id: int) -> dict[str, Any]:
    """What device ``device_id``'s card shows: state, task, counters, whether an image is loaded."""
    return driver.execute_script(
        """
        const card = document.querySelector(`#admire-devices .admire-card[data-device="${arguments[0]}"]`);
        if (!card) return null;
        const img = card.querySelector("img.admire-shot");
        return {state: card.querySelector(".admire-state").textContent,
                task: card.querySelector(".admire-task").textContent,
                restarts: card.querySelector(".admire-restarts").textContent,
                failures: card.querySelector(".admire-failures").textContent,
                title: card.querySelector("header b").textContent,
                image: img ? img.complete && img.naturalWidth : null};
        """,
        device_id,
    )


def episodes_text(driver: Any) -> str:
    return driver.execute_script("const t = document.querySelector('#admire-episodes'); return t ? t.innerText : ''")
