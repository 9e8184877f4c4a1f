"""The OpenTelemetry SDK as the tests' listener: one in-memory span exporter and one
in-memory metric reader, set as the process's global providers the first time a test
asks (the API refuses to replace a global provider, so there is one of each per run).

From then on every store of the run is traced (the rest of the suite runs with telemetry
on, which is coverage too); spans are kept only while a test holds the ``otel`` fixture,
so that the exporter does not grow over the run (the ``otel`` fixtures, via
:func:`listening`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sessiondb import telemetry


@dataclass
class Listener:
    spans: InMemorySpanExporter
    reader: InMemoryMetricReader

    def finished(self, name: str | None = None) -> list[ReadableSpan]:
        """Spans ended since the last :meth:`clear`, oldest first; only ``name``'s."""
        got = list(self.spans.get_finished_spans())
        return [s for s in got if name is None or s.name == name]

    def one(self, name: str) -> ReadableSpan:
        got = self.finished(name)
        assert len(got) == 1, [s.name for s in self.finished()]
        return got[0]

    def clear(self) -> None:
        self.spans.clear()

    def points(self, metric: str, **match: Any) -> list[Any]:
        """The data points of ``metric`` whose attributes hold ``match`` (metrics are
        cumulative over the run: match on the test's own database)."""
        return [
            point
            for name, point in _points(self.reader)
            if name == metric and all(point.attributes.get(k) == v for k, v in match.items())
        ]


def _points(reader: InMemoryMetricReader) -> Iterator[tuple[str, Any]]:
    data = reader.get_metrics_data()
    if data is None:
        return
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    yield metric.name, point


class _WhileListening(SimpleSpanProcessor):
    """Exports ended spans only while a test listens."""

    listening = False

    def on_end(self, span: ReadableSpan) -> None:
        if self.listening:
            super().on_end(span)


_listener: Listener | None = None
_processor: _WhileListening | None = None


def listener() -> Listener:
    """The run's listener, set up on first use."""
    global _listener, _processor
    if _listener is None:
        spans = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        _processor = _WhileListening(spans)
        tracer_provider.add_span_processor(_processor)
        reader = InMemoryMetricReader()
        trace.set_tracer_provider(tracer_provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        assert trace.get_tracer_provider() is tracer_provider, "another tracer provider is set"
        _listener = Listener(spans, reader)
    assert _processor is not None
    _processor.listening = True
    telemetry.refresh_providers()
    _listener.clear()
    return _listener


def stop_listening() -> None:
    if _processor is not None:
        _processor.listening = False
    if _listener is not None:
        _listener.clear()


def listening() -> Iterator[Listener]:
    """The body of a test's ``otel`` fixture: the run's listener, keeping spans for this
    test only."""
    try:
        yield listener()
    finally:
        stop_listening()
