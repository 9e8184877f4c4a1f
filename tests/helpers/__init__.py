"""The suite's own helpers, shared by ``unit/``, ``behaviour/`` and ``ops/``.

- ``messages``: messages in wire shape as a caller appends them; ``overlays``: sessions
  holding them and a raw view proving the records table only grows; ``compaction``:
  the compaction tests' messages and summary headings.
- ``claude_code``: Claude Code and cersei lines for the tests that write their own files;
  ``formats``: generated files of every format; ``corpus``: the corpus of real
  transcripts beside the repository (skipped with a reason when absent).
- ``sql``: the tables read and written by SQL, beside the store (``:memory:`` too);
  ``migrations``: data at an older revision and the schema state after a migration.
- ``processes``: workers in OS processes, and Python commands run as a user runs them;
  ``pgbouncer``: a real PgBouncer in front of the test's database (a fixture).
- ``input_tables``: tables of inputs; ``import_memory_probe``: one import's peak memory,
  measured in a process of its own.
"""
