"""SECURITY.md names the test that holds each promise; each named test must exist.

A test renamed or removed without the page following would leave a promise unheld and
the page still claiming it. Read with :mod:`ast`, so nothing is imported.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "SECURITY.md"
# `tests/dir/test_file.py::test_name`, or a whole file: `tests/dir/test_file.py`.
REFERENCE = re.compile(r"`(tests/[\w/]+\.py)(?:::(\w+))?`")


def _promises() -> list[tuple[str, list[tuple[str, str | None]]]]:
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("## What is promised, and the test that holds it", 1)[1]
    section = section.split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("| ") or line.startswith(("| promise", "| ---")):
            continue
        promise, tests = line[2:].rsplit(" | ", 1)
        rows.append((promise, REFERENCE.findall(tests)))
    return rows


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.name.startswith("test_")
    }


PROMISES = _promises()


def test_the_page_lists_promises() -> None:
    assert len(PROMISES) >= 15


@pytest.mark.parametrize(("promise", "references"), PROMISES, ids=[p for p, _ in PROMISES])
def test_every_promise_names_tests_that_exist(
    promise: str, references: list[tuple[str, str]]
) -> None:
    assert references, f"no test named for: {promise}"
    for file, name in references:
        path = ROOT / file
        assert path.is_file(), f"{file} (for: {promise}) does not exist"
        if name:
            assert name in _test_names(path), f"{file}::{name} (for: {promise}) does not exist"
