"""sessiondb: AI-agent conversation sessions as append-only rows in Postgres or SQLite.

async with SessionStore.open("sessions.db") as store:
    await store.migrate()
    info = await store.create_session()
    await store.append(info.id, [{"role": "user", "content": "hello"}])
    messages = await store.context(info.id)
"""

from .compaction import (
    CompactionEvent,
    CompactionResult,
    CompactionSettings,
    Summarizer,
    Tokenizer,
    offline_summarizer,
)
from .errors import (
    BusyError,
    CompactionError,
    ConfigurationError,
    ConflictError,
    DatabaseError,
    DatabaseUnavailableError,
    HasChildrenError,
    ImportFormatError,
    InvalidInputError,
    InvalidSessionIdError,
    LeaseLostError,
    MissingDependencyError,
    NotFoundError,
    RecordNotFoundError,
    SeqConflictError,
    SessionDBError,
    SessionNotFoundError,
    StoreClosedError,
    SummarizerError,
    TurnTimeoutError,
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
from .transfer import ImportFailure, ImportProgress, ImportReport
from .turns import Turn

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
    "DatabaseError",
    "DatabaseUnavailableError",
    "HasChildrenError",
    "ImageContent",
    "ImportFailure",
    "ImportFormatError",
    "ImportProgress",
    "ImportReport",
    "InvalidInputError",
    "InvalidSessionIdError",
    "LeaseLostError",
    "Message",
    "Metrics",
    "MissingDependencyError",
    "NewSession",
    "NotFoundError",
    "OtherContent",
    "Prune",
    "Record",
    "RecordNotFoundError",
    "RetentionReport",
    "SeqConflictError",
    "SessionDBError",
    "SessionInfo",
    "SessionNotFoundError",
    "SessionPage",
    "SessionStore",
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
