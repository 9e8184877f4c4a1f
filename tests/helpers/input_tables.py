"""A table of bad inputs checked against one database.

A fresh Postgres database per case costs more than the case itself, so tests that try
many inputs loop over a table instead of parametrising, and name every case that went
wrong in the assertion.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any


async def not_refused(
    cases: dict[str, Any], call: Callable[[Any], Awaitable[Any]], error: type[Exception]
) -> dict[str, str]:
    """The cases that ``call`` did not refuse with ``error``: name -> what happened."""
    wrong: dict[str, str] = {}
    for name, case in cases.items():
        try:
            result = await call(case)
        except error:
            continue
        except Exception as exc:  # the wrong error is a failure too, named
            wrong[name] = f"raised {type(exc).__name__}: {exc}"[:300]
        else:
            wrong[name] = f"accepted: {result!r}"[:300]
    return wrong
