"""Tests that run workers in OS processes, as replicas of a service would: each started
with the "spawn" method (its own interpreter, event loop, engine and pool); and Python
commands run as a user would run them."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The context every worker process and the barriers and queues they share come from.
SPAWN = multiprocessing.get_context("spawn")


def run_processes(
    target: Callable[..., Any],
    args_for: Callable[[int], tuple[Any, ...]],
    count: int,
    *,
    timeout: float,
    name: str = "sessiondb-worker",
) -> None:
    """Run ``target(*args_for(p))`` in ``count`` processes and wait for them all. A
    process still running after ``timeout`` seconds is killed and fails the test, and so
    does one that exits with a non-zero code. Blocks: an async test calls it through
    ``asyncio.to_thread``."""
    processes = [
        SPAWN.Process(target=target, args=args_for(p), name=f"{name}-{p}") for p in range(count)
    ]
    for process in processes:
        process.start()
    try:
        for process in processes:
            process.join(timeout)
    finally:
        hung = [p for p in processes if p.is_alive()]
        for process in hung:
            process.kill()
            process.join(10)
    assert not hung, f"did not finish in {timeout}s: {[p.name for p in hung]}"
    codes = {p.name: p.exitcode for p in processes}
    assert all(code == 0 for code in codes.values()), f"a process failed: {codes}"


def run_python(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python *args`` (this interpreter) in a process of its own, its output captured as
    text; fails the test, with its stderr, unless it exits with 0."""
    done = subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr
    return done
