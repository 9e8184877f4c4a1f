"""Branches of an SDK conversation, as sessiondb forks (by reference: no row is copied).

The conversation's keyed session is the branch ``main``; every other branch is a fork
(of ``main`` or of another branch) whose name is ``BRANCH_PREFIX`` plus the branch's
id. Other forks of the session (made with ``SessionStore.fork`` or the CLI) are not
branches.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ...errors import InvalidInputError, brief
from ...models import SessionInfo
from ...store import SessionStore
from ...validation import MAX_NAME_CHARS

#: The branch that is the keyed session itself.
MAIN = "main"
#: How the name of a branch's fork starts; the branch id follows.
BRANCH_PREFIX = "openai-agents branch: "
_PAGE = 1000


@dataclass(frozen=True)
class Branch:
    """A branch: its id, its session, the branch it was made from and where."""

    branch_id: str
    session_id: str
    parent_branch: str | None
    fork_seq: int | None
    created_at: datetime


def branch_id_of(name: str | None) -> str | None:
    """The branch id a fork's name gives, ``None`` when the fork is not a branch."""
    if name is None or not name.startswith(BRANCH_PREFIX):
        return None
    return name[len(BRANCH_PREFIX) :] or None


def check_branch_id(value: object, what: str = "branch_id") -> str:
    """A branch id given by the caller.

    Raises:
        InvalidInputError: not a non-blank string that fits a session name.
    """
    limit = MAX_NAME_CHARS - len(BRANCH_PREFIX)
    if not isinstance(value, str) or not value.strip():
        raise InvalidInputError(f"{what} must be a non-blank string, got {brief(value)}")
    if len(value) > limit or "\x00" in value or _has_surrogate(value):
        raise InvalidInputError(
            f"{what} must be at most {limit} characters, without NUL or lone surrogates"
        )
    return value


def _has_surrogate(text: str) -> bool:
    return any("\ud800" <= c <= "\udfff" for c in text)


async def find_branches(store: SessionStore, main: SessionInfo) -> list[Branch]:
    """Every branch of the conversation whose keyed session is ``main``, ``main`` first,
    then by creation. A branch's sub-branches are found through its own forks."""
    found = [Branch(MAIN, main.id, None, None, main.created_at)]
    queue = [(main.id, MAIN)]
    while queue:
        parent_id, parent_branch = queue.pop(0)
        cursor: str | None = None
        while True:
            page = await store.list_sessions(_PAGE, cursor, parent_id=parent_id)
            for info in page.items:
                branch_id = branch_id_of(info.name)
                if branch_id is None or branch_id == MAIN:
                    continue
                found.append(
                    Branch(branch_id, info.id, parent_branch, info.fork_seq, info.created_at)
                )
                queue.append((info.id, branch_id))
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
    first, rest = found[0], found[1:]
    rest.sort(key=lambda b: (b.created_at, b.session_id))
    return [first, *rest]


__all__ = ["BRANCH_PREFIX", "MAIN", "Branch", "branch_id_of", "check_branch_id", "find_branches"]
