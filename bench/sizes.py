"""How much work each mode does: full (the figures as the issue states them), quick
(smaller data sets, under 2 minutes on 2 cores) and tiny (the smoke test's)."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Sizes:
    mode: str
    # 1. append one message: timed appends per side, after a warm-up
    append_reps: int
    append_warmup: int
    # 2. append a batch
    batch: int
    batch_reps: int
    # 3. bulk load: sessions x records each, whole loads timed per side
    bulk_sessions: int
    bulk_records: int
    bulk_reps: int
    # 4. context load: the long session, the short one, and what the compaction keeps
    long_session: int
    short_session: int
    keep: int
    context_reps: int
    replay_reps: int
    # 5. listing: sessions in the table, the deep page's number, the page size
    list_sessions: int
    list_page: int
    page_size: int
    list_reps: int
    # 6. fork: the small session's length (the large one is ``long_session``)
    fork_small: int
    fork_reps: int
    # 7. contended appends: processes x writers, appends per writer, spread sessions
    processes: int
    writers: int
    contended_appends: int
    contended_sessions: int
    contended_reps: int
    # 8, 9. import and export of a generated Claude Code directory: files, lines in all,
    # timed runs per side (export: more, as its floor varies with the page cache's
    # writeback); the big file whose import's peak memory is logged (lines)
    import_files: int
    import_lines: int
    import_reps: int
    export_reps: int
    big_file_lines: int
    # 10. OpenAI Agents SDK sessions: items in the long session
    agents_items: int
    # 13. search: records of the small and the large database (the same hits in both),
    # timed searches per side
    search_small: int = 20_000
    search_large: int = 1_000_000
    search_reps: int = 100


FULL = Sizes(
    mode="full",
    append_reps=400,
    append_warmup=40,
    batch=50,
    batch_reps=60,
    bulk_sessions=1000,
    bulk_records=100,
    bulk_reps=3,
    long_session=100_000,
    short_session=1000,
    keep=200,
    context_reps=100,
    replay_reps=5,
    list_sessions=100_000,
    list_page=200,
    page_size=50,
    list_reps=100,
    fork_small=10,
    fork_reps=60,
    processes=2,
    writers=8,
    contended_appends=50,
    contended_sessions=1000,
    contended_reps=5,
    import_files=200,
    import_lines=100_000,
    import_reps=3,
    export_reps=7,
    big_file_lines=100_000,
    agents_items=20_000,
)

# The deep page (200 x 50) still lies inside 20k sessions; the long session is 20k
# records. Figure names carry the sizes, so a quick table never passes for a full one.
QUICK = replace(
    FULL,
    mode="quick",
    append_reps=200,
    append_warmup=20,
    batch_reps=30,
    bulk_sessions=200,
    bulk_reps=3,
    long_session=20_000,
    context_reps=50,
    replay_reps=3,
    list_sessions=20_000,
    list_reps=50,
    fork_reps=30,
    contended_appends=20,
    contended_reps=3,
    import_lines=20_000,
    import_reps=3,
    export_reps=9,
    big_file_lines=20_000,
    search_large=200_000,
    search_reps=50,
)

# Only proves that every figure still runs (the smoke test): seconds, not a measurement.
TINY = replace(
    QUICK,
    mode="tiny",
    append_reps=10,
    append_warmup=2,
    batch_reps=4,
    bulk_sessions=10,
    bulk_records=20,
    bulk_reps=1,
    long_session=800,
    short_session=400,
    keep=200,
    context_reps=5,
    replay_reps=1,
    list_sessions=300,
    list_page=5,
    list_reps=5,
    fork_reps=5,
    contended_appends=2,
    contended_sessions=20,
    contended_reps=1,
    import_files=20,
    import_lines=1000,
    import_reps=1,
    export_reps=1,
    big_file_lines=400,
    agents_items=400,
    search_small=400,
    search_large=4_000,
    search_reps=5,
)


def for_mode(quick: bool, tiny: bool) -> Sizes:
    if tiny:
        return TINY
    return QUICK if quick else FULL


def count(n: int) -> str:
    """``100000`` -> ``100k``, for figure names."""
    if n >= 1000 and n % 1000 == 0:
        return f"{n // 1000}k"
    return str(n)
