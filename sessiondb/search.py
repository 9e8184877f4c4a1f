"""Full-text search over a namespace's messages and compaction summaries
(:meth:`SessionStore.search`).

The query is read once in Python (:mod:`sessiondb.search_query`) and written in the
backend's syntax; one statement (:mod:`sessiondb.search_statements`) returns the page's
hits with their payloads; each snippet is cut here, in Python, from the text
:mod:`sessiondb.search_text` takes out of the payload, the same on both backends.
Writes index the text in their own statement or transaction (see
:func:`sessiondb.statements.search_vector` and the SQLite backend), so a record can be
found the moment it commits.
"""

from __future__ import annotations

import base64
import binascii
import time
import zlib
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING, Any, get_args

import orjson

from . import jsoncodec
from . import search_statements as sq
from . import statements as q
from .errors import (
    ConfigurationError,
    CorruptRecordError,
    EncryptionError,
    InvalidInputError,
    SessionDBError,
    brief,
)
from .ids import check_session_id
from .models import INSTANCE_DICT, MadeWhenUsed, Role, SearchHit, SearchPage, trusted
from .rows import utc
from .search_query import Query, parse, snippets, to_fts5, to_tsquery
from .search_rank import rank_query
from .search_text import MAX_INDEXED_CHARS, payload_text
from .validation import strict_int

if TYPE_CHECKING:
    from .core import Core

#: The most hits one page holds.
MAX_LIMIT = 200
#: How many matches one search ranks: the newest this many records that match the query
#: and every filter (namespace, session, roles, since, tombstones and prunes). A query
#: with fewer matches ranks them all; one with more gives the best of its newest
#: ``WINDOW``, so that a call's work stays bounded however common the words (a word in
#: one record of eight, over 10M records: 1.25M matches, 20 s to rank on Postgres). The
#: later pages of a walk rank the same window (its bounds travel in the cursor).
WINDOW = 10_000
# A later page ranks at most this many times WINDOW: the window of its cursor, which
# holds WINDOW matches unless records written since landed between its bounds, or, for
# a walk whose first page held every match, the newest matches (none of the first
# page's lost unless more than WINDOW arrived since).
LATER_PAGE_SLACK = 2
# Postgres: how long what ANALYZE knows of the words (sq.word_statistics) is used
# before it is read again, and the cost model that picks the window's path from it
# (microseconds, measured over 2M records): a record read newest first from the
# recency index and checked against the query, a match read through the GIN index
# with its checks (namespace, tombstone, prune), and a candidate's checks.
STATISTICS_SECONDS = 300.0
_SCAN_US, _MATCH_US, _CHECK_US = 2.5, 17.0, 10.0
# The first timestamp of a Postgres window key, in a cursor: microseconds since this.
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_BIGINT = 2**63
_ROLES = frozenset(get_args(Role))


def _fingerprint(query: str, flags: tuple[Any, ...]) -> int:
    """Ties a cursor to the search that made it."""
    value = [query, *flags]
    try:
        # What jsoncodec.dumps writes when orjson takes the value (strings, None, bools:
        # no number for its check of NaN to walk), without that walk: ~2 µs a search.
        raw = orjson.dumps(value)
    except TypeError:  # orjson refuses a lone surrogate in the query
        raw = jsoncodec.dumps(value).encode("utf-8", "surrogatepass")
    return zlib.crc32(raw)


def _encode(rank: float, session_id: str, seq: int, mark: int, bounds: sq.Window | None) -> str:
    value: list[Any] = [rank, session_id, seq, mark]
    if bounds is not None:  # a full window's keys (a cursor without them: every match)
        oldest, newest = bounds
        if isinstance(newest, datetime):  # Postgres: (created_at, session_id, seq)
            at, sid, key_seq = oldest
            value += [
                [(at - _EPOCH) // _MICROSECOND, sid, key_seq],
                (newest - _EPOCH) // _MICROSECOND,
            ]
        else:
            value += [oldest, newest]
    raw = jsoncodec.dumps(value).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _int(value: object) -> int:
    if type(value) is not int or not -_BIGINT <= value < _BIGINT:
        raise ValueError("not a key")
    return value


def _decode(
    cursor: object, mark: int, postgres: bool
) -> tuple[tuple[float, str, int], sq.Window | None]:
    bad = f"invalid cursor {brief(cursor)}: pass back the next_cursor of the same search"
    if not isinstance(cursor, str) or len(cursor) > 500:
        raise InvalidInputError(bad)
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        rank, session_id, seq, made, *window = jsoncodec.loads(raw)
        if made != mark or not isinstance(rank, float) or len(window) not in (0, 2):
            raise ValueError("not this search's cursor")
        after = rank, check_session_id(session_id), _int(seq)
        if not window:
            return after, None
        oldest, newest = window
        if not postgres:
            return after, (_int(oldest), _int(newest))
        at, sid, key_seq = oldest
        return after, (
            (_EPOCH + _int(at) * _MICROSECOND, check_session_id(sid), _int(key_seq)),
            _EPOCH + _int(newest) * _MICROSECOND,
        )
    except (binascii.Error, ValueError, TypeError, RecursionError, OverflowError):
        raise InvalidInputError(bad) from None


# A hit is built from values of the right types already (models.trusted): validating
# them again cost ~2.3 µs a hit, and model_construct ~4.2 µs. Hits are frozen, so they
# share one fields-set.
_HIT_FIELDS = set(SearchHit.model_fields)
_PAGE_FIELDS = frozenset(SearchPage.model_fields)
_SEARCHED = 2 * MAX_INDEXED_CHARS  # the text a snippet is cut from: body and thinking


class _Hit(MadeWhenUsed, SearchHit):
    """A :class:`~sessiondb.models.SearchHit` whose ``snippet``, ``spans`` and
    ``timestamp`` are made from the row when first used: those fields, ``model_dump``,
    ``==``, ``repr``, ``marked()``, a copy or a pickle make them (once). Cutting a
    snippet is most of a search's Python (~8 µs a hit: the payload parsed, its text
    taken out, the words around the match found), and a caller that pages through hits
    for their ids and ranks never reads one. A ``SearchHit`` in every way a caller can
    see but ``type(h) is SearchHit``; equal to the ``SearchHit`` it stands for.

    A payload that cannot be read (a row not written by sessiondb) raises
    :class:`~sessiondb.errors.CorruptRecordError` where the snippet is first used.
    """

    __slots__ = ("_sessiondb_source",)

    def _sessiondb_make(self) -> None:
        try:
            created_at, payload, thinking, cut = _get_source(self)
        except AttributeError:
            return  # cut already
        d: dict[str, Any] = INSTANCE_DICT.__get__(self)
        try:
            timestamp = utc(created_at)
            text = payload_text(d["kind"], payload) or ("", "")
        except (ValueError, TypeError, RecursionError) as exc:
            raise CorruptRecordError(
                f"session {d['session_id']!r} seq {d['seq']}: the stored payload of a "
                f"search hit cannot be read ({type(exc).__name__})"
            ) from None
        shown = text[0] if not (thinking and text[1]) else f"{text[0]}\n{text[1]}"
        snippet, spans = cut(shown, _SEARCHED)
        # The fields in their declared order, as a SearchHit built whole holds them.
        INSTANCE_DICT.__set__(
            self,
            {
                "session_id": d["session_id"],
                "seq": d["seq"],
                "kind": d["kind"],
                "role": d["role"],
                "timestamp": timestamp,
                "snippet": snippet,
                "spans": spans,
                "rank": d["rank"],
            },
        )
        try:  # noqa: SIM105 - another thread may have cut it meanwhile
            _del_source(self)
        except AttributeError:  # pragma: no cover
            pass

    def __eq__(self, other: object) -> bool:
        if type(other) is SearchHit or type(other) is _Hit:
            return (
                self.__dict__ == other.__dict__
                and getattr(other, "__pydantic_extra__", None) is None
                and getattr(other, "__pydantic_private__", None) is None
            )
        return NotImplemented

    # A SearchHit is frozen, so hashable; defining __eq__ would take that away.
    __hash__ = SearchHit.__hash__

    def __repr_name__(self) -> str:
        return "SearchHit"


_SOURCE: Any = _Hit.__dict__["_sessiondb_source"]
_get_source = _SOURCE.__get__
_set_source = _SOURCE.__set__
_del_source = _SOURCE.__delete__


@lru_cache(maxsize=256)
def _written(
    query: Query, thinking: bool, postgres: bool
) -> tuple[str, str, Callable[[str, int], tuple[str, tuple[tuple[int, int], ...]]]]:
    """The query in the backend's syntax, as SQLite's rank reads it (empty on Postgres),
    and its snippet cutter: made once for a query a service asks again and again (~3 µs
    of every search)."""
    if postgres:
        return to_tsquery(query, thinking), "", snippets(query)
    return to_fts5(query, thinking), rank_query(query), snippets(query)


def _best(row: Sequence[Any]) -> tuple[float, str, int]:
    """A SQLite hit row's place on its page: best rank first, then session and seq."""
    return -row[6], row[0], row[1]


def _roles(roles: Sequence[str] | None) -> list[str] | None:
    if roles is None:
        return None
    if isinstance(roles, str) or not isinstance(roles, Sequence):
        raise InvalidInputError(f"roles must be a list of roles, got {brief(roles)}")
    chosen = list(roles)
    if not chosen or len(chosen) > len(_ROLES) or not all(r in _ROLES for r in chosen):
        raise InvalidInputError(
            f"roles must name some of {', '.join(sorted(_ROLES))}; got {brief(roles)}"
        )
    return sorted(set(chosen))


class WordStatistics:
    """What ANALYZE knew of the search index's words when last read: the indexed
    records and the share of them holding each of the most common words."""

    __slots__ = ("indexed", "read_at", "shares")

    def __init__(self, indexed: float, shares: dict[str, float], read_at: float) -> None:
        self.indexed = indexed
        self.shares = shares
        self.read_at = read_at

    def share(self, query: Query) -> float:
        """An estimate of the share of indexed records ``query`` matches (0 for words
        ANALYZE found too rare to list): every group must match, a group is any of its
        terms, a phrase is no commoner than its rarest word, a prefix as common as the
        listed words it begins."""
        found = 1.0
        for group in query.groups:
            either = 0.0
            for term in group:
                words = [w.lower() for w in term.words]
                rarest = min((self.shares.get(w, 0.0) for w in words[:-1]), default=1.0)
                last = words[-1]
                if term.prefix:
                    tail = sum(f for w, f in self.shares.items() if w.startswith(last))
                else:
                    tail = self.shares.get(last, 0.0)
                either += min(rarest, tail)
            found = min(found, either)
        return min(found, 1.0)


async def _statistics(core: Core) -> WordStatistics:
    """The cached :class:`WordStatistics` of ``core``'s database, read again after
    :data:`STATISTICS_SECONDS`; empty when ANALYZE has not run, they cannot be read or
    the recency index is missing: search then takes the GIN index's path."""
    cached: WordStatistics | None = core.search_statistics
    now = time.monotonic()
    if cached is not None and now - cached.read_at < STATISTICS_SECONDS:
        return cached
    try:
        rows = await core.backend.fetch(sq.word_statistics(), plain=True)
    except SessionDBError:
        rows = []
    stats = WordStatistics(0.0, {}, now)
    # Without the recency index (new code ahead of migration 0008), always the GIN path.
    if rows and rows[0][2] is not None and rows[0][4]:
        tuples, nulls, words, shares, _ = rows[0]
        stats.indexed = max(float(tuples), 0.0) * (1.0 - float(nulls or 0.0))
        stats.shares = dict(zip(words, map(float, shares), strict=False))
    core.search_statistics = stats
    return stats


def newest_first(stats: WordStatistics, query: Query) -> bool:
    """Postgres: whether the window is cheaper read newest first from the recency index (each
    record read checked against the query) than from every match the GIN index finds
    (the same rows either way)."""
    if not stats.indexed:
        return False
    share = stats.share(query)
    if share <= 0.0:
        return False
    matches = share * stats.indexed
    if matches <= WINDOW:
        return False
    reading = min(WINDOW / share, stats.indexed) * _SCAN_US + WINDOW * _CHECK_US
    return reading < matches * _MATCH_US


async def search(
    core: Core,
    query: str,
    *,
    limit: int = 20,
    cursor: str | None = None,
    session_id: str | None = None,
    roles: Sequence[str] | None = None,
    since: datetime | None = None,
    thinking: bool = False,
    hidden: bool = False,
) -> SearchPage:
    """One page of hits for ``query``: messages and compaction summaries of the
    namespace, best first (highest ``rank``), then by session and seq.

    Only the newest :data:`WINDOW` matches (every filter below applied first) are
    ranked: a query with fewer matches ranks them all; one with more gives the best of
    its newest ``WINDOW`` (newest: by rowid on SQLite, by ``(created_at, session_id,
    seq)`` on Postgres). The pages of one walk keep to its first page's window, while
    records are written, without repeating or losing a hit.

    Args:
        query: words (all must match), ``"a phrase"``, ``-word`` / ``-"a phrase"``
            (must not match), ``a OR b``, ``word*`` (a prefix); the same meaning on both
            backends (:mod:`sessiondb.search_query`).
        limit: hits per page, 1..:data:`MAX_LIMIT`.
        cursor: the ``next_cursor`` of the previous page of the same search.
        session_id: only that session's records along its lineage (a fork's inherited
            records too, reported with this id), its tombstones and prunes applied.
        roles: only messages of these roles (compaction summaries have none).
        since: only records written at or after this aware datetime.
        thinking: search thinking blocks too (their text joins the snippet).
        hidden: tombstoned and pruned records too.

    Raises:
        InvalidQueryError: the query cannot be read (empty, too long, only exclusions).
        InvalidInputError: another argument is out of range, or a cursor of another
            search.
        SessionNotFoundError: ``session_id`` names no session of the namespace.
        ConfigurationError: the store does not index text (``core.search_indexing``).
        EncryptionError: the namespace is encrypted: an index would hold its plaintext.
    """
    if core.encrypted:
        raise EncryptionError(
            "search refuses an encrypted namespace: a full-text index would keep its "
            "text in plaintext beside the ciphertext"
        )
    if not core.search_indexing:
        raise ConfigurationError(
            "search is off for this store: it does not index the text of its records "
            "(an encrypted namespace keeps no plaintext index)"
        )
    if not core.search_schema:
        raise ConfigurationError(
            "the database has no search index yet: run `sessiondb migrate` or "
            "`await store.migrate()` (revision 0006)"
        )
    parsed = parse(query)
    strict_int(limit, "limit", minimum=1, maximum=MAX_LIMIT)
    for name, flag in (("thinking", thinking), ("hidden", hidden)):
        if not isinstance(flag, bool):
            raise InvalidInputError(f"{name} must be True or False, got {brief(flag)}")
    if session_id is not None:
        check_session_id(session_id)
    chosen = _roles(roles)
    if since is not None and (not isinstance(since, datetime) or since.tzinfo is None):
        raise InvalidInputError(f"since must be a timezone-aware datetime, got {brief(since)}")
    mark = _fingerprint(query, (session_id, chosen, since and since.isoformat(), thinking, hidden))
    postgres = core.flavour == q.POSTGRES
    after, bounds = _decode(cursor, mark, postgres) if cursor is not None else (None, None)
    window = WINDOW if after is None else LATER_PAGE_SLACK * WINDOW
    rendered, ranked, cut_snippet = _written(parsed, thinking, postgres)
    # A common word's window is read newest first; a session's lineage, small beside the
    # table, is always searched through the GIN index (the plan it had before windows).
    common = postgres and session_id is None and newest_first(await _statistics(core), parsed)
    bound = sq.search(
        core.flavour,
        core.namespace,
        rendered,
        limit=limit + 1,
        window=window,
        search_config=core.settings.search_config,
        session_id=session_id,
        roles=chosen,
        since=since,
        after=after,
        bounds=bounds,
        hidden=hidden,
        common=common,
        rank_query=ranked,
    )
    # Read by position (sq.search's columns), as plain tuples on SQLite.
    rows = await core.backend.fetch(bound, plain=True)
    window_row: Sequence[Any] = rows[0] if rows else ()
    if not postgres:  # the page in no order, and the window's row (no session id)
        window_row = rows.pop(-1 if rows[-1][0] is None else [r[0] for r in rows].index(None))
        rows.sort(key=_best)
    if session_id is not None and not rows and cursor is None:
        await core.session(session_id)  # raises SessionNotFoundError when missing
    hits: list[SearchHit] = []
    for row in rows[:limit]:
        # A slice, not a starred unpacking (a list made for every row): ~2 µs a page.
        sid, seq, kind, role, created_at, payload, rank = row[:7]
        hit = trusted(
            _Hit,
            {
                "session_id": session_id if session_id is not None else sid,
                "seq": seq if seq.__class__ is int else int(seq),
                "kind": kind,
                "role": role,
                "rank": rank if rank.__class__ is float else float(rank),
            },
            _HIT_FIELDS,
        )
        _set_source(hit, (created_at, payload, thinking, cut_snippet))
        hits.append(hit)
    next_cursor = None
    if len(rows) > limit:
        sid, seq, _, _, _, _, rank, *_ = rows[limit - 1]
        if after is None:  # the first page: its window's bounds, if it was full
            bounds = sq.window_of(core.flavour, window_row, window)
        next_cursor = _encode(float(rank), sid, int(seq), mark, bounds)
    return trusted(SearchPage, {"hits": hits, "next_cursor": next_cursor}, _PAGE_FIELDS)
