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
- **Every response** carries the Content-Security-Policy :data:`CSP` (no script but the
  viewer's own file, no inline script or handler, images from ``data:`` only) and asks
  not to be framed, sniffed, cached or referred.

Plain ASGI, no framework: the gate stands in front of the application.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

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


def check_bind(host: str, token: str | None) -> None:
    """Refuse a bind address other than loopback without a token, and a weak token.

    Raises:
        ConfigurationError: what is wrong, and what to do.
    """
    if token is not None:
        if not MIN_TOKEN_CHARS <= len(token) <= MAX_TOKEN_CHARS:
            raise ConfigurationError(
                f"--token must have {MIN_TOKEN_CHARS} to {MAX_TOKEN_CHARS} characters "
                f"(it has {len(token)}); for example: python -c 'import secrets; "
                "print(secrets.token_urlsafe())'"
            )
        if not all("!" <= c <= "~" for c in token):
            raise ConfigurationError("--token may hold printable ASCII characters only, no space")
        return
    if not is_loopback(host):
        raise ConfigurationError(
            f"refusing to serve on {host!r} without --token: any other address than "
            "127.0.0.1, ::1 or localhost lets other machines read every session; "
            "pass --token (16+ characters) and open the printed address"
        )


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
    """The ASGI middleware: the token or loopback-host rule, then the headers."""

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
