"""Every code example of the README and the documentation site (``docs/``) runs as written,
or says why it cannot.

Each ``python``, ``sh`` or ``bash`` block is preceded by a marker line:

- ``<!-- example -->``: a complete example. A Python block runs as a script, a shell block
  with ``bash -eu`` (the environment's ``python`` and ``sessiondb`` first on ``PATH``),
  each in a process of its own in an empty directory, and must exit 0.
- ``<!-- example: MODULE EXTRA -->``: the same, for an example that needs a framework;
  without MODULE it is skipped with the extra to install (a failure under
  ``SESSIONDB_REQUIRE_FRAMEWORKS=1``).
- ``<!-- example: fragment (why) -->`` or ``<!-- example: not-run (why) -->``: not run,
  with the reason (a part of a larger program, a server or a key of one's own, an
  install).

A block without a marker fails ``test_every_code_block_says_whether_it_runs``, so a new
example is run unless its author says why not. The README's two commands
(``<!-- quickstart-command -->``, ``<!-- test-command -->``) are what ``.ci/run`` runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.frameworks import need_framework

ROOT = Path(__file__).resolve().parents[2]
CODE = ("python", "sh", "bash")
MARKER = re.compile(r"^<!-- (?:example(?:: (?P<how>.*?))?|(?P<ci>quickstart|test)-command) -->$")
SKIPPED = re.compile(r"^(fragment|not-run) \(.+\)$")
#: Examples that run today; a change that loses some must say so here.
AT_LEAST = 17


@dataclass(frozen=True)
class Block:
    where: str  # file:line of the opening fence
    lang: str
    marker: str | None  # the marker's text after "example: ", "" for a bare one
    code: str

    @property
    def runs(self) -> bool:
        if self.marker is None or self.marker.endswith("-command"):
            return False
        return self.marker.split(" ")[0] not in ("fragment", "not-run")

    @property
    def framework(self) -> tuple[str, str] | None:
        if self.marker:
            module, _, extra = self.marker.partition(" ")
            return module, extra
        return None


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    found = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        if stripped.startswith("```") and len(stripped) > 3:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            lang = stripped[3:].split()[0]
            if lang in CODE:
                marker = _marker(lines[i - 1].strip()) if i else None
                code = textwrap.dedent("\n".join(lines[i + 1 : end])) + "\n"
                where = f"{path.relative_to(ROOT)}:{i + 1}"
                found.append(Block(where, lang, marker, code))
            i = end + 1
            continue
        i += 1
    return found


def _marker(line: str) -> str | None:
    match = MARKER.match(line)
    if match is None:
        return None
    if match.group("ci"):
        return f"{match.group('ci')}-command"
    return match.group("how") or ""


ALL = [b for path in documents() for b in blocks(path)]
RUN = [b for b in ALL if b.runs]


def test_every_code_block_says_whether_it_runs() -> None:
    unmarked = [b.where for b in ALL if b.marker is None]
    assert not unmarked, (
        "code blocks without an <!-- example … --> line before them (see this test's "
        "docstring): " + ", ".join(unmarked)
    )
    bad = [
        f"{b.where}: {b.marker!r}"
        for b in ALL
        if b.marker and not b.runs and "-command" not in b.marker and not SKIPPED.match(b.marker)
    ]
    assert not bad, "a block that does not run must give its reason in parentheses: " + str(bad)


def test_the_examples_are_counted() -> None:
    skipped = len(ALL) - len(RUN)
    print(f"\n{len(ALL)} code blocks: {len(RUN)} run, {skipped} marked fragment or not-run")
    assert len(RUN) >= AT_LEAST, f"only {len(RUN)} examples run, fewer than {AT_LEAST}"


@pytest.mark.parametrize("block", RUN, ids=[b.where for b in RUN])
def test_an_example_runs(block: Block, tmp_path: Path) -> None:
    if block.framework is not None:
        need_framework(*block.framework)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONDB_")}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    if block.lang == "python":
        script = tmp_path / "example.py"
        argv = [sys.executable, str(script)]
    else:
        script = tmp_path / "example.sh"
        argv = ["bash", "-eu", str(script)]
    script.write_text(block.code, encoding="utf-8")
    done = subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, f"{block.where}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
