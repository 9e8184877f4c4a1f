"""The shared corpus of real transcripts, found in one place.

``SESSIONDB_CORPUS`` if set, else ``shared/corpus`` beside the repository. Nothing here
touches it at import: a test that needs it is marked ``corpus`` (checked before the test
runs, by ``tests/conftest.py``) or asks for a file with :func:`corpus_file`. Without the
corpus such a test is skipped with the reason; ``SESSIONDB_REQUIRE_CORPUS=1`` turns that
skip into a failure (CI sets it). Every format also has generated fixtures, so a bare
clone still tests each reader and writer (``tests/behaviour/test_formats_generated.py``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

MISSING = "the shared corpus of real transcripts is not beside the repository; set SESSIONDB_CORPUS"


def corpus_dir() -> Path:
    """Where the corpus is, present or not: ``SESSIONDB_CORPUS``, else ``shared/corpus``
    beside the repository."""
    explicit = os.environ.get("SESSIONDB_CORPUS")
    if explicit:
        return Path(explicit)
    return Path(__file__).resolve().parents[3] / "shared" / "corpus"


#: The corpus directory (a path only: nothing is read until a test asks).
CORPUS = corpus_dir()

#: The Claude Code files of the corpus, relative to ``CORPUS / "claude-code"``, sorted.
CLAUDE_FILES = (
    "agent-sessions/small.jsonl",
    "claude-code-log/edge_cases.jsonl",
    "spotter/4d5611e5-241a-462a-8d15-5122611a9569/subagents/agent-a2898e3.jsonl",
    "spotter/4d5611e5-241a-462a-8d15-5122611a9569/subagents/agent-acompact-e1f845.jsonl",
    "spotter/4d5611e5-241a-462a-8d15-5122611a9569.jsonl",
    "spotter/short.jsonl",
    "spotter/tool_heavy.jsonl",
)
#: The pi files of the corpus, relative to ``CORPUS / "pi"``.
PI_FILES = ("pi-mono/large-session.jsonl",)
#: The Codex CLI rollout files of the corpus, relative to ``CORPUS / "codex"``, sorted.
CODEX_FILES = (
    "agentcmd__rollout-2025-09-24T20-12-23-01997ea4-a70d-7da3-8c20-c736db82a7c5.jsonl",
    "agentcmd__rollout-2025-09-25T09-49-46-01998190-fba6-7f40-9309-dc4e48c5844a.jsonl",
    "agentwatch__codex-session.jsonl",
    "codemie__rollout-2026-01-02T19-00-00-019b7f95-0000-7000-0000-000000000001.jsonl",
    "codemie__rollout-2026-05-11T11-26-55-019e1625-789d-76c0-80ab-3724b5ddb799.jsonl",
    "kvsankar__session_with_compaction.jsonl",
    "oyakata__rollout-2026-10-08T10-22-25-01a1191a-be38-7192-9d4a-d6e939ff6c5d.jsonl",
)


def _unavailable(reason: str) -> None:
    if os.environ.get("SESSIONDB_REQUIRE_CORPUS") == "1":
        pytest.fail(f"{reason} (SESSIONDB_REQUIRE_CORPUS=1)")
    pytest.skip(reason)


def need_corpus() -> Path:
    """The corpus directory; skips the test without it (fails it under
    ``SESSIONDB_REQUIRE_CORPUS=1``)."""
    if not CORPUS.is_dir():
        _unavailable(f"{MISSING} (looked in {CORPUS})")
    return CORPUS


def corpus_file(relative: Path | str) -> Path:
    """The corpus file at ``relative``; skips the test without it (fails it under
    ``SESSIONDB_REQUIRE_CORPUS=1``)."""
    path = need_corpus() / relative
    if not path.is_file():
        _unavailable(f"corpus file {relative} not found in {CORPUS}; set SESSIONDB_CORPUS")
    return path


def corpus_present() -> bool:
    """Whether the corpus is there; without it, ``False`` - or a failure under
    ``SESSIONDB_REQUIRE_CORPUS=1``. For a test that adds the corpus to generated files
    and still tests those without it."""
    if CORPUS.is_dir():
        return True
    if os.environ.get("SESSIONDB_REQUIRE_CORPUS") == "1":
        pytest.fail(f"{MISSING} (looked in {CORPUS}) (SESSIONDB_REQUIRE_CORPUS=1)")
    return False
