"""Export's fast path: a format's line cut out of the stored text of its record, with no
parse.

Export writes a format's line back as its envelope's line with the message content put
in again. Parsing a 1 kB payload for that costs about 2 us, and most of it goes to the
envelope's dozen small strings, not to the content. So a reader may store a message
laid out for splicing, and a writer then cuts the line out of the stored text with no
parse:

    {"role": ..., ..., "content": [...],
     KEY: {"content": form, "line": {..., "message": {...}}, "splice": hex}}

The content comes just before the envelope, the envelope last, the message last in
its line, and ``splice`` (32 hex digits) holds where the content is as the line holds
it (the payload's content list, or the text of its one text block), where the line
starts and where its message ends. The writer checks the text is still laid out so:
the first ``"content":`` in it is the content's key (none of the reader's members
before it holds an object; a ``Message`` model, or a sorted dump, writes ``content``
second or first, so a payload serialised again is caught), the envelope opens where
the content ends, and the line and its message start and end where the offsets say.
A text that fails any of these is parsed instead.

An ``entry`` record's line is cut out of its payload's text the same way
(:func:`entry_line`).
"""

from __future__ import annotations

import struct
from binascii import unhexlify
from typing import Any

import orjson

_SPLICE_AT = ',"splice":"'
_SPLICE_AT_BYTES = _SPLICE_AT.encode()
_SPLICE_TAIL = len(_SPLICE_AT) + 32 + 3  # the hex, then '"}}'
_SPLICE_FIELDS = struct.Struct(">4I")
# The envelope's opening text by (key, form), and the forms a splice knows.
_OPENERS: dict[tuple[str, str], bytes] = {}
_FORMS = frozenset(("blocks", "string"))
# The text block a one-string content is stored as (``wire_message``'s form).
_TEXT_BLOCK = b'[{"type":"text","text":'


def splice(payload: dict[str, Any], key: str) -> str | None:
    """The text of message ``payload`` laid out for :func:`spliced_line`, its envelope
    under ``key`` given the ``splice`` member the text ends with.

    The payload must be in the stored order already (the reader builds it so): its
    members, none an object with a ``content`` key; then ``content``; then the envelope
    ``{"content": form, "line": line}``, where ``line`` is the message's line less its
    message's ``content``, with ``message`` last. ``form`` is ``"blocks"`` (the line's
    content is the payload's content list as it is) or ``"string"`` (its one text
    block's text). ``None`` when it is not, or orjson refuses a value: store it the
    usual way.
    """
    envelope = payload[key]
    form, line = envelope["content"], envelope["line"]
    if (
        len(envelope) != 2
        or next(iter(envelope)) != "content"
        or form not in _FORMS
        or next(reversed(line), None) != "message"
        or next(reversed(payload)) != key
    ):
        return None
    try:
        whole = orjson.dumps(payload)
    except (TypeError, orjson.JSONEncodeError):
        return None
    begin = whole.find(b'"content":') + 10
    opener = _OPENERS.get((key, form))
    if opener is None:
        opener = _OPENERS[key, form] = b',"%s":{"content":"%s","line":{' % (
            key.encode(),
            form.encode(),
        )
    stop = whole.find(opener, begin)
    brace = len(whole) - 4  # the message's "}", then the line's, the envelope's, the payload's
    if (
        begin < 10
        or stop < 0
        or whole.count(opener, stop + 1)  # the envelope opens once, after the content
        or whole[-4:] != b"}}}}"
        or brace > 0xFFFFFFFF
    ):
        return None
    line_at = stop + len(opener) - 1
    if form == "string":
        if (
            whole[begin : begin + len(_TEXT_BLOCK)] != _TEXT_BLOCK
            or whole[stop - 2 : stop] != b"}]"
        ):
            return None
        begin, stop = begin + len(_TEXT_BLOCK), stop - 2
    offsets = _SPLICE_FIELDS.pack(begin, stop, line_at, brace).hex()
    envelope["splice"] = offsets
    return f'{whole[:-2].decode()}{_SPLICE_AT}{offsets}"}}}}'


def spliced_line(text: str | bytes) -> bytes | None:
    """The line a :func:`splice` payload's text (or its UTF-8 bytes, as export reads it)
    holds, with its newline; ``None`` for any other text (the writer then parses the
    payload)."""
    data = text if text.__class__ is bytes else str(text).encode("utf-8", "surrogatepass")
    assert isinstance(data, bytes)
    end = len(data) - _SPLICE_TAIL
    if end < 10 or data[end : end + 11] != _SPLICE_AT_BYTES or data[-3:] != b'"}}':
        return None
    try:
        begin, stop, line_at, brace = _SPLICE_FIELDS.unpack(unhexlify(data[end + 11 : -3]))
    except ValueError:  # not hex (binascii.Error)
        return None
    if not 10 <= begin <= stop < line_at < brace < end:
        return None
    if data[begin] == 0x5B:  # "[": the content list itself
        key_at, opens_at = begin - 10, stop
    else:  # the text of its one text block
        key_at, opens_at = begin - len(_TEXT_BLOCK) - 10, stop + 2
        if data[key_at + 10 : begin] != _TEXT_BLOCK or data[stop:opens_at] != b"}]":
            return None
    if (
        data.find(b'"content":') != key_at
        or data[opens_at] != 0x2C  # ",": the envelope follows the content
        or data[line_at - 7 : line_at + 1] != b'"line":{'
        or data[brace] != 0x7D  # "}"
    ):
        return None
    comma = b"" if data[brace - 1] == 0x7B else b","  # 0x7B: "{", an empty message
    return b"".join(
        (data[line_at:brace], comma, b'"content":', data[begin:stop], data[brace:end], b"\n")
    )


def entry_prefix(fmt: str) -> bytes:
    """What the text of format ``fmt``'s :func:`~sessiondb.formats.lines.entry_payload`
    with no extra member starts with: the ``prefix`` :func:`entry_line` takes."""
    return b'{"format":%s,"line":{' % orjson.dumps(fmt)


def entry_line(text: str | bytes, prefix: bytes) -> bytes | None:
    """The line an :func:`~sessiondb.formats.lines.entry_payload` text (or its UTF-8
    bytes) with no extra members holds (``prefix``: ``{"format":"<name>","line":{``, see
    :func:`entry_prefix`), with its newline; ``None`` for any other text.

    The line is the object after the prefix up to the payload's closing brace: the
    payload has no member after it (an extra member comes before the line, and a part
    number written after it by an older import ends the text with a digit, not ``}}``).
    """
    data = text if text.__class__ is bytes else str(text).encode("utf-8", "surrogatepass")
    assert isinstance(data, bytes)
    if data.startswith(prefix) and data.endswith(b"}}"):
        return data[len(prefix) - 1 : -1] + b"\n"
    return None
