"""Checks of values before they reach SQL: plain functions, no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import ValidationError

from . import jsoncodec
from .errors import InvalidInputError, brief
from .jsoncodec import MAX_JSON_DEPTH


def column_text(value: Any, what: str, *, optional: bool = True) -> str | None:
    """A string for an indexed column: refuse what the databases cannot store."""
    if value is None:
        if optional:
            return None
        raise InvalidInputError(f"{what} is required")
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise InvalidInputError(f"{what} must not contain NUL characters: {brief(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(f"{what} must not contain lone surrogates: {brief(value)}") from exc
    return value


# Bounds of a session's text fields, in characters. A name is shown in listings (a
# derived one is 50 characters); a model is an id like "claude-sonnet-4-5-20250929"; a
# cron job id is the caller's job name. Generous beside any real value, and small enough
# that a page of 1,000 sessions stays a few MB. ``source`` is one of two words;
# ``system_prompt_override`` and ``metadata`` are bounded by the store's
# ``max_record_bytes`` (UTF-8 bytes of the stored text), like a record.
MAX_NAME_CHARS = 1024
MAX_MODEL_CHARS = 256
MAX_CRON_JOB_ID_CHARS = 256


def bounded_text(value: Any, what: str, limit: int, *, optional: bool = True) -> str | None:
    """:func:`column_text` of at most ``limit`` characters."""
    text = column_text(value, what, optional=optional)
    if text is not None and len(text) > limit:
        raise InvalidInputError(
            f"{what} must be at most {limit} characters, got {len(text)}: {brief(text, 40)}"
        )
    return text


#: The session columns its caller sets (:func:`session_fields` checks them); a fork
#: copies them from its parent.
SESSION_FIELD_COLUMNS = ("name", "model", "cron_job_id", "system_prompt_override", "metadata_json")


def session_fields(
    name: Any,
    model: Any,
    cron_job_id: Any,
    system_prompt_override: Any,
    metadata: Any,
    max_bytes: int,
) -> dict[str, Any]:
    """The checked text columns of a session row: ``name``, ``model``, ``cron_job_id``,
    ``system_prompt_override`` and ``metadata_json`` (``metadata`` as JSON text, or
    ``None``), each within its bound.

    Raises:
        InvalidInputError: a value is not storable or is over its bound; the message
            names the field.
    """
    fields: dict[str, str | None] = {
        "name": bounded_text(name, "name", MAX_NAME_CHARS),
        "model": bounded_text(model, "model", MAX_MODEL_CHARS),
        "cron_job_id": bounded_text(cron_job_id, "cron_job_id", MAX_CRON_JOB_ID_CHARS),
        "system_prompt_override": column_text(system_prompt_override, "system_prompt_override"),
        "metadata_json": None if metadata is None else to_json(metadata, "metadata"),
    }
    for field in ("system_prompt_override", "metadata_json"):
        text = fields[field]
        if text is not None:
            check_record_size(text, max_bytes, field.removesuffix("_json"))
    return fields


# A key is the caller's own address for a session. 512 characters, and at most 1,536
# bytes of UTF-8, so that with a namespace of 255 characters the entry of the unique
# (namespace, key) index stays under Postgres's btree limit of 2,704 bytes.
MAX_KEY_CHARS = 512
MAX_KEY_BYTES = 1536


def session_key(value: Any) -> str:
    """A session key: a non-empty string of at most :data:`MAX_KEY_CHARS` characters that
    a text column holds exactly (no NUL, no lone surrogate). Kept as given: case,
    spaces and Unicode normalisation all count."""
    key = column_text(value, "key", optional=False)
    assert key is not None
    if not key:
        raise InvalidInputError("key must not be empty")
    if len(key) > MAX_KEY_CHARS or len(key.encode("utf-8")) > MAX_KEY_BYTES:
        raise InvalidInputError(
            f"key must be at most {MAX_KEY_CHARS} characters ({MAX_KEY_BYTES} bytes of "
            f"UTF-8), got {len(key)} characters: {key[:40]!r}…"
        )
    return key


def to_json(value: Any, what: str) -> str:
    """JSON text for a payload; a value JSON cannot hold (a set, a tuple key) is bad input."""
    try:
        return jsoncodec.dumps(value, max_depth=MAX_JSON_DEPTH)
    except jsoncodec.TooDeepError:
        raise InvalidInputError(too_deep(what)) from None
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{what} cannot be stored as JSON: {exc}") from exc
    except RecursionError:
        raise InvalidInputError(too_deep(what)) from None


def too_deep(what: str) -> str:
    """The message for a value nested past :data:`MAX_JSON_DEPTH`."""
    return f"{what} is nested more than {MAX_JSON_DEPTH} levels deep (arrays and objects)"


def check_depth(value: Any, what: str, text: str | bytes | None = None) -> None:
    """Refuse ``value`` if it nests arrays and objects past :data:`MAX_JSON_DEPTH`.

    ``text``: the value's JSON text, if at hand; when it holds too few ``[`` and ``{``
    to be that deep, the value is not walked.

    Raises:
        InvalidInputError: the value is too deep; the message names ``what``.
    """
    if text is not None and not jsoncodec.text_deeper_than(text):
        return
    if jsoncodec.deeper_than(value):
        raise InvalidInputError(too_deep(what))


def strict_int(
    value: Any, what: str, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """An int (not a bool) within 64 bits and within ``minimum``..``maximum``: the one
    check every integer argument goes through, so that each says the same."""
    low = -(2**63) if minimum is None else minimum
    high = 2**63 - 1 if maximum is None else maximum
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        wanted = _int_range(minimum, maximum)
        raise InvalidInputError(f"{what} must be {wanted}, got {brief(value)}")
    return value


def _int_range(minimum: int | None, maximum: int | None) -> str:
    if maximum is not None:
        return f"an int in {minimum if minimum is not None else -(2**63)}..{maximum}"
    if minimum is None:
        return "a 64-bit int"
    if minimum == 0:
        return "a non-negative int"
    if minimum == 1:
        return "a positive int"
    return f"an int >= {minimum}"


def check_record_size(payload: str, limit: int, what: str) -> None:
    """Refuse a record whose stored JSON is over ``limit`` bytes (UTF-8)."""
    if len(payload) <= limit // 4:  # at most 4 bytes a character: no need to count
        return
    size = len(payload.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise InvalidInputError(
            f"{what} is {size} bytes as stored, over the store's max_record_bytes of {limit}"
        )


def check_bool(value: object, name: str) -> None:
    """A flag: ``True`` or ``False``, not a truthy value."""
    if not isinstance(value, bool):
        raise InvalidInputError(f"{name} must be True or False, got {brief(value)}")


def check_source(source: object, cron_job_id: object) -> None:
    """A session's ``source``, and ``cron_job_id`` only with ``source='cron'``."""
    if source not in ("interactive", "cron"):
        raise InvalidInputError(f"source must be 'interactive' or 'cron', got {brief(source)}")
    if source == "interactive" and cron_job_id is not None:
        raise InvalidInputError("cron_job_id is only for source='cron'")


def check_list(value: object, name: str, what: str) -> None:
    """A list-like of ``what``: an iterable that is not itself one string."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InvalidInputError(f"{name} must be a list of {what}, got {brief(value)}")


def record_kinds(kinds: Iterable[str] | None, known: Sequence[str]) -> tuple[str, ...] | None:
    """``records(kinds=…)`` checked: an iterable of known kind names, not one string;
    sorted and unique, so that each set of kinds makes one cached statement."""
    if kinds is None:
        return None
    if isinstance(kinds, str | bytes) or not isinstance(kinds, Iterable):
        raise InvalidInputError(
            f"kinds must be a list of kind names ({', '.join(known)}), got {brief(kinds)}"
        )
    chosen = []
    for kind in kinds:
        if not isinstance(kind, str) or kind not in known:
            raise InvalidInputError(
                f"unknown record kind {brief(kind)}; kinds are {', '.join(known)}"
            )
        chosen.append(kind)
    return tuple(sorted(set(chosen)))


def prune_seqs(seqs: object, most: int) -> list[int]:
    """``append_prune``'s seqs checked: a non-empty list of at most ``most`` distinct
    positive ints; sorted."""
    if isinstance(seqs, str | bytes) or not isinstance(seqs, Sequence):
        raise InvalidInputError(f"seqs must be a list of ints, got {type(seqs).__name__}")
    if not seqs:
        raise InvalidInputError("seqs must name at least one tool result")
    if len(seqs) > most:
        raise InvalidInputError(f"at most {most} seqs per prune, got {len(seqs)}")
    for seq in seqs:
        strict_int(seq, "each seq", minimum=1)
    if len(set(seqs)) != len(seqs):
        raise InvalidInputError("the same seq appears twice in seqs")
    return sorted(seqs)


def first_error(exc: ValidationError) -> str:
    """A pydantic error as one line: where, then what."""
    first = exc.errors()[0]
    message = str(first["msg"]).removeprefix("Value error, ")
    where = ".".join(str(p) for p in first["loc"])
    return message if where in ("messages", "") else f"{where}: {message}"
