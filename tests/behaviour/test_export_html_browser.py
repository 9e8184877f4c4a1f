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

from pathlib import Path
from typing import Any

from helpers.browser import require_browser

require_browser()

from helpers.browser import console_after, no_alert  # noqa: E402
from helpers.html_pages import SCRIPT, rich_session  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

from sessiondb import SessionStore  # noqa: E402
from sessiondb.formats.html import CSP  # noqa: E402


def _open(browser: Any, page: Path) -> list[dict[str, Any]]:
    """Open ``page``; the console messages it caused."""
    return console_after(browser, page.resolve().as_uri())


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
    assert no_alert(browser)
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
