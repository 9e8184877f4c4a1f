"""Who may read the viewer: the bind-address rule, the token gate, the security headers.

- **Loopback by default.** Bound to a loopback address (``127.0.0.1``, ``::1``,
  ``localhost``) the viewer needs no token; bound to anything else it refuses to start
  without one (:func:`check_bind`). A token of fewer than :data:`MIN_TOKEN_CHARS`
  characters is refused too: it would be guessed.
- **Without a token, only loopback host names.** A page on another site could point a
  DNS name of its own at 127.0.0.1 (DNS rebinding) and read the viewer from the
  visitor's browser; the ``Host`` header then names that site, and the viewer answers
  403 (:class:`Gate`).
- **With a token, every request carries it**: ``Authorization: Bearer <token>``, or the
  cookie the viewer sets when a page is first opened with ``?token=<token>`` (it then
  redirects to the same address without the token, so it stays out of the history and
  the address bar; ``EventSource`` cannot send a header, the cookie it can). A missing
  or wrong token is a 401. Tokens are compared with :func:`hmac.compare_digest`; the
  cookie holds a digest of the token, not the token. Its name carries another digest
  (:func:`cookie_name`): cookies are not kept per port, so two viewers with different
  tokens on one host would otherwise overwrite each other's.
- **Its own pages only** (:func:`foreign`): a request that a page of another origin made
  (``Sec-Fetch-Site`` other than ``same-origin`` or ``none``, or an ``Origin`` that is
  not the viewer's own) is a 403 before anything else runs, token or not, except the
  script and the style sheet (:data:`STATIC_PATHS`, constant files of the package). A
  page elsewhere cannot read the viewer's answers, but it could time them: a search for
  a word the sessions hold took longer than one for a word they do not. ``same-site``
  is refused too: another port of 127.0.0.1 (any local program's web page) is the same
  *site* as the viewer but another origin, and a ``SameSite=Strict`` cookie still
  goes with its requests; the viewer's own pages only ever make same-origin requests.
  A request without these headers (curl, a script, a browser from before 2023) passes
  this rule and meets the others.
- **The token stays out of argv, logs and errors**: ``--token-file`` and
  :data:`sessiondb.env.ENV_VIEWER_TOKEN` keep it out of ``/proc/PID/cmdline``, which
  every local user can read (:func:`resolve_token`); an error about a token names its
  source and what is wrong with it, never its text.
- **Every response** carries the Content-Security-Policy :data:`CSP` (no script but the
  viewer's own file, no inline script or handler, images from ``data:`` only) and asks
  not to be framed, sniffed, cached or referred.

Plain ASGI, no framework: the gate stands in front of the application.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import stat
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

from ..env import ENV_VIEWER_TOKEN
from ..errors import ConfigurationError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MIN_TOKEN_CHARS = 16
MAX_TOKEN_CHARS = 512
#: The start of the cookie's name; :func:`cookie_name` adds the token's part.
COOKIE = "sessiondb_viewer"
LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost"})
#: What a page of another origin may still load: the viewer's script and style sheet.
STATIC_PATHS = frozenset({"/static/viewer.js", "/static/viewer.css"})
#: The ``Sec-Fetch-Site`` values of the viewer's own requests: its pages' (same origin)
#: and the operator's (an address typed, pasted, bookmarked or opened by a program).
OWN_SITES = frozenset({"same-origin", "none"})
#: The most a token file may hold (a token of :data:`MAX_TOKEN_CHARS` and a newline).
MAX_TOKEN_FILE_BYTES = 4096

#: The viewer's Content-Security-Policy: its own script and style files only, images
#: from ``data:`` (the sessions' inline images), requests to itself only.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
HEADERS = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
    (b"cross-origin-resource-policy", b"same-origin"),
)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name, IPv6 maybe in brackets) is this machine
    only."""
    name = host.strip().lower().removeprefix("[").removesuffix("]")
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_token(token: str, source: str = "--token") -> None:
    """Refuse a weak token (``source`` names where it came from, for the message).

    Raises:
        ConfigurationError: what is wrong with the token; never the token itself.
    """
    if not MIN_TOKEN_CHARS <= len(token) <= MAX_TOKEN_CHARS:
        raise ConfigurationError(
            f"the token of {source} must have {MIN_TOKEN_CHARS} to {MAX_TOKEN_CHARS} "
            f"characters (it has {len(token)}); for example: python -c 'import secrets; "
            "print(secrets.token_urlsafe())'"
        )
    if not all("!" <= c <= "~" for c in token):
        raise ConfigurationError(
            f"the token of {source} may hold printable ASCII characters only, no space"
        )


def check_bind(host: str, token: str | None, source: str = "--token") -> None:
    """Refuse a bind address other than loopback without a token, and a weak token.

    Raises:
        ConfigurationError: what is wrong, and what to do.
    """
    if token is not None:
        check_token(token, source)
        return
    if not is_loopback(host):
        raise ConfigurationError(
            f"refusing to serve on {host!r} without --token: any other address than "
            "127.0.0.1, ::1 or localhost lets other machines read every session; "
            f"pass --token-file PATH or ${ENV_VIEWER_TOKEN} (16+ characters) and open "
            "the printed address"
        )


def read_token_file(path: str) -> str:
    """The token held in the file at ``path``: its text without the whitespace around
    it (a trailing newline), checked by :func:`check_token`.

    Raises:
        ConfigurationError: the file is missing, unreadable, readable by every user,
            not text, empty, or its token is weak. The message names the file and the
            fault, never what the file holds.
    """
    source = f"--token-file {path}"
    try:
        with open(path, "rb") as file:
            mode = os.fstat(file.fileno()).st_mode
            if stat.S_ISREG(mode) and mode & stat.S_IROTH:
                raise ConfigurationError(
                    f"{source}: every user of this machine can read it; "
                    f"chmod o-rw {path} (600 is usual)"
                )
            data = file.read(MAX_TOKEN_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigurationError(f"{source}: cannot read it: {exc.strerror or exc}") from None
    if len(data) > MAX_TOKEN_FILE_BYTES:
        raise ConfigurationError(f"{source}: more than {MAX_TOKEN_FILE_BYTES} bytes, not a token")
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark, as some editors write
    except UnicodeDecodeError:
        # Not "from exc": the decode error quotes a byte of the file.
        raise ConfigurationError(f"{source}: not UTF-8 text") from None
    token = text.strip()
    if not token:
        raise ConfigurationError(f"{source}: the file is empty")
    check_token(token, source)
    return token


def resolve_token(
    token: str | None, token_file: str | None, environ: Mapping[str, str] = os.environ
) -> tuple[str | None, str]:
    """The viewer's token and where it came from: ``--token``, else ``--token-file``,
    else :data:`~sessiondb.env.ENV_VIEWER_TOKEN`; ``(None, "")`` for none.

    Raises:
        ConfigurationError: both flags given; an environment variable that is set but
            empty; a token file :func:`read_token_file` refuses; a weak token.
    """
    if token is not None and token_file is not None:
        raise ConfigurationError("give the token once: --token or --token-file, not both")
    if token is not None:
        check_token(token, "--token")
        return token, "--token"
    if token_file is not None:
        return read_token_file(token_file), "--token-file"
    if ENV_VIEWER_TOKEN in environ:
        value = environ[ENV_VIEWER_TOKEN].strip()
        if not value:
            raise ConfigurationError(f"${ENV_VIEWER_TOKEN} is set but empty")
        check_token(value, f"${ENV_VIEWER_TOKEN}")
        return value, ENV_VIEWER_TOKEN
    return None, ""


def foreign(scope: Scope, headers: Mapping[str, str]) -> str | None:
    """Why the request comes from a page of another origin, or None when it does not.

    ``Sec-Fetch-Site`` (every current browser sends it) must be ``same-origin`` or
    ``none``: ``cross-site`` is another site's page, and ``same-site`` another port of
    the same host or another name under the same domain, still another origin. An
    ``Origin`` header, when there is one, must be the viewer's own (scheme and
    ``Host``)."""
    site = headers.get("sec-fetch-site")
    if site is not None and site.strip().lower() not in OWN_SITES:
        return "a page of another origin cannot use this viewer; open its address yourself"
    origin = headers.get("origin")
    if origin is not None:
        own = f"{scope.get('scheme', 'http')}://{headers.get('host', '')}"
        if _origin_key(origin) != _origin_key(own):
            return "a page of another origin cannot use this viewer; open its address yourself"
    return None


def _origin_key(origin: str) -> str:
    """``scheme://host[:port]`` in lower case, without the scheme's default port."""
    text = origin.strip().lower().rstrip("/")
    for scheme, port in (("http://", ":80"), ("https://", ":443")):
        if text.startswith(scheme) and text.endswith(port):
            return text.removesuffix(port)
    return text


def cookie_value(token: str) -> str:
    return hashlib.sha256(b"sessiondb viewer cookie\0" + token.encode()).hexdigest()


def cookie_name(token: str) -> str:
    """The cookie's name for ``token``: one per token, so that viewers on other ports
    of the same host keep their own (a browser sends a host's cookies to every port)."""
    digest = hashlib.sha256(b"sessiondb viewer name\0" + token.encode()).hexdigest()
    return f"{COOKIE}_{digest[:12]}"


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode())


class Gate:
    """The ASGI middleware: the own-origin rule, the token or loopback-host rule, then
    the headers."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token
        self.cookie = cookie_value(token) if token is not None else None
        self.cookie_name = cookie_name(token) if token is not None else COOKIE

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *HEADERS]
            await send(message)

        headers = _headers(scope)
        if scope.get("path") not in STATIC_PATHS and (why := foreign(scope, headers)):
            await _plain(with_headers, 403, why)
            return
        if self.token is None:
            host = headers.get("host", "")
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            if not is_loopback(name):
                await _plain(with_headers, 403, "this viewer answers on localhost only")
                return
            await self.app(scope, receive, with_headers)
            return
        assert self.cookie is not None
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given = [v for k, v in query if k == "token"]
        if given:
            if len(given) == 1 and _same(given[0], self.token):
                set_cookie = f"{self.cookie_name}={self.cookie}"
                await _redirect_with_cookie(with_headers, scope, query, set_cookie)
            else:
                await _plain(with_headers, 401, "wrong token")
            return
        auth = headers.get("authorization", "")
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and _same(value.strip(), self.token):
            await self.app(scope, receive, with_headers)
            return
        if _same(_cookies(headers.get("cookie", "")).get(self.cookie_name, ""), self.cookie):
            await self.app(scope, receive, with_headers)
            return
        await _plain(with_headers, 401, "this viewer needs its token", bearer=True)


def _headers(scope: Scope) -> dict[str, str]:
    found: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        found[key] = f"{found[key]}; {text}" if key == "cookie" and key in found else text
    return found


def _cookies(header: str) -> dict[str, str]:
    jar: dict[str, str] = {}
    for part in header.split(";"):
        name, _, value = part.strip().partition("=")
        jar.setdefault(name, value)
    return jar


async def _plain(send: Send, status: int, text: str, *, bearer: bool = False) -> None:
    headers = [(b"content-type", b"text/plain; charset=utf-8")]
    if bearer:
        headers.append((b"www-authenticate", b'Bearer realm="sessiondb"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": f"{status}: {text}\n".encode()})


async def _redirect_with_cookie(
    send: Send, scope: Scope, query: list[tuple[str, str]], cookie: str
) -> None:
    """303 to the same path without ``token``, setting ``cookie`` (``name=value``)."""
    # "/" + path without leading slashes: a path of "//host" must not leave the site.
    location = "/" + quote(str(scope.get("path", "/")).lstrip("/"), safe="/:@!$&'()*+,;=-._~")
    rest = [(k, v) for k, v in query if k != "token"]
    if rest:
        location += "?" + urlencode(rest)
    set_cookie = f"{cookie}; Path=/; HttpOnly; SameSite=Strict"
    headers = [
        (b"location", location.encode("latin-1")),
        (b"set-cookie", set_cookie.encode()),
        (b"content-type", b"text/plain; charset=utf-8"),
    ]
    await send({"type": "http.response.start", "status": 303, "headers": headers})
    await send({"type": "http.response.body", "body": b"303: see the same page without token\n"})
