"""OpenTelemetry spans and metrics for every public call of
:class:`~sessiondb.SessionStore` (``pip install 'sessiondb[otel]'``).

:func:`traced` wraps each public method of the class once, where the class is defined,
so a method added later is covered without being touched
(``tests/unit/test_telemetry_wiring.py`` fails for one that is not). A call becomes one
span of kind CLIENT named ``sessiondb.<method>`` with the database semantic conventions
(``db.system``, ``db.operation.name``, ``db.namespace``, ``server.address`` and
``server.port``) and sessiondb's own attributes (``sessiondb.namespace``,
``sessiondb.session_id``, ``sessiondb.records``, ``sessiondb.retries``,
``sessiondb.replica``); an error leaving it sets ``error.type`` to its class name, the
span's status to ERROR, and adds the exception event. Metrics:
``db.client.operation.duration`` (s), ``sessiondb.retries``,
``sessiondb.writes.outcome_unknown`` and ``db.client.connection.count`` (the pools'
connections by state).

The span is named after the library call, not ``{operation} {namespace}``: a sessiondb
call is several statements, and a driver's own instrumentation (asyncpg's) names its
spans after the SQL, so ``sessiondb.append`` says at a glance which layer a span is.

What it costs when nobody listens: ``import sessiondb`` never imports OpenTelemetry; the
first store imports its API, if it is installed. A call then asks whether a real tracer
or meter provider is configured and, while neither is, runs the method straight
through: no span, no context switch, no clock read. Going through the API's no-op
tracer and proxy meter instead measured 1.15x on a SQLite append of one message
(~17 µs of ~110 µs), so the call skips them. Asking the API for its providers costs
~1.6 µs (it reads ``os.environ`` on each lookup), so the answer is kept for
:data:`RECHECK_SECONDS`: the check costs ~0.1 µs, and a provider set after the store
opened is used from within a second (at once after :func:`refresh_providers`).
``python -m bench --only 13`` compares an append with and without the wrapper.

Never recorded: message content, metadata, keys, names, or the URL's password. The
session id is recorded only when it is a well-formed id. The exception event carries
the error's class and its fixed default message, never the error's own text
(:func:`exception_event`).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
import sys
import time
import traceback
import weakref
from collections.abc import AsyncGenerator, Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, cast

from .backends.base import CALL_STATS, CallStats, CountsConnections
from .config import Settings
from .lazy import LazyFunction

if TYPE_CHECKING:
    from .backends import Backend

C = TypeVar("C", bound=type)

#: Public names of SessionStore that get no span: ``open`` and ``connect`` build a store
#: and open no connection (a span for a store's whole life would be no call's span).
NOT_TRACED = frozenset({"open", "connect"})
#: Set on every wrapped method: what tests look for.
MARK = "__sessiondb_traced__"
SCOPE = "sessiondb"
SPAN_PREFIX = "sessiondb."
_ID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")
# Seconds between two looks at the global providers while not both are set: a provider
# set after a store opened is used from at most this long after (or at once after
# refresh_providers()).
RECHECK_SECONDS = 1.0
# The semantic conventions' buckets for db.client.operation.duration (seconds).
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)
_ENDS_CLEANLY = (GeneratorExit, asyncio.CancelledError)


class Api:
    """OpenTelemetry's API, once imported, with the tracer and instruments of the
    providers last seen (made again when an application sets new providers)."""

    def __init__(self) -> None:
        from opentelemetry import context, metrics, trace

        self.trace = trace
        self.metrics = metrics
        self.context = context
        self.span_kind = trace.SpanKind.CLIENT
        self.error = trace.Status(trace.StatusCode.ERROR)
        self._tracer_provider: Any = None
        self._meter_provider: Any = None
        self.tracer: Any = None
        self.instruments: Instruments | None = None
        self._on = False
        self._settled = False
        self._next_check = 0.0
        # Whose pools the gauge observes: open stores (weakly: a store dropped unclosed
        # goes with its core).
        self.stores = OPEN_STORES

    def listening(self) -> bool:
        """Whether a real tracer or meter provider is configured. The providers are
        looked up again at most every :data:`RECHECK_SECONDS` (each lookup costs ~1.6 µs,
        most of it the API reading ``os.environ``), and never once both are real: the
        API refuses to replace a provider that was set."""
        if self._settled:
            return True
        now = time.monotonic()
        if now >= self._next_check:
            self._next_check = now + RECHECK_SECONDS
            self.refresh()
        return self._on

    def refresh(self) -> None:
        """Look the global providers up now; a changed one gets a new tracer or
        instruments."""
        tracer_provider = self.trace.get_tracer_provider()
        meter_provider = self.metrics.get_meter_provider()
        if tracer_provider is not self._tracer_provider:
            self._tracer_provider = tracer_provider
            self.tracer = tracer_provider.get_tracer(SCOPE) if _is_real(tracer_provider) else None
        if meter_provider is not self._meter_provider:
            self._meter_provider = meter_provider
            self.instruments = (
                Instruments(meter_provider.get_meter(SCOPE), self)
                if _is_real(meter_provider)
                else None
            )
        self._on = self.tracer is not None or self.instruments is not None
        self._settled = self.tracer is not None and self.instruments is not None


def _is_real(provider: object) -> bool:
    """A provider not of the API package itself (its no-op and proxy providers are)."""
    return not type(provider).__module__.startswith(
        ("opentelemetry.trace", "opentelemetry.metrics")
    )


class Instruments:
    """The metrics, made once per meter provider."""

    def __init__(self, meter: Any, api: Api) -> None:
        self.duration = meter.create_histogram(
            "db.client.operation.duration",
            unit="s",
            description="Duration of sessiondb's public calls.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )
        self.retries = meter.create_counter(
            "sessiondb.retries",
            unit="{retry}",
            description="Attempts run again after a transient database failure.",
        )
        self.outcome_unknown = meter.create_counter(
            "sessiondb.writes.outcome_unknown",
            unit="{write}",
            description="Writes whose commit outcome is unknown (the connection broke).",
        )
        observation = api.metrics.Observation

        def connections(_options: Any) -> list[Any]:
            seen = []
            for store in list(api.stores):
                for pool, used, idle in store.connection_counts():
                    base = {**store.metric_attributes, "db.client.connection.pool.name": pool}
                    seen.append(observation(used, {**base, "db.client.connection.state": "used"}))
                    seen.append(observation(idle, {**base, "db.client.connection.state": "idle"}))
            return seen

        meter.create_observable_up_down_counter(
            "db.client.connection.count",
            callbacks=[connections],
            unit="{connection}",
            description="Connections of sessiondb's pools, by state (used, idle).",
        )


_api: Api | None = None
_loaded = False
#: The open stores whose pools the connection gauge observes (weakly: a store dropped
#: unclosed goes with its core).
OPEN_STORES: weakref.WeakSet[StoreTelemetry] = weakref.WeakSet()
#: Any of these imported means the application (or its auto-instrumentation) uses
#: OpenTelemetry; a provider can only be set through them.
API_MODULES = ("opentelemetry.trace", "opentelemetry.metrics")


def load_api(force: bool = False) -> Api | None:
    """The API, imported the first time a call finds it in use; ``None`` while the
    application has not imported OpenTelemetry (nobody can have set a provider then, and
    the CLI starts without importing it) or when it is not installed."""
    global _api, _loaded
    if not _loaded:
        if not force and not any(name in sys.modules for name in API_MODULES):
            return None
        _loaded = True
        try:
            _api = Api()
        except ImportError:
            _api = None
    return _api


def refresh_providers() -> None:
    """Look at the global tracer and meter providers now, instead of within
    :data:`RECHECK_SECONDS`: for an application that sets them after opening a store and
    wants the very next call traced (and for tests)."""
    api = load_api(force=True)
    if api is not None:
        api.refresh()


class StoreTelemetry:
    """One store's attributes and pool, and the API when it is installed."""

    def __init__(self, settings: Settings, backend: Backend) -> None:
        self.api = load_api()  # None until the application imports OpenTelemetry
        self.backend = backend
        self.attributes = store_attributes(settings)
        self.metric_attributes = {
            k: v for k, v in self.attributes.items() if k != "sessiondb.namespace"
        }
        self._by_operation: dict[str, dict[str, Any]] = {}
        if isinstance(backend, CountsConnections):
            OPEN_STORES.add(self)

    def operation_attributes(self, operation: str) -> dict[str, Any]:
        """The metrics' attributes of a call of ``operation`` (made once per operation)."""
        found = self._by_operation.get(operation)
        if found is None:
            found = self._by_operation[operation] = {
                **self.metric_attributes,
                "db.operation.name": operation,
            }
        return found

    def connection_counts(self) -> list[tuple[str, int, int]]:
        if isinstance(self.backend, CountsConnections):
            return self.backend.connection_counts()
        return []

    def forget(self) -> None:
        """The store closed: its pool is no longer observed."""
        OPEN_STORES.discard(self)

    def active(self) -> Api | None:
        """The API when someone listens, else ``None`` (the call goes straight through)."""
        api = self.api
        if api is None:
            api = self.api = load_api()
            if api is None:
                return None
        if not api.listening():
            return None
        return api


def store_attributes(settings: Settings) -> dict[str, str | int]:
    """The database conventions' attributes of the store's database; never the password."""
    attributes: dict[str, str | int] = {"sessiondb.namespace": settings.namespace}
    if settings.is_sqlite:
        attributes["db.system"] = "sqlite"
        attributes["db.namespace"] = (
            ":memory:" if settings.is_memory else str(settings.sqlite_database)
        )
        return attributes
    url = settings.url
    attributes["db.system"] = "postgresql"
    if url.database:
        attributes["db.namespace"] = url.database
    host = url.host
    if host and "," not in host:  # a multi-host URL: the server is chosen per connection
        attributes["server.address"] = host
        attributes["server.port"] = url.port or 5432
    return attributes


# -- one call ----------------------------------------------------------------------------


class Call:
    """The span, stats and timing of one public call."""

    def __init__(self, api: Api, store: StoreTelemetry, operation: str, session_id: object) -> None:
        self.api = api
        self.operation = operation
        self.store = store
        self.stats = CallStats()
        self.records: int | None = None
        self._stats_token: Any = None
        self._context_token: Any = None
        self.started = time.perf_counter()
        attributes: dict[str, Any] = {**store.attributes, "db.operation.name": operation}
        if isinstance(session_id, str) and _ID.fullmatch(session_id):
            attributes["sessiondb.session_id"] = session_id
        self.span = (
            api.tracer.start_span(
                SPAN_PREFIX + operation, kind=api.span_kind, attributes=attributes
            )
            if api.tracer is not None
            else None
        )

    def __enter__(self) -> None:
        """The call's span becomes the current one, and its stats collect, until
        ``__exit__`` (entered once at a time: a generator's steps, a block's two ends)."""
        span = self.span
        self._stats_token = CALL_STATS.set(self.stats)
        self._context_token = (
            self.api.context.attach(self.api.trace.set_span_in_context(span))
            if span is not None
            else None
        )

    def __exit__(self, *_exc: object) -> None:
        context_token = self._context_token
        try:
            CALL_STATS.reset(self._stats_token)
        except ValueError:
            # Left in another context than it was entered in (a turn entered and exited
            # by two tasks): that context's values are not this call's to restore.
            return
        if context_token is not None:
            self.api.context.detach(context_token)

    def result(self, value: object) -> None:
        """Note what the call returned: records and a created session's id."""
        self.records = count_records(value)
        session_id = getattr(value, "id", None)
        if self.span is not None and isinstance(session_id, str) and _ID.fullmatch(session_id):
            self.span.set_attribute("sessiondb.session_id", session_id)

    def end(self, error: BaseException | None = None) -> None:
        """End the span and record the metrics."""
        elapsed = time.perf_counter() - self.started
        failed = error is not None and not isinstance(error, _ENDS_CLEANLY)
        span = self.span
        if span is not None:
            ended: dict[str, Any] = {
                "sessiondb.retries": self.stats.retries,
                "sessiondb.replica": self.stats.replica_reads > 0,
            }
            if self.records is not None:
                ended["sessiondb.records"] = self.records
            if failed:
                assert error is not None
                ended["error.type"] = type(error).__name__
            span.set_attributes(ended)  # one call: the SDK checks each call's attributes
            if failed:
                assert error is not None
                span.add_event("exception", exception_event(error))
                span.set_status(self.api.error)
            span.end()
        instruments = self.api.instruments
        if instruments is not None:
            attributes = self.store.operation_attributes(self.operation)
            if failed:
                attributes = {**attributes, "error.type": type(error).__name__}
            instruments.duration.record(elapsed, attributes)
            if self.stats.retries:
                instruments.retries.add(self.stats.retries, attributes)
            if failed and getattr(error, "outcome_unknown", False):
                instruments.outcome_unknown.add(1, attributes)


def exception_event(error: BaseException) -> dict[str, str]:
    """The ``exception`` event of a failed call, as the semantic conventions name its
    attributes, holding nothing the caller passed or the database stored.

    An error's own message is not recorded: it may quote a session key, a name, a
    refused argument or a driver's detail (a unique violation's ``Key (namespace,
    key)=(…)``), and which part of a message is data cannot be told from here. So
    ``exception.message`` is the class's fixed default message (its docstring's first
    paragraph, see :mod:`sessiondb.errors`), and ``exception.stacktrace`` holds the
    frames (files, lines and code) without the message or its causes' messages. The
    error's full text reaches the caller, who may log it where keys may be.
    """
    kind = type(error)
    module, name = kind.__module__, kind.__qualname__
    qualified = f"{module}.{name}" if module and module != "builtins" else name
    doc = kind.__doc__ if kind.__doc__ is not BaseException.__doc__ else None
    first = (doc or "").strip().split("\n\n")[0]
    message = " ".join(first.split()) if module.startswith("sessiondb") else ""
    frames = "".join(traceback.format_tb(error.__traceback__))
    return {
        "exception.type": qualified,
        "exception.message": message or name,
        "exception.stacktrace": f"Traceback (most recent call last):\n{frames}{qualified}\n",
        "exception.escaped": "False",
    }


def count_records(value: object) -> int | None:
    """Records (or messages) a call returned; ``None`` for any other result. By class
    name, so that telemetry imports no model (start-up: sessiondb/cli.py); a read's
    message is a ``StoredMessage`` (:mod:`sessiondb.decode`)."""
    if isinstance(value, list):
        if value and type(value[0]).__name__ in ("Record", "Message", "StoredMessage"):
            return len(value)
        return None
    if type(value).__name__ == "Record":
        return 1
    records = getattr(value, "records", None)  # an ImportReport
    return records if isinstance(records, int) and not isinstance(records, bool) else None


# -- the wrappers --------------------------------------------------------------------------


def _telemetry_of(store: Any) -> StoreTelemetry:
    telemetry: StoreTelemetry = store.core.telemetry
    return telemetry


def _session_arg(fn: Callable[..., Any]) -> Callable[[tuple[Any, ...], dict[str, Any]], object]:
    """How to find the ``session_id`` argument of a call of ``fn`` (after ``self``)."""
    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        names = []
    if "session_id" not in names:
        return lambda _args, _kwargs: None
    at = names.index("session_id") - 1

    def find(args: tuple[Any, ...], kwargs: dict[str, Any]) -> object:
        return args[at] if 0 <= at < len(args) else kwargs.get("session_id")

    return find


def _wrap_coroutine(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    find = _session_arg(fn)

    @functools.wraps(fn)
    async def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        api = _api if _loaded else load_api()  # the providers are global, and so is the API
        if api is None or not api.listening():
            return await fn(self, *args, **kwargs)
        traced = Call(api, _telemetry_of(self), name, find(args, kwargs))
        try:
            with traced:
                value = await fn(self, *args, **kwargs)
        except BaseException as exc:
            traced.end(exc)
            raise
        traced.result(value)
        traced.end()
        return value

    return call


async def _traced_generator(traced: Call, inner: AsyncGenerator[Any, None]) -> Any:
    """``inner``'s items, with the call's span around the whole iteration."""
    count = 0
    try:
        while True:
            with traced:
                try:
                    item = await inner.__anext__()
                except StopAsyncIteration:
                    break
            count += 1
            yield item
    except BaseException as exc:
        traced.records = count
        traced.end(exc)
        raise
    finally:
        await inner.aclose()
    traced.records = count
    traced.end()


class _TracedContext:
    """An async context manager whose span lasts from entering to leaving the block."""

    def __init__(self, traced: Call, inner: AbstractAsyncContextManager[Any]) -> None:
        self._traced = traced
        self._inner = inner

    async def __aenter__(self) -> Any:
        self._traced.__enter__()
        try:
            return await self._inner.__aenter__()
        except BaseException as exc:
            self._traced.__exit__()
            self._traced.end(exc)
            raise

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        try:
            suppressed = await self._inner.__aexit__(kind, exc, tb)
        except BaseException as error:
            self._traced.__exit__()
            self._traced.end(error)
            raise
        self._traced.__exit__()
        self._traced.end(None if suppressed else exc)
        return suppressed


def _wrap_plain(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """A method that is not a coroutine function: it may return an async generator
    (``watch``), an async context manager (``turn``), an awaitable, or a value."""
    find = _session_arg(fn)

    @functools.wraps(fn)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        api = _api if _loaded else load_api()  # the providers are global, and so is the API
        if api is None or not api.listening():
            return fn(self, *args, **kwargs)
        traced = Call(api, _telemetry_of(self), name, find(args, kwargs))
        try:
            with traced:
                value = fn(self, *args, **kwargs)
        except BaseException as exc:
            traced.end(exc)
            raise
        if inspect.isasyncgen(value):
            return _traced_generator(traced, cast("AsyncGenerator[Any, None]", value))
        if hasattr(value, "__aenter__") and hasattr(value, "__aexit__"):
            return _TracedContext(traced, value)
        if inspect.isawaitable(value):
            return _traced_awaitable(traced, value)
        traced.result(value)
        traced.end()
        return value

    return call


async def _traced_awaitable(traced: Call, awaitable: Any) -> Any:
    try:
        with traced:
            value = await awaitable
    except BaseException as exc:
        traced.end(exc)
        raise
    traced.result(value)
    traced.end()
    return value


def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (a method named ``name``) with a span and metrics per call."""
    if inspect.isasyncgenfunction(fn):
        inner = fn

        def fn(self: Any, *args: Any, **kwargs: Any) -> Any:  # a plain function returning it
            return inner(self, *args, **kwargs)

        functools.update_wrapper(fn, inner)
    if inspect.iscoroutinefunction(fn):
        wrapped = _wrap_coroutine(name, fn)
    else:
        wrapped = _wrap_plain(name, fn)
    setattr(wrapped, MARK, True)
    return wrapped


def public_methods(cls: type) -> dict[str, Any]:
    """The public methods of ``cls`` and its bases, as stored on the class (functions,
    classmethods, staticmethods; not properties)."""
    found: dict[str, Any] = {}
    for name in dir(cls):
        if name.startswith("_"):
            continue
        raw = inspect.getattr_static(cls, name)
        if isinstance(
            raw, staticmethod | classmethod | LazyFunction | TracedLazy
        ) or inspect.isfunction(raw):
            found[name] = raw
    return found


class TracedLazy:
    """A :class:`~sessiondb.lazy.LazyFunction` method, wrapped by :func:`wrap` when its
    module is first imported (the CLI starts without importing it)."""

    def __init__(self, name: str, lazy: LazyFunction) -> None:
        self.name = name
        self.lazy = lazy
        self.wrapped: Callable[..., Any] | None = None
        setattr(self, MARK, True)

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        if self.wrapped is None:
            self.wrapped = wrap(self.name, self.lazy.__get__(None, owner))
        return self.wrapped if obj is None else self.wrapped.__get__(obj, owner)


def traced(cls: C) -> C:
    """Class decorator: every public method of ``cls`` but :data:`NOT_TRACED` gets a span
    and metrics per call (nothing when no OpenTelemetry provider is configured)."""
    for name, raw in public_methods(cls).items():
        if name in NOT_TRACED or isinstance(raw, staticmethod | classmethod):
            continue
        if getattr(raw, MARK, False):
            continue
        setattr(
            cls, name, TracedLazy(name, raw) if isinstance(raw, LazyFunction) else wrap(name, raw)
        )
    return cls


def is_traced(method: object) -> bool:
    """Whether ``method`` (as stored on the class) was wrapped by :func:`traced`."""
    return bool(getattr(method, MARK, False))


__all__ = [
    "NOT_TRACED",
    "StoreTelemetry",
    "is_traced",
    "load_api",
    "public_methods",
    "refresh_providers",
    "traced",
]
