"""What the compaction engine needs of a store: a protocol of public methods, so that
the engine never imports the store (which imports the engine)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..config import Settings
    from ..models import Message, Record, SessionInfo
    from .breaker import CircuitBreaker


class CompactionStore(Protocol):
    """What the engine needs of a store: its public reads and overlay appends, and its
    circuit breaker. :class:`sessiondb.SessionStore` is one."""

    @property
    def settings(self) -> Settings: ...

    @property
    def compaction_breaker(self) -> CircuitBreaker: ...

    async def get_session(self, session_id: str) -> SessionInfo: ...

    async def context(self, session_id: str) -> list[Message]: ...

    async def records(
        self,
        session_id: str,
        *,
        include_superseded: bool = ...,
        kinds: Iterable[str] | None = ...,
        from_seq: int | None = ...,
        to_seq: int | None = ...,
    ) -> list[Record]: ...

    async def append_compaction(
        self,
        session_id: str,
        *,
        summary: str,
        first_kept_seq: int,
        tokens_before: int = ...,
        read_files: Sequence[str] = ...,
        modified_files: Sequence[str] = ...,
        expected_seq: int | None = ...,
    ) -> Record: ...

    async def append_prune(
        self,
        session_id: str,
        seqs: Sequence[int],
        *,
        marker: str = ...,
        tokens_freed: int = ...,
        expected_seq: int | None = ...,
    ) -> Record: ...
