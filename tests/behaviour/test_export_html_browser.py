"""An exported page in a real browser: Debian's ``chromium``, driven by Selenium through
``chromium-driver`` (``.ci/run`` installs both; no browser is downloaded at run time).

The page shows the session (messages, each tool call with its result, thinking folded,
the image) with its own style sheet applied, and every hostile string in it stays text:
no script runs (a flag the payloads would set stays unset, no alert opens), nothing is
hidden or restyled. A screenshot of each page goes to ``SESSIONDB_TEST_ARTEFACTS`` when
set, else to the test's temporary directory.

Without Selenium or the browser the module is skipped; ``SESSIONDB_REQUIRE_BROWSER=1``
(CI) makes that a failure.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.html_pages import SCRIPT, rich_session

from sessiondb import SessionStore
from sessiondb.formats.html import CSP

CHROMIUM = os.environ.get("SESSIONDB_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("SESSIONDB_CHROMEDRIVER", "/usr/bin/chromedriver")


def _need(condition: bool, reason: str) -> None:
    if condition:
        return
    if os.environ.get("SESSIONDB_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason} (SESSIONDB_REQUIRE_BROWSER=1)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


try:
    from selenium import webdriver
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
except ImportError as exc:  # pragma: no cover - depends on the environment
    _need(False, f"selenium is not installed ({exc}): pip install 'sessiondb[dev]'")
_need(
    shutil.which(CHROMIUM) is not None and shutil.which(CHROMEDRIVER) is not None,
    f"no browser: apt-get install chromium chromium-driver ({CHROMIUM}, {CHROMEDRIVER})",
)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tmp_path_factory.mktemp("chromium-profile")
    for arg in (
        "--headless=new",
        "--no-sandbox",  # tests run as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1100,1400",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def artefacts(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("SESSIONDB_TEST_ARTEFACTS") or tmp_path / "artefacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _open(browser: Any, page: Path) -> list[dict[str, Any]]:
    """Open ``page``; the console messages it caused."""
    browser.get_log("browser")  # drop what earlier pages logged
    browser.get(page.resolve().as_uri())
    return list(browser.get_log("browser"))


def _no_alert(browser: Any) -> bool:
    try:
        browser.switch_to.alert.dismiss()
    except NoAlertPresentException:
        return True
    return False


async def test_a_page_in_the_browser(
    db_url: str, tmp_path: Path, browser: Any, artefacts: Path, backend: str
) -> None:
    async with SessionStore.open(db_url) as store:
        sid, fork = await rich_session(store)
        written = await store.export_all(tmp_path / "out", format="html")
    page = written[sid][0]
    console = _open(browser, page)
    # Nothing ran, nothing was refused: the page ships no script and its own style
    # passes its CSP (a violation would be logged).
    assert browser.execute_script("return window.__xss === undefined") is True
    assert _no_alert(browser)
    assert [m for m in console if m.get("level") == "SEVERE"] == []
    assert browser.find_elements(By.TAG_NAME, "script") == []
    assert browser.find_elements(By.ID, "evil") == []
    assert browser.find_elements(By.CSS_SELECTOR, "a[href^='javascript']") == []
    # The page's sheet applies; the session's <style> and style attributes do not.
    body = browser.find_element(By.TAG_NAME, "body")
    assert body.is_displayed() and body.value_of_css_property("max-width") == "960px"
    assert browser.find_elements(By.CSS_SELECTOR, "[style]") == []
    assert browser.title == f"hostile {SCRIPT} · sessiondb"
    # Messages, each tool call with its result, thinking folded, the image shown.
    first = browser.find_element(By.ID, "r1")
    assert first.is_displayed() and SCRIPT in first.text
    tools = browser.find_elements(By.CSS_SELECTOR, "section.tool")
    assert len(tools) == 3
    assert "call-1" in tools[0].text and "file body" in tools[0].text
    assert "grep output" in tools[1].text
    thinking = browser.find_element(By.CSS_SELECTOR, "details.thinking")
    assert thinking.get_attribute("open") is None
    assert not thinking.find_element(By.CSS_SELECTOR, ".text").is_displayed()
    thinking.find_element(By.TAG_NAME, "summary").click()
    assert "secret thoughts" in thinking.find_element(By.CSS_SELECTOR, ".text").text
    (image,) = browser.find_elements(By.TAG_NAME, "img")
    assert browser.execute_script("return arguments[0].naturalWidth", image) == 1
    browser.save_screenshot(str(artefacts / f"html-export-{backend}.png"))
    # The fork's page links to this one.
    _open(browser, written[fork][0])
    assert browser.execute_script("return window.__xss === undefined") is True
    browser.find_element(By.CSS_SELECTOR, f"a[href='{sid}.html#r4']").click()
    assert browser.current_url.endswith(f"{sid}.html#r4")
    browser.save_screenshot(str(artefacts / f"html-export-fork-{backend}.png"))
    assert (artefacts / f"html-export-{backend}.png").stat().st_size > 1000


def test_the_check_sees_a_script_run_and_the_policy_stop_it(tmp_path: Path, browser: Any) -> None:
    """The checks above can fail: markup written raw runs in this browser, and the
    page's policy stops it."""
    raw = "<!DOCTYPE html><title>t</title><body><script>window.__xss = 1</script>"
    (tmp_path / "open.html").write_text(raw)
    _open(browser, tmp_path / "open.html")
    assert browser.execute_script("return window.__xss") == 1
    guarded = raw.replace(
        "<title>", f'<meta http-equiv="Content-Security-Policy" content="{CSP}"><title>'
    )
    (tmp_path / "guarded.html").write_text(guarded)
    console = _open(browser, tmp_path / "guarded.html")
    assert browser.execute_script("return window.__xss === undefined") is True
    assert any("Content Security Policy" in m.get("message", "") for m in console)
