"""Medians of repeated calls, after a warm-up, with both sides of a figure interleaved."""

from __future__ import annotations

import gc
import statistics
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import Any

Call = Callable[[], Awaitable[Any]]


async def _times(call: Call, n: int) -> list[float]:
    times = []
    for _ in range(n):
        start = perf_counter()
        await call()
        times.append(perf_counter() - start)
    return times


async def compare(
    a: Call, b: Call, *, reps: int, warmup: int, block: int = 10
) -> tuple[float, float]:
    """The medians of ``reps`` timed calls of ``a`` and of ``b``.

    Both are warmed up first (connections, prepared statements, caches), then timed in
    alternating blocks, so that drift during the run (a growing table, autovacuum, the
    other core busy) falls on both sides alike.
    """
    for _ in range(warmup):
        await a()
        await b()
    gc.collect()
    times_a: list[float] = []
    times_b: list[float] = []
    while len(times_a) < reps:
        n = min(block, reps - len(times_a))
        times_a += await _times(a, n)
        times_b += await _times(b, n)
    return statistics.median(times_a), statistics.median(times_b)
