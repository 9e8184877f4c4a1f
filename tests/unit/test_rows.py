"""Reading a timestamp column (sessiondb.rows.utc): the SQLite backend's own text by a
fast path, any other ISO text and datetimes as before; pure, no database."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessiondb.backends.sqlite import timestamp
from sessiondb.errors import CorruptRecordError
from sessiondb.models import Metrics, SessionInfo, TurnInfo
from sessiondb.rows import session_info, utc


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


# -- a sessions row as a model: as it is when exact, validated otherwise --------------------

_AT = datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=UTC)
_ROW: dict[str, Any] = {
    "id": "01J9Z3K7Q8R2V5X4W6Y0A1B2C3",
    "namespace": "default",
    "name": "a name",
    "created_at": _AT,
    "last_message_at": "2026-01-02 03:04:06.000001",
    "model": None,
    "message_count": 3,
    "last_seq": 4,
    "source": "cron",
    "cron_job_id": "job",
    "system_prompt_override": None,
    "input_tokens": 1,
    "output_tokens": 2,
    "cache_read_tokens": 0,
    "cache_write_tokens": 5,
    "cost_total": 0.25,
    "metadata_json": '{"k": [1, {"n": null}]}',
    "parent_id": None,
    "fork_seq": None,
    "key": "mine",
}
_TURN = {"turn_holder": "w1", "turn_acquired_at": _AT, "turn_expires_at": _AT}


_MADE = {"created_at", "last_message_at"}


def _validated(row: dict[str, Any]) -> SessionInfo:
    """The model as pydantic validates it from the row's values."""
    metrics = Metrics(**{n: row[n] for n in Metrics.model_fields})
    turn = row.get("turn_holder")
    return SessionInfo(
        **{n: row[n] for n in SessionInfo.model_fields if n in row and n not in _MADE},
        created_at=utc(row["created_at"]),
        last_message_at=utc(row["last_message_at"]) if row["message_count"] else None,
        metrics=metrics,
        metadata=json.loads(row["metadata_json"]) if row["metadata_json"] else None,
        turn=None
        if turn is None
        else TurnInfo(
            holder=turn,
            acquired_at=utc(row["turn_acquired_at"]),
            expires_at=utc(row["turn_expires_at"]),
        ),
    )


@pytest.mark.parametrize(
    "row",
    [_ROW, {**_ROW, **_TURN}, {**_ROW, "message_count": 0, "metadata_json": None}],
    ids=["plain", "turn", "empty"],
)
def test_an_exact_row_is_the_model_validation_makes(row: dict[str, Any]) -> None:
    made = session_info(row)
    expected = _validated(row)
    assert made == expected
    assert repr(made) == repr(expected)
    assert made.model_dump(by_alias=True) == expected.model_dump(by_alias=True)
    assert made.model_dump_json() == expected.model_dump_json()
    assert made.model_fields_set == expected.model_fields_set
    assert made.metrics.model_fields_set == expected.metrics.model_fields_set


@pytest.mark.parametrize(
    "change",
    [
        {"cost_total": 1},  # an integer in a REAL column: converted as before
        {"message_count": True},
        {"fork_seq": "7"},
        {"input_tokens": 2.0},
    ],
    ids=repr,
)
def test_a_row_of_other_types_is_converted_as_validation_converts_it(
    change: dict[str, Any],
) -> None:
    row = {**_ROW, **change}
    assert session_info(row) == _validated(row)


@pytest.mark.parametrize(
    "change",
    [{"source": "webhook"}, {"id": 7}, {"message_count": "many"}, {"metadata_json": "[1]"}],
    ids=repr,
)
def test_a_row_no_model_can_hold_is_refused_naming_the_session(
    change: dict[str, Any],
) -> None:
    row = {**_ROW, **change}
    with pytest.raises(CorruptRecordError, match=f"session {row['id']!r}: its stored row"):
        session_info(row)
