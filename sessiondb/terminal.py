"""Stored text made safe for a person's terminal.

Whatever the store holds came from users, models and files nobody checked; printed raw,
an ESC sequence rewrites the window title or clears the screen, a CR overwrites the line
before it, and a bidi override reorders what follows. :func:`shown` makes every such
character visible instead, as the escape a programmer would type (``\\x1b``, ``\\r``,
``\\u202e``), and leaves all other text as it is.

Escaped, always:

- C0 controls U+0000..U+001F (but see ``\\n`` and ``\\t`` below), DEL U+007F and C1
  controls U+0080..U+009F: ``\\x1b``, ``\\x07``, ``\\x9b``; ``\\r``, ``\\n``, ``\\t`` by
  their short names;
- the bidi marks, embeddings, overrides and isolates U+061C, U+200E, U+200F,
  U+202A..U+202E and U+2066..U+2069, and the line and paragraph separators U+2028 and
  U+2029: ``\\u202e``;
- lone surrogates U+D800..U+DFFF (which no terminal encoding can write): ``\\udc80``.

A single-line field (a name, an id, a table cell, a path) escapes ``\\n`` and ``\\t`` as
well, so that it cannot start a forged line or shift a column. A multi-line body
(``one_line=False``: message text, thinking, a summary) keeps ``\\n`` and ``\\t``.

``--json`` output goes through :func:`json_for_terminal`, which writes the same characters
as JSON escapes (``\\u001b``): the same JSON value for a script, nothing raw on a terminal.

A backslash is not escaped: printable text is shown unchanged, so a path or a regex reads
as it was written. The display is therefore not a round trip (the four characters
``\\x1b`` and an escaped ESC look alike); ``--json`` is the exact form.
"""

from __future__ import annotations

import re

__all__ = ["json_for_terminal", "shown"]

# Characters a terminal acts on rather than shows, or that reorder the text around them.
_CONTROL_RANGES = (
    (0x00, 0x1F),  # C0
    (0x7F, 0x9F),  # DEL and C1 (U+009B is a one-byte CSI to some terminals)
    (0x061C, 0x061C),  # ARABIC LETTER MARK
    (0x200E, 0x200F),  # LEFT-TO-RIGHT and RIGHT-TO-LEFT MARK
    (0x2028, 0x2029),  # LINE and PARAGRAPH SEPARATOR
    (0x202A, 0x202E),  # bidi embeddings and overrides
    (0x2066, 0x2069),  # bidi isolates
    (0xD800, 0xDFFF),  # lone surrogates
)
_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(code: int) -> str:
    char = chr(code)
    if char in _SHORT:
        return _SHORT[char]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _pattern(keep: str) -> re.Pattern[str]:
    ranges = "".join(
        f"\\u{lo:04x}-\\u{hi:04x}" if lo != hi else f"\\u{lo:04x}" for lo, hi in _CONTROL_RANGES
    )
    kept = "".join(f"\\u{ord(c):04x}" for c in keep)
    return re.compile(f"(?![{kept}])[{ranges}]" if kept else f"[{ranges}]")


_ONE_LINE = _pattern("")
_MULTI_LINE = _pattern("\n\t")


def _replace(match: re.Match[str]) -> str:
    return _escape(ord(match.group()))


def shown(text: str, *, one_line: bool = True) -> str:
    """``text`` with every control, bidi and lone-surrogate character as a visible escape.

    Args:
        text: a stored string (a name, a message's text, a path).
        one_line: escape ``\\n`` and ``\\t`` too (the default); ``False`` for a body
            printed over several lines, which keeps them.
    """
    return (_ONE_LINE if one_line else _MULTI_LINE).sub(_replace, text)


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def json_for_terminal(text: str) -> str:
    """JSON text (as ``json.dumps`` writes it, indented or not) with every character
    :func:`shown` would escape written as a ``\\uXXXX`` escape: it decodes to the
    same value, and prints no control, bidi character or lone surrogate raw.

    Such characters occur in ``json.dumps`` output only inside strings (and only with
    ``ensure_ascii=False``), where a ``\\u`` escape means the same character.
    """
    return _MULTI_LINE.sub(_json_escape, text)
