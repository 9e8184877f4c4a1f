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
    CompactionError,
    ConfigurationError,
    ConflictError,
    HasChildrenError,
    ImportFormatError,
    InvalidInputError,
    InvalidSessionIdError,
    MissingDependencyError,
    NotFoundError,
    RecordNotFoundError,
    SeqConflictError,
    SessionDBError,
    SessionNotFoundError,
    SummarizerError,
)
from .models import (
    Compaction,
    ContentBlock,
    ImageContent,
    Message,
    Metrics,
    NewSession,
    OtherContent,
    Record,
    SessionInfo,
    SessionPage,
    TextContent,
    ThinkingContent,
    Tombstone,
    ToolCallContent,
    Usage,
)
from .store import SessionStore

__all__ = [
    "Compaction",
    "CompactionError",
    "CompactionEvent",
    "CompactionResult",
    "CompactionSettings",
    "ConfigurationError",
    "ConflictError",
    "ContentBlock",
    "HasChildrenError",
    "ImageContent",
    "ImportFormatError",
    "InvalidInputError",
    "InvalidSessionIdError",
    "Message",
    "Metrics",
    "MissingDependencyError",
    "NewSession",
    "NotFoundError",
    "OtherContent",
    "Record",
    "RecordNotFoundError",
    "SeqConflictError",
    "SessionDBError",
    "SessionInfo",
    "SessionNotFoundError",
    "SessionPage",
    "SessionStore",
    "Summarizer",
    "SummarizerError",
    "TextContent",
    "ThinkingContent",
    "Tokenizer",
    "Tombstone",
    "ToolCallContent",
    "Usage",
    "offline_summarizer",
]
