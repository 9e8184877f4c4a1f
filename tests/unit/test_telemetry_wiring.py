"""sessiondb.telemetry without a listener: every public method of SessionStore is
wrapped; ``import sessiondb`` does not import OpenTelemetry; without it installed the
store works; with the API but no SDK a call does no telemetry work; a provider set after
the store opened is used. The in-process spans are in tests/behaviour/test_telemetry.py.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from sessiondb import SessionStore, telemetry


def untraced(cls: type) -> list[str]:
    """Public methods of ``cls`` that are neither wrapped nor meant to be left alone."""
    return sorted(
        name
        for name, method in telemetry.public_methods(cls).items()
        if name not in telemetry.NOT_TRACED and not telemetry.is_traced(method)
    )


def test_every_public_method_of_the_store_is_traced() -> None:
    methods = telemetry.public_methods(SessionStore)
    # The kinds there are: coroutines, async generators (watch), context managers (turn),
    # the transfer and compaction functions the class takes in.
    for name in ("append", "context", "watch", "watch_all", "turn", "import_path", "compact"):
        assert name in methods
    assert untraced(SessionStore) == []
    # open and connect make a store and open nothing: they are the only ones left alone.
    assert {n for n in methods if not telemetry.is_traced(methods[n])} == {"open", "connect"}


def test_a_method_added_after_the_decorator_is_caught() -> None:
    class Extended(SessionStore):
        async def search(self, text: str) -> list[str]:
            return [text]

    assert untraced(Extended) == ["search"]
    assert untraced(telemetry.traced(Extended)) == []


def test_the_wrappers_keep_names_and_docs() -> None:
    assert SessionStore.append.__name__ == "append"
    assert SessionStore.append.__doc__ is not None
    assert "expected_seq" in SessionStore.append.__doc__


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_import_sessiondb_does_not_import_opentelemetry() -> None:
    out = _run(
        """
        import asyncio, sys
        import sessiondb
        print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))

        async def main():
            async with sessiondb.SessionStore.open(":memory:") as store:
                await store.migrate()
        asyncio.run(main())
        print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
        """
    )
    # Nor does using a store: until the application imports OpenTelemetry, nobody can
    # have set a provider (the CLI starts without it).
    assert out.splitlines() == ["[]", "[]"]


def test_the_store_works_without_opentelemetry() -> None:
    out = _run(
        """
        import asyncio, sys
        sys.modules["opentelemetry"] = None  # as if not installed: importing it fails
        from sessiondb import SessionStore, telemetry

        async def main():
            async with SessionStore.open(":memory:") as store:
                await store.migrate()
                sid = (await store.create_session()).id
                await store.append(sid, {"role": "user", "content": "hello"})
                async with store.turn(sid):
                    pass
                print([m.content[0].text for m in await store.context(sid)])
            print(telemetry.load_api())
        asyncio.run(main())
        """
    )
    assert out.splitlines() == ["['hello']", "None"]


def test_without_an_sdk_a_call_does_no_telemetry_work_until_a_provider_is_set() -> None:
    out = _run(
        """
        import asyncio
        from sessiondb import SessionStore, telemetry
        from sessiondb.backends.base import CALL_STATS

        seen = []

        class Spy:
            def __init__(self, backend):
                self.backend = backend
            def __getattr__(self, name):
                return getattr(self.backend, name)
            async def fetch(self, bound, **options):
                seen.append(CALL_STATS.get())
                return await self.backend.fetch(bound, **options)

        async def main():
            from sessiondb.backends import open_backend
            from sessiondb.config import Settings
            settings = Settings.from_env(":memory:")
            store = SessionStore(settings, backend=Spy(open_backend(settings)))
            await store.migrate()
            sid = (await store.create_session()).id
            await store.context(sid)
            print(store.core.telemetry.active() is None, seen[-1] is None)

            # An application configures the SDK after the store opened.
            from opentelemetry import trace
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import SimpleSpanProcessor
            from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
                InMemorySpanExporter,
            )
            spans = InMemorySpanExporter()
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(spans))
            trace.set_tracer_provider(provider)
            # Looked at again within RECHECK_SECONDS of the last look, without a refresh.
            await asyncio.sleep(telemetry.RECHECK_SECONDS)
            await store.context(sid)
            print(seen[-1] is not None, [s.name for s in spans.get_finished_spans()])
            await store.close()
        asyncio.run(main())
        """
    )
    lines = out.splitlines()
    assert lines[0] == "True True"
    assert lines[1] == "True ['sessiondb.context']"
