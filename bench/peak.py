"""Peak memory of importing one file, measured in a process of its own.

``python -m bench.peak URL FILE`` imports ``FILE`` (Claude Code) into the store at
``URL`` and prints one JSON object: the resident set just before the import
(interpreter, modules, the open store), the peak resident set reached by the end of
it, in bytes, and the records written. The resident set counts what tracemalloc does
not see (SQLite's page caches, the drivers' buffers); a process of its own keeps other
figures' garbage out of it. The peak is Linux's ``VmHWM``, which (unlike
``ru_maxrss``) does not carry over the parent's peak through fork and exec.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
from pathlib import Path

from sessiondb import SessionStore


def _status(field: str) -> int:
    """A ``/proc/self/status`` size in bytes; ``ru_maxrss`` where there is none."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


async def _run(url: str, path: Path) -> dict[str, int]:
    async with SessionStore.open(url) as store:
        await store.list_sessions(limit=1)  # connections and statements warmed
        before = _status("VmRSS")
        report = await store.import_path(path, format="claude-code")
        after = _status("VmHWM")
    if report.failures:
        raise SystemExit(f"import failed: {report.failures[0]}")
    return {"before": before, "peak": after, "records": report.records}


def main() -> None:
    url, path = sys.argv[1], Path(sys.argv[2])
    print(json.dumps(asyncio.run(_run(url, path))))


if __name__ == "__main__":
    main()
