"""Session files in and out of the database: :func:`import_path`, :func:`export_session`
and :func:`export_all`, over the readers and writers of :mod:`sessiondb.formats`.

**Import** reads each file with its format, checks every record of a session (messages
through :func:`sessiondb.models.wire_message`, overlays through their models) before
anything of it is committed, then writes whole sessions in batches of about
``BATCH_RECORDS`` records, one transaction per batch, through the backend's bulk path
(COPY on Postgres); a batch is written while the next files are read. A session of
more than ``STREAM_RECORDS`` records or ``STREAM_CHARS`` of payload is not held
whole: it is written in chunks inside its own transaction as its records are read and
checked, and a record failing late rolls the transaction back. A session that fails its
checks is reported and not written; the other sessions go on. A batch the database
refuses is written again one session per transaction, so one bad session never takes
others with it.

**Export** (:func:`export_all`) reads the namespace's records with one keyset-paginated
statement and hands the writers the stored JSON
(:class:`~sessiondb.formats.stored.StoredRecord`), without building models.

**Idempotency** needs no extra column. A session's id is a function of the store's
namespace and the session's external key (``claude-code:<stem>``, ``pi:<id>``,
``native:<id>``, …; see :class:`sessiondb.formats.ImportedSession`): the 128 bits of a
ULID taken from SHA-256 of both. A re-import computes the same id, finds it stored and
skips the session without reading its records. The price: an imported session's id
does not sort by its creation time. A file that grew since it was imported is still
skipped whole; appending the new tail is not done.

**Tenants.** Ids are one space for every namespace, so none is taken from a file as
it stands: a native file's id is hashed with the namespace too, and the same file
imported by two tenants gives two sessions that neither can see, block or learn of.
The file's own id is kept as the session's key (``native:<id>``), and a native export
writes it back (the directory, ``id``, and a fork's ``parentId``), so a round trip gives
the same file. A native file whose id is a session of the importing namespace already
(made there, or imported when native ids were kept as they came) is that session.

**Times.** Records keep the timestamps the file gives them. The session's
``created_at`` and ``last_message_at``, which order listings and decide
:meth:`~sessiondb.SessionStore.expire`, are never later than the moment the session
is stored: a file dated in the future is not kept from retention or pinned to the top
of every listing.

**Modules.** :mod:`~sessiondb.transfer.importer` (:func:`import_path`, the batches
and the streamed sessions), :mod:`~sessiondb.transfer.checks` (a session's records
checked and turned into rows), :mod:`~sessiondb.transfer.exporter`
(:func:`export_session`, :func:`export_all`) and :mod:`~sessiondb.transfer.reports`
(what an import reports).
"""

from __future__ import annotations

from ..formats import SkippedPath

# The tuning constants (the ``as`` imports) are readable here as before. The code reads
# each in the module that defines it, so a test that changes one patches that module
# (``transfer.importer.BATCH_RECORDS``).
from .exporter import EXPORT_AHEAD as EXPORT_AHEAD
from .exporter import EXPORT_BATCH as EXPORT_BATCH
from .exporter import export_all, export_session
from .importer import ANALYZE_AFTER as ANALYZE_AFTER
from .importer import BATCH_CHARS as BATCH_CHARS
from .importer import BATCH_RECORDS as BATCH_RECORDS
from .importer import LOOK_UP_FILES as LOOK_UP_FILES
from .importer import STREAM_CHARS as STREAM_CHARS
from .importer import STREAM_RECORDS as STREAM_RECORDS
from .importer import import_path, session_id_for
from .reports import ImportFailure, ImportProgress, ImportReport

__all__ = [
    "ImportFailure",
    "ImportProgress",
    "ImportReport",
    "SkippedPath",
    "export_all",
    "export_session",
    "import_path",
    "session_id_for",
]
