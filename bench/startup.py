"""Figure 13: start-up, timed as a shell sees it: whole processes, from their start to
their exit.

Three commands, each beside ``python -c pass`` (the same interpreter) started the same
way in the same run, the two taking turns run by run so that a busy moment of the
machine falls on both: ``sessiondb --help``, ``sessiondb sessions list`` on a small
SQLite file, and ``python -c "import sessiondb"``. The table gives sessiondb's median
and the bare interpreter's, and their ratio; the goals are on sessiondb's own median
(issue 27: ``--help`` within 150 ms, the listing within 250 ms).

Each command also gets a row of CPU time (user + system, the operating system's own
account of the finished child): on a machine shared with other work, wall time grows
with the queue for a core and CPU time hardly does, so that row is the one to compare
between runs.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter

from sessiondb import SessionStore

from .databases import Server
from .figures import Run
from .report import Goal, Result

# Sessions in the small file that ``sessions list`` prints.
LISTED_SESSIONS = 20
WARMUP = 1  # the first run writes the bytecode caches


def _command() -> list[str]:
    """``sessiondb`` as installed beside this interpreter (the console script a user
    runs), else ``python -m sessiondb``."""
    script = Path(sys.executable).with_name("sessiondb")
    return [str(script)] if script.exists() else [sys.executable, "-m", "sessiondb"]


def _cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one whole run of ``argv``."""
    cpu = _cpu()
    started = perf_counter()
    subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env, check=True)
    return perf_counter() - started, _cpu() - cpu


@dataclass(frozen=True)
class Paired:
    """Medians of one command and of ``python -c pass``, run in turns."""

    wall: float
    floor_wall: float
    cpu: float
    floor_cpu: float


def paired(argv: list[str], runs: int, env: dict[str, str]) -> Paired:
    """The medians of ``runs`` whole runs of ``argv`` and of ``python -c pass``, in
    turns, after a warm-up of both (the page cache, the bytecode caches)."""
    bare = [sys.executable, "-c", "pass"]
    for _ in range(WARMUP):
        _run(argv, env)
        _run(bare, env)
    ours: list[tuple[float, float]] = []
    floor: list[tuple[float, float]] = []
    for _ in range(runs):
        ours.append(_run(argv, env))
        floor.append(_run(bare, env))
    return Paired(
        wall=statistics.median(w for w, _ in ours),
        floor_wall=statistics.median(w for w, _ in floor),
        cpu=statistics.median(c for _, c in ours),
        floor_cpu=statistics.median(c for _, c in floor),
    )


async def startup(run: Run, server: Server) -> list[Result]:
    runs = run.sizes.startup_runs
    db = await server.fresh()
    async with SessionStore.open(db.url) as store:
        for i in range(LISTED_SESSIONS):
            info = await store.create_session(name=f"session {i}")
            await store.append(info.id, [{"role": "user", "content": "hello"}])
    # The commands read no SESSIONDB_* set by whoever runs the bench, and may cache
    # their bytecode as an installed package has it (pip compiles it): under
    # PYTHONDONTWRITEBYTECODE every run would compile sessiondb's sources afresh
    # (~0.1 s), which no user pays. The warm-up writes the caches.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SESSIONDB_") and k != "PYTHONDONTWRITEBYTECODE"
    }
    sessiondb = _command()
    commands = [
        ("sessiondb --help", "-", [*sessiondb, "--help"], 0.150),
        (
            f"sessiondb sessions list, {LISTED_SESSIONS} sessions",
            server.backend,
            [*sessiondb, "--db", db.url, "sessions", "list"],
            0.250,
        ),
        ("import sessiondb", "-", [sys.executable, "-c", "import sessiondb"], None),
    ]
    results = []
    for title, backend, argv, goal in commands:
        p = paired(argv, runs, env)
        bound = None if goal is None else Goal("<=", goal, absolute=True)
        results += [
            Result(f"14 {title} (vs python -c pass)", backend, p.wall, p.floor_wall, bound),
            Result(f"14 {title}, CPU time (vs python -c pass)", backend, p.cpu, p.floor_cpu),
        ]
    await server.drop(db)
    return results
