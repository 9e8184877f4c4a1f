"""``sessiondb serve`` and a web page of another origin, in a real browser (Debian's
chromium through Selenium, see :mod:`helpers.browser`): the viewer runs as a user
starts it (``python -m sessiondb serve --port 0``), the page is served from another
loopback origin, and the browser visits it.

The page asks for the viewer's search as such a page can: ``fetch`` in ``no-cors``
mode (the answer unreadable, its time not), an ``<img>``, a ``<script>``, and a link
the visitor follows. What the viewer answered is read from the browser's own network
log (DevTools): each of those requests got the 403, not a search. Two pages: one on
``localhost`` (``Sec-Fetch-Site: cross-site`` against 127.0.0.1) and one on another
port of 127.0.0.1 (``same-site``, still another origin). The operator's own visit to the
same address is answered.
"""

from __future__ import annotations

import asyncio
import io
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from helpers.browser import require_browser

require_browser()

from helpers.browser import start_browser  # noqa: E402
from helpers.messages import user  # noqa: E402
from helpers.viewer import served  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

from sessiondb import SessionStore, cli  # noqa: E402

WORD = "nightingale"
REFUSED = "403: a page of another origin cannot use this viewer"
WAIT_S = 10.0

_PAGE = """<!doctype html>
<meta charset="utf-8"><title>a page elsewhere</title>
<a id="go" href="{viewer}search?q={word}&amp;via=link">a link to the viewer</a>
<script>
const viewer = {viewer_json};
const done = [];
window.__done = done;
const started = performance.now();
fetch(viewer + "search?q={word}&via=fetch", {{mode: "no-cors"}})
  .then(() => done.push(["fetch", performance.now() - started]))
  .catch(() => done.push(["fetch", "error"]));
const img = new Image();
img.onload = img.onerror = () => done.push(["img"]);
img.src = viewer + "search?q={word}&via=img";
const script = document.createElement("script");
script.onload = script.onerror = () => done.push(["script"]);
script.src = viewer + "search?q={word}&via=script";
document.head.append(script);
</script>
"""


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    driver = start_browser(tmp_path_factory.mktemp("chromium-profile"), network_log=True)
    try:
        yield driver
    finally:
        driver.quit()


@contextmanager
def page_elsewhere(host: str, html: str) -> Iterator[str]:
    """A web server on ``host`` (another origin than the viewer's) serving ``html``."""
    body = html.encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def _answers(browser: Any, prefix: str) -> dict[str, int]:
    """The status of each response the browser received from an address starting with
    ``prefix`` since the last call, by the ``via=`` of its query (DevTools' log: a
    response the browser then blocks from the page has its status in the "extra
    info" event only)."""
    urls: dict[str, str] = {}
    statuses: dict[str, int] = {}
    for entry in browser.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        method, params = message["method"], message["params"]
        if method == "Network.requestWillBeSent":
            urls[params["requestId"]] = params["request"]["url"]
        elif method == "Network.responseReceived":
            statuses[params["requestId"]] = params["response"]["status"]
        elif method == "Network.responseReceivedExtraInfo":
            statuses.setdefault(params["requestId"], params["statusCode"])
    found: dict[str, int] = {}
    for request, url in urls.items():
        if url.startswith(prefix) and "via=" in url:
            found[url.rsplit("via=", 1)[1]] = statuses.get(request, 0)
    return found


def _wait_for(browser: Any, script: str, timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = browser.execute_script(script)
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


@pytest.mark.parametrize(
    "host", ["localhost", "127.0.0.1"], ids=["cross-site", "same-site-other-port"]
)
def test_a_page_of_another_origin_cannot_probe_the_viewers_search(
    browser: Any, host: str, tmp_path: Path
) -> None:
    db = f"{tmp_path}/v.sqlite3"
    assert cli.main(["--db", db, "migrate"], out=io.StringIO()) == 0

    async def seed() -> None:
        async with SessionStore.open(db) as store:
            sid = (await store.create_session()).id
            await store.append(sid, user(f"the {WORD} merger closes on Friday"))

    asyncio.run(seed())
    with served(db, tmp_path) as (address, _):
        html = _PAGE.format(viewer=address, viewer_json=json.dumps(address), word=WORD)
        with page_elsewhere(host, html) as elsewhere:
            browser.get("about:blank")
            browser.get_log("performance")  # drop what came before
            browser.get(elsewhere)
            assert _wait_for(browser, "return window.__done && window.__done.length === 3")
            browser.find_element(By.ID, "go").click()  # the visitor follows the link
            _wait_for(browser, f"return location.href.startsWith({json.dumps(address)})")
            shown = browser.find_element(By.TAG_NAME, "body").text
            answers = _answers(browser, address)
        assert answers == {"fetch": 403, "img": 403, "script": 403, "link": 403}, answers
        assert shown.startswith(REFUSED), shown
        assert WORD not in shown
        # The operator opening the same address (typed, a bookmark): answered.
        browser.get(f"{address}search?q={WORD}&via=typed")
        text = browser.find_element(By.TAG_NAME, "body").text
        assert _answers(browser, address) == {"typed": 200}
        assert f"the {WORD} merger" in text
