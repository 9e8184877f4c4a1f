"""``sessiondb serve`` against a client that is not the operator: a web page of another
origin (refused before any work, so that it cannot time a search), a local user
reading the process list (the token comes from a file or the environment, never argv),
and a client that opens connections and never finishes a request (bounded: a header
timeout and a connection cap). The same pages in a real browser:
tests/behaviour/test_viewer_cross_site.py."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.messages import user
from helpers.viewer import client
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sessiondb import SessionStore, cli
from sessiondb.env import ENV_VIEWER_TOKEN
from sessiondb.errors import ConfigurationError
from sessiondb.viewer.auth import read_token_file, resolve_token
from sessiondb.viewer.server import HEADER_TIMEOUT_S

TOKEN = "guard-token-Xq7vR2mK9pL4sT8w"
REFUSED = "403: a page of another origin cannot use this viewer"


async def test_pages_of_other_origins_are_refused_before_any_work(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page elsewhere sends ``fetch(viewer + '/search?q=word', {mode: 'no-cors'})``:
    it cannot read the answer, but it could time it (a hit took 7.7-8.7 ms, a miss
    4.1-5.1 ms). Every such request is a 403 and no search runs."""
    sid = (await store.create_session()).id
    await store.append(sid, user("the nightingale merger"))
    searches: list[str] = []
    search = store.search

    async def counted(query: str, **options: Any) -> Any:
        searches.append(query)
        return await search(query, **options)

    monkeypatch.setattr(store, "search", counted)
    paths = ["/search?q=nightingale", "/", f"/s/{sid}", f"/s/{sid}/events?from_seq=0", "/events"]
    foreign = [
        {"Sec-Fetch-Site": "cross-site"},
        # Another port of 127.0.0.1: the same site, another origin.
        {"Sec-Fetch-Site": "same-site"},
        {"Sec-Fetch-Site": "CROSS-SITE"},
        {"Sec-Fetch-Site": "something-new"},
        {"Origin": "http://evil.example"},
        {"Origin": "http://127.0.0.1:9999"},
        {"Origin": "http://localhost:8800"},
        {"Origin": "null"},  # a sandboxed frame, a file:// page
        {"Sec-Fetch-Site": "same-origin", "Origin": "http://127.0.0.1:9999"},
    ]
    async with client(store) as http:
        for path in paths:
            for headers in foreign:
                response = await http.get(path, headers=headers)
                assert response.status_code == 403, (path, headers, response.text[:200])
                assert response.text.startswith(REFUSED), (path, headers)
        assert searches == []
        # The viewer's own pages, and the operator opening an address.
        for headers in [
            {},
            {"Sec-Fetch-Site": "same-origin"},
            {"Sec-Fetch-Site": "none"},
            {"Origin": "http://127.0.0.1:8800"},
            {"Origin": "HTTP://127.0.0.1:8800/", "Sec-Fetch-Site": "same-origin"},
        ]:
            response = await http.get("/search?q=nightingale", headers=headers)
            assert response.status_code == 200, headers
            assert "nightingale" in response.text
        assert searches == ["nightingale"] * 5
        # The script and the style sheet: constant files, another site may load them.
        for path in ("/static/viewer.js", "/static/viewer.css"):
            response = await http.get(path, headers={"Sec-Fetch-Site": "cross-site"})
            assert response.status_code == 200, path
        assert (await http.get("/static/viewer.js?x", headers=foreign[0])).status_code == 200
        assert (await http.get("/static/other.js", headers=foreign[0])).status_code == 403


async def test_a_token_does_not_let_a_page_of_another_origin_in(store: SessionStore) -> None:
    """With a token, a same-site page (another port of the host) would send the
    ``SameSite=Strict`` cookie along: the origin rule comes before the token's."""
    async with client(store, token=TOKEN) as http:
        first = await http.get(f"/?token={TOKEN}")
        assert first.status_code == 303
        assert (await http.get("/search?q=x")).status_code == 200  # the cookie
        for site in ("same-site", "cross-site"):
            response = await http.get("/search?q=x", headers={"Sec-Fetch-Site": site})
            assert response.status_code == 403 and response.text.startswith(REFUSED), site
        bearer = {"Authorization": f"Bearer {TOKEN}", "Origin": "http://127.0.0.1:9999"}
        assert (await http.get("/", headers=bearer)).status_code == 403
        # A link to ?token= from another site does not set the cookie either.
        response = await http.get(f"/?token={TOKEN}", headers={"Sec-Fetch-Site": "cross-site"})
        assert response.status_code == 403 and "set-cookie" not in response.headers


# -- the token outside argv ------------------------------------------------------------


def _token_file(folder: Path, content: bytes | str, mode: int = 0o600) -> Path:
    path = folder / "viewer-token"
    if isinstance(content, str):
        content = content.encode()
    path.write_bytes(content)
    path.chmod(mode)
    return path


def _migrated(tmp_path: Path) -> str:
    db = f"{tmp_path}/v.sqlite3"
    assert cli.main(["--db", db, "migrate"], out=io.StringIO()) == 0
    return db


def _serve_fails(db: str, *args: str) -> str:
    """``sessiondb serve ARGS`` in this process: it must refuse to start (exit 1); what
    it printed."""
    err, out = io.StringIO(), io.StringIO()
    with redirect_stderr(err):
        code = cli.main(["--db", db, "serve", "--port", "0", *args], out=out)
    assert code == 1, (args, err.getvalue())
    return err.getvalue() + out.getvalue()


def test_bad_token_files_are_typed_errors_that_never_show_the_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _migrated(tmp_path)
    folder = tmp_path / "secrets"
    folder.mkdir()
    monkeypatch.delenv(ENV_VIEWER_TOKEN, raising=False)
    cases: list[tuple[bytes | str, int, str, str]] = [
        # (content, mode, the fault named, a secret that must not show)
        ("Kiwi7secret\n", 0o600, "must have 16 to 512 characters (it has 11)", "Kiwi7secret"),
        ("Papaya9-" * 80, 0o600, "must have 16 to 512 characters (it has 640)", "Papaya9-"),
        ("Mango5 secret phrase\n", 0o600, "printable ASCII characters only", "Mango5"),
        ("Guava3-ünïcode-secret", 0o600, "printable ASCII characters only", "Guava3"),
        (b"Lychee8\xff\xfe-secret-bytes", 0o600, "not UTF-8 text", "Lychee8"),
        (b"Lime4" * 1000, 0o600, "more than 4096 bytes", "Lime4"),
        ("", 0o600, "the file is empty", ""),
        (" \n\t\n", 0o600, "the file is empty", ""),
        (TOKEN + "\n", 0o644, "every user of this machine can read it", TOKEN),
    ]
    for content, mode, fault, secret in cases:
        path = _token_file(folder, content, mode)
        shown = _serve_fails(db, "--token-file", str(path))
        assert "sessiondb: error: " in shown and f"--token-file {path}" in shown, shown
        assert fault in shown, (fault, shown)
        if secret:
            assert secret not in shown, shown
        assert "Traceback" not in shown
    missing = _serve_fails(db, "--token-file", str(folder / "absent"))
    assert "cannot read it: No such file or directory" in missing
    directory = _serve_fails(db, "--token-file", str(folder))
    assert "cannot read it: Is a directory" in directory
    path = _token_file(folder, TOKEN)
    both = _serve_fails(db, "--token-file", str(path), "--token", TOKEN)
    assert "--token or --token-file, not both" in both and TOKEN not in both
    weak_flag = _serve_fails(db, "--token", "Kiwi7secret")
    assert "the token of --token must have 16" in weak_flag and "Kiwi7secret" not in weak_flag
    # The environment variable: named when it is wrong, its value never shown.
    monkeypatch.setenv(ENV_VIEWER_TOKEN, "Kiwi7secret")
    weak_env = _serve_fails(db)
    assert f"the token of ${ENV_VIEWER_TOKEN} must have 16" in weak_env
    assert "Kiwi7secret" not in weak_env
    monkeypatch.setenv(ENV_VIEWER_TOKEN, "  ")
    assert f"${ENV_VIEWER_TOKEN} is set but empty" in _serve_fails(db)
    monkeypatch.delenv(ENV_VIEWER_TOKEN)
    # Off localhost without a token: the refusal names the ways to give one.
    off = _serve_fails(db, "--host", "0.0.0.0")
    assert "--token-file" in off and ENV_VIEWER_TOKEN in off


def test_the_token_comes_from_a_flag_a_file_or_the_environment(tmp_path: Path) -> None:
    path = _token_file(tmp_path, f"\n  {TOKEN}\r\n")
    assert read_token_file(str(path)) == TOKEN
    assert resolve_token(None, str(path), {}) == (TOKEN, "--token-file")
    assert resolve_token(None, None, {ENV_VIEWER_TOKEN: TOKEN}) == (TOKEN, ENV_VIEWER_TOKEN)
    # A flag wins over the environment.
    other = "other-token-0123456789"
    assert resolve_token(other, None, {ENV_VIEWER_TOKEN: TOKEN}) == (other, "--token")
    assert resolve_token(None, str(path), {ENV_VIEWER_TOKEN: other}) == (TOKEN, "--token-file")
    assert resolve_token(None, None, {}) == (None, "")


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(content=st.one_of(st.binary(max_size=700), st.text(max_size=700).map(str.encode)))
@example(content=b"\xef\xbb\xbfBom-token-0123456789")
@example(content=b"Trailing-NUL-token-012\x00")
def test_any_token_file_gives_its_token_or_a_typed_error_without_it(
    tmp_path: Path, content: bytes
) -> None:
    path = _token_file(tmp_path, content)
    try:
        token = read_token_file(str(path))
    except ConfigurationError as exc:
        message = str(exc)
        assert message.startswith(f"--token-file {path}") or "the token of --token-file" in message
        text = content.decode("utf-8", "replace").strip()
        if len(text) >= 12:
            assert text not in message
            assert text[:12] not in message
        return
    assert token == content.decode("utf-8-sig").strip()
    assert 16 <= len(token) <= 512 and all("!" <= c <= "~" for c in token)


# -- the viewer in a process of its own --------------------------------------------------


@contextmanager
def _viewer(
    tmp_path: Path,
    *args: str,
    env: dict[str, str] | None = None,
    open_files: int | None = None,
) -> Iterator[tuple[subprocess.Popen[str], list[str]]]:
    """``sessiondb serve --port 0 ARGS`` on a migrated SQLite file, in a process of its
    own (with at most ``open_files`` open files); it and the lines it printed first."""
    db = _migrated(tmp_path)

    def limit_files() -> None:
        import resource

        assert open_files is not None
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, hard))

    command = [sys.executable, "-m", "sessiondb", "--db", db, "serve", "--port", "0", *args]
    process = subprocess.Popen(
        command,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**{k: v for k, v in os.environ.items() if k != ENV_VIEWER_TOKEN}, **(env or {})},
        preexec_fn=limit_files if open_files is not None else None,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        if not first.startswith("sessiondb viewer"):
            process.kill()
            raise AssertionError((first, process.communicate(timeout=10)))
        yield process, [first]
    finally:
        if process.poll() is None:
            process.terminate()
        try:
            process.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate(timeout=5)


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")
def test_a_token_file_or_the_environment_keeps_the_token_out_of_the_process_list(
    tmp_path: Path,
) -> None:
    """``--token`` sits in ``/proc/PID/cmdline``, which every local user can read; a
    token from ``--token-file`` or the environment does not, nor in what is printed."""
    path = _token_file(tmp_path, TOKEN + "\n")
    ways: list[tuple[tuple[str, ...], dict[str, str]]] = [
        (("--token-file", str(path)), {}),
        ((), {ENV_VIEWER_TOKEN: TOKEN}),
    ]
    for args, env in ways:
        with _viewer(tmp_path, *args, env=env) as (process, lines):
            assert process.stdout is not None
            lines.append(process.stdout.readline())
            assert TOKEN not in _cmdline(process.pid), args
            address = lines[0].rsplit(" ", 1)[1].strip()
            assert address.startswith("http://127.0.0.1:") and address.endswith("/")
            assert "?token=" not in lines[0] and TOKEN not in "".join(lines)
            assert "?token=<the token>" in lines[1]
            assert httpx.get(address, timeout=10).status_code == 401
            bearer = {"Authorization": f"Bearer {TOKEN}"}
            assert httpx.get(address, headers=bearer, timeout=10).status_code == 200
            first = httpx.get(f"{address}?token={TOKEN}", timeout=10)
            assert first.status_code == 303
            process.terminate()
            out, err = process.communicate(timeout=15)
        assert TOKEN not in out + err, args
    # --token: where it shows (the reason for the other two), and it is printed as before.
    with _viewer(tmp_path, "--token", TOKEN) as (process, lines):
        assert TOKEN in _cmdline(process.pid)
        assert lines[0].rstrip().endswith(f"?token={TOKEN}")


def _partial_head(address: tuple[str, int]) -> socket.socket:
    """A connection that starts a request and never finishes its headers."""
    sock = socket.create_connection(address, timeout=10)
    sock.sendall(b"GET /search?q=x HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    return sock


def _closed_by_server(sock: socket.socket, deadline: float) -> bool:
    """Whether the server closes ``sock`` before ``deadline`` (monotonic)."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        sock.settimeout(left)
        try:
            data = sock.recv(4096)
        except TimeoutError:
            return False
        except ConnectionError:
            return True
        if not data:
            return True


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_NOFILE")
def test_connections_that_never_finish_their_headers_do_not_lock_the_viewer_out(
    tmp_path: Path,
) -> None:
    """300 connections that never finish their headers, under a limit of 192 open
    files: at fe324bb the viewer stopped accepting (out of files) and never recovered.
    Now a normal request is answered at once (the connection that waited longest for
    its head makes room), every idle one is closed within the header timeout, and so is
    a kept-alive connection that trickles a byte at a time."""
    with _viewer(tmp_path, open_files=192) as (_, lines):
        url = lines[0].rsplit(" ", 1)[1].strip()
        host, port = httpx.URL(url).host, httpx.URL(url).port
        assert port is not None
        address = (host, port)
        # A connection that got one answer, then sends a byte now and then (uvicorn's
        # keep-alive timer stops at the first byte of the next request).
        trickler = socket.create_connection(address, timeout=10)
        trickler.sendall(b"GET /static/viewer.css HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert trickler.recv(64).startswith(b"HTTP/1.1 200")
        trickler.sendall(b"G")
        opened = time.monotonic()
        slow = [_partial_head(address) for _ in range(300)]
        try:
            # Answered within the window, while all 300 are open.
            response = httpx.get(url, timeout=HEADER_TIMEOUT_S + 10)
            assert response.status_code == 200
            assert "sessiondb" in response.text
            deadline = opened + HEADER_TIMEOUT_S + 15
            still_open = [s for s in slow if not _closed_by_server(s, deadline)]
            assert still_open == [], f"{len(still_open)} of 300 idle connections kept open"
            assert _closed_by_server(trickler, deadline), "a trickling connection kept open"
            # And the viewer still answers.
            assert httpx.get(url, timeout=HEADER_TIMEOUT_S + 10).status_code == 200
        finally:
            for sock in [*slow, trickler]:
                sock.close()
