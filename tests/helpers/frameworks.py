"""The agent frameworks whose adapters sessiondb ships, imported or skipped in one place.

A framework's tests start with :func:`need_framework`: without the framework's package
the module is skipped with the extra to install; ``SESSIONDB_REQUIRE_FRAMEWORKS=1``
turns that skip into a failure (CI sets it, and installs every framework's extra).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def need_framework(module: str, extra: str) -> ModuleType:
    """Import ``module``, or skip the whole test module naming ``extra`` (fail it under
    ``SESSIONDB_REQUIRE_FRAMEWORKS=1``)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        reason = f"{module} is not installed ({exc}): pip install 'sessiondb[{extra}]'"
        if os.environ.get("SESSIONDB_REQUIRE_FRAMEWORKS") == "1":
            pytest.fail(f"{reason} (SESSIONDB_REQUIRE_FRAMEWORKS=1)", pytrace=False)
        pytest.skip(reason, allow_module_level=True)
