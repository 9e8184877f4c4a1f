"""``sessiondb serve``: a read-only web viewer of a session database (the
``sessiondb[serve]`` extra: Starlette and Uvicorn).

The sessions list, search, and each session's transcript (the HTML export's rendering),
followed live through :meth:`sessiondb.SessionStore.watch` and server-sent events. It
listens on 127.0.0.1 unless told otherwise, and on any other address only with a token
that every request must carry (:mod:`.auth`). Plain HTML, one small script file of its
own, a Content-Security-Policy that allows nothing else.

Imported only by ``sessiondb serve`` (and a caller who wants the ASGI app): neither
``import sessiondb`` nor the CLI's other commands load Starlette or Uvicorn.
"""

from __future__ import annotations

from ..errors import MissingDependencyError

try:
    import starlette  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as exc:
    raise MissingDependencyError(exc.name or "starlette", "serve") from exc

from .app import create_app
from .server import serve

__all__ = ["create_app", "serve"]
