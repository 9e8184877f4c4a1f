"""sessiondb's benchmark: each figure beside its floor, measured in the same run.

Run it from the repository root::

    python -m bench                 # full sizes, under 15 minutes on 2 cores
    python -m bench --quick         # smaller sizes, under 2 minutes
    python -m bench --json out.json # also write the table as JSON

The floor of a figure is the same work done with the bare driver (asyncpg, sqlite3)
on the same tables in the same database, so the ratio, not the absolute time, is the
result (DESIGN.md §7). Modules: ``sizes`` (how much work each mode does), ``data``
(deterministic sessions and JSONL files), ``databases`` (the run's own databases),
``floors`` (the bare-driver code), ``figures`` (figures 1-6), ``contention`` (figure 7,
several processes), ``timing`` and ``report``.
"""
