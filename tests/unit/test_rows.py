"""Reading a timestamp column (sessiondb.rows.utc): the SQLite backend's own text by a
fast path, any other ISO text and datetimes as before; pure, no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessiondb.backends.sqlite import timestamp
from sessiondb.rows import utc


@given(st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)))
def test_the_sqlite_backends_text_reads_back_as_the_same_aware_utc_time(at: datetime) -> None:
    text = timestamp(at.replace(tzinfo=UTC))
    got = utc(text)
    assert got == at.replace(tzinfo=UTC) and got.tzinfo is UTC
    assert got == datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-11-25 23:28:40.495453", datetime(2026, 11, 25, 23, 28, 40, 495453, UTC)),
        ("2026-11-25T23:28:40.495453", datetime(2026, 11, 25, 23, 28, 40, 495453, UTC)),
        ("2026-11-25 23:28:40", datetime(2026, 11, 25, 23, 28, 40, tzinfo=UTC)),
        ("2026-11-25 23:28:40.495+02:00", datetime(2026, 11, 25, 21, 28, 40, 495000, UTC)),
        ("2026-11-25 23:28:40.495+02", datetime(2026, 11, 25, 21, 28, 40, 495000, UTC)),
        ("2026-11-25 23:28:40.49+0200", datetime(2026, 11, 25, 21, 28, 40, 490000, UTC)),
        (datetime(2026, 1, 1), datetime(2026, 1, 1, tzinfo=UTC)),
        (
            datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=2))),
            datetime(2025, 12, 31, 22, tzinfo=UTC),
        ),
    ],
)
def test_other_texts_and_datetimes_read_as_before(
    value: str | datetime, expected: datetime
) -> None:
    got = utc(value)
    assert got == expected and got.tzinfo is UTC
