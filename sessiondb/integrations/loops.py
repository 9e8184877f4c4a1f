"""The event loop a store's connections belong to, for adapters that frameworks call
from other loops.

A store's connections are tied to the loop they were opened on (asyncpg's pool is).
ADK's ``Runner.run`` (its sync entry point) runs every call on a new loop in a new
thread, and asyncio programs that call ``asyncio.run`` twice do the same. So an adapter
decides the store's home loop once (``Core.home_loop``): the loop running when it is
built, else a loop thread of its own; and :func:`on_home` runs each call there, going
through ``run_coroutine_threadsafe`` when it is called from another loop.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from ..core import Core
from ..errors import ConfigurationError

T = TypeVar("T")
P = ParamSpec("P")


class LoopThread:
    """An event loop running on a daemon thread of its own."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self.loop.call_soon(started.set)
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()
        started.wait()

    def stop(self) -> None:
        """Stop the loop and wait for its thread (call it from another thread)."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


def settle_home(core: Core, name: str, *, thread: bool) -> LoopThread | None:
    """Decide the store's home loop unless a live one is decided already: the running
    loop; with no loop running, a new loop thread if ``thread`` (returned: its owner
    stops it), else nothing yet (the first call's loop becomes the home)."""
    try:
        current: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        current = None
    with core.home_lock:
        home = core.home_loop
        if home is not None and not home.is_closed():
            return None
        made = LoopThread(name) if current is None and thread else None
        core.home_loop = made.loop if made is not None else current
        return made


async def on_home(core: Core, work: Coroutine[Any, Any, T]) -> T:
    """Await ``work`` on the store's home loop, from whichever loop is running.

    Raises:
        ConfigurationError: the home loop is closed or not running (the store was first
            used from an ``asyncio.run`` that has ended): open the store where it is
            used, or build the adapter outside any loop.
    """
    current = asyncio.get_running_loop()
    with core.home_lock:
        if core.home_loop is None:
            core.home_loop = current
        home = core.home_loop
    if home is current:
        return await work
    if home.is_closed() or not home.is_running():
        work.close()
        raise ConfigurationError(
            "the store's connections belong to an event loop that is no longer running; "
            "build the service outside any event loop (it then keeps a loop thread of its "
            "own), or on the loop that calls it"
        )
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, home))


class HasCoreAttr(Protocol):
    """An adapter holding its store's core."""

    @property
    def core(self) -> Core: ...


S = TypeVar("S", bound=HasCoreAttr)


def on_home_loop(
    method: Callable[Concatenate[S, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, T]]:
    """Make an adapter's coroutine method run on its store's home loop."""

    @functools.wraps(method)
    async def wrapper(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await on_home(self.core, method(self, *args, **kwargs))

    return wrapper


class Migratable(Protocol):
    """What :class:`MigrateOnce` needs of a store."""

    async def migrate(self) -> None: ...


class MigrateOnce:
    """An adapter's ``create_tables=True``: run the store's migrations before its first
    call, once, however many of its calls race to be first."""

    def __init__(self, store: Migratable, *, pending: bool) -> None:
        self._store = store
        self.pending = pending
        self._lock: asyncio.Lock | None = None  # made on first use, on the caller's loop

    async def __call__(self) -> None:
        if not self.pending:
            return
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.pending:
                await self._store.migrate()
                self.pending = False
