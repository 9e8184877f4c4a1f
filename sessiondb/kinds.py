"""Record kinds: the one list of what a session's record can be.

Tables (the ``kind`` check constraint), models (:class:`~sessiondb.models.Record`), the
store (``records(kinds=…)``), the file formats and the conformance suite take the kinds
from here. A new kind is added here first; each place that must know what it means (its
payload model in ``models.py``, its columns in ``rows.py``, the formats that write it)
then fails until it does.
"""

from __future__ import annotations

from typing import Literal, get_args

RecordKind = Literal["message", "compaction", "tombstone", "entry", "prune"]

#: Every kind, in the order documents list them.
KINDS: tuple[RecordKind, ...] = get_args(RecordKind)

#: Kinds whose record changes the context without adding to it.
OVERLAY_KINDS: tuple[RecordKind, ...] = ("compaction", "tombstone", "prune")

#: Kinds a caller of the store writes through its methods; ``entry`` only comes from an
#: imported file (a line of it that no kind models).
WRITTEN_KINDS: tuple[RecordKind, ...] = tuple(k for k in KINDS if k != "entry")

#: The SQL check on ``sessiondb_records.kind`` (its migration spells out the same list).
KIND_CHECK = "kind IN ({})".format(", ".join(f"'{k}'" for k in KINDS))
