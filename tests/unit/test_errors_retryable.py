"""Each error says whether making the same call again is safe (``retryable``)."""

from __future__ import annotations

import inspect

import pytest

import sessiondb
from sessiondb import errors

RETRYABLE = {"BusyError", "DatabaseUnavailableError"}


def _classes() -> list[type[errors.SessionDBError]]:
    return [
        c
        for _, c in inspect.getmembers(errors, inspect.isclass)
        if issubclass(c, errors.SessionDBError)
    ]


@pytest.mark.parametrize("cls", _classes(), ids=lambda c: c.__name__)
def test_every_error_class_says_whether_it_is_retryable(cls: type[errors.SessionDBError]) -> None:
    assert "retryable" in {k for c in cls.__mro__ for k in vars(c)}
    assert cls.retryable is (cls.__name__ in RETRYABLE)


def test_conflicts_and_bad_input_are_not_retryable() -> None:
    assert sessiondb.SeqConflictError("s", 1, 2).retryable is False
    assert sessiondb.InvalidInputError("x").retryable is False
    assert sessiondb.HasChildrenError("s", ["c"]).retryable is False
    assert sessiondb.BusyError().retryable is True


def test_an_unknown_commit_outcome_is_not_retryable() -> None:
    lost = sessiondb.DatabaseUnavailableError("lost")
    unknown = sessiondb.DatabaseUnavailableError("lost after COMMIT", outcome_unknown=True)
    assert (lost.retryable, lost.outcome_unknown) == (True, False)
    assert (unknown.retryable, unknown.outcome_unknown) == (False, True)
    assert type(unknown).retryable is True  # the class is unchanged
