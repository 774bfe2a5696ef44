"""Where the chat's lines land on a terminal: rows taken, and a line above rewritten. [core]

No I/O: render.py counts the rows its status lines take, to find a tool's line again."""

from __future__ import annotations

import textwrap

CLEAR_LINE = "\r\x1b[2K"  # column 0, then erase the line (ECMA-48 EL)


def rewrite_above(up: int, text: str) -> str:
    """Replaces the line `up` lines above the cursor (which is in column 0) with `text` and
    comes back: cursor up, clear the line, write, cursor down, column 0 (ECMA-48 CUU, EL, CUD)."""
    return f"\x1b[{up}A\r\x1b[2K{text}\x1b[{up}B\r"


def rows(text: str, width: int | None) -> list[str] | None:
    """A status line as the rows it takes on a terminal `width` columns wide: wrapped at spaces
    (issue 39 item 7: at 40 columns they broke mid-word), a word wider than the width cut; with
    no width known, one row. None when the rows cannot be counted: characters that may take
    two columns in a line that might not fit (it stays as it is; nothing above is rewritten)."""
    if width is None or len(text) <= width // 2:
        return [text]
    if width < 1 or not text.isascii() or not text.isprintable():
        return None
    if len(text) <= width:
        return [text]
    return textwrap.wrap(
        text, width, subsequent_indent="  " if width > 8 else "", break_on_hyphens=False
    ) or [text]
