"""The circuit breaker of auto-compaction: one per store."""

from __future__ import annotations


class CircuitBreaker:
    """Counts consecutive failed auto-compactions per session."""

    def __init__(self) -> None:
        self._failures: dict[str, int] = {}

    def failures(self, session_id: str) -> int:
        return self._failures.get(session_id, 0)

    def record_failure(self, session_id: str) -> int:
        count = self._failures.get(session_id, 0) + 1
        self._failures[session_id] = count
        return count

    def record_success(self, session_id: str) -> None:
        self._failures.pop(session_id, None)

    def reset(self, session_id: str | None = None) -> None:
        """Let auto-compaction try again (for one session, or all)."""
        if session_id is None:
            self._failures.clear()
        else:
            self._failures.pop(session_id, None)
