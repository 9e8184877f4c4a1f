"""``sessiondb serve`` in a real browser (Debian's chromium through Selenium, see
:mod:`helpers.browser`), the server started as a user would (``python -m sessiondb
serve --port 0``, its own process):

- the list, a session opened from it, search through the box;
- another process appends a message: it shows within a second (measured from the
  append's return in that process to the browser's DOM change), stored markup as text;
- no script of a session runs, on the page or live (a flag the payloads would set stays
  unset, no alert opens, nothing is refused by the CSP either: the page's own script and
  style pass it);
- with ``--token``: the first load by ``?token=`` sets the cookie, the live stream works
  through it;
- screenshots in ``SESSIONDB_TEST_ARTEFACTS`` (else the test's temporary directory);
  ``SESSIONDB_README_SCREENSHOT=path`` also writes the README's picture there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from helpers.browser import require_browser

require_browser()

from helpers.browser import console_after, no_alert  # noqa: E402
from helpers.html_pages import SCRIPT, XSS, rich_session  # noqa: E402
from helpers.messages import user  # noqa: E402
from helpers.screenshot_session import readme_session  # noqa: E402
from helpers.viewer import served  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402

from sessiondb import SessionStore  # noqa: E402

TOKEN = "browser-token-0123456789"
#: The budget to wait for a live message, and the delay it must show within.
WAIT_S = 5.0
LIVE_S = 1.0

_WRITER = """
import asyncio, json, sys, time
from sessiondb import SessionStore

async def main(url, sid):
    async with SessionStore.open(url) as store:
        await store.get_session(sid)
        print("ready", flush=True)
        for line in sys.stdin:
            await store.append(sid, json.loads(line))
            print(repr(time.time()), flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


@contextmanager
def writer(db_url: str, sid: str) -> Iterator[subprocess.Popen[str]]:
    """Another process with a store on the database, appending what it is sent."""
    process = subprocess.Popen(
        [sys.executable, "-c", _WRITER, db_url, sid],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        yield process
    finally:
        process.communicate(timeout=30)


def _append(process: subprocess.Popen[str], message: dict[str, Any]) -> None:
    assert process.stdin is not None
    process.stdin.write(json.dumps(message) + "\n")
    process.stdin.flush()


def _committed(process: subprocess.Popen[str]) -> float:
    assert process.stdout is not None
    return float(process.stdout.readline())


def _nothing_ran(browser: Any) -> None:
    assert browser.execute_script("return window.__xss === undefined") is True
    assert no_alert(browser)
    assert browser.find_elements(By.CSS_SELECTOR, "main script, #session-head script") == []
    assert browser.find_elements(By.ID, "evil") == []
    assert browser.find_elements(By.CSS_SELECTOR, "a[href^='javascript']") == []


def _severe(console: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in console if m.get("level") == "SEVERE"]


def _wait_for(browser: Any, script: str, *args: Any, timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = browser.execute_script(script, *args)
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.02)


def _watch_for(browser: Any, marker: str) -> None:
    """Record in the page when an element holding ``marker`` enters the transcript."""
    browser.execute_script(
        """
        const marker = arguments[0];
        window.__seenAt = undefined;
        new MutationObserver((_, observer) => {
          if (document.getElementById('records').textContent.includes(marker)) {
            window.__seenAt = Date.now() / 1000;
            observer.disconnect();
          }
        }).observe(document.getElementById('records'), {childList: true, subtree: true});
        """,
        marker,
    )


async def test_list_search_session_and_a_live_message(
    db_url: str, tmp_path: Path, browser: Any, artefacts: Path, backend: str
) -> None:
    async with SessionStore.open(db_url) as store:
        sid, fork = await rich_session(store)
        (zebra,) = await store.append(sid, user("the zebra crossed"))
    with served(db_url, tmp_path) as (url, _):
        console = console_after(browser, url)
        assert browser.title == "sessions · sessiondb"
        assert _severe(console) == []
        _nothing_ran(browser)
        rows = browser.find_elements(By.CSS_SELECTOR, "table.sessions tbody tr")
        assert len(rows) == 2
        # The first page is live: another process's append moves its session to the top.
        assert _wait_for(browser, "return document.getElementById('live').textContent == 'live'")
        top = "return document.querySelector('#session-rows tr').id"
        assert browser.execute_script(top) == f"row-{sid}"  # the zebra came last
        with writer(db_url, fork) as other:
            _append(other, user(f"list-{backend} {XSS}"))
            committed = _committed(other)
            moved = _wait_for(browser, f"{top} == 'row-{fork}' && Date.now() / 1000")
            assert moved, f"the fork's row did not move to the top within {WAIT_S} s"
            print(f"sessions list ({backend}): moved {(moved - committed) * 1000:.0f} ms after")
            assert moved - committed <= LIVE_S
        assert len(browser.find_elements(By.CSS_SELECTOR, "table.sessions tbody tr")) == 2
        _nothing_ran(browser)
        link = browser.find_element(By.CSS_SELECTOR, f"#row-{sid} > td:first-child > a")
        assert link.text == f"hostile {SCRIPT}"
        browser.get_log("browser")
        link.click()
        assert _wait_for(browser, "return document.getElementById('live').textContent == 'live'")
        assert browser.title == f"hostile {SCRIPT} · sessiondb"
        _nothing_ran(browser)
        assert _severe(browser.get_log("browser")) == []  # the CSP let the script run
        tools = browser.find_elements(By.CSS_SELECTOR, "section.tool")
        assert len(tools) == 3 and "file body" in tools[0].text
        (image,) = browser.find_elements(By.CSS_SELECTOR, "main img")
        assert browser.execute_script("return arguments[0].naturalWidth", image) == 1

        # Another process appends: the message shows within a second, as text.
        with writer(db_url, sid) as other:
            for i in range(3):
                marker = f"live-{i}-{backend}"
                _watch_for(browser, marker)
                _append(other, user(f"{marker} {XSS}"))
                committed = _committed(other)
                seen = _wait_for(browser, "return window.__seenAt")
                assert seen, f"{marker} did not show within {WAIT_S} s"
                delay = seen - committed
                print(f"live message {i} ({backend}): shown {delay * 1000:.0f} ms after commit")
                assert delay <= LIVE_S
                newest = browser.find_elements(By.CSS_SELECTOR, "#records > .item")[-1]
                assert marker in newest.text and SCRIPT in newest.text
                _nothing_ran(browser)
        browser.save_screenshot(str(artefacts / f"viewer-live-{backend}.png"))

        # Search through the box.
        box = browser.find_element(By.CSS_SELECTOR, "input[name=q]")
        box.send_keys("zebra", Keys.ENTER)
        assert _wait_for(
            browser,
            "return location.pathname == '/search' && document.readyState == 'complete'",
        )
        hit = browser.find_element(By.CSS_SELECTOR, "ol.hits li.hit")
        assert "zebra" in hit.find_element(By.TAG_NAME, "mark").text
        hit.find_element(By.TAG_NAME, "a").click()
        # The hit's link names the page holding it (transcripts are paged).
        assert browser.current_url.endswith(f"/s/{sid}?at={zebra.seq}#r{zebra.seq}")
        assert browser.find_elements(By.ID, f"r{zebra.seq}")
        _nothing_ran(browser)
    assert (artefacts / f"viewer-live-{backend}.png").stat().st_size > 1000


async def test_a_link_to_a_record_lands_on_the_page_holding_it(
    db_url: str, tmp_path: Path, browser: Any
) -> None:
    """``/s/<id>#r5`` of a 1,000-record session serves its last page (seqs 801..1000):
    the viewer's script goes on to ``?at=5#r5``, the page holding record 5; a search hit
    on another page than the last is linked to its own page."""
    messages = [user(f"message {i}" + (" okapi" if i in (4, 320) else "")) for i in range(1000)]
    async with SessionStore.open(db_url) as store:
        (sid,) = await store.import_sessions([{"name": "long", "messages": messages}])
    with served(db_url, tmp_path) as (url, _):
        base = url.rstrip("/")
        browser.get(f"{base}/s/{sid}#r5")
        where = "return document.getElementById('r5') && location.pathname + location.search"
        assert _wait_for(browser, where + " + location.hash") == f"/s/{sid}?at=5#r5"
        main = browser.find_element(By.ID, "records")
        assert (main.get_attribute("data-first"), main.get_attribute("data-last")) == ("1", "200")
        assert "message 4 okapi" in browser.find_element(By.ID, "r5").text
        _nothing_ran(browser)
        # A hash changed on the page (a link followed within it) resolves the same way.
        browser.get(f"{base}/s/{sid}?at=1")
        browser.execute_script("location.hash = '#r900'")
        assert _wait_for(browser, "return document.getElementById('r900') && location.search")
        assert browser.current_url.endswith(f"/s/{sid}?at=900#r900")
        # A search hit on the second page: its link opens that page at the record.
        browser.get(f"{base}/search?q=okapi")
        link = browser.find_element(By.XPATH, "//ol[@class='hits']//a[contains(., '#321')]")
        link.click()
        assert _wait_for(browser, "return document.getElementById('r321') && location.href")
        assert browser.current_url.endswith(f"/s/{sid}?at=321#r321")
        main = browser.find_element(By.ID, "records")
        assert main.get_attribute("data-first") == "201"
        assert "message 320 okapi" in browser.find_element(By.ID, "r321").text


async def test_with_a_token_the_first_load_sets_the_cookie(
    db_url: str, tmp_path: Path, browser: Any, backend: str
) -> None:
    async with SessionStore.open(db_url) as store:
        sid = (await store.create_session(name="guarded")).id
        await store.append(sid, user("behind the token"))
    with served(db_url, tmp_path, "--token", TOKEN) as (url, _):
        assert url.endswith(f"?token={TOKEN}")
        base = url.split("?")[0]
        browser.delete_all_cookies()
        browser.get(f"{base}s/{sid}")
        assert "401" in browser.find_element(By.TAG_NAME, "body").text
        browser.get(f"{base}s/{sid}?token={TOKEN}")
        assert browser.current_url == f"{base}s/{sid}"  # the token left the address
        assert "behind the token" in browser.find_element(By.ID, "records").text
        # The event stream goes through with the cookie: a live message arrives.
        assert _wait_for(browser, "return document.getElementById('live').textContent == 'live'")
        with writer(db_url, sid) as other:
            _watch_for(browser, "through the cookie")
            _append(other, user("through the cookie"))
            _committed(other)
            assert _wait_for(browser, "return window.__seenAt")
        browser.delete_all_cookies()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_the_readme_screenshot(
    db_url: str, tmp_path: Path, browser: Any, artefacts: Path
) -> None:
    async with SessionStore.open(db_url) as store:
        sid = await readme_session(store)
    with served(db_url, tmp_path) as (url, _):
        browser.set_window_size(1100, 1000)
        try:
            browser.get(f"{url}s/{sid}")
            assert _wait_for(
                browser, "return document.getElementById('live').textContent == 'live'"
            )
            with writer(db_url, sid) as other:
                _watch_for(browser, "The nightly import")
                _append(
                    other,
                    {
                        "role": "assistant",
                        "content": [
                            {
                                "type": "text",
                                "text": "The nightly import now skips the torn last line "
                                "and reports it as a bad line; the other 1,204 sessions "
                                "were imported.",
                            }
                        ],
                    },
                )
                _committed(other)
                assert _wait_for(browser, "return window.__seenAt")
            browser.execute_script("window.scrollTo(0, 0)")
            shot = artefacts / "viewer.png"
            browser.save_screenshot(str(shot))
        finally:
            browser.set_window_size(1100, 1400)
    assert shot.stat().st_size > 10_000
    target = os.environ.get("SESSIONDB_README_SCREENSHOT")
    if target:
        shutil.copyfile(shot, target)
