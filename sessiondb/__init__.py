"""sessiondb: AI-agent conversation sessions as append-only rows in Postgres or SQLite.

async with SessionStore.open("sessions.db") as store:
    await store.migrate()
    info = await store.create_session()
    await store.append(info.id, [{"role": "user", "content": "hello"}])
    messages = await store.context(info.id)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# The errors are eager: they are small (the standard library only), and a caller's
# ``except sessiondb.SessionDBError`` should cost nothing.
from .errors import (
    BusyError,
    CompactionError,
    ConfigurationError,
    ConflictError,
    CorruptRecordError,
    DatabaseError,
    DatabaseUnavailableError,
    DecryptionError,
    EncryptedNamespaceError,
    EncryptionError,
    ExportPathError,
    HasChildrenError,
    ImportFormatError,
    InvalidInputError,
    InvalidQueryError,
    InvalidSessionIdError,
    KeyConfigurationError,
    LeaseLostError,
    MissingDependencyError,
    NotFoundError,
    ReadOnlyError,
    RecordNotFoundError,
    SeqConflictError,
    SessionDBError,
    SessionNotFoundError,
    StoreClosedError,
    SummarizerError,
    TurnTimeoutError,
)

if TYPE_CHECKING:
    from .compaction import (
        CompactionEvent,
        CompactionResult,
        CompactionSettings,
        Summarizer,
        Tokenizer,
        offline_summarizer,
    )
    from .models import (
        Compaction,
        ContentBlock,
        ImageContent,
        Message,
        Metrics,
        NewSession,
        OtherContent,
        Prune,
        Record,
        SearchHit,
        SearchPage,
        SessionInfo,
        SessionPage,
        TextContent,
        ThinkingContent,
        Tombstone,
        ToolCallContent,
        TurnInfo,
        Usage,
    )
    from .retention import RetentionReport
    from .store import SessionStore
    from .transfer import ImportFailure, ImportProgress, ImportReport, SkippedPath
    from .turns import Turn

# Every other public name is imported on first use (start-up rule in sessiondb/cli.py):
# ``import sessiondb`` loads no SQLAlchemy, pydantic, Alembic or driver. A new public
# name goes in three places: the TYPE_CHECKING block above (for type checkers), this
# table (name -> module), and ``__all__``; tests/ops/test_startup.py checks they agree.
_LAZY: dict[str, str] = {
    "CompactionEvent": ".compaction",
    "CompactionResult": ".compaction",
    "CompactionSettings": ".compaction",
    "Summarizer": ".compaction",
    "Tokenizer": ".compaction",
    "offline_summarizer": ".compaction",
    "Compaction": ".models",
    "ContentBlock": ".models",
    "ImageContent": ".models",
    "Message": ".models",
    "Metrics": ".models",
    "NewSession": ".models",
    "OtherContent": ".models",
    "Prune": ".models",
    "Record": ".models",
    "SearchHit": ".models",
    "SearchPage": ".models",
    "SessionInfo": ".models",
    "SessionPage": ".models",
    "TextContent": ".models",
    "ThinkingContent": ".models",
    "Tombstone": ".models",
    "ToolCallContent": ".models",
    "TurnInfo": ".models",
    "Usage": ".models",
    "RetentionReport": ".retention",
    "SessionStore": ".store",
    "ImportFailure": ".transfer",
    "ImportProgress": ".transfer",
    "ImportReport": ".transfer",
    "SkippedPath": ".transfer",
    "Turn": ".turns",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sessiondb' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # the next look-up is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "BusyError",
    "Compaction",
    "CompactionError",
    "CompactionEvent",
    "CompactionResult",
    "CompactionSettings",
    "ConfigurationError",
    "ConflictError",
    "ContentBlock",
    "CorruptRecordError",
    "DatabaseError",
    "DatabaseUnavailableError",
    "DecryptionError",
    "EncryptedNamespaceError",
    "EncryptionError",
    "ExportPathError",
    "HasChildrenError",
    "ImageContent",
    "ImportFailure",
    "ImportFormatError",
    "ImportProgress",
    "ImportReport",
    "InvalidInputError",
    "InvalidQueryError",
    "InvalidSessionIdError",
    "KeyConfigurationError",
    "LeaseLostError",
    "Message",
    "Metrics",
    "MissingDependencyError",
    "NewSession",
    "NotFoundError",
    "OtherContent",
    "Prune",
    "ReadOnlyError",
    "Record",
    "RecordNotFoundError",
    "RetentionReport",
    "SearchHit",
    "SearchPage",
    "SeqConflictError",
    "SessionDBError",
    "SessionInfo",
    "SessionNotFoundError",
    "SessionPage",
    "SessionStore",
    "SkippedPath",
    "StoreClosedError",
    "Summarizer",
    "SummarizerError",
    "TextContent",
    "ThinkingContent",
    "Tokenizer",
    "Tombstone",
    "ToolCallContent",
    "Turn",
    "TurnInfo",
    "TurnTimeoutError",
    "Usage",
    "offline_summarizer",
]
