"""sessiondb.orm's public builders with any argument: a statement, or a SessionDBError."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy.dialects import postgresql, sqlite

from sessiondb import SessionDBError
from sessiondb.orm import SessionRow, lineage_records

anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.sampled_from(["\x00", "\ud800", "'; DROP TABLE x; --", '"', "$.a", ""]),
    st.binary(max_size=4),
    st.lists(st.text(max_size=3), max_size=2),
)
DIALECTS = [sqlite.dialect(), postgresql.dialect()]  # type: ignore[no-untyped-call]


@settings(database=None, deadline=None, max_examples=200)
@given(anything)
def test_fuzz_metadata_field(name: Any) -> None:
    try:
        expr = SessionRow.metadata_field(name)
    except SessionDBError:
        assert not isinstance(name, str) or "\x00" in name or "\ud800" in name
        return
    for dialect in DIALECTS:
        compiled = expr.compile(dialect=dialect)
        # The name is bound, never written into the SQL.
        assert compiled.params == {"metadata_field_1": name}


@settings(database=None, deadline=None, max_examples=200)
@given(anything, anything)
def test_fuzz_lineage_records(session_id: Any, namespace: Any) -> None:
    try:
        stmt = lineage_records(session_id, namespace)
    except SessionDBError:
        assert not (isinstance(session_id, str) and isinstance(namespace, str))
        return
    for dialect in DIALECTS:
        params = stmt.compile(dialect=dialect).params
        assert (params["sid"], params["ns"]) == (session_id, namespace)
