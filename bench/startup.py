"""Figure 13: start-up, timed as a shell sees it: whole processes, from their start to
their exit.

Three commands, each beside ``python -c pass`` (the same interpreter) started the same
way in the same run, the two taking turns run by run so that a busy moment of the
machine falls on both: ``sessiondb --help``, ``sessiondb sessions list`` on a small
SQLite file, and ``python -c "import sessiondb"``. The table gives sessiondb's median
and the bare interpreter's, and their ratio; the goals are on sessiondb's own median
(issue 27: ``--help`` within 150 ms, the listing within 250 ms).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path
from time import perf_counter

from sessiondb import SessionStore

from .databases import Server
from .figures import Run
from .report import Goal, Result

# Sessions in the small file that ``sessions list`` prints.
LISTED_SESSIONS = 20
WARMUP = 2


def _command() -> list[str]:
    """``sessiondb`` as installed beside this interpreter (the console script a user
    runs), else ``python -m sessiondb``."""
    script = Path(sys.executable).with_name("sessiondb")
    return [str(script)] if script.exists() else [sys.executable, "-m", "sessiondb"]


def _wall(argv: list[str], env: dict[str, str]) -> float:
    started = perf_counter()
    subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env, check=True)
    return perf_counter() - started


def paired(argv: list[str], runs: int, env: dict[str, str]) -> tuple[float, float]:
    """The medians of ``runs`` whole runs of ``argv`` and of ``python -c pass``, in
    turns, after a warm-up of both (the page cache, the bytecode caches)."""
    bare = [sys.executable, "-c", "pass"]
    for _ in range(WARMUP):
        _wall(argv, env)
        _wall(bare, env)
    ours: list[float] = []
    floor: list[float] = []
    for _ in range(runs):
        ours.append(_wall(argv, env))
        floor.append(_wall(bare, env))
    return statistics.median(ours), statistics.median(floor)


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
    help_s, help_floor = paired([*sessiondb, "--help"], runs, env)
    list_s, list_floor = paired([*sessiondb, "--db", db.url, "sessions", "list"], runs, env)
    import_s, import_floor = paired([sys.executable, "-c", "import sessiondb"], runs, env)
    await server.drop(db)
    return [
        Result(
            "13 sessiondb --help (vs python -c pass)",
            "-",
            help_s,
            help_floor,
            Goal("<=", 0.150, absolute=True),
        ),
        Result(
            f"13 sessiondb sessions list, {LISTED_SESSIONS} sessions (vs python -c pass)",
            server.backend,
            list_s,
            list_floor,
            Goal("<=", 0.250, absolute=True),
        ),
        Result("13 import sessiondb (vs python -c pass)", "-", import_s, import_floor),
    ]
