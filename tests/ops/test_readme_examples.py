"""The README's runnable examples run as written.

Each Python block after a ``<!-- runnable-example -->`` line runs in a process of its
own, in an empty directory, and must exit 0. ``<!-- runnable-example: MODULE EXTRA -->``
names the framework the example needs: without it the example is skipped with the
extra to install (a failure under ``SESSIONDB_REQUIRE_FRAMEWORKS=1``).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.frameworks import need_framework

README = Path(__file__).resolve().parents[2] / "README.md"
MARK = re.compile(
    r"^<!-- runnable-example(?:: (\S+) (\S+))? -->\n```python\n(.*?)^```", re.M | re.S
)


def examples() -> list[tuple[str, str | None, str | None, str]]:
    text = README.read_text(encoding="utf-8")
    found = []
    for match in MARK.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        module, extra, code = match.groups()
        found.append((f"README.md:{line}", module, extra, code))
    return found


def test_the_readme_has_examples() -> None:
    assert len(examples()) >= 3


@pytest.mark.parametrize(
    ("where", "module", "extra", "code"), examples(), ids=[e[0] for e in examples()]
)
def test_a_readme_example_runs(
    where: str, module: str | None, extra: str | None, code: str, tmp_path: Path
) -> None:
    if module is not None and extra is not None:
        need_framework(module, extra)
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"{where}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
