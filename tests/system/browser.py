"""A real headless Chromium (Debian's `chromium` and `chromium-driver`) driven through Selenium.

Never a downloaded browser: the binary and its driver are the distribution's, of the same version.
Console messages are kept (`goog:loggingPrefs`) so a test can assert the page logged no error.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage")


def require_chromium() -> None:
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if shutil.which(path) is None]
    if missing:
        raise AssertionError(f"missing {', '.join(missing)}: install Debian's chromium and chromium-driver "
                             "(scripts/install-system-deps.sh --test does)")


@contextmanager
def chromium(profile_dir: Path, *, width: int = 1280, height: int = 900) -> Iterator[webdriver.Chrome]:
    """A fresh browser with its own user-data dir; quit when the block ends."""
    require_chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile_dir}")
    options.add_argument(f"--window-size={width},{height}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver: webdriver.Chrome) -> list[dict[str, Any]]:
    """Console entries of level SEVERE since the last call (the log is drained by reading it)."""
    entries: list[dict[str, Any]] = driver.get_log("browser")  # type: ignore[no-untyped-call]
    return [entry for entry in entries if entry.get("level") == "SEVERE"]


def screenshot(driver: webdriver.Chrome, path: Path, *, width: int, mobile: bool = False) -> Path:
    """The whole page at `width` CSS pixels (a phone's viewport when `mobile`)."""
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": max(height, 600), "deviceScaleFactor": 2 if mobile else 1, "mobile": mobile})
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": max(height, 600), "deviceScaleFactor": 2 if mobile else 1, "mobile": mobile})
    path.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(path))
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    return path
