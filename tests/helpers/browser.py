"""A real browser for the tests: Debian's ``chromium``, driven by Selenium through
``chromium-driver`` (``.ci/run`` installs both; no browser is downloaded at run time).

A test module calls :func:`require_browser` first: without Selenium or the browser the
module is skipped, and ``SESSIONDB_REQUIRE_BROWSER=1`` (CI) makes that a failure. Then
it takes the ``browser`` and ``artefacts`` fixtures (imported into the module):
screenshots go to ``SESSIONDB_TEST_ARTEFACTS`` when set, else to the test's temporary
directory.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("SESSIONDB_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("SESSIONDB_CHROMEDRIVER", "/usr/bin/chromedriver")


def _need(condition: bool, reason: str) -> None:
    if condition:
        return
    if os.environ.get("SESSIONDB_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason} (SESSIONDB_REQUIRE_BROWSER=1)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require_browser() -> None:
    """Skip the calling module without Selenium or the browser (fail under
    ``SESSIONDB_REQUIRE_BROWSER=1``)."""
    try:
        import selenium  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        _need(False, f"selenium is not installed ({exc}): pip install 'sessiondb[dev]'")
    _need(
        shutil.which(CHROMIUM) is not None and shutil.which(CHROMEDRIVER) is not None,
        f"no browser: apt-get install chromium chromium-driver ({CHROMIUM}, {CHROMEDRIVER})",
    )


def start_browser(profile: Path, *, network_log: bool = False) -> Any:
    """Chromium, headless, with its profile in ``profile``; with ``network_log``, its
    DevTools events readable as ``get_log("performance")`` (what each response was)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",  # tests run as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1100,1400",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(arg)
    logs = {"browser": "ALL", **({"performance": "ALL"} if network_log else {})}
    options.set_capability("goog:loggingPrefs", logs)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    driver = start_browser(tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def artefacts(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("SESSIONDB_TEST_ARTEFACTS") or tmp_path / "artefacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def console_after(browser: Any, url: str) -> list[dict[str, Any]]:
    """Open ``url``; the console messages it caused."""
    browser.get("about:blank")  # the page before stops (a live page's reconnects)
    browser.get_log("browser")  # drop what earlier pages logged
    browser.get(url)
    return list(browser.get_log("browser"))


def no_alert(browser: Any) -> bool:
    """Whether no alert is open (one that is gets dismissed)."""
    from selenium.common.exceptions import NoAlertPresentException

    try:
        browser.switch_to.alert.dismiss()
    except NoAlertPresentException:
        return True
    return False
